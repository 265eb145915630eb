//! The tool list every MCP session sees: the memory tools, the top stored workflows as
//! tools (AWM_AS), and the deployed graphs. Built from the memory, published through a
//! `watch` channel, rebuilt when the memory changes.

use std::collections::HashSet;
use std::sync::Arc;

use rmcp::model::Tool;
use serde_json::{Map, Value, json};

use flowmem_exec::ToolBox;
use flowmem_memory::{MemoryStore, WorkflowTools, retention_score};
use flowmem_model::{Scope, Workflow};

use crate::error::ServerError;
use crate::state::{Parts, ServeConfig};

/// The name of the prompt-memory tool.
pub const FIND_WORKFLOWS: &str = "find_workflows";
/// The name of the tool that shows one workflow.
pub const GET_WORKFLOW: &str = "get_workflow";
/// The name of the online-learning tool.
pub const REPORT_RUN: &str = "report_run";

/// The longest description part of a workflow tool's name.
const SLUG_CHARS: usize = 40;

/// One published tool list.
#[derive(Debug, Clone)]
pub(crate) struct Catalog {
    /// The memory's revision it was built at.
    pub(crate) revision: i64,
    /// The workflow tools, best retention score first, with their names.
    pub(crate) workflows: Vec<(String, Workflow)>,
    /// Every tool, in the order `tools/list` gives them.
    pub(crate) tools: Vec<Tool>,
}

impl Catalog {
    /// Lists the memory and builds the tool list.
    pub(crate) fn build(store: &MemoryStore, cfg: &ServeConfig, parts: &Parts) -> Result<Catalog, ServerError> {
        let revision = store.revision()?;
        let mut workflows = store.list(&Scope::default())?;
        // Best retention score first; ties by id, so the order is the same every time.
        workflows.sort_by(|a, b| {
            retention_score(&b.stats).total_cmp(&retention_score(&a.stats)).then_with(|| a.id.cmp(&b.id))
        });
        workflows.truncate(cfg.max_workflow_tools);
        let named = name_workflows(workflows);
        let mut tools = memory_tools(parts.evaluator.is_some());
        let workflow_tools = WorkflowTools::with_names(parts.tools.clone(), named.clone());
        for definition in
            workflow_tools.definitions().into_iter().filter(|def| workflow_tools.is_workflow_tool(&def.name))
        {
            let mut schema = definition.parameters;
            if let Some(isolation) = &cfg.isolation {
                add_state_key(&mut schema, &isolation.key_arg);
            }
            tools.push(tool(definition.name, definition.description, schema));
        }
        for graph in &parts.graphs {
            let description = format!(
                "Runs the workflow graph {} end to end on a query, with the configured tools and models, and returns its answer and a trace id (read it as the resource flowmem://trace/{{id}}).",
                graph.graph.graph().name.as_deref().unwrap_or(&graph.tool)
            );
            let mut schema = json!({
                "type": "object",
                "properties": {"query": {"type": "string", "description": "the task for the workflow"}},
                "required": ["query"]
            });
            if let Some(isolation) = &cfg.isolation {
                add_state_key(&mut schema, &isolation.key_arg);
            }
            tools.push(tool(graph.tool.clone(), description, schema));
        }
        Ok(Catalog { revision, workflows: named, tools })
    }

    /// Whether `other` offers exactly the same tools.
    pub(crate) fn same_tools(&self, other: &Catalog) -> bool {
        self.tools == other.tools
    }

    /// The workflow offered under the tool name `name`.
    pub(crate) fn workflow(&self, name: &str) -> Option<&Workflow> {
        self.workflows.iter().find(|(known, _)| known == name).map(|(_, workflow)| workflow)
    }
}

/// Pairs each workflow with its tool name: `wf_`, the description in lower-case words
/// joined by `_` (at most [`SLUG_CHARS`] characters), `_` and the first 6 hex digits of
/// its content id. The id part makes the name stable (the same workflow always gets it)
/// and unique; on the rare clash of both parts, the whole id is used.
pub(crate) fn name_workflows(workflows: Vec<Workflow>) -> Vec<(String, Workflow)> {
    let mut taken: HashSet<String> = HashSet::new();
    let mut named = Vec::with_capacity(workflows.len());
    for workflow in workflows {
        let slug = slug(&workflow.description);
        let hex: String = workflow.id.trim_start_matches("wf-").chars().filter(char::is_ascii_alphanumeric).collect();
        let short: String = hex.chars().take(6).collect();
        let mut name = format!("wf_{slug}_{short}");
        if taken.contains(&name) {
            name = format!("wf_{slug}_{hex}");
        }
        taken.insert(name.clone());
        named.push((name, workflow));
    }
    named
}

fn slug(description: &str) -> String {
    let mut slug = String::new();
    for word in description.split(|c: char| !c.is_ascii_alphanumeric()).filter(|word| !word.is_empty()) {
        let extra = usize::from(!slug.is_empty()) + word.len();
        if slug.len() + extra > SLUG_CHARS {
            if slug.is_empty() {
                slug.extend(word.chars().take(SLUG_CHARS).map(|c| c.to_ascii_lowercase()));
            }
            break;
        }
        if !slug.is_empty() {
            slug.push('_');
        }
        slug.extend(word.chars().map(|c| c.to_ascii_lowercase()));
    }
    if slug.is_empty() { "workflow".to_owned() } else { slug }
}

fn add_state_key(schema: &mut Value, key_arg: &str) {
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        properties.insert(
            key_arg.to_owned(),
            json!({"type": "string", "description": "run in this tool state instead of a fresh one"}),
        );
    }
}

fn tool(name: String, description: String, schema: Value) -> Tool {
    let schema = match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    Tool::new(name, description, Arc::new(schema))
}

fn memory_tools(can_judge: bool) -> Vec<Tool> {
    let outcome = if can_judge {
        "whether the run succeeded; when left out, the evaluator model judges it"
    } else {
        "whether the run succeeded (required: this server has no evaluator model)"
    };
    vec![
        tool(
            FIND_WORKFLOWS.to_owned(),
            "Finds the stored workflows that fit a task, best first, in Agent Workflow Memory's text form with their ids: reusable step-by-step routines learned from earlier successful runs. Read them before acting.".to_owned(),
            json!({
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "the task to find workflows for"},
                    "scope": {"type": "object", "description": "only workflows of this site and/or domain",
                              "properties": {"site": {"type": "string"}, "domain": {"type": "string"}}},
                    "k": {"type": "integer", "minimum": 1, "description": "how many workflows (default 5)"}
                },
                "required": ["task"]
            }),
        ),
        tool(
            GET_WORKFLOW.to_owned(),
            "Shows one stored workflow: its steps with {variables}, its variables, where it was learned from (provenance) and how it fared (usage statistics).".to_owned(),
            json!({
                "type": "object",
                "properties": {"id": {"type": "string", "description": "the workflow id, such as wf-0123456789abcdef"}},
                "required": ["id"]
            }),
        ),
        tool(
            REPORT_RUN.to_owned(),
            "Hands a finished run back so the memory keeps learning: OpenAI chat messages with tool calls and results. It is judged, and induced into memory when successful. Returns what was stored, merged or rejected, and why. Needs a write token.".to_owned(),
            json!({
                "type": "object",
                "properties": {
                    "messages": {"type": "array", "items": {"type": "object"},
                                 "description": "the run as OpenAI chat messages: the user task, assistant tool_calls, tool results, the final answer"},
                    "outcome": {"type": "boolean", "description": outcome},
                    "scope": {"type": "object", "description": "the site and/or domain the workflows belong to",
                              "properties": {"site": {"type": "string"}, "domain": {"type": "string"}}}
                },
                "required": ["messages"]
            }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use flowmem_model::Workflow;

    use crate::catalog::{name_workflows, slug};

    fn workflow(id: &str, description: &str) -> Workflow {
        serde_json::from_value(serde_json::json!({"id": id, "description": description, "steps": []})).unwrap()
    }

    #[test]
    fn names_come_from_the_description_and_the_id() {
        assert_eq!(slug("Cancel a pending order!"), "cancel_a_pending_order");
        assert_eq!(slug("¿?"), "workflow");
        assert!(slug(&"word ".repeat(30)).len() <= 40);
        assert_eq!(slug(&"x".repeat(60)).len(), 40);
        let named = name_workflows(vec![
            workflow("wf-0123456789abcdef", "Cancel a pending order"),
            workflow("wf-0123459999999999", "Cancel a pending order"),
        ]);
        assert_eq!(named[0].0, "wf_cancel_a_pending_order_012345");
        assert_eq!(named[1].0, "wf_cancel_a_pending_order_0123459999999999", "a clash takes the whole id");
        assert!(
            named
                .iter()
                .all(|(name, _)| name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        );
    }
}
