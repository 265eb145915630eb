//! Integration tests of flowmem-memory: one binary, one module per topic.

mod concurrency;
mod curve_html;
mod lm;
mod online;
mod render;
mod retrieval;
mod rule_data;
mod store;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use flowmem_llm::{HttpModel, HttpModelConfig, RetryPolicy};
use flowmem_model::{Scope, Workflow};
use flowmem_testsupport::ScriptedLlmServer;

/// The repository root (the worktree), so data is reached as `../shared/data/...`.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The real OpenAI-compatible client, pointed at a scripted server, with fast retries
/// and a short timeout so a test fails quickly instead of hanging.
pub fn scripted_model(server: &ScriptedLlmServer) -> HttpModel {
    let mut cfg = HttpModelConfig::new("scripted", server.base_url(), "scripted-model");
    cfg.timeout = Duration::from_secs(10);
    cfg.retry = RetryPolicy {
        max_retries: 2,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        max_retry_after: Duration::from_secs(1),
    };
    HttpModel::new(cfg).expect("an HTTP client for the scripted server")
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
