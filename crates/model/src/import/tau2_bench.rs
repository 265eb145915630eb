//! τ²-bench task files: a JSON array of tasks, each read as a [`Record`].
//!
//! A task is `{id, description, user_scenario{persona, instructions}, initial_state,
//! evaluation_criteria{actions, communicate_info, nl_assertions, …}}`. The id is kept
//! verbatim. The query is built from `user_scenario.instructions` (its reason for the
//! call, what the user knows and does not know, and how to behave; or the text itself
//! when instructions are a plain string). `evaluation_criteria.actions` is the
//! orchestration log: each action's `action_id` becomes [`ToolCall::call_id`] and its
//! `compare_args` becomes [`ToolCall::compare_args`]. `communicate_info` is what the
//! agent must say ([`Record::required_outputs`]); with the natural-language assertions it
//! makes up the reference result text.

use crate::import::Imported;
use crate::import::input::Input;
use crate::import::json::{Node, Problem};
use crate::{Item, Meta, Record, ToolCall};

/// The parts of τ²'s structured user instructions, in the order the query gives them,
/// with the label each gets.
const INSTRUCTION_PARTS: [(&str, &str); 4] = [
    ("reason_for_call", "Reason for call"),
    ("known_info", "Known info"),
    ("unknown_info", "Unknown info"),
    ("task_instructions", "Task instructions"),
];

/// Imports every task of a τ²-bench task file.
pub(crate) fn run(input: &Input<'_>, out: &mut Imported) {
    input.each_element(out, |_key, node| record(&node, &input.source).map(Item::Record));
}

fn record(node: &Node<'_, '_>, source: &str) -> Result<Record, Problem> {
    let id = node.field("id")?.id_text()?;
    let scenario = node.field("user_scenario")?;
    let instructions = scenario.field("instructions")?;
    let (query, domain) = query_and_domain(&instructions)?;
    let criteria = node.opt_field("evaluation_criteria")?;
    let mut orchestration = Vec::new();
    let mut required_outputs = Vec::new();
    let mut assertions = Vec::new();
    if let Some(criteria) = criteria {
        if let Some(actions) = criteria.opt_field("actions")? {
            for (idx, value) in actions.as_array()?.iter().enumerate() {
                orchestration.push(tool_call(&actions.child(idx, value))?);
            }
        }
        if let Some(info) = criteria.opt_field("communicate_info")? {
            required_outputs = info.strings()?;
        }
        if let Some(nl_assertions) = criteria.opt_field("nl_assertions")? {
            assertions = nl_assertions.strings()?;
        }
    }
    let reference_result = required_outputs.iter().chain(&assertions).cloned().collect::<Vec<_>>().join("\n");
    Ok(Record {
        id,
        query,
        reference_result,
        required_outputs,
        orchestration,
        meta: Meta { site: None, domain, source: Some(source.to_owned()) },
    })
}

fn query_and_domain(instructions: &Node<'_, '_>) -> Result<(String, Option<String>), Problem> {
    if let serde_json::Value::String(text) = instructions.value {
        return Ok((text.clone(), None));
    }
    let mut parts = Vec::new();
    for (key, label) in INSTRUCTION_PARTS {
        if let Some(part) = instructions.opt_field(key)? {
            let text = part.as_str()?.trim();
            if !text.is_empty() {
                parts.push(format!("{label}: {text}"));
            }
        }
    }
    if parts.is_empty() {
        return Err(instructions.problem(
            "no instructions: `reason_for_call`, `known_info`, `unknown_info` and `task_instructions` are all missing",
        ));
    }
    let domain = match instructions.opt_field("domain")? {
        Some(domain) => Some(domain.as_str()?.to_owned()),
        None => None,
    };
    Ok((parts.join("\n"), domain))
}

fn tool_call(action: &Node<'_, '_>) -> Result<ToolCall, Problem> {
    let name = action.field("name")?.as_str()?;
    let mut call = action.tool_call(name, "arguments", false)?;
    if let Some(action_id) = action.opt_field("action_id")? {
        call.call_id = Some(action_id.id_text()?);
    }
    if let Some(compare_args) = action.opt_field("compare_args")? {
        call.compare_args = Some(compare_args.strings()?);
    }
    Ok(call)
}
