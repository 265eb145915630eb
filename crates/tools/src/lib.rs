//! flowmem's tools: real MCP servers, over stdio and streamable HTTP, behind one registry.
//!
//! FlowScout's tool-calling nodes and AWM's agents act through tools. This crate starts or
//! reaches the MCP servers named in `flowmem.toml`, exposes their tools under unique
//! names, validates and times every call, restarts servers that died, and replays
//! recorded tool-call logs. It is the only crate that starts tool processes.
//!
//! # Brief overview
//!
//! - [`ToolsConfig`] is the `[tools]` section of `flowmem.toml`: a list of
//!   [`ServerConfig`]s (stdio command or HTTP URL, allow/deny filter, timeout).
//! - [`Registry`] connects to every server and lists their tools as [`ToolSpec`]s (name,
//!   description, input schema). A name listed by two servers becomes `server.tool`.
//! - [`Registry::call`] returns a [`flowmem_model::ToolCall`] with its result or error and
//!   latency; [`Registry::invoke`] also gives the [`CallStatus`] and any [`Restart`].
//!   Failed calls are observations, never panics or `Err`s.
//! - [`StateIsolation`] is tool-state isolation for stateful servers (the τ²-bench
//!   ones): the key argument, the reset tool, the tools hidden from agents, and the
//!   helpers that add, strip and hide the key. `flowmem-exec`'s `IsolatedTools` applies
//!   it to a run's tool box.
//! - [`replay`] runs records' orchestration logs through the registry, with per-record
//!   [`StateIsolation`], and returns a [`ReplayReport`].
//!
//! # Example
//!
//! ```no_run
//! use flowmem_tools::{CallStatus, Registry, ToolsConfig};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let doc: toml::Value = toml::from_str(r#"
//! [tools]
//! timeout_secs = 10
//! [[tools.mcp]]
//! name = "everything"
//! command = ".deps/node/node_modules/.bin/mcp-server-everything"
//! args = ["stdio"]
//! "#)?;
//! let registry = Registry::connect(&ToolsConfig::from_toml(&doc, None)?).await?;
//! for tool in registry.tools() {
//!     println!("{}: {}", tool.name, tool.description);
//! }
//! let args = serde_json::json!({"a": 2, "b": "three"});
//! let invocation = registry.invoke("get-sum", args.as_object().unwrap().clone()).await;
//! assert_eq!(invocation.status, CallStatus::InvalidArguments);
//! println!("{}", invocation.call.error.unwrap()); // names `/b`
//! registry.shutdown().await;
//! # Ok(()) }
//! ```

mod config;
mod error;
mod registry;
mod replay;
mod server;
mod spec;
mod state;

pub use crate::config::{
    ConfigError, DEFAULT_CALL_TIMEOUT_SECS, DEFAULT_CONNECT_TIMEOUT_SECS, ServerConfig, ToolAlias, ToolFilter,
    ToolsConfig, TransportConfig,
};
pub use crate::error::ToolServerError;
#[cfg(fuzzing)]
#[doc(hidden)]
pub use crate::registry::fuzzing;
pub use crate::registry::{CallStatus, EventSink, Invocation, Registry};
pub use crate::replay::{
    CallFailure, RecordReport, ReplayConfig, ReplayReport, replay, replay_with_progress, replay_with_results,
};
pub use crate::server::Restart;
pub use crate::spec::ToolSpec;
pub use crate::state::{StateIsolation, StateLease, StateResetError};
