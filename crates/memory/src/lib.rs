//! flowmem's workflow memory (Agent Workflow Memory): induce reusable workflows from
//! agent runs and keep them in a store agents can query.
//!
//! # Brief overview
//!
//! - [`MemoryStore`] is the memory: one SQLite file (WAL, migrated schema, one
//!   transaction per write) holding [`Workflow`](flowmem_model::Workflow)s with scope,
//!   provenance, creation time, usage statistics and an embedding vector.
//!   [`MemoryStore::search`] ranks by BM25, [`MemoryStore::search_with`] by BM25,
//!   vector similarity or both fused ([`RetrievalMode`]); [`MemoryStore::add`] merges
//!   near-duplicates and evicts by [`retention_score`] when a scope is full.
//! - [`Retriever`] is how every caller retrieves: it embeds the query when its mode
//!   needs a vector (through a `&dyn EmbeddingModel`, never building one), and
//!   [`sync_vectors`] keeps the stored vectors those of the current model.
//! - [`induce`] turns [`Trajectory`](flowmem_model::Trajectory)s into workflows, by
//!   rules ([`induce::rule`], deterministic) or with a language model
//!   ([`induce::lm`]); each reports what it skipped or rejected and why.
//! - [`render`] turns a workflow into AWM's prompt text and into a linear
//!   [`WorkflowGraph`](flowmem_model::WorkflowGraph), and reads and writes the
//!   plain-text and JSONL exchange formats.
//! - [`run_with_memory`] runs exec's ReAct agent with retrieved workflows, either in its
//!   system prompt within a token budget ([`prompt_memory`]) or as callable tools
//!   ([`WorkflowTools`], AWM_AS) whose calls expand to their steps.
//! - [`eval_retrieval`] measures retrieval quality on held-out records with reference
//!   tool logs (TC of the top workflow, recall@k), per [`RetrievalMode`].
//! - [`judge_run`] is AWM's LM evaluator; [`agreement`] compares it with ground truth.
//! - [`learn_online`] is online AWM over a task stream, resumable from its progress
//!   file (the stream is saved beside it, [`read_stream`]), with a fresh tool state per
//!   run for stateful servers, and the [`LearningCurve`] against the same agent without
//!   memory.
//! - [`composition`] finds the stored workflows a new one is built from (snowballing);
//!   [`composition_tree`] lays the hierarchy out.
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

mod agent;
mod compose;
mod curve_html;
mod error;
mod eval_retrieval;
mod index;
pub mod induce;
mod judge;
mod offline;
mod online;
pub mod render;
mod retrieval;
mod schema;
mod store;
mod templates;
mod text;

pub use crate::agent::{
    CHARS_PER_TOKEN, MemoryAgentConfig, MemoryMode, MemoryRun, PromptMemory, RETRIEVAL_NODE_ID, WorkflowTools,
    WorkflowUse, approx_tokens, expand_calls, prompt_memory, record_uses, run_with_memory, workflow_tool_name,
    workflow_variables,
};
pub use crate::compose::{TreeLine, composition, composition_tree};
pub use crate::curve_html::{curve_chart, render_curve_html};
pub use crate::error::{InduceError, MemoryError, OnlineError};
pub use crate::eval_retrieval::{ModeSummary, RecordResult, RetrievalEvalConfig, RetrievalReport, eval_retrieval};
pub use crate::judge::{Agreement, EVALUATE_PROMPT, Judgement, RunToJudge, agreement, judge_run};
pub use crate::offline::{Added, OfflineConfig, OfflineReport, induce_offline};
pub use crate::online::{
    Arm, ArmCurve, CURVE_HTML_FILE, CURVE_JSON_FILE, LearningCurve, OnlineConfig, OnlineProgress, OnlineReport,
    PROGRESS_FILE, ProgressLine, STREAM_FILE, SuccessSource, TaskRun, learn_online, learning_curve, read_progress,
    read_stream,
};
pub use crate::retrieval::{
    QueryEmbedding, Retrieval, RetrievalMode, Retriever, SearchQuery, WorkflowVectors, embed_workflows,
    retrieval_record, sync_vectors,
};
pub use crate::store::{
    AddOutcome, CheckReport, Hit, MemoryStore, Page, PageQuery, PageSort, PageStatus, PrunePolicy, StoreConfig,
    UsageDay, UseOutcome, VectorTask, retention_score, success_rate,
};
pub use crate::templates::prompts;
pub use crate::text::description_similarity;
