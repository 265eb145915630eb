//! FlowScout's historical records `(q_i, r_i, π_i)`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Meta, ToolCall};

/// A historical record: a query, its reference result and its validated tool-call log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Record {
    /// The source's id, kept verbatim as a string (τ-bench's task index, τ²'s task id).
    pub id: String,
    /// The user's query.
    pub query: String,
    /// The reference result `r_i`, as text.
    #[serde(default)]
    pub reference_result: String,
    /// Strings the answer must contain (τ-bench's `outputs`), for deterministic checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_outputs: Vec<String>,
    /// The validated tool orchestration log `π_i`, in order.
    #[serde(default)]
    pub orchestration: Vec<ToolCall>,
    /// Where the record came from.
    #[serde(default)]
    pub meta: Meta,
}
