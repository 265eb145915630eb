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
    /// The text is not a workflow graph.
    #[error("invalid workflow graph in `{}:{line}:{column}`: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The line, counting from 1 (0 when unknown).
        line: usize,
        /// The column, counting from 1 (0 when unknown).
        column: usize,
        /// What is wrong, naming the field.
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
    match format {
        GraphFormat::Json => serde_json::from_str(text).map_err(|err| GraphFileError::Parse {
            path: path.to_owned(),
            line: err.line(),
            column: err.column(),
            message: err.to_string(),
        }),
        GraphFormat::Yaml => serde_yaml::from_str(text).map_err(|err| {
            let (line, column) = err.location().map_or((0, 0), |at| (at.line(), at.column()));
            GraphFileError::Parse { path: path.to_owned(), line, column, message: err.to_string() }
        }),
    }
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
