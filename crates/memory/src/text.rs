//! Text helpers shared by the store: tokens, description similarity, index text.

use std::collections::BTreeSet;

use flowmem_model::{Workflow, canonical_json};

/// Splits text into lowercase alphanumeric tokens, the way the SQLite `unicode61`
/// tokenizer does: every character that is not a letter or a digit separates tokens,
/// so `get_order_details` yields `get`, `order`, `details`.
pub(crate) fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|ch: char| !ch.is_alphanumeric()).filter(|token| !token.is_empty()).map(str::to_lowercase)
}

/// The token Jaccard similarity of two descriptions: |A ∩ B| / |A ∪ B| over their token
/// sets. Two empty descriptions are identical (1.0).
#[must_use]
pub fn description_similarity(a: &str, b: &str) -> f64 {
    let set_a: BTreeSet<String> = tokens(a).collect();
    let set_b: BTreeSet<String> = tokens(b).collect();
    if set_a.is_empty() && set_b.is_empty() {
        return 1.0;
    }
    let n_common = set_a.intersection(&set_b).count();
    let n_union = set_a.len() + set_b.len() - n_common;
    n_common as f64 / n_union as f64
}

/// The action-sequence key of a workflow: its tool names joined by a separator that
/// cannot occur in a tool name.
pub(crate) fn action_key(workflow: &Workflow) -> String {
    let mut key = String::new();
    for (idx, tool) in workflow.tool_sequence().enumerate() {
        if idx > 0 {
            key.push('\u{1f}');
        }
        key.push_str(tool);
    }
    key
}

/// The text indexed for a workflow's steps: each step's state, reasoning, tool name and
/// argument names and values.
pub(crate) fn steps_text(workflow: &Workflow) -> String {
    let mut text = String::new();
    for step in &workflow.steps {
        for part in [&step.state, &step.reasoning, &step.action.tool] {
            if !part.is_empty() {
                text.push_str(part);
                text.push('\n');
            }
        }
        for (name, value) in &step.action.args {
            text.push_str(name);
            text.push(' ');
            match value {
                serde_json::Value::String(value) => text.push_str(value),
                other => text.push_str(&canonical_json(other)),
            }
            text.push('\n');
        }
    }
    text
}

/// The text a workflow is embedded from for vector retrieval: its description, then its
/// tool names (from [`action_key`]'s sequence, separated by commas), on a second line.
/// The description carries the task's meaning; the tool names (`exchange_delivered_order_items`)
/// say what the workflow does when the description is terse.
pub(crate) fn embedding_text<'a>(description: &str, tools: impl IntoIterator<Item = &'a str>) -> String {
    let mut text = description.trim().to_owned();
    let mut first = true;
    for tool in tools {
        text.push_str(if first { "\n" } else { ", " });
        first = false;
        text.push_str(&tool.replace('_', " "));
    }
    text
}

#[cfg(test)]
mod tests {
    use crate::text::{description_similarity, tokens};

    #[test]
    fn tokens_split_on_punctuation_and_lowercase() {
        let got: Vec<String> = tokens("Get_Order-Details(id=\"#W12\")").collect();
        assert_eq!(got, ["get", "order", "details", "id", "w12"]);
    }

    #[test]
    fn similarity_is_token_jaccard() {
        assert_eq!(description_similarity("Cancel an order", "cancel AN order"), 1.0);
        // {cancel, an, order} vs {cancel, the, order}: 2 shared of 4.
        assert_eq!(description_similarity("cancel an order", "cancel the order"), 0.5);
        assert_eq!(description_similarity("", ""), 1.0);
        assert_eq!(description_similarity("a", ""), 0.0);
    }
}
