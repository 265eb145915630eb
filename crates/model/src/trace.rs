//! What one run did: the tool trace `π̂`, the result `r̂`, and node observations `O`.
//!
//! A trace grows linearly with the run (trace format 2): each node's output is recorded
//! once, in its own observation, numbered by [`NodeObservation::entry`]; a node's input
//! refers to those numbers ([`ContextInput::Entries`]) instead of copying the upstream
//! results, and its recorded prompt shows [`PROMPT_RESULTS_MARKER`] where the upstream
//! results were. [`Trace::inputs_of`] follows the references. Traces written before
//! format 2 still read: their copied inputs load as [`ContextInput::Copied`].

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ToolCall;

/// Everything one run of a workflow graph or an agent did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Trace {
    /// The id of the query (record or trajectory) that was run.
    #[serde(default)]
    pub query_id: String,
    /// The query text.
    #[serde(default)]
    pub query: String,
    /// The tool orchestration trace `π̂`, in the order the calls finished.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// The final result `r̂`, when the run produced one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The per-node observations `O`, in the order the nodes finished.
    #[serde(default)]
    pub observations: Vec<NodeObservation>,
    /// The error that ended the run early, if any. Observations up to it are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the run-time guard flagged, in order (`flowmem agent --guard`); empty when no
    /// guard ran or nothing deviated. Absent from traces written before the guard existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deviations: Vec<Deviation>,
}

/// A tool call off the skeleton a run-time guard checks against, or a run that ended
/// where the skeleton cannot end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Deviation {
    /// The call's position among the calls checked so far, from 0; for an end, the
    /// number of calls checked.
    pub index: usize,
    /// The tool called; absent when the run ended where the skeleton cannot end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The tools the skeleton allowed instead, sorted; empty when it allowed only the end.
    pub expected: Vec<String>,
    /// Whether the call was blocked (never invoked; the agent was told why) rather than
    /// only flagged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub blocked: bool,
    /// The model's id of the call, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

/// Where one argument of a tool node's call came from (data-flow grounding).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArgGrounding {
    /// The argument.
    pub arg: String,
    /// The source used: a mined binding (`result of NODE at PATH`, `constant`), or
    /// `model` when the model wrote the value with nothing to ground it.
    pub source: String,
    /// How many candidate values the binding gave at run time.
    pub candidates: usize,
    /// Whether the value sent is one of the candidates.
    pub grounded: bool,
}

/// What one executed node saw and did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeObservation {
    /// The node's id (or the agent step number for the ReAct baseline).
    pub node_id: String,
    /// The node kind, such as `llm:plan` or `tool`.
    pub node_kind: String,
    /// Which loop iteration this was, counting from 0.
    #[serde(default)]
    pub iteration: u32,
    /// The number of the context entry this node's output became, which the inputs of
    /// later nodes refer to; `None` for nodes whose output enters no context (control
    /// nodes, failures) and in traces before format 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<u64>,
    /// The upstream context the node received: the numbers of its entries. Shared, as
    /// every member of a `parallel` receives the same context.
    #[serde(default, skip_serializing_if = "no_input")]
    pub input: Arc<ContextInput>,
    /// The rendered prompt, for nodes that call a model, with the block of upstream
    /// results (which the input refers to) shown as [`PROMPT_RESULTS_MARKER`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The node's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The node's error, if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The tool call a tool node made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<ToolCall>,
    /// For a tool node: where each argument of its call came from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grounding: Vec<ArgGrounding>,
    /// Start time in milliseconds since the Unix epoch.
    #[serde(default)]
    pub started_at_ms: f64,
    /// Wall time in milliseconds.
    #[serde(default)]
    pub latency_ms: f64,
    /// Prompt tokens spent by this node.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Completion tokens spent by this node.
    #[serde(default)]
    pub completion_tokens: u64,
}

/// One line of a JSONL trace file.
///
/// Every tool invocation is a line with `"kind": "tool_call"` carrying `tool`, `args`, and
/// `result` or `error`. A call the run-time guard flagged or blocked is a line with
/// `"kind": "deviation"` (the [`Deviation`]'s fields) just before it; files written before
/// the guard existed have none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TraceEvent {
    /// A node finished (or failed).
    Node(NodeObservation),
    /// A tool was invoked.
    ToolCall {
        /// The query the call belongs to.
        query_id: String,
        /// The node that made the call, when a workflow made it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node_id: Option<String>,
        /// The call and its outcome.
        #[serde(flatten)]
        call: ToolCall,
    },
    /// The run-time guard found a call off its skeleton (or a run ending where the
    /// skeleton cannot).
    Deviation {
        /// The query the call belongs to.
        query_id: String,
        /// The agent step that made the call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node_id: Option<String>,
        /// What deviated and what the skeleton expected.
        #[serde(flatten)]
        deviation: Deviation,
    },
    /// A tool server was restarted before a call.
    ServerRestart {
        /// The server's name.
        server: String,
        /// Why it was restarted.
        reason: String,
    },
    /// The run finished.
    Final {
        /// The query id.
        query_id: String,
        /// The final result, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<String>,
        /// The error that ended the run, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

fn no_input(input: &Arc<ContextInput>) -> bool {
    input.is_empty()
}

/// What stands in a recorded prompt where the node's upstream results were: the
/// `results` template rendered over the entries of its [`NodeObservation::input`].
pub const PROMPT_RESULTS_MARKER: &str = "⟪results of the input entries⟫";

/// The context a node received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ContextInput {
    /// The entries, as runs of consecutive entry numbers `[first, last]` (inclusive):
    /// the outputs of the observations with those [`NodeObservation::entry`] numbers.
    /// A chain's node reads one run, however long the chain.
    Entries(Vec<[u64; 2]>),
    /// A context copied in full: the ReAct agent's conversation so far (its steps are
    /// bounded by `--max-steps`), or, in traces before format 2, a workflow node's
    /// upstream results as a list of `{node, kind, iteration, output, failed}`. Shared,
    /// so a wide fan-out holds it once.
    Copied(Arc<Value>),
}

impl Default for ContextInput {
    fn default() -> ContextInput {
        ContextInput::Entries(Vec::new())
    }
}

impl ContextInput {
    /// Whether the node received nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        match self {
            ContextInput::Entries(runs) => runs.is_empty(),
            ContextInput::Copied(value) => value.is_null() || value.as_array().is_some_and(Vec::is_empty),
        }
    }

    /// The entries of sorted entry numbers, as runs of consecutive numbers.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_model::ContextInput;
    ///
    /// let input = ContextInput::from_entries([0, 1, 2, 5, 6, 9]);
    /// assert_eq!(input, ContextInput::Entries(vec![[0, 2], [5, 6], [9, 9]]));
    /// assert_eq!(input.entries().collect::<Vec<_>>(), [0, 1, 2, 5, 6, 9]);
    /// ```
    pub fn from_entries(entries: impl IntoIterator<Item = u64>) -> ContextInput {
        let mut input = ContextInput::default();
        for entry in entries {
            input.push_entry(entry);
        }
        input
    }

    /// Adds entry number `entry`, newer than those held, extending the last run when it
    /// follows it. A copied context becomes the entries alone.
    pub fn push_entry(&mut self, entry: u64) {
        if let ContextInput::Copied(_) = self {
            *self = ContextInput::default();
        }
        if let ContextInput::Entries(runs) = self {
            match runs.last_mut() {
                Some(run) if run[1].checked_add(1) == Some(entry) => run[1] = entry,
                _ => runs.push([entry, entry]),
            }
        }
    }

    /// The entry numbers, oldest first; none for a copied context.
    pub fn entries(&self) -> impl Iterator<Item = u64> + '_ {
        let runs = match self {
            ContextInput::Entries(runs) => &runs[..],
            ContextInput::Copied(_) => &[],
        };
        runs.iter().flat_map(|&[first, last]| first..=last)
    }
}

impl Trace {
    /// The observations whose outputs `observation` received as its context, oldest
    /// first: [`NodeObservation::input`] followed to the observations it numbers. Empty
    /// for a trace before format 2, whose observations carry the copy itself
    /// ([`ContextInput::Copied`]).
    #[must_use]
    pub fn inputs_of(&self, observation: &NodeObservation) -> Vec<&NodeObservation> {
        let by_entry: std::collections::HashMap<u64, &NodeObservation> =
            self.observations.iter().filter_map(|seen| Some((seen.entry?, seen))).collect();
        observation.input.entries().filter_map(|entry| by_entry.get(&entry).copied()).collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::trace::{Deviation, Trace, TraceEvent};

    #[test]
    fn a_trace_written_before_the_guard_reads_with_no_deviations() {
        let old = json!({"query_id": "q", "query": "x", "tool_calls": [], "result": "done", "observations": []});
        let trace: Trace = serde_json::from_value(old.clone()).unwrap();
        assert!(trace.deviations.is_empty());
        assert_eq!(serde_json::to_value(&trace).unwrap(), old, "no guard, no new field written");
    }

    #[test]
    fn a_deviation_line_round_trips_and_an_end_has_no_tool() {
        let flagged = Deviation {
            index: 1,
            tool: Some("delete_account".into()),
            expected: vec!["cancel".into(), "refund".into()],
            blocked: true,
            call_id: Some("call_1".into()),
        };
        let line = TraceEvent::Deviation { query_id: "q".into(), node_id: Some("step-1".into()), deviation: flagged };
        let text = serde_json::to_value(&line).unwrap();
        assert_eq!(
            text,
            json!({"kind": "deviation", "query_id": "q", "node_id": "step-1", "index": 1, "tool": "delete_account",
                "expected": ["cancel", "refund"], "blocked": true, "call_id": "call_1"})
        );
        assert_eq!(serde_json::from_value::<TraceEvent>(text).unwrap(), line);
        let end = json!({"kind": "deviation", "query_id": "q", "index": 2, "expected": ["refund"]});
        let TraceEvent::Deviation { deviation, node_id: None, .. } = serde_json::from_value(end).unwrap() else {
            panic!("not a deviation line")
        };
        assert_eq!((deviation.tool, deviation.blocked), (None, false));
    }
}
