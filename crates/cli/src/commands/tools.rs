//! `flowmem tools`: list, call and replay the tools of the configured MCP servers.

use std::io::{BufRead, IsTerminal};
use std::path::Path;

use anyhow::Context;
use flowmem_model::Record;
use flowmem_tools::{CallStatus, Registry, ReplayConfig, ReplayReport, StateIsolation};
use serde::Serialize;
use serde_json::Value;

use crate::args::{ToolsArgs, ToolsCallArgs, ToolsCommand, ToolsReplayArgs};
use crate::commands::ExitStatus;
use crate::commands::common::block_on;
use crate::printer::Printer;
use crate::session::{CacheUse, Session, SessionSettings, ToolsUse};
use crate::settings::{Config, ModelRoles};

/// Runs a `flowmem tools` subcommand.
pub fn run(args: &ToolsArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let config = Config::load(&args.config)?;
    if config.tools(true)?.servers.is_empty() {
        anyhow::bail!(
            "no tool servers are configured\nhint: add `[[tools.mcp]]` entries to flowmem.toml (see `flowmem tools --help`)"
        );
    }
    let settings = SessionSettings {
        config,
        models: ModelRoles::default(),
        tools: ToolsUse::Required,
        prompts: None,
        cache: CacheUse::Off,
        state: None,
    };
    block_on(async {
        let session = Session::open(settings).await?;
        let registry = session.registry();
        for warning in registry.warnings() {
            printer.warn(warning);
        }
        let res = match &args.command {
            ToolsCommand::List => list(registry, printer),
            ToolsCommand::Call(call_args) => call(registry, call_args, printer).await,
            ToolsCommand::Replay(replay_args) => replay(registry, replay_args, printer).await,
        };
        session.close().await;
        res
    })
}

fn list(registry: &Registry, printer: &Printer) -> anyhow::Result<ExitStatus> {
    if printer.json {
        printer.json_result(&registry.tools())?;
        return Ok(ExitStatus::Success);
    }
    for tool in registry.tools() {
        printer.result(&format!("{}  [{}]", tool.name, tool.server))?;
        if !tool.description.is_empty() {
            printer.result(&format!("    {}", tool.description.replace('\n', "\n    ")))?;
        }
        printer.result(&format!("    input: {}", tool.input_schema))?;
    }
    Ok(ExitStatus::Success)
}

/// The `--json` shape of `flowmem tools call`: the traced call plus how it ended.
#[derive(Serialize)]
struct CallOutput<'a> {
    status: CallStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<&'a str>,
    #[serde(flatten)]
    call: &'a flowmem_model::ToolCall,
}

async fn call(registry: &Registry, args: &ToolsCallArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let parsed: Value =
        serde_json::from_str(&args.args).with_context(|| format!("`--args` is not valid JSON: `{}`", args.args))?;
    let Value::Object(call_args) = parsed else {
        anyhow::bail!("`--args` must be a JSON object, such as '{{\"a\": 1}}'");
    };
    let invocation = registry.invoke(&args.name, call_args).await;
    if let Some(restart) = &invocation.restart {
        printer.warn(&format!("server `{}` restarted: {}", restart.server, restart.reason));
    }
    if printer.json {
        let output =
            CallOutput { status: invocation.status, server: invocation.server.as_deref(), call: &invocation.call };
        printer.json_result(&output)?;
    } else if invocation.status == CallStatus::Ok {
        match &invocation.call.result {
            Some(Value::String(text)) => printer.result(text)?,
            Some(other) => printer.json_result(other)?,
            None => {}
        }
    } else {
        let error = invocation.call.error.as_deref().unwrap_or("no details");
        if invocation.status == CallStatus::ToolError {
            printer.error(&format!("`{}` returned an error: {error}", args.name));
        } else {
            printer.error(error);
        }
    }
    Ok(if invocation.status == CallStatus::Ok { ExitStatus::Success } else { ExitStatus::Failure })
}

/// The `--json` shape of `flowmem tools replay`: the replay report plus skipped lines.
#[derive(Serialize)]
struct ReplayOutput<'a> {
    #[serde(flatten)]
    report: &'a ReplayReport,
    /// Input lines that were not records, as `file:line: reason`.
    skipped: &'a [String],
}

async fn replay(registry: &Registry, args: &ToolsReplayArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let (records, skipped) = read_records(&args.records)?;
    for reason in &skipped {
        printer.warn(&format!("skipped {reason}"));
    }
    let cfg = ReplayConfig {
        concurrency: args.concurrency,
        isolation: args.state_key_arg.as_ref().map(|key_arg| StateIsolation {
            key_arg: key_arg.clone(),
            reset_tool: args.reset_tool.clone(),
            hidden_tools: Vec::new(),
            key: args.state_key_prefix.clone(),
        }),
    };
    let bar = if printer.progress && std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(records.len() as u64);
        bar.set_message("records replayed");
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let report = flowmem_tools::replay_with_progress(registry, &records, &cfg, &|_| bar.inc(1)).await;
    bar.finish_and_clear();
    if printer.json {
        printer.json_result(&ReplayOutput { report: &report, skipped: &skipped })?;
    } else {
        for record in report.per_record.iter().filter(|record| !record.ok) {
            if let Some(reason) = &record.reset_error {
                printer.result(&format!("record {}: not run, reset failed: {reason}", record.id))?;
            }
            for failure in &record.failures {
                printer.result(&format!(
                    "record {}: call {} `{}` {}: {}",
                    record.id,
                    failure.index,
                    failure.tool,
                    status_name(failure.status),
                    shorten(&failure.error, 240)
                ))?;
            }
        }
        printer.result(&format!(
            "{} of {} records ok; {} calls: {} executed, {} tool errors, {} transport errors, {} protocol errors, {} invalid arguments, {} unknown tools, {} not run; {} server restarts",
            report.records_ok,
            report.records,
            report.calls,
            report.executed,
            report.tool_errors,
            report.transport_errors,
            report.protocol_errors,
            report.invalid_arguments,
            report.unknown_tools,
            report.not_run,
            report.restarts,
        ))?;
    }
    let all_ok = report.records_ok == report.records && skipped.is_empty();
    Ok(if all_ok { ExitStatus::Success } else { ExitStatus::Failure })
}

/// Reads a JSONL file of records; lines that are not records are skipped with a reason.
fn read_records(path: &Path) -> anyhow::Result<(Vec<Record>, Vec<String>)> {
    let file = crate::commands::common::open_input(path)?;
    let mut records = Vec::new();
    let mut skipped = Vec::new();
    for (idx, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read `{}`", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(&line) {
            Ok(record) => records.push(record),
            Err(err) => skipped.push(format!("`{}:{}`: not a record: {err}", path.display(), idx + 1)),
        }
    }
    Ok((records, skipped))
}

/// The first `max_chars` characters of `text`, with `…` when cut (`--json` has it all).
fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

fn status_name(status: CallStatus) -> &'static str {
    match status {
        CallStatus::Ok => "ok",
        CallStatus::ToolError => "tool error",
        CallStatus::InvalidArguments => "invalid arguments",
        CallStatus::UnknownTool => "unknown tool",
        CallStatus::ProtocolError => "protocol error",
        CallStatus::Timeout => "timeout",
        CallStatus::TransportError => "transport error",
    }
}
