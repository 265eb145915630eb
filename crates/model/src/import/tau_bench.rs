//! τ-bench v1 task files: one task per JSONL line, read as a [`Record`].
//!
//! A line is `{id, domain, split, user_id, instruction, actions: [{name, kwargs}],
//! outputs: [string], annotator}`. The id is the task's index in its split and is kept
//! verbatim; `instruction` (the user simulator's brief) is the query; `actions` is the
//! ground-truth orchestration log; `outputs` are the strings the agent's replies must
//! contain, kept as [`Record::required_outputs`] and, one per line, as the reference
//! result text.

use crate::import::Imported;
use crate::import::input::Input;
use crate::import::json::{Node, Problem};
use crate::{Item, Meta, Record};

/// Imports every line of a τ-bench task file.
pub(crate) fn run(input: &Input<'_>, out: &mut Imported) {
    input.each_line(out, |node| record(&node, &input.source).map(Item::Record));
}

fn record(node: &Node<'_, '_>, source: &str) -> Result<Record, Problem> {
    let id = node.field("id")?.id_text()?;
    let query = node.field("instruction")?.as_str()?.to_owned();
    let actions = node.field("actions")?;
    let mut orchestration = Vec::new();
    for (idx, value) in actions.as_array()?.iter().enumerate() {
        let action = actions.child(idx, value);
        let name = action.field("name")?.as_str()?;
        orchestration.push(action.tool_call(name, "kwargs", false)?);
    }
    let required_outputs = match node.opt_field("outputs")? {
        Some(outputs) => outputs.strings()?,
        None => Vec::new(),
    };
    let domain = match node.opt_field("domain")? {
        Some(domain) => Some(domain.as_str()?.to_owned()),
        None => None,
    };
    Ok(Record {
        id,
        query,
        reference_result: required_outputs.join("\n"),
        required_outputs,
        orchestration,
        meta: Meta { site: None, domain, source: Some(source.to_owned()) },
    })
}
