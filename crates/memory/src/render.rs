//! Workflows in other shapes: AWM prompt text, a linear workflow graph, and the JSONL and
//! plain-text exchange formats.
//!
//! # The AWM text format
//!
//! One workflow per block; blocks are separated by blank lines, as AWM splits its
//! induction output. A block is a `Workflow:` line with the description, then per step a
//! `State:`, a `Reasoning:` and an `Action:` line. The action is the tool name followed by
//! its arguments as a JSON object in parentheses:
//!
//! ```text
//! Workflow: Look up a user's order
//! State: The user gave their email.
//! Reasoning: The order lookup needs the user id.
//! Action: find_user_id_by_email({"email":"{email}"})
//! State: The user id is known.
//! Reasoning: Now read the order.
//! Action: get_order_details({"order_id":"{order_id}"})
//! ```
//!
//! The text is produced by the `workflow` prompt template (`prompts/workflow.j2`), which
//! is also what agents see in their prompt. The reader is lenient where models are
//! sloppy: a `## ` or `Workflow` prefix is optional, `[state]` and `<think>…</think>` are
//! read as state and reasoning, code fences are ignored, `key=value` arguments are
//! accepted, and a block that holds only a description lends it to the next block.

use std::io::{BufRead, Write};

use serde_json::Value;

use flowmem_model::{
    Edge, EdgeKind, GraphNode, JsonObject, LlmRole, NodeKind, Workflow, WorkflowAction, WorkflowGraph, WorkflowStep,
    canonical_json,
};

pub use crate::templates::{INDUCE_PROMPT, WORKFLOW_PROMPT, add_prompts, prompt_text, prompts};

/// A workflow read from AWM text: description and steps only.
#[derive(Debug, Clone, PartialEq)]
pub struct TextWorkflow {
    /// The 1-based line where its block starts.
    pub line: usize,
    /// The description.
    pub description: String,
    /// The steps.
    pub steps: Vec<WorkflowStep>,
}

/// A problem in AWM text, located by line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct TextError {
    /// The 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Reads workflows from AWM text. Returns the workflows of every block that parsed and
/// an error for every line that did not; blocks without any `Action:` are prose and
/// yield nothing.
///
/// # Example
///
/// ```
/// let text = "Workflow: Greet\nAction: hello({\"name\": \"{name}\"})\nAction: bye()\n";
/// let (workflows, errors) = flowmem_memory::render::parse_text(text);
/// assert!(errors.is_empty());
/// assert_eq!(workflows[0].steps[0].action.args["name"], "{name}");
/// ```
#[must_use]
pub fn parse_text(text: &str) -> (Vec<TextWorkflow>, Vec<TextError>) {
    let mut workflows = Vec::new();
    let mut errors = Vec::new();
    let mut pending_description: Option<String> = None;
    let mut block: Vec<(usize, &str)> = Vec::new();
    let lines = text.lines().enumerate().map(|(idx, line)| (idx + 1, line.trim()));
    for (line_no, line) in lines.chain(std::iter::once((0, ""))) {
        if line.starts_with("```") {
            continue;
        }
        if !line.is_empty() {
            block.push((line_no, line));
            continue;
        }
        if block.is_empty() {
            continue;
        }
        match parse_block(&block, &mut errors) {
            Block::Workflow(mut workflow) => {
                if workflow.description.is_empty() {
                    workflow.description = pending_description.take().unwrap_or_default();
                }
                pending_description = None;
                workflows.push(workflow);
            }
            Block::Prose(description) => pending_description = description,
        }
        block.clear();
    }
    (workflows, errors)
}

enum Block {
    Workflow(TextWorkflow),
    Prose(Option<String>),
}

fn parse_block(block: &[(usize, &str)], errors: &mut Vec<TextError>) -> Block {
    let mut description = String::new();
    let mut steps = Vec::new();
    let mut state = String::new();
    let mut reasoning = String::new();
    let mut saw_action = false;
    for (idx, &(line_no, line)) in block.iter().enumerate() {
        if let Some(rest) = strip_label(line, "action") {
            saw_action = true;
            match parse_action(rest) {
                Ok(action) => steps.push(WorkflowStep {
                    state: std::mem::take(&mut state),
                    reasoning: std::mem::take(&mut reasoning),
                    action,
                }),
                Err(message) => errors.push(TextError { line: line_no, message }),
            }
        } else if let Some(rest) = strip_label(line, "state").or_else(|| line.strip_prefix("[state]").map(str::trim)) {
            append(&mut state, rest);
        } else if let Some(rest) = strip_label(line, "reasoning").or_else(|| think(line)) {
            append(&mut reasoning, rest);
        } else if idx == 0 {
            description = header(line).to_owned();
        } else if let Some(rest) = strip_label(line, "workflow") {
            // A second header inside one block: the model forgot the blank line.
            append(&mut description, rest);
        } else {
            // Free text between labelled lines is more state.
            append(&mut state, line);
        }
    }
    if !saw_action {
        return Block::Prose((!description.is_empty()).then_some(description));
    }
    Block::Workflow(TextWorkflow { line: block[0].0, description, steps })
}

fn header(line: &str) -> &str {
    let line = line.trim_start_matches('#').trim();
    let line = strip_label(line, "workflow").unwrap_or(line);
    line.trim_matches('*').trim()
}

/// `Label: rest`, case-insensitively, with optional `**` bold around the label.
fn strip_label<'l>(line: &'l str, label: &str) -> Option<&'l str> {
    let line = line.trim_start_matches(['*', '-', ' ']);
    let head = line.get(..label.len())?;
    if !head.eq_ignore_ascii_case(label) {
        return None;
    }
    let rest = line[label.len()..].trim_start_matches('*');
    let rest = rest.strip_prefix(':')?;
    Some(rest.trim_start_matches('*').trim())
}

fn think(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("<think>")?;
    Some(rest.strip_suffix("</think>").unwrap_or(rest).trim())
}

fn append(target: &mut String, text: &str) {
    if text.is_empty() {
        return;
    }
    if !target.is_empty() {
        target.push(' ');
    }
    target.push_str(text);
}

/// Parses `tool({...})`, `tool()`, `tool(key="v", n=2)` or a bare `tool`.
fn parse_action(text: &str) -> Result<WorkflowAction, String> {
    let text = text.trim().trim_matches('`').trim();
    let (tool, args) = match text.find('(') {
        None => (text, ""),
        Some(open) => {
            let Some(inner) = text[open + 1..].strip_suffix(')') else {
                return Err(format!("action `{text}` opens `(` but does not end with `)`"));
            };
            (text[..open].trim(), inner.trim())
        }
    };
    let valid_name =
        !tool.is_empty() && tool.chars().all(|ch| ch.is_alphanumeric() || matches!(ch, '_' | '-' | '.' | '/' | ':'));
    if !valid_name {
        return Err(format!("action `{text}` does not start with a tool name"));
    }
    let args = if args.is_empty() {
        JsonObject::new()
    } else if args.starts_with('{') {
        match serde_json::from_str::<Value>(args) {
            Ok(Value::Object(map)) => map,
            Ok(_) | Err(_) => return Err(format!("the arguments of `{tool}` are not a JSON object: {args}")),
        }
    } else {
        keyword_args(args).ok_or_else(|| format!("the arguments of `{tool}` are neither JSON nor key=value: {args}"))?
    };
    Ok(WorkflowAction { tool: tool.to_owned(), args, sources: Default::default() })
}

/// Reads `key="v", n=2` (values as JSON when they parse, else as bare strings). Commas
/// inside quoted values are respected.
fn keyword_args(text: &str) -> Option<JsonObject> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut in_quotes = false;
    let mut escaped = false;
    for ch in text.chars() {
        match ch {
            '\\' if in_quotes && !escaped => escaped = true,
            '"' if !escaped => in_quotes = !in_quotes,
            ',' if !in_quotes => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => escaped = false,
        }
        current.push(ch);
    }
    parts.push(current);
    let mut args = JsonObject::new();
    for part in parts {
        let (key, value) = part.split_once('=')?;
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|ch| ch.is_alphanumeric() || ch == '_') {
            return None;
        }
        let value = value.trim();
        let value =
            serde_json::from_str::<Value>(value).unwrap_or_else(|_| Value::String(value.trim_matches('\'').to_owned()));
        args.insert(key.to_owned(), value);
    }
    Some(args)
}

pub(crate) fn single_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Converts a workflow into a linear executable graph, so FlowScout can optimise it: a
/// `plan` LLM node, one tool node per step (hinted to the step's tool, instructed with
/// the step's state, reasoning and argument template), and a `synthesize` LLM node, joined
/// by data edges.
///
/// # Example
///
/// ```
/// # let workflow: flowmem_model::Workflow = serde_json::from_value(serde_json::json!({
/// #   "description": "d", "steps": [{"action": {"tool": "a"}}, {"action": {"tool": "b"}}]})).unwrap();
/// let graph = flowmem_memory::render::to_graph(&workflow);
/// assert_eq!(graph.nodes.len(), 4);
/// assert_eq!((graph.entry.as_str(), graph.exit.as_str()), ("plan", "synthesize"));
/// ```
#[must_use]
pub fn to_graph(workflow: &Workflow) -> WorkflowGraph {
    let mut nodes = Vec::with_capacity(workflow.steps.len() + 2);
    nodes.push(GraphNode {
        id: "plan".to_owned(),
        kind: NodeKind::Llm {
            role: LlmRole::Plan,
            instruction: Some(format!("Follow the workflow: {}", single_line(&workflow.description))),
            model: None,
        },
        description: Some("Parse the query into the workflow's variables".to_owned()),
    });
    for (idx, step) in workflow.steps.iter().enumerate() {
        let mut instruction = String::new();
        for (label, text) in [("Expected state", &step.state), ("Reasoning", &step.reasoning)] {
            if !text.trim().is_empty() {
                instruction.push_str(&format!("{label}: {}\n", single_line(text)));
            }
        }
        instruction.push_str(&format!(
            "Call {} with arguments shaped like {}",
            step.action.tool,
            canonical_json(&Value::Object(step.action.args.clone()))
        ));
        nodes.push(GraphNode {
            id: format!("step_{}", idx + 1),
            kind: NodeKind::Tool {
                hints: vec![step.action.tool.clone()],
                instruction: Some(instruction),
                bindings: Default::default(),
            },
            description: Some(format!("Workflow step {}: {}", idx + 1, step.action.tool)),
        });
    }
    nodes.push(GraphNode {
        id: "synthesize".to_owned(),
        kind: NodeKind::Llm { role: LlmRole::Synthesize, instruction: None, model: None },
        description: Some("Write the final answer".to_owned()),
    });
    let edges = nodes
        .windows(2)
        .map(|pair| Edge { from: pair[0].id.clone(), to: pair[1].id.clone(), kind: EdgeKind::Data, label: None })
        .collect();
    WorkflowGraph {
        name: Some(single_line(&workflow.description)),
        nodes,
        edges,
        entry: "plan".to_owned(),
        exit: "synthesize".to_owned(),
        queries: Vec::new(),
    }
}

/// Writes workflows as JSONL: one `Workflow` JSON object per line.
///
/// # Errors
///
/// Any error of `out`.
pub fn write_jsonl(workflows: &[Workflow], out: &mut dyn Write) -> std::io::Result<()> {
    for workflow in workflows {
        serde_json::to_writer(&mut *out, workflow).map_err(std::io::Error::other)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// A JSONL line that is not a workflow.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: not a workflow: {source}")]
pub struct WorkflowLineError {
    /// The 1-based line.
    pub line: usize,
    /// The decoding error, which names the field.
    #[source]
    pub source: serde_json::Error,
}

/// Reads JSONL workflows, skipping blank lines. Returns the workflows that decoded and an
/// error per line that did not.
///
/// # Errors
///
/// Only reading `input` fails the whole call.
pub fn read_jsonl(input: &mut dyn BufRead) -> std::io::Result<(Vec<Workflow>, Vec<WorkflowLineError>)> {
    let mut workflows = Vec::new();
    let mut errors = Vec::new();
    for (idx, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Workflow>(&line) {
            Ok(workflow) => workflows.push(workflow),
            Err(source) => errors.push(WorkflowLineError { line: idx + 1, source }),
        }
    }
    Ok((workflows, errors))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::render::{parse_action, parse_text};

    #[test]
    fn actions_parse_in_json_keyword_and_bare_forms() {
        assert_eq!(parse_action("f({\"a\": 1})").unwrap().args["a"], 1);
        let kw = parse_action("f(a=\"x, y\", n=2, s=plain)").unwrap();
        assert_eq!(serde_json::Value::Object(kw.args), json!({"a": "x, y", "n": 2, "s": "plain"}));
        assert!(parse_action("g").unwrap().args.is_empty());
        assert!(parse_action("f({\"a\": 1}").is_err());
        assert!(parse_action("f([1])").is_err());
        assert!(parse_action("not a tool()").is_err());
    }

    #[test]
    fn sloppy_text_still_parses() {
        let text = "Here are the workflows:\n\n## Find a user\n\n[state] Start\n<think>need id</think>\n```\nAction: find(email=\"{email}\")\n```\naction: get({\"id\": \"{id}\"})\n";
        let (workflows, errors) = parse_text(text);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(workflows.len(), 1);
        assert_eq!(workflows[0].description, "Find a user");
        assert_eq!(workflows[0].steps[0].state, "Start");
        assert_eq!(workflows[0].steps[0].reasoning, "need id");
        assert_eq!(workflows[0].steps[1].action.tool, "get");
    }
}
