//! flowmem's workflow memory (Agent Workflow Memory): induce reusable workflows from
//! agent runs and keep them in a store agents can query.
//!
//! # Brief overview
//!
//! - [`MemoryStore`] is the memory: one SQLite file (WAL, migrated schema, one
//!   transaction per write) holding [`Workflow`](flowmem_model::Workflow)s with scope,
//!   provenance, creation time and usage statistics. [`MemoryStore::search`] ranks by
//!   BM25; [`MemoryStore::add`] merges near-duplicates and evicts by
//!   [`retention_score`] when a scope is full.
//! - [`induce`] turns [`Trajectory`](flowmem_model::Trajectory)s into workflows, by
//!   rules ([`induce::rule`], deterministic) or with a language model
//!   ([`induce::lm`]); each reports what it skipped or rejected and why.
//! - [`render`] turns a workflow into AWM's prompt text and into a linear
//!   [`WorkflowGraph`](flowmem_model::WorkflowGraph), and reads and writes the
//!   plain-text and JSONL exchange formats.
//!
//! # Example
//!
//! ```
//! use flowmem_memory::{MemoryStore, StoreConfig, induce};
//! use flowmem_model::{Scope, Trajectory};
//!
//! let line = r#"{"id": "t1", "query": "Where is order 7?", "steps": [
//!   {"action": {"kind": "tool_call", "tool": "find_user", "args": {"email": "a@b.c"}}},
//!   {"action": {"kind": "tool_call", "tool": "get_order", "args": {"order_id": "7"}}}]}"#;
//! let trajectory: Trajectory = serde_json::from_str(line)?;
//! let induction = induce::rule(&[trajectory], &induce::RuleConfig::standard());
//! assert_eq!(induction.workflows.len(), 1);
//!
//! let dir = tempfile::tempdir()?;
//! let mut store = MemoryStore::open(&dir.path().join("memory.db"), StoreConfig::standard())?;
//! store.add_all(&induction.workflows)?;
//! let hits = store.search("order status", &Scope::default(), 5)?;
//! assert_eq!(hits.len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod error;
mod index;
pub mod induce;
mod offline;
pub mod render;
mod schema;
mod store;
mod templates;
mod text;

pub use crate::error::{InduceError, MemoryError};
pub use crate::offline::{OfflineConfig, OfflineReport, induce_offline};
pub use crate::store::{
    AddOutcome, Hit, MemoryStore, PrunePolicy, StoreConfig, UseOutcome, retention_score, success_rate,
};
pub use crate::text::description_similarity;
