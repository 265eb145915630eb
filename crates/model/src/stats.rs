//! Summary counts of records and trajectories: items, tool calls, tools, transitions.

use std::collections::HashMap;

use serde::Serialize;

use crate::{Item, Outcome};

/// Summary counts of a set of items, as `flowmem stats` prints them.
///
/// This is part of `flowmem stats --json` (whose document is versioned): add fields,
/// never rename or remove them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// Items counted.
    pub n_items: usize,
    /// How many of them are records.
    pub n_records: usize,
    /// How many of them are trajectories.
    pub n_trajectories: usize,
    /// Tool calls over all items (a record's orchestration, a run's tool steps).
    pub n_tool_calls: usize,
    /// Items without any tool call.
    pub n_items_without_tool_calls: usize,
    /// The most tool calls in one item.
    pub max_tool_calls: usize,
    /// Tool calls that carry an error.
    pub n_failed_tool_calls: usize,
    /// Trajectories whose source labelled how they ended.
    pub n_labelled: usize,
    /// Labelled trajectories that succeeded (a true label or a score of at least 1).
    pub n_succeeded: usize,
    /// Distinct tool names.
    pub n_distinct_tools: usize,
    /// Distinct (tool, next tool) pairs within items.
    pub n_distinct_transitions: usize,
    /// The most called tools, most calls first (ties by name).
    pub top_tools: Vec<ToolCount>,
    /// The most frequent tool-to-tool transitions within an item, most frequent first
    /// (ties by names).
    pub top_transitions: Vec<ToolTransition>,
}

/// How often one tool was called.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolCount {
    /// The tool's name.
    pub tool: String,
    /// Its number of calls.
    pub count: usize,
}

/// How often one tool call was directly followed by another in the same item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolTransition {
    /// The earlier call's tool.
    pub from: String,
    /// The next call's tool.
    pub to: String,
    /// How often `to` directly followed `from`.
    pub count: usize,
}

/// Counts items, tool calls, tools and tool-to-tool transitions, keeping the `top` most
/// frequent tools and transitions.
///
/// A transition is a pair of consecutive tool calls in one item; messages between them
/// do not break it, and the last call of one item never pairs with the next item.
///
/// # Example
///
/// ```
/// use flowmem_model::{Item, Record, ToolCall, stats};
///
/// let call = |name: &str| ToolCall::new(name, serde_json::Value::Null).unwrap();
/// let record = Record {
///     id: "1".into(),
///     query: "q".into(),
///     reference_result: String::new(),
///     required_outputs: vec![],
///     orchestration: vec![call("find"), call("get"), call("get")],
///     meta: Default::default(),
/// };
/// let summary = stats(&[Item::Record(record)], 10);
/// assert_eq!((summary.n_tool_calls, summary.n_distinct_tools), (3, 2));
/// assert_eq!(summary.top_transitions[0].count, 1);
/// ```
#[must_use]
pub fn stats(items: &[Item], top: usize) -> Stats {
    let mut tools: HashMap<&str, usize> = HashMap::new();
    let mut transitions: HashMap<(&str, &str), usize> = HashMap::new();
    let mut res = Stats {
        n_items: items.len(),
        n_records: 0,
        n_trajectories: 0,
        n_tool_calls: 0,
        n_items_without_tool_calls: 0,
        max_tool_calls: 0,
        n_failed_tool_calls: 0,
        n_labelled: 0,
        n_succeeded: 0,
        n_distinct_tools: 0,
        n_distinct_transitions: 0,
        top_tools: Vec::new(),
        top_transitions: Vec::new(),
    };
    for item in items {
        match item {
            Item::Record(_) => res.n_records += 1,
            Item::Trajectory(trajectory) => {
                res.n_trajectories += 1;
                if let Some(outcome) = trajectory.success {
                    res.n_labelled += 1;
                    res.n_succeeded += usize::from(Outcome::is_success(outcome));
                }
            }
        }
        let mut n_calls = 0;
        let mut previous: Option<&str> = None;
        for call in item.tool_calls() {
            n_calls += 1;
            res.n_failed_tool_calls += usize::from(call.failed());
            *tools.entry(&call.tool).or_default() += 1;
            if let Some(from) = previous {
                *transitions.entry((from, &call.tool)).or_default() += 1;
            }
            previous = Some(&call.tool);
        }
        res.n_tool_calls += n_calls;
        res.max_tool_calls = res.max_tool_calls.max(n_calls);
        res.n_items_without_tool_calls += usize::from(n_calls == 0);
    }
    res.n_distinct_tools = tools.len();
    res.n_distinct_transitions = transitions.len();
    let mut tools: Vec<(&str, usize)> = tools.into_iter().collect();
    tools.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    res.top_tools =
        tools.into_iter().take(top).map(|(tool, count)| ToolCount { tool: tool.to_owned(), count }).collect();
    let mut transitions: Vec<((&str, &str), usize)> = transitions.into_iter().collect();
    transitions.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    res.top_transitions = transitions
        .into_iter()
        .take(top)
        .map(|((from, to), count)| ToolTransition { from: from.to_owned(), to: to.to_owned(), count })
        .collect();
    res
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{Action, Item, Meta, Outcome, Record, Step, ToolCall, Trajectory, stats};

    fn call(name: &str) -> ToolCall {
        ToolCall::new(name, json!({})).unwrap()
    }

    fn record(calls: &[&str]) -> Item {
        Item::Record(Record {
            id: "r".into(),
            query: "q".into(),
            reference_result: String::new(),
            required_outputs: vec![],
            orchestration: calls.iter().map(|name| call(name)).collect(),
            meta: Meta::default(),
        })
    }

    #[test]
    fn transitions_stay_within_an_item() {
        let summary = stats(&[record(&["a", "b"]), record(&["b", "a", "b"]), record(&[])], 10);
        assert_eq!((summary.n_items, summary.n_records, summary.n_tool_calls), (3, 3, 5));
        assert_eq!((summary.n_items_without_tool_calls, summary.max_tool_calls), (1, 3));
        assert_eq!(summary.n_distinct_tools, 2);
        // a->b twice, b->a once; never b (end of item 1) -> b (start of item 2).
        let pairs: Vec<(&str, &str, usize)> =
            summary.top_transitions.iter().map(|t| (t.from.as_str(), t.to.as_str(), t.count)).collect();
        assert_eq!(pairs, [("a", "b", 2), ("b", "a", 1)]);
        assert_eq!(summary.top_tools[0].tool, "b");
    }

    #[test]
    fn top_limits_and_ties_sort_by_name() {
        let summary = stats(&[record(&["z", "y", "x"])], 1);
        assert_eq!(summary.top_tools.len(), 1);
        assert_eq!(summary.top_tools[0].tool, "x");
        assert_eq!(summary.n_distinct_transitions, 2);
        assert_eq!((summary.top_transitions[0].from.as_str(), summary.top_transitions[0].to.as_str()), ("y", "x"));
    }

    #[test]
    fn messages_do_not_break_transitions_and_outcomes_count() {
        let mut failed = call("b");
        failed.error = Some("boom".into());
        let step = |action| Step { observation: None, reasoning: None, action };
        let run = Trajectory {
            id: "t".into(),
            attempt: None,
            query: "q".into(),
            steps: vec![
                step(Action::ToolCall(call("a"))),
                step(Action::Message { content: "hm".into() }),
                step(Action::ToolCall(failed)),
            ],
            final_answer: None,
            reference: None,
            success: Some(Outcome::Score(0.5)),
            meta: Meta::default(),
        };
        let summary = stats(&[Item::Trajectory(run)], 5);
        assert_eq!((summary.n_trajectories, summary.n_labelled, summary.n_succeeded), (1, 1, 0));
        assert_eq!(summary.n_failed_tool_calls, 1);
        assert_eq!(summary.top_transitions[0].count, 1);
    }
}
