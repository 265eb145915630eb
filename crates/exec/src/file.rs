//! Reading and writing workflow graphs as JSON or YAML files a person can edit.

use std::path::{Path, PathBuf};

use flowmem_model::WorkflowGraph;

/// The file formats a workflow graph is stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphFormat {
    /// JSON (`.json`).
    Json,
    /// YAML (`.yaml` or `.yml`).
    Yaml,
}

impl GraphFormat {
    /// The format a file name's extension names; YAML for `.yaml`/`.yml`, JSON otherwise.
    #[must_use]
    pub fn from_path(path: &Path) -> GraphFormat {
        match path.extension().and_then(|ext| ext.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("yaml") || ext.eq_ignore_ascii_case("yml") => GraphFormat::Yaml,
            _ => GraphFormat::Json,
        }
    }
}

/// A graph file that could not be read, parsed or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GraphFileError {
    /// The file could not be read or written.
    #[error("cannot access `{}`", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The text is not a workflow graph: bad syntax, a wrong type, a missing or an
    /// unknown field.
    #[error("invalid workflow graph in `{}:{line}:{column}`: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The line, counting from 1 (0 when unknown).
        line: usize,
        /// The column, counting from 1 (0 when unknown).
        column: usize,
        /// The path of the offending field, such as `nodes[0].hint`, when known.
        field: Option<String>,
        /// What is wrong, naming the field; for an unknown field, the nearest known one.
        message: String,
    },
    /// The graph could not be serialised.
    #[error("cannot serialise the workflow graph for `{}`: {message}", path.display())]
    Serialize {
        /// The file.
        path: PathBuf,
        /// The serialiser's message.
        message: String,
    },
}

/// Reads a workflow graph from a `.json`, `.yaml` or `.yml` file.
///
/// # Errors
///
/// [`GraphFileError::Io`] when the file cannot be read; [`GraphFileError::Parse`] with the
/// line, column and field when it is not a workflow graph.
pub fn load_graph(path: &Path) -> Result<WorkflowGraph, GraphFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| GraphFileError::Io { path: path.to_owned(), source })?;
    parse_graph(&text, GraphFormat::from_path(path), path)
}

/// Parses a workflow graph from text; `path` only names the source in errors.
///
/// # Errors
///
/// [`GraphFileError::Parse`] with the line, column and field when the text is not a
/// workflow graph.
pub fn parse_graph(text: &str, format: GraphFormat, path: &Path) -> Result<WorkflowGraph, GraphFileError> {
    let parse_error = |line: usize, column: usize, at: &serde_path_to_error::Path, message: String| {
        let (field, message) = describe(at, message);
        GraphFileError::Parse { path: path.to_owned(), line, column, field, message }
    };
    match format {
        GraphFormat::Json => {
            let mut deserializer = serde_json::Deserializer::from_str(text);
            serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
                let at = err.path().clone();
                let err = err.into_inner();
                parse_error(err.line(), err.column(), &at, message_only(&err.to_string()))
            })
        }
        GraphFormat::Yaml => {
            serde_path_to_error::deserialize(serde_yaml::Deserializer::from_str(text)).map_err(|err| {
                let at = err.path().clone();
                let err = err.into_inner();
                let (line, column) = err.location().map_or((0, 0), |at| (at.line(), at.column()));
                parse_error(line, column, &at, message_only(&err.to_string()))
            })
        }
    }
}

/// The field a parse error is about and the message to show: an unknown field is named
/// with its full path and the nearest known field (`nodes[0].hint`: did you mean
/// `hints`?).
fn describe(at: &serde_path_to_error::Path, message: String) -> (Option<String>, String) {
    let parent = at.to_string();
    let parent = if parent == "." { None } else { Some(parent) };
    // serde_yaml starts its message with the path again (`nodes[0]: unknown field …`).
    let message = match &parent {
        Some(parent) => message.strip_prefix(&format!("{parent}: ")).map_or(message.clone(), str::to_owned),
        None => message,
    };
    let Some((unknown, nearest)) = flowmem_model::unknown_field(&message) else {
        return (parent, message);
    };
    // The path ends at the unknown field itself when serde got that far, and at its
    // object when the field was buffered for a flattened part (a node's kind).
    let field = match &parent {
        Some(parent) if parent == unknown || parent.ends_with(&format!(".{unknown}")) => parent.clone(),
        Some(parent) => format!("{parent}.{unknown}"),
        None => unknown.to_owned(),
    };
    let mut described = format!("`{field}`: unknown field");
    if let Some(nearest) = nearest {
        described.push_str(&format!(", did you mean `{nearest}`?"));
    }
    described.push_str(&format!(" ({message})"));
    (Some(field), described)
}

/// A parser's message without its own " at line L column C" (the error names the place).
fn message_only(text: &str) -> String {
    text.rsplit_once(" at line ").map_or(text, |(message, _)| message).to_owned()
}

/// Serialises a graph as pretty JSON or YAML text.
///
/// # Errors
///
/// [`GraphFileError::Serialize`] if the serialiser fails (it does not for valid UTF-8 ids).
pub fn graph_to_string(graph: &WorkflowGraph, format: GraphFormat) -> Result<String, GraphFileError> {
    let res = match format {
        GraphFormat::Json => serde_json::to_string_pretty(graph)
            .map(|mut text| {
                text.push('\n');
                text
            })
            .map_err(|err| err.to_string()),
        GraphFormat::Yaml => serde_yaml::to_string(graph).map_err(|err| err.to_string()),
    };
    res.map_err(|message| GraphFileError::Serialize { path: PathBuf::new(), message })
}

/// Writes a graph to `path`, atomically, as YAML for `.yaml`/`.yml` and JSON otherwise.
///
/// # Errors
///
/// [`GraphFileError::Io`] when the file cannot be written.
pub fn save_graph(graph: &WorkflowGraph, path: &Path) -> Result<(), GraphFileError> {
    let text = graph_to_string(graph, GraphFormat::from_path(path)).map_err(|err| match err {
        GraphFileError::Serialize { message, .. } => GraphFileError::Serialize { path: path.to_owned(), message },
        other => other,
    })?;
    flowmem_model::write_text_atomic(path, &text)
        .map_err(|err| GraphFileError::Io { path: err.path, source: err.source })
}
