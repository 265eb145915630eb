//! Glue that several commands share: the async runtime and progress bars.

use anyhow::Context;

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
