//! The `flowmem` binary: parses arguments, runs one command, maps the outcome to an exit
//! code. All logic lives in the library crates; this crate only glues them together.

mod args;
mod commands;
mod logging;
mod printer;
mod session;
mod settings;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::commands::ExitStatus;
use crate::printer::{ErrorReport, Printer};

/// mimalloc rather than the system allocator: a request through `flowmem serve` makes
/// many small, short-lived allocations (JSON values, rows, rendered text), and glibc's
/// malloc and free took about a sixth of the gateway's CPU
/// (`bench/runs/2026-12-05-vm/gateway_allocator.txt` has the A/B).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    logging::init(&cli.global);
    let printer = Printer::new(&cli.global);
    let res = run(cli, &printer);
    match res {
        Ok(status) => status.into(),
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            printer.error_report(&ErrorReport::of(&err));
            ExitStatus::Error.into()
        }
    }
}

/// Ends a run whose command line clap refused: clap's message on stderr (or the help
/// or version it was asked for), and with `--json` an error document on stdout too.
fn usage_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(err.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
        || err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand && !wants_json()
    {
        let _ = err.print();
        return ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2));
    }
    let _ = err.print();
    if wants_json() {
        let document = serde_json::json!({ "error": ErrorReport::usage(err) });
        // A value of plain strings always serialises.
        if let Ok(text) = serde_json::to_string_pretty(&document) {
            let _ = writeln!(std::io::stdout().lock(), "{text}");
        }
    }
    ExitStatus::Error.into()
}

/// Whether the command line asks for `--json`, read before (or without) parsing it.
fn wants_json() -> bool {
    std::env::args_os().skip(1).take_while(|arg| arg != "--").any(|arg| arg == "--json")
}

fn run(cli: Cli, printer: &Printer) -> anyhow::Result<ExitStatus> {
    match cli.command {
        Command::Schema(args) => commands::schema::run(&args, printer),
        Command::Split(args) => commands::split::run(&args, printer),
        Command::Score(args) => commands::score::run(&args, printer),
        Command::Graph(command) => commands::graph::run(&command, printer),
        Command::Tools(args) => commands::tools::run(&args, printer),
        Command::Mine(args) => commands::mine::run(&args, printer),
        Command::Conform(args) => commands::conform::run(&args, printer),
        Command::Induce(args) => commands::induce::run(&args, printer),
        Command::Memory(args) => commands::memory::run(&args, printer),
        Command::Import(args) => commands::import::run(&args, printer),
        Command::Stats(args) => commands::stats::run(&args, printer),
        Command::ServeLlm(args) => commands::serve_llm::run(&args, printer),
        Command::Serve(args) => commands::serve::run(&args, printer),
        Command::Llm(args) => commands::llm::run(&args, printer),
        Command::Run(args) => commands::run::run_workflow(&args, printer),
        Command::Agent(args) => commands::run::run_baseline(&args, printer),
        Command::Scout(args) => commands::scout::run(&args, printer),
        Command::Study(args) => commands::study::run(&args, printer),
        Command::Eval(args) => commands::eval::run(&args, printer),
        Command::Learn(args) => commands::learn::run(&args, printer),
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
