//! flowmem's data model: one vocabulary for Agent Workflow Memory and FlowScout.
//!
//! This crate sits at the bottom of the workspace. It has no async code and no network
//! access; every other crate speaks in its types.
//!
//! # Brief overview
//!
//! - [`ToolCall`] is one tool invocation. Scoring compares calls by tool name and
//!   [canonical JSON](canonical_json) of their arguments, so key order, whitespace and
//!   `1` versus `1.0` never matter.
//! - [`Trajectory`] is one agent run (AWM's experience `e = (q, P_e)`), made of [`Step`]s.
//! - [`Record`] is FlowScout's `(query, reference result, validated tool-call log)`.
//! - [`Workflow`] is an AWM workflow: a description plus [`WorkflowStep`]s whose actions
//!   hold `{variable}` placeholders.
//! - [`WorkflowGraph`] is FlowScout's executable graph of LLM, tool and control nodes.
//! - [`Trace`] is everything one run of a graph or an agent did.
//! - [`import`] reads outside formats ([`ImportFormat`]) into [`Item`]s, reporting what it
//!   [`Skipped`]; [`read_items`], [`read_records`], [`read_trajectories`] and
//!   [`write_jsonl_atomic`] read and write flowmem's own JSONL files, and [`stats`]
//!   summarises them.
//! - [`write_atomic`], [`write_text_atomic`], [`write_json_atomic`] and [`AtomicFile`]
//!   are the one way flowmem writes an output file: beside the target, synced, then
//!   renamed over it, so a reader never sees half a file.
//!
//! # Example
//!
//! ```
//! use flowmem_model::ToolCall;
//!
//! // The OpenAI wire form carries arguments as a JSON string.
//! let wire = ToolCall::from_wire("get_order", serde_json::json!("{\"id\": 1.0}"))?;
//! let plain = ToolCall::new("get_order", serde_json::json!({"id": 1}))?;
//! assert!(wire.same_call(&plain));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod call;
mod canonical;
mod error_text;
mod fs;
mod graph;
mod import;
mod item;
mod json_path;
mod jsonl;
mod record;
mod routes;
mod secrets;
mod shape;
mod stats;
mod suggest;
mod trace;
mod trajectory;
mod upstream;
mod value_match;
mod workflow;

pub use crate::call::{ArgsError, ToolCall, wire_arguments};
pub use crate::canonical::{canonical_eq, canonical_json};
pub use crate::error_text::error_chain;
pub use crate::fs::{AtomicFile, WriteError, open_append, write_atomic, write_json_atomic, write_text_atomic};
pub use crate::graph::{
    ArgBinding, BindingSource, Condition, EachUse, Edge, EdgeKind, GraphDiff, GraphNode, LlmRole, NodeKind, Pairing,
    Precondition, ValueSource, WorkflowGraph,
};
pub use crate::import::{
    Duplicate, DuplicateIds, ImportError, ImportFormat, Imported, Location, MAX_SPAN_BYTES, OtlpAttribute, OtlpBatch,
    OtlpEncoding, OtlpEvent, OtlpLogEvent, OtlpSignal, OtlpSpan, Skipped, assemble_otlp, decode_otlp,
    encode_export_response, encode_rpc_status, import, import_bytes, import_paths, import_text, otlp_file_encoding,
};
pub use crate::item::{Item, ItemKind};
pub use crate::json_path::values_at;
pub use crate::jsonl::{JsonlError, read_items, read_jsonl, read_records, read_trajectories, write_jsonl_atomic};
pub use crate::record::Record;
pub use crate::routes::{NEAREST_VOTES, NearestVote, decision_words, nearest_route};
pub use crate::secrets::{MIN_SECRET_CHARS, REDACTED, StreamRedactor, redact, redact_value, register_secret};
pub use crate::shape::{ANCHOR_WORDS, Anchor, ValueShape, anchor_score, left_contexts, query_words};
pub use crate::stats::{Stats, ToolCount, ToolTransition, stats};
pub use crate::suggest::{nearest, unknown_field, with_suggestion};
pub use crate::trace::{
    ArgGrounding, ContextInput, Deviation, NodeObservation, PROMPT_RESULTS_MARKER, Trace, TraceEvent,
};
pub use crate::trajectory::{Action, Meta, Outcome, Step, Trajectory};
pub use crate::upstream::Upstream;
pub use crate::value_match::{normalise_text, occurs_in, value_key};
pub use crate::workflow::{
    Provenance, Retirement, Scope, StepSource, Workflow, WorkflowAction, WorkflowStats, WorkflowStep,
};

/// The JSON object type used for tool arguments.
pub type JsonObject = serde_json::Map<String, serde_json::Value>;
