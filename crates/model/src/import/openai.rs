//! Agent runs logged as OpenAI chat messages, read as [`Trajectory`]s.
//!
//! A file is JSONL (`*.jsonl`, one run a line) or JSON: an array of runs, one run, or a
//! bare message list. A run is a bare message list, or an object holding it under
//! `messages`, `traj`, `trajectory` or `conversation`, with optional `id` / `task_id` /
//! `query_id` (kept verbatim; a run without one gets its 0-based position in the file),
//! `trial` / `attempt`, `reward` / `success` / `score`, and `domain` / `site`.
//!
//! The query is the first user message; later user messages become the observation of
//! the next step. Each assistant tool call is a step; a `tool` message's content is the
//! result of the call whose id is its `tool_call_id`. The legacy `function_call` and
//! `role: "function"` pair is read as well. The final answer is the last assistant
//! message without tool calls.

use std::collections::HashMap;

use serde_json::Value;

use crate::import::Imported;
use crate::import::input::Input;
use crate::import::json::{Node, Problem, type_name};
use crate::{Action, Item, Meta, Outcome, Step, ToolCall, Trajectory};

/// The members that may hold a run's message list, in the order they are tried.
const MESSAGE_KEYS: [&str; 4] = ["messages", "traj", "trajectory", "conversation"];
/// The members that may hold a run's id, in the order they are tried.
const ID_KEYS: [&str; 3] = ["id", "task_id", "query_id"];

/// A message list turned into steps.
pub(crate) struct Conversation {
    /// The first user message.
    pub(crate) query: String,
    /// The steps in order.
    pub(crate) steps: Vec<Step>,
    /// The last assistant message without tool calls.
    pub(crate) final_answer: Option<String>,
}

/// Imports every run of an OpenAI-format file.
pub(crate) fn run(input: &Input<'_>, out: &mut Imported) {
    let mut position = 0;
    let mut convert = |node: Node<'_, '_>| {
        let res = trajectory(&node, position, &input.source).map(Item::Trajectory);
        position += 1;
        res
    };
    if input.file.extension().is_some_and(|ext| ext == "jsonl") {
        input.each_line(out, convert);
        return;
    }
    match serde_json::from_str::<Value>(input.text) {
        Ok(Value::Array(items)) if !items.first().is_some_and(is_message) => {
            input.each_element(out, |_key, node| convert(node));
        }
        // A bare message list, one run object, or text that is not JSON (which the
        // driver reports with its line).
        _ => input.document(out, convert),
    }
}

fn is_message(value: &Value) -> bool {
    value.get("role").is_some_and(Value::is_string)
}

fn trajectory(node: &Node<'_, '_>, position: usize, source: &str) -> Result<Trajectory, Problem> {
    if let Value::Array(_) = node.value {
        let conversation = conversation(node)?;
        return Ok(Trajectory {
            id: position.to_string(),
            attempt: None,
            query: conversation.query,
            steps: conversation.steps,
            final_answer: conversation.final_answer,
            reference: None,
            success: None,
            meta: Meta { site: None, domain: None, source: Some(source.to_owned()) },
        });
    }
    let mut messages = None;
    for key in MESSAGE_KEYS {
        if let Some(found) = node.opt_field(key)? {
            messages = Some(found);
            break;
        }
    }
    let Some(messages) = messages else {
        return Err(node.problem("no message list: expected one of `messages`, `traj`, `trajectory` or `conversation`"));
    };
    let conversation = conversation(&messages)?;
    let mut id = None;
    for key in ID_KEYS {
        if let Some(found) = node.opt_field(key)? {
            id = Some(found.id_text()?);
            break;
        }
    }
    Ok(Trajectory {
        id: id.unwrap_or_else(|| position.to_string()),
        attempt: attempt(node)?,
        query: conversation.query,
        steps: conversation.steps,
        final_answer: conversation.final_answer,
        reference: None,
        success: outcome(node)?,
        meta: Meta {
            site: opt_string(node, "site")?,
            domain: opt_string(node, "domain")?,
            source: Some(source.to_owned()),
        },
    })
}

/// Turns a message list into steps; see the module docs for the rules.
pub(crate) fn conversation(messages: &Node<'_, '_>) -> Result<Conversation, Problem> {
    let mut query = None;
    let mut steps: Vec<Step> = Vec::new();
    let mut final_answer = None;
    let mut observations: Vec<String> = Vec::new();
    // Tool-call id -> index of its step, for matching `tool` results.
    let mut open_calls: HashMap<String, usize> = HashMap::new();
    // The step of the last legacy `function_call`, for matching a `function` result.
    let mut open_function = None;
    for (idx, value) in messages.as_array()?.iter().enumerate() {
        let message = messages.child(idx, value);
        let role_node = message.field("role")?;
        let role = role_node.as_str()?;
        let content = content_text(&message)?;
        match role {
            "system" | "developer" => {}
            "user" => match &query {
                None => query = Some(content.unwrap_or_default().trim().to_owned()),
                Some(_) => observations.extend(content),
            },
            "assistant" => {
                let calls = assistant_calls(&message)?;
                if calls.is_empty() {
                    if let Some(text) = content.filter(|text| !text.trim().is_empty()) {
                        final_answer = Some(text.clone());
                        steps.push(Step {
                            observation: take_observation(&mut observations),
                            reasoning: None,
                            action: Action::Message { content: text },
                        });
                    }
                    continue;
                }
                let mut reasoning = content.filter(|text| !text.trim().is_empty());
                for (call, legacy) in calls {
                    if legacy {
                        open_function = Some(steps.len());
                    } else if let Some(id) = &call.call_id {
                        open_calls.insert(id.clone(), steps.len());
                    }
                    steps.push(Step {
                        observation: take_observation(&mut observations),
                        reasoning: reasoning.take(),
                        action: Action::ToolCall(call),
                    });
                }
            }
            "tool" => {
                let id_node = message.field("tool_call_id")?;
                let id = id_node.id_text()?;
                let Some(&step_idx) = open_calls.get(&id) else {
                    return Err(id_node.problem(format!("no earlier assistant tool call has the id `{id}`")));
                };
                set_result(&mut steps[step_idx], content);
            }
            "function" => {
                let Some(step_idx) = open_function.take() else {
                    return Err(role_node.problem("a `function` result without an earlier `function_call`"));
                };
                set_result(&mut steps[step_idx], content);
            }
            other => {
                return Err(role_node.problem(format!(
                    "unknown role `{other}`: expected system, developer, user, assistant, tool or function"
                )));
            }
        }
    }
    let Some(query) = query else {
        return Err(messages.problem("no user message: the query is the first user message"));
    };
    Ok(Conversation { query, steps, final_answer })
}

/// The tool calls of an assistant message, each with whether it is a legacy
/// `function_call`.
fn assistant_calls(message: &Node<'_, '_>) -> Result<Vec<(ToolCall, bool)>, Problem> {
    let mut calls = Vec::new();
    if let Some(tool_calls) = message.opt_field("tool_calls")? {
        for (idx, value) in tool_calls.as_array()?.iter().enumerate() {
            let tool_call = tool_calls.child(idx, value);
            let function = tool_call.field("function")?;
            let name = function.field("name")?.as_str()?;
            let mut call = function.tool_call(name, "arguments", true)?;
            if let Some(id) = tool_call.opt_field("id")? {
                call.call_id = Some(id.id_text()?);
            }
            calls.push((call, false));
        }
    }
    if let Some(function) = message.opt_field("function_call")? {
        let name = function.field("name")?.as_str()?;
        calls.push((function.tool_call(name, "arguments", true)?, true));
    }
    Ok(calls)
}

/// A message's text: a string, or the `text` of its content parts joined by newlines.
fn content_text(message: &Node<'_, '_>) -> Result<Option<String>, Problem> {
    let Some(content) = message.opt_field("content")? else {
        return Ok(None);
    };
    match content.value {
        Value::String(text) => Ok(Some(text.clone())),
        Value::Array(parts) => {
            let mut texts = Vec::new();
            for (idx, part) in parts.iter().enumerate() {
                let part = content.child(idx, part);
                if let Some(text) = part.opt_field("text")? {
                    texts.push(text.as_str()?.to_owned());
                }
            }
            Ok(Some(texts.join("\n")))
        }
        other => {
            Err(content.problem(format!("expected a string or a list of content parts, found {}", type_name(other))))
        }
    }
}

fn set_result(step: &mut Step, content: Option<String>) {
    if let Action::ToolCall(call) = &mut step.action {
        call.result = Some(content.map_or(Value::Null, Value::String));
    }
}

fn take_observation(observations: &mut Vec<String>) -> Option<String> {
    if observations.is_empty() {
        return None;
    }
    let text = observations.join("\n");
    observations.clear();
    Some(text)
}

fn attempt(node: &Node<'_, '_>) -> Result<Option<u32>, Problem> {
    for key in ["trial", "attempt"] {
        if let Some(found) = node.opt_field(key)? {
            return match found.value.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => Ok(Some(n)),
                None => Err(found.problem(format!("expected a trial number, found {}", type_name(found.value)))),
            };
        }
    }
    Ok(None)
}

fn outcome(node: &Node<'_, '_>) -> Result<Option<Outcome>, Problem> {
    for key in ["reward", "success", "score"] {
        if let Some(found) = node.opt_field(key)? {
            return match found.value {
                Value::Bool(ok) => Ok(Some(Outcome::Bool(*ok))),
                Value::Number(number) => match number.as_f64() {
                    Some(score) => Ok(Some(Outcome::Score(score))),
                    None => Err(found.problem("expected a finite number")),
                },
                other => Err(found.problem(format!("expected a boolean or a number, found {}", type_name(other)))),
            };
        }
    }
    Ok(None)
}

fn opt_string(node: &Node<'_, '_>, key: &str) -> Result<Option<String>, Problem> {
    match node.opt_field(key)? {
        Some(found) => Ok(Some(found.as_str()?.to_owned())),
        None => Ok(None),
    }
}
