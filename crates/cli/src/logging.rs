//! Log lines on stderr: the `tracing` events of every crate, filtered by `-q`/`-v`, and
//! drawn around the progress bars so that neither garbles the other.
//!
//! Every progress bar lives in one [`MultiProgress`] ([`progress`]); every log line and
//! every message the [`Printer`](crate::printer::Printer) writes goes out through
//! [`suspend`], which clears the bars, writes, and draws them again.

use std::io::Write;
use std::sync::LazyLock;

use indicatif::MultiProgress;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

use crate::args::GlobalArgs;

/// The filter the global flags ask for: `--quiet` errors only, by default warnings, `-v`
/// flowmem's info lines, `-vv` its debug lines (and the libraries' info), `-vvv`
/// everything. `RUST_LOG`, when set, replaces all but `--quiet`.
#[must_use]
pub fn filter_directives(global: &GlobalArgs, rust_log: Option<&str>) -> String {
    if global.quiet {
        return "error".to_owned();
    }
    if let Some(directives) = rust_log.filter(|value| !value.trim().is_empty()) {
        return directives.to_owned();
    }
    match global.verbose {
        0 => "warn".to_owned(),
        // A directive's target matches by prefix, so `flowmem` covers every `flowmem_*`
        // crate and the binary.
        1 => "warn,flowmem=info".to_owned(),
        2 => "info,flowmem=debug".to_owned(),
        _ => "trace".to_owned(),
    }
}

/// Installs the stderr subscriber for the global flags. Call once, first thing.
pub fn init(global: &GlobalArgs) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let directives = filter_directives(global, rust_log.as_deref());
    let filter = EnvFilter::try_new(&directives).unwrap_or_else(|err| {
        let _ =
            writeln!(std::io::stderr(), "warning: RUST_LOG=`{directives}` is not a filter ({err}); logging warnings");
        EnvFilter::new("warn")
    });
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(StderrAroundBars)
        .with_ansi(ansi)
        .without_time()
        .finish();
    // A second call (none today) keeps the first subscriber.
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// The one set of progress bars on stderr. Add every bar to it, so that log lines and
/// messages are written around them.
pub fn progress() -> &'static MultiProgress {
    static PROGRESS: LazyLock<MultiProgress> = LazyLock::new(MultiProgress::new);
    &PROGRESS
}

/// Runs `write` (a write to stderr or stdout) with the progress bars cleared, drawing
/// them again afterwards.
pub fn suspend<R>(write: impl FnOnce() -> R) -> R {
    progress().suspend(write)
}

/// Makes a [`LineBuffer`] per log event.
struct StderrAroundBars;

impl<'a> MakeWriter<'a> for StderrAroundBars {
    type Writer = LineBuffer;

    fn make_writer(&'a self) -> LineBuffer {
        LineBuffer(Vec::new())
    }
}

/// Collects one formatted event and writes it to stderr in one piece, around the bars,
/// with every registered secret redacted, when dropped.
struct LineBuffer(Vec<u8>);

impl Write for LineBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LineBuffer {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        // A log line may quote what a server sent back; secrets never reach stderr.
        let line = String::from_utf8_lossy(&self.0);
        let line = flowmem_model::redact(&line);
        // Nowhere is left to report a failed write to stderr.
        suspend(|| {
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        });
    }
}

#[cfg(test)]
mod tests {
    use super::filter_directives;
    use crate::args::GlobalArgs;

    fn global(quiet: bool, verbose: u8) -> GlobalArgs {
        GlobalArgs { json: false, quiet, verbose, no_progress: false }
    }

    #[test]
    fn flags_pick_the_level() {
        assert_eq!(filter_directives(&global(false, 0), None), "warn");
        assert_eq!(filter_directives(&global(false, 1), None), "warn,flowmem=info");
        assert_eq!(filter_directives(&global(false, 2), None), "info,flowmem=debug");
        assert_eq!(filter_directives(&global(false, 3), None), "trace");
        assert_eq!(filter_directives(&global(true, 0), None), "error");
    }

    #[test]
    fn rust_log_replaces_all_but_quiet() {
        assert_eq!(filter_directives(&global(false, 1), Some("flowmem_llm=trace")), "flowmem_llm=trace");
        assert_eq!(filter_directives(&global(false, 0), Some("  ")), "warn");
        assert_eq!(filter_directives(&global(true, 2), Some("debug")), "error");
    }
}
