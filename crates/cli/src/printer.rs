//! Where output goes: results to stdout, everything else to stderr, all of it written
//! around the progress bars ([`crate::logging::suspend`]).

use std::io::Write;

use crate::args::GlobalArgs;
use crate::logging::suspend;

/// Writes results to stdout and messages to stderr, honouring `--quiet` and `--json`.
#[derive(Debug, Clone)]
pub struct Printer {
    /// Whether results are printed as JSON.
    pub json: bool,
    quiet: bool,
    /// Whether progress bars may be drawn.
    pub progress: bool,
}

impl Printer {
    /// Builds the printer from the global flags. Progress bars are hidden under
    /// `--quiet`, `-v` (log lines would crowd them) and `--no-progress`.
    pub fn new(global: &GlobalArgs) -> Printer {
        let quiet = global.quiet;
        let progress = !quiet && global.verbose == 0 && !global.no_progress;
        Printer { json: global.json, quiet, progress }
    }

    /// Prints a result line to stdout.
    pub fn result(&self, text: &str) -> std::io::Result<()> {
        suspend(|| writeln!(std::io::stdout().lock(), "{text}"))
    }

    /// Prints `value` as pretty JSON to stdout.
    pub fn json_result(&self, value: &impl serde::Serialize) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(value)?;
        self.result(&text)?;
        Ok(())
    }

    /// Prints an informational message to stderr, unless `--quiet`.
    pub fn info(&self, text: &str) {
        if !self.quiet {
            suspend(|| {
                let _ = writeln!(std::io::stderr().lock(), "{text}");
            });
        }
    }

    /// Prints a warning to stderr, unless `--quiet`.
    pub fn warn(&self, text: &str) {
        if !self.quiet {
            suspend(|| {
                let _ = writeln!(std::io::stderr().lock(), "warning: {text}");
            });
        }
    }

    /// Prints an error to stderr, always.
    pub fn error(&self, text: &str) {
        suspend(|| {
            let _ = writeln!(std::io::stderr().lock(), "error: {text}");
        });
    }
}
