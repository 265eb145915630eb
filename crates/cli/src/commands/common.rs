//! Glue that several commands share: the async runtime, progress bars, tool-state
//! isolation and the task checker.

use anyhow::{Context, bail};
use flowmem_eval::{StateServer, TaskChecker};
use flowmem_tools::{Registry, StateIsolation, ToolsConfig};

use crate::args::StateArgs;
use crate::commands::ExitStatus;
use crate::logging;
use crate::printer::Printer;
use crate::settings;

/// Runs an async command on a fresh multi-threaded tokio runtime.
///
/// # Errors
///
/// When the runtime cannot start, or whatever the command returns.
pub fn block_on<F: std::future::Future<Output = anyhow::Result<ExitStatus>>>(future: F) -> anyhow::Result<ExitStatus> {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")?;
    runtime.block_on(future)
}

/// A progress bar of `len` steps on stderr drawn with the indicatif `template`, or
/// `None` when the printer hides progress. It is one of [`logging::progress`]'s bars, so
/// log lines and messages are written around it.
pub fn progress_bar(printer: &Printer, len: u64, template: &str) -> Option<indicatif::ProgressBar> {
    if !printer.progress {
        return None;
    }
    let bar = logging::progress().add(indicatif::ProgressBar::new(len));
    bar.set_style(
        indicatif::ProgressStyle::with_template(template).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}

/// The per-run tool-state isolation that `--state-key-arg`, `--reset-tool` and
/// `--hide-tool` ask for, with runs under state keys starting at `key`; `None` without a
/// state argument and reset tool.
pub fn state_isolation(state: &StateArgs, key: &str) -> Option<StateIsolation> {
    let (key_arg, reset_tool) = state.state_key_arg.as_ref().zip(state.reset_tool.as_ref())?;
    Some(StateIsolation {
        key_arg: key_arg.clone(),
        reset_tool: Some(reset_tool.clone()),
        hidden_tools: state.hide_tool.clone(),
        key: key.to_owned(),
    })
}

/// τ-bench's deterministic task check when `--task-check` asks for it: through
/// `registry`, reading the state files in `--state-dir` or the directory the configured
/// server's `env` names, with the key argument and reset tool of `isolation`. Its keys
/// (`flowmem-check/…`) never meet the runs' keys.
///
/// # Errors
///
/// When the check is asked for without isolation, or no state directory is found.
pub fn task_checker(
    state: &StateArgs,
    tools: &ToolsConfig,
    registry: &Registry,
    isolation: Option<&StateIsolation>,
) -> anyhow::Result<Option<TaskChecker>> {
    if !state.task_check {
        return Ok(None);
    }
    let Some(isolation) = isolation else {
        bail!("--task-check needs --state-key-arg and --reset-tool");
    };
    let state_dir = settings::task_check_state_dir(state.state_dir.as_deref(), tools)?;
    let mut server = StateServer::tau2(&state_dir);
    server.isolation = isolation.with_key(server.isolation.key.clone());
    Ok(Some(TaskChecker::new(registry.clone(), server)))
}

/// How many of `records`' logged calls have neither a result nor an error.
pub fn calls_lacking_results(records: &[flowmem_model::Record]) -> usize {
    records
        .iter()
        .flat_map(|record| &record.orchestration)
        .filter(|call| call.result.is_none() && call.error.is_none())
        .count()
}

/// Replays `records`' logged calls through `registry` (in isolated tool state when
/// `isolation` is set) and gives the records back with the results, showing progress and
/// then a one-line summary; the same for `flowmem mine` and `flowmem scout`.
pub async fn replay_for_results(
    registry: &Registry,
    records: &[flowmem_model::Record],
    isolation: Option<StateIsolation>,
    concurrency: usize,
    printer: &Printer,
) -> (flowmem_tools::ReplayReport, Vec<flowmem_model::Record>) {
    let cfg = flowmem_tools::ReplayConfig { concurrency, isolation };
    let bar =
        progress_bar(printer, records.len() as u64, "{spinner} replaying for results {pos}/{len} records {elapsed}");
    let inc = |_: &flowmem_tools::RecordReport| {
        if let Some(bar) = &bar {
            bar.inc(1);
        }
    };
    let (report, replayed) = flowmem_tools::replay_with_results(registry, records, &cfg, &inc).await;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    printer.info(&format!(
        "replayed {} records for their results: {} of {} calls executed, {} records fully ok",
        report.records, report.executed, report.calls, report.records_ok
    ));
    (report, replayed)
}

/// A file the command reads that cannot be opened; `--json` names it.
#[derive(Debug)]
pub struct CannotOpen {
    /// The file, as given.
    pub path: std::path::PathBuf,
    /// Why.
    pub source: std::io::Error,
}

impl std::fmt::Display for CannotOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot open `{}`", self.path.display())
    }
}

impl std::error::Error for CannotOpen {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Opens an input file, or says which could not be opened.
pub fn open_input(path: &std::path::Path) -> Result<std::fs::File, CannotOpen> {
    std::fs::File::open(path).map_err(|source| CannotOpen { path: path.to_owned(), source })
}

/// A flag the command needs and was not given (nor its variable); `--json` names it as a
/// usage error.
#[derive(Debug)]
pub struct MissingFlag {
    /// The flag, such as `--memory`.
    pub flag: &'static str,
    /// What is missing and how to give it, hint lines included.
    pub message: &'static str,
}

impl std::fmt::Display for MissingFlag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message)
    }
}

impl std::error::Error for MissingFlag {}

/// A memory database named by `--memory` that does not exist (for the commands that
/// read one); `--json` names the file.
#[derive(Debug)]
pub struct NoMemory {
    /// The file, as given.
    pub path: std::path::PathBuf,
}

impl std::fmt::Display for NoMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "memory database `{}` does not exist\nhint: create it with `flowmem induce` or `flowmem memory import`",
            self.path.display()
        )
    }
}

impl std::error::Error for NoMemory {}

/// An output path that names one of the command's inputs: writing it would destroy the
/// input before (or while) it is read.
#[derive(Debug)]
pub struct OutputIsInput {
    /// The output, as given.
    pub output: std::path::PathBuf,
    /// The input it is, as given.
    pub input: std::path::PathBuf,
}

impl std::fmt::Display for OutputIsInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the output `{}` is also an input", self.output.display())?;
        if self.input != self.output {
            write!(f, " (`{}`)", self.input.display())?;
        }
        write!(f, "; flowmem never overwrites what it reads\nhint: write the output to another path")
    }
}

impl std::error::Error for OutputIsInput {}

/// Refuses when one of `outputs` is the same file as one of `inputs` (through symbolic
/// links, hard links and different spellings of the path): the one check every command
/// that writes files makes before writing. Outputs that do not exist yet are no input.
///
/// # Errors
///
/// [`OutputIsInput`] naming the first such output and input.
pub fn refuse_outputs_that_are_inputs(
    outputs: &[&std::path::Path],
    inputs: &[&std::path::Path],
) -> Result<(), OutputIsInput> {
    for output in outputs {
        let Ok(output_file) = std::fs::metadata(output) else { continue };
        for input in inputs {
            let Ok(input_file) = std::fs::metadata(input) else { continue };
            if same_file(&output_file, &input_file) {
                return Err(OutputIsInput { output: output.to_path_buf(), input: input.to_path_buf() });
            }
        }
    }
    Ok(())
}

/// Whether two metadata describe the same file (device and inode).
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// How many of an XES log's remarks are listed one by one; the rest are counted.
const MAX_XES_REMARKS: usize = 20;

/// The remarks of an XES log read from `path` (merged traces, empty traces, bad
/// timestamps) as lines for a user, the first ones in full and the rest counted: what
/// `flowmem import` and `flowmem mine` tell about a log.
pub fn xes_remark_lines(path: &std::path::Path, xes: &flowmem_mining::XesLog) -> Vec<String> {
    let mut lines: Vec<String> =
        xes.remarks.iter().take(MAX_XES_REMARKS).map(|remark| format!("`{}`: {remark}", path.display())).collect();
    if xes.remarks.len() > MAX_XES_REMARKS {
        lines.push(format!(
            "`{}`: … and {} more remarks like these",
            path.display(),
            xes.remarks.len() - MAX_XES_REMARKS
        ));
    }
    lines
}

/// Waits for Ctrl-C twice: the first sets `stop` and warns with `what` (the long run
/// then ends at its next checkpoint), the second returns (the caller drops the work in
/// flight).
pub async fn interrupts(stop: &std::sync::atomic::AtomicBool, printer: &Printer, what: &str) {
    if tokio::signal::ctrl_c().await.is_err() {
        // No signal handler: never interrupt.
        std::future::pending::<()>().await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    printer.warn(&format!("{what} (press Ctrl-C again to stop now)"));
    let _ = tokio::signal::ctrl_c().await;
}

/// Completes on the first Ctrl-C, or SIGTERM on Unix. It listens from the moment it is
/// called, not from its first poll: a signal that comes right after the server said
/// where it listens still stops it gracefully.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let streams = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()));
        async move {
            match streams {
                (Ok(mut interrupt), Ok(mut term)) => {
                    tokio::select! {
                        _ = interrupt.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                (Ok(mut interrupt), Err(err)) => {
                    tracing::warn!(error = %err, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                    interrupt.recv().await;
                }
                (Err(err), _) => {
                    tracing::warn!(error = %err, "cannot listen for signals; Ctrl-C may not stop the server gracefully");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
