//! Where output goes: results to stdout, everything else to stderr, all of it written
//! around the progress bars ([`crate::logging::suspend`]) and with every registered
//! secret redacted ([`flowmem_model::redact`]), whatever text it quotes.

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
        let text = flowmem_model::redact(text);
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
            let text = flowmem_model::redact(text);
            suspend(|| {
                let _ = writeln!(std::io::stderr().lock(), "{text}");
            });
        }
    }

    /// Prints a warning to stderr, unless `--quiet`.
    pub fn warn(&self, text: &str) {
        if !self.quiet {
            let text = flowmem_model::redact(text);
            suspend(|| {
                let _ = writeln!(std::io::stderr().lock(), "warning: {text}");
            });
        }
    }

    /// Prints an error to stderr, always.
    pub fn error(&self, text: &str) {
        let text = flowmem_model::redact(text);
        suspend(|| {
            let _ = writeln!(std::io::stderr().lock(), "error: {text}");
        });
    }
}

/// The `--json` document of a failed command: `{"error": {kind, message, file, line,
/// field, node, hint}}` on stdout (version 1). Every key is present; what does not apply
/// is `null`.
///
/// `kind` says what failed: `usage` (the arguments), `input` (a file's content),
/// `io` (reading or writing a file), `config` (`flowmem.toml`), `model` (the model or its
/// endpoint), `protocol` (an answer that is not the protocol's), `tools` (a tool
/// server), `memory` (a memory database), `graph` (an invalid workflow graph), or
/// `error` (anything else). `message` is the error with its causes, without the hint
/// lines, which go to `hint`.
#[derive(Debug, serde::Serialize)]
pub struct ErrorReport {
    /// What failed.
    pub kind: &'static str,
    /// The error and its causes, one line.
    pub message: String,
    /// The file concerned, as given.
    pub file: Option<std::path::PathBuf>,
    /// The 1-based line in `file`.
    pub line: Option<usize>,
    /// The field, flag or JSON path concerned.
    pub field: Option<String>,
    /// The workflow graph node concerned.
    pub node: Option<String>,
    /// What to do about it.
    pub hint: Option<String>,
}

impl ErrorReport {
    /// A report of `err`, an error chain whose most specific typed cause fills the fields.
    pub fn of(err: &anyhow::Error) -> ErrorReport {
        let (message, hint) = split_hints(&format!("{err:#}"));
        let mut report = ErrorReport { kind: "error", message, file: None, line: None, field: None, node: None, hint };
        // The innermost cause that says where is the most precise; outer context only
        // adds words.
        for cause in err.chain() {
            report.locate(cause);
        }
        report
    }

    /// A report of a command line clap refused.
    pub fn usage(err: &clap::Error) -> ErrorReport {
        let rendered = err.render().to_string();
        let text = rendered.trim().trim_start_matches("error: ");
        let (message, hint) = split_hints(text);
        let field = match err.get(clap::error::ContextKind::InvalidArg) {
            Some(clap::error::ContextValue::String(arg)) => arg.split_whitespace().next().map(str::to_owned),
            _ => None,
        };
        ErrorReport { kind: "usage", message, file: None, line: None, field, node: None, hint }
    }

    /// Fills what `cause` knows, if it is one of the typed errors that say where.
    fn locate(&mut self, cause: &(dyn std::error::Error + 'static)) {
        use flowmem_exec::GraphFileError;
        use flowmem_llm::{LlmError, ModelConfigError};
        use flowmem_model::{ImportError, JsonlError, WriteError};
        let unclassified = self.kind == "error";
        // Transparent wrappers hide their inner error from the chain: look at it instead.
        let cause: &(dyn std::error::Error + 'static) = match cause.downcast_ref::<flowmem_exec::ProcessModelError>() {
            Some(flowmem_exec::ProcessModelError::Graph(inner)) => inner,
            Some(flowmem_exec::ProcessModelError::Pnml(inner)) => inner,
            _ => cause,
        };
        let mut kind = |kind: &'static str, file: Option<&std::path::Path>| {
            self.kind = kind;
            if let Some(file) = file {
                self.file = Some(file.to_path_buf());
            }
        };
        if let Some(err) = cause.downcast_ref::<crate::commands::common::OutputIsInput>() {
            kind("input", Some(&err.output));
        } else if let Some(err) = cause.downcast_ref::<crate::commands::common::CannotOpen>() {
            kind("io", Some(&err.path));
        } else if let Some(err) = cause.downcast_ref::<crate::commands::common::NoMemory>() {
            kind("memory", Some(&err.path));
        } else if let Some(err) = cause.downcast_ref::<crate::commands::common::MissingFlag>() {
            kind("usage", None);
            self.field = Some(err.flag.to_owned());
        } else if let Some(err) = cause.downcast_ref::<flowmem_exec::ProcessModelError>() {
            use flowmem_exec::ProcessModelError;
            match err {
                ProcessModelError::Io { path, .. } => kind("io", Some(path)),
                ProcessModelError::Shape { path, .. } | ProcessModelError::Tree { path, .. } => {
                    kind("input", Some(path));
                }
                ProcessModelError::Invalid { path, source } => {
                    kind("graph", Some(path));
                    self.node = source.violations.iter().find_map(|violation| violation.node()).map(str::to_owned);
                }
                // The PNML or graph error beneath says where.
                _ => {}
            }
        } else if let Some(err) = cause.downcast_ref::<flowmem_mining::MiningError>() {
            use flowmem_mining::MiningError;
            match err {
                MiningError::Io { path, .. } => kind("io", Some(path)),
                MiningError::Xml { path, .. } | MiningError::NotXes { path, .. } | MiningError::Pnml { path, .. } => {
                    kind("input", Some(path));
                }
                _ => kind("input", None),
            }
        } else if let Some(flowmem_optimize::ScoutError::File { path, .. }) = cause.downcast_ref() {
            kind("io", Some(path));
        } else if let Some(flowmem_optimize::SearchError::Io { path, .. }) = cause.downcast_ref() {
            kind("io", Some(path));
        } else if let Some(err) = cause.downcast_ref::<ImportError>() {
            match err {
                ImportError::Read { path, .. } => kind("io", Some(path)),
                ImportError::NoInputFiles { path, .. } => kind("input", Some(path)),
                _ => kind("input", None),
            }
        } else if let Some(err) = cause.downcast_ref::<GraphFileError>() {
            match err {
                GraphFileError::Parse { path, line, field, .. } => {
                    kind("input", Some(path));
                    self.line = (*line > 0).then_some(*line);
                    self.field.clone_from(field);
                }
                GraphFileError::Io { path, .. } => kind("io", Some(path)),
                GraphFileError::Serialize { path, .. } => kind("io", Some(path)),
                _ => kind("input", None),
            }
        } else if let Some(err) = cause.downcast_ref::<JsonlError>() {
            match err {
                JsonlError::Read { path, .. } => kind("io", Some(path)),
                JsonlError::Syntax { path, line, .. } | JsonlError::UnknownKind { path, line } => {
                    kind("input", Some(path));
                    self.line = Some(*line);
                }
                JsonlError::Invalid { path, line, json_path, .. } => {
                    kind("input", Some(path));
                    self.line = Some(*line);
                    self.field = Some(json_path.clone());
                }
                JsonlError::MixedKinds { path, line, .. } => {
                    kind("input", Some(path));
                    self.line = Some(*line);
                }
                _ => kind("input", None),
            }
        } else if let Some(err) = cause.downcast_ref::<WriteError>() {
            kind("io", Some(&err.path));
        } else if let Some(err) = cause.downcast_ref::<ModelConfigError>() {
            match err {
                ModelConfigError::Read { path, .. } | ModelConfigError::Parse { path, .. } => {
                    kind("config", Some(path))
                }
                ModelConfigError::Invalid { origin, field, .. } => {
                    let file = (origin != "environment").then(|| std::path::Path::new(origin));
                    kind("config", file);
                    self.field = Some(field.clone());
                }
                _ => kind("config", None),
            }
        } else if let Some(err) = cause.downcast_ref::<flowmem_tools::ConfigError>() {
            match err {
                flowmem_tools::ConfigError::Toml { path, .. } => kind("config", Some(path)),
                flowmem_tools::ConfigError::Invalid { path, field, .. } => {
                    kind("config", path.as_deref());
                    self.field = Some(field.clone());
                }
                _ => kind("config", None),
            }
        } else if let Some(err) = cause.downcast_ref::<LlmError>() {
            kind(if matches!(err, LlmError::Protocol { .. }) { "protocol" } else { "model" }, None);
        } else if cause.downcast_ref::<flowmem_tools::ToolServerError>().is_some() {
            kind("tools", None);
        } else if let Some(err) = cause.downcast_ref::<flowmem_memory::MemoryError>() {
            kind("memory", memory_path(err));
        } else if let Some(err) = cause.downcast_ref::<flowmem_exec::InvalidGraph>() {
            kind("graph", None);
            self.node = err.violations.iter().find_map(|violation| violation.node()).map(str::to_owned);
        } else if cause.downcast_ref::<std::io::Error>().is_some() && unclassified {
            kind("io", None);
        }
    }
}

/// The file a memory error names.
fn memory_path(err: &flowmem_memory::MemoryError) -> Option<&std::path::Path> {
    use flowmem_memory::MemoryError;
    match err {
        MemoryError::Database { path, .. }
        | MemoryError::SchemaTooNew { path, .. }
        | MemoryError::Corrupt { path, .. }
        | MemoryError::NotFound { path, .. }
        | MemoryError::NotMemory { path, .. } => Some(path),
        _ => None,
    }
}

/// A message split into its text and its `hint:` lines (joined by newlines).
fn split_hints(text: &str) -> (String, Option<String>) {
    let mut message = Vec::new();
    let mut hints = Vec::new();
    for line in text.lines() {
        match line.trim_start().strip_prefix("hint: ") {
            Some(hint) => hints.push(hint.trim().to_owned()),
            None => message.push(line),
        }
    }
    let hint = (!hints.is_empty()).then(|| hints.join("\n"));
    (message.join("\n").trim().to_owned(), hint)
}

impl Printer {
    /// Reports a failed command: `error: …` on stderr, and with `--json` also the
    /// [`ErrorReport`] as one JSON document on stdout.
    pub fn error_report(&self, report: &ErrorReport) {
        let mut text = report.message.clone();
        if let Some(hint) = &report.hint {
            text.push_str(&format!("\nhint: {hint}"));
        }
        self.error(&text);
        if self.json {
            let document = serde_json::json!({ "error": report });
            // A value of plain strings and numbers always serialises.
            if let Ok(text) = serde_json::to_string_pretty(&document) {
                let _ = self.result(&text);
            }
        }
    }
}
