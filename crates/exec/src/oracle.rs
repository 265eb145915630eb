//! The seam for ground truth about a run: a deterministic check of whether a trace
//! achieved its record's task.
//!
//! The check itself (τ-bench's database comparison) is `flowmem-eval`'s `TaskChecker`;
//! the trait lives here, beside the runs it judges, so that the agents of
//! `flowmem-memory` can take an oracle without depending on the evaluator.

use flowmem_model::{Record, Trace};

/// A deterministic check of one run's outcome (τ-bench's database comparison).
#[async_trait::async_trait]
pub trait TaskOracle: Send + Sync {
    /// Whether the run traced by `trace` achieved the task of `record`.
    ///
    /// # Errors
    ///
    /// [`TaskCheckError`] when the check itself could not be carried out (a failed
    /// reset or replay, an unreadable state file).
    async fn task_success(&self, record: &Record, trace: &Trace) -> Result<bool, TaskCheckError>;
}

/// A task check that could not be carried out; it shows its cause's message and chain.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct TaskCheckError(
    /// Why the check could not be carried out.
    pub Box<dyn std::error::Error + Send + Sync>,
);
