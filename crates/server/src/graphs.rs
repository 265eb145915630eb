//! Deployed FlowScout graphs: every `*.workflow.json` of a directory, served as
//! `run_<name>`.

use std::path::Path;

use flowmem_exec::{ToolCatalog, check, load_graph};

use crate::error::ServerError;
use crate::state::DeployedGraph;

/// The suffix of deployable graph files.
pub const GRAPH_SUFFIX: &str = ".workflow.json";

/// Loads every `*.workflow.json` in `dir` (not recursively), in name order, and
/// validates each against `tool_names`. A graph `best.workflow.json` becomes the tool
/// `run_best`; characters other than letters, digits, `_` and `-` become `_`.
///
/// # Errors
///
/// [`ServerError::Graph`] naming the file when the directory cannot be read, a file does
/// not parse or is invalid, or two files map to the same tool name.
pub fn load_graphs(dir: &Path, tool_names: &[String]) -> Result<Vec<DeployedGraph>, ServerError> {
    let graph_error = |path: &Path, message: String| ServerError::Graph { path: path.to_path_buf(), message };
    let entries =
        std::fs::read_dir(dir).map_err(|err| graph_error(dir, format!("cannot read the directory: {err}")))?;
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|err| graph_error(dir, format!("cannot read the directory: {err}")))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(GRAPH_SUFFIX) && name.len() > GRAPH_SUFFIX.len() {
            paths.push(entry.path());
        }
    }
    paths.sort();
    let mut graphs: Vec<DeployedGraph> = Vec::with_capacity(paths.len());
    for path in paths {
        let file_name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        let stem = file_name.trim_end_matches(GRAPH_SUFFIX);
        let tool: String = std::iter::once("run_".to_owned())
            .chain(
                stem.chars()
                    .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
                    .map(String::from),
            )
            .collect();
        if let Some(other) = graphs.iter().find(|graph| graph.tool == tool) {
            return Err(graph_error(&path, format!("its tool name `{tool}` is taken by `{}`", other.path.display())));
        }
        let graph = load_graph(&path).map_err(|err| graph_error(&path, err.to_string()))?;
        let graph = check(graph, ToolCatalog::Known(tool_names)).map_err(|err| graph_error(&path, err.to_string()))?;
        graphs.push(DeployedGraph { tool, path, graph });
    }
    Ok(graphs)
}
