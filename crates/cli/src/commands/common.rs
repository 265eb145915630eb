//! Glue that several commands share: the async runtime, progress bars, tool-state
//! isolation and the task checker.

use std::path::Path;

use anyhow::Context;
use flowmem_eval::{StateIsolation, StateServer, TaskChecker};
use flowmem_tools::Registry;

use crate::commands::ExitStatus;
use crate::printer::Printer;

/// Runs an async command on a fresh multi-threaded tokio runtime.
///
/// # Errors
///
/// When the runtime cannot start, or whatever the command returns.
pub fn block_on<F: std::future::Future<Output = anyhow::Result<ExitStatus>>>(future: F) -> anyhow::Result<ExitStatus> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")?;
    runtime.block_on(future)
}

/// A progress bar of `len` steps on stderr drawn with the indicatif `template`, or
/// `None` when the printer hides progress.
pub fn progress_bar(printer: &Printer, len: u64, template: &str) -> Option<indicatif::ProgressBar> {
    if !printer.progress {
        return None;
    }
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(indicatif::ProgressStyle::with_template(template).unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()));
    Some(bar)
}

/// The per-run tool-state isolation that `--state-key-arg`, `--reset-tool` and
/// `--hide-tool` ask for, with runs under state keys starting at `key`; `None` without a
/// state argument and reset tool.
pub fn state_isolation(
    key_arg: Option<&String>,
    reset_tool: Option<&String>,
    hidden_tools: &[String],
    key: &str,
) -> Option<StateIsolation> {
    let (key_arg, reset_tool) = key_arg.zip(reset_tool)?;
    Some(StateIsolation {
        key_arg: key_arg.clone(),
        reset_tool: reset_tool.clone(),
        hidden_tools: hidden_tools.to_vec(),
        key: key.to_owned(),
    })
}

/// τ-bench's deterministic task check through `registry`, reading the server's state
/// files in `state_dir`, with the key argument and reset tool of `isolation`. Its keys
/// (`flowmem-check/…`) never meet the runs' keys.
pub fn task_checker(registry: &Registry, state_dir: &Path, isolation: &StateIsolation) -> TaskChecker {
    let mut server = StateServer::tau2(state_dir);
    server.key_arg.clone_from(&isolation.key_arg);
    server.reset_tool.clone_from(&isolation.reset_tool);
    TaskChecker::new(registry.clone(), server)
}
