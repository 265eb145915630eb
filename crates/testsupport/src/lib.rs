//! Test helpers shared by every flowmem crate.
//!
//! # Brief overview
//!
//! - [`ScriptedLlmServer`] is a real HTTP server on loopback that speaks the OpenAI
//!   chat-completions API (`POST /v1/chat/completions`, `GET /v1/models`), and
//!   `POST /v1/embeddings` with deterministic bag-of-words vectors. It answers
//!   from a [`Script`] of [`Reply`] values, in request order or matched on content with
//!   [`Match`], injects faults (429 with `Retry-After`, 500, slow replies, malformed
//!   JSON, missing fields), streams a reply as SSE chunks when the request asks for
//!   `stream: true`, records every request, and tracks the most requests it had
//!   in flight at once.
//! - [`repo_root`], [`deps_dir`], [`shared_data_dir`] and [`require_path`] find the
//!   repository, the external test dependencies installed by `scripts/setup/`, and the
//!   shared test data.
//! - [`synthetic_workflows`] builds a workflow memory of any size shaped like τ-bench
//!   retail, with [`retail_queries`] to search it and [`Latencies`] to summarise the
//!   timings, for benches.
//! - [`spawn_listening`] starts a server process and waits for the line that says
//!   where it listens.
//! - [`PgCluster`] is a throwaway PostgreSQL server on loopback, in a temporary
//!   directory, with a database per test ([`PgCluster::fresh_database`]); one per test
//!   or [`PgCluster::shared`] by every test of a process.
//!
//! Use it as a dev-dependency only.
//!
//! # Example
//!
//! ```
//! use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let server = ScriptedLlmServer::start(
//!     Script::in_order([
//!         Reply::server_error(),
//!         Reply::tool_call("get_order", json!({"order_id": "#W42"})),
//!     ])
//!     .when(Match::after_tool_result(), Reply::text("Your order has shipped.")),
//! )
//! .await;
//! let base_url = server.base_url(); // give this to the client under test
//! # let _ = base_url;
//! // ... run the code under test, then assert on what the server saw:
//! assert_eq!(server.chat_requests().len(), 0);
//! assert_eq!(server.max_in_flight(), 0);
//! # }
//! ```

mod corpus;
mod graphs;
mod order_loop;
mod paths;
mod postgres;
mod process;
mod script;
mod server;

pub use crate::corpus::{Latencies, Lcg, retail_queries, synthetic_workflows};
pub use crate::graphs::{llm_chain, loops_in_sequence};
pub use crate::order_loop::{LOOP_ORDERS, order_loop};
pub use crate::paths::{deps_dir, repo_root, require_path, shared_data_dir};
pub use crate::postgres::PgCluster;
pub use crate::process::{Listening, process_memory_kib, process_status, spawn_listening};
pub use crate::script::{Match, Reply, Script};
pub use crate::server::{BAG_OF_WORDS_DIM, RecordedRequest, ScriptedLlmServer, bag_of_words};
