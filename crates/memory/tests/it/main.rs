//! Integration tests of flowmem-memory: one binary, one module per topic.

mod concurrency;
mod curve_html;
mod online;
mod render;
mod rule_data;
mod store;
mod wire;

use std::path::PathBuf;

use serde_json::json;

use flowmem_model::{Scope, Workflow};

/// The repository root (the worktree), so data is reached as `../shared/data/...`.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A workflow with the given description, tool sequence and scope domain.
pub fn workflow(description: &str, tools: &[&str], domain: Option<&str>) -> Workflow {
    let steps: Vec<serde_json::Value> = tools
        .iter()
        .map(|tool| json!({"state": "", "reasoning": format!("call {tool}"), "action": {"tool": tool, "args": {"id": "{id}"}}}))
        .collect();
    let mut workflow: Workflow = serde_json::from_value(json!({"description": description, "steps": steps}))
        .expect("the literal is a valid workflow");
    workflow.scope = Scope { site: None, domain: domain.map(str::to_owned) };
    workflow.provenance.inducer = "rule".to_owned();
    workflow
}
