//! `flowmem serve`: learned workflows for any agent, over MCP.
//!
//! An agent that adds flowmem to its MCP configuration gets Agent Workflow Memory's
//! prompt memory (`find_workflows`, `get_workflow`), the stored workflows as callable
//! tools (AWM_AS), FlowScout's deployed graphs as `run_<name>` tools, and `report_run`
//! to hand its finished runs back so that the memory keeps learning (online AWM).
//!
//! # Brief overview
//!
//! - [`AppState`] is the one state of a server process: the memory (read connections
//!   and one writer), the [`Parts`] the caller built (tools, models, deployed graphs),
//!   the [`TokenStore`], and the catalog of tools every session sees. [`ServeConfig`]
//!   holds the policies.
//! - [`router`] is the one axum `Router` over it, with each surface nested under its
//!   own path behind the token layer; [`serve_http`] serves it with graceful shutdown.
//!   [`serve_stdio`] serves the same MCP handler ([`FlowmemMcp`]) on stdin/stdout.
//! - [`load_graphs`] reads a directory of `*.workflow.json` files into
//!   [`DeployedGraph`]s.
//! - Tokens ([`TokenStore`], [`TokenScope`]) are stored hashed in the memory database.
//!
//! The crate builds no model and starts no tool server: the binary hands them over in
//! [`Parts`]. It never prints; it logs through `tracing`.
//!
//! # Example
//!
//! ```
//! use flowmem_server::{TokenScope, TokenStore};
//!
//! let dir = tempfile::tempdir()?;
//! let tokens = TokenStore::open(&dir.path().join("memory.db"))?;
//! let token = tokens.create(TokenScope::Read)?;
//! assert_eq!(tokens.check(&token.secret)?, Some(TokenScope::Read));
//! assert_eq!(tokens.check("fmt_not-a-token")?, None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod api;
mod auth;
mod calls;
mod catalog;
mod db;
mod error;
mod gateway;
mod graphs;
mod http;
mod learn;
mod mcp;
mod otlp;
mod queue;
mod runs;
pub mod sched;
mod state;
mod stdio;
mod ui;

pub use crate::auth::{Caller, NewToken, TokenScope, TokenStore};
pub use crate::catalog::{FIND_WORKFLOWS, GET_WORKFLOW, REPORT_RUN};
pub use crate::error::ServerError;
pub use crate::gateway::{GatewayConfig, InjectMode, Privacy};
pub use crate::graphs::{GRAPH_SUFFIX, load_graphs};
pub use crate::http::{router, serve_http};
pub use crate::learn::Induce;
pub use crate::mcp::{FlowmemMcp, TRACE_URI, WORKFLOW_URI};
pub use crate::otlp::OtlpConfig;
pub use crate::state::{AppState, DeployedGraph, Parts, ServeConfig};
pub use crate::stdio::serve_stdio;
