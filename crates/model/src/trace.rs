//! What one run did: the tool trace `π̂`, the result `r̂`, and node observations `O`.

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
    /// The upstream context the node received.
    ///
    /// Shared: every member of a `parallel` node receives the same context, so a wide
    /// fan-out holds it once, not once per member. It serialises as the plain value.
    #[serde(default, skip_serializing_if = "is_null")]
    pub input: Arc<Value>,
    /// The rendered prompt, for nodes that call a model.
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
/// `result` or `error`.
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

fn is_null(value: &Arc<Value>) -> bool {
    value.is_null()
}
