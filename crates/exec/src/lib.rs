//! flowmem's workflow executor: FlowScout's graphs made runnable, and the ReAct baseline
//! every result is compared against.
//!
//! # Brief overview
//!
//! - [`check`] decides `Valid(G, T)` for a [`WorkflowGraph`](flowmem_model::WorkflowGraph)
//!   and returns every [`Violation`] (each naming its node), or a [`ValidatedGraph`].
//! - [`compile`] binds a validated graph to a [`Runtime`] (models, a [`ToolBox`], the role
//!   prompt templates of [`EXEC_PROMPTS`]) and precomputes what a run needs: a [`Plan`].
//! - [`run`] executes one query through a plan on tokio, concurrently where the graph
//!   allows, and returns a [`Trace`](flowmem_model::Trace) (`π̂`, `r̂` and the node
//!   observations `O`). Every step is also reported as an [`ExecEvent`] to an
//!   [`ExecObserver`]: the [`JsonlTraceWriter`], progress bars, or OpenTelemetry.
//! - [`run_agent`] is the ReAct baseline over the same models and tools, producing the
//!   same trace shape. With a [`CallGuard`] in its [`AgentConfig`], each tool call is
//!   checked against a skeleton as it is made ([`CallChecker`]); a deviation is recorded
//!   in the trace with the tools the skeleton expected, and blocked under
//!   [`GuardPolicy::Block`]. [`load_process_model`] reads skeleton files.
//! - [`IsolatedTools`] gives a run its own state on a stateful tool server (the
//!   `flowmem-tools` [`StateIsolation`](flowmem_tools::StateIsolation)) and hides the
//!   state plumbing from the model; [`visible_tools`] lists what a graph may bind to.
//! - [`TaskOracle`] is the seam for ground truth about a run (τ-bench's task check).
//! - [`load_graph`]/[`save_graph`] read and write JSON or YAML graph files;
//!   [`to_mermaid`] and [`to_dot`] draw them.
//!
//! # Example
//!
//! ```
//! use flowmem_exec::{check, to_mermaid, ToolCatalog};
//! use flowmem_model::WorkflowGraph;
//!
//! let graph: WorkflowGraph = serde_json::from_value(serde_json::json!({
//!     "nodes": [
//!         {"id": "plan", "kind": "llm", "role": "plan"},
//!         {"id": "answer", "kind": "llm", "role": "synthesize",
//!          "instruction": "Follow this plan: {{ plan }}"}
//!     ],
//!     "edges": [{"from": "plan", "to": "answer"}],
//!     "entry": "plan",
//!     "exit": "answer"
//! }))?;
//! let validated = check(graph, ToolCatalog::Known(&[]))?;
//! assert!(to_mermaid(validated.graph()).starts_with("flowchart TD"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod engine;
mod event;
mod file;
mod grounding;
mod guard;
mod isolated;
mod jsonl;
mod node;
mod oracle;
mod otel;
mod plan;
mod prompts;
mod react;
mod reask;
mod render;
mod toolbox;
mod validate;

pub use crate::engine::{RunInput, run};
pub use crate::event::{ExecEvent, ExecObserver, NoObserver, Observers, RecordingObserver};
pub use crate::file::{GraphFileError, GraphFormat, graph_to_string, load_graph, parse_graph, save_graph};
pub use crate::grounding::Grounding;
pub use crate::guard::{
    CallChecker, CallGuard, GuardPolicy, ProcessModel, ProcessModelError, ProcessModelKind, blocked_result,
    load_process_model,
};
pub use crate::isolated::{IsolatedTools, isolated_runtime, visible_tools};
pub use crate::jsonl::JsonlTraceWriter;
pub use crate::oracle::{TaskCheckError, TaskOracle};
pub use crate::otel::{OtelError, OtelExporter};
pub use crate::plan::{CompileError, Plan, Runtime, compile};
pub use crate::prompts::{
    CONTEXT_CHARS, CONTEXT_ITEM_CHARS, ContextItem, EXEC_PROMPTS, PromptContext, exec_prompts, limit_context,
    limit_context_items, register_prompts,
};
pub use crate::react::{AgentConfig, run_agent};
pub use crate::render::{to_dot, to_mermaid};
pub use crate::toolbox::ToolBox;
pub use crate::validate::{
    InvalidGraph, LOOP_BODY, LOOP_EXIT, ROUTE_DEFAULT, ROUTE_ERROR, ROUTE_OK, ToolCatalog, VAR_QUERY, ValidatedGraph,
    Violation, check, condition_routes, unbind_unknown_tools, violations,
};
