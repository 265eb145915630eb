//! Counting calls, tokens and wall time per model and per purpose.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::{ChatModel, ChatRequest, ChatResponse, LlmError, Purpose};

/// A shareable tally of LLM calls. Clones share one tally.
///
/// Wrap each model in an [`AccountedModel`] with the same `Accounting` to count every
/// call of a run, then put [`Accounting::snapshot`] in the run summary.
///
/// # Example
///
/// ```
/// use flowmem_llm::Accounting;
///
/// let accounting = Accounting::new();
/// let snapshot = accounting.snapshot();
/// assert_eq!(snapshot.total.calls, 0);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Accounting {
    tally: Arc<Mutex<BTreeMap<(String, Purpose), Totals>>>,
}

/// Counts for one model, one purpose, or everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Calls made, including failed ones and cache hits.
    pub calls: u64,
    /// Calls that ended in an error.
    pub errors: u64,
    /// Calls answered from the response cache.
    pub cache_hits: u64,
    /// Prompt tokens spent (cache hits spend none).
    pub prompt_tokens: u64,
    /// Completion tokens spent (cache hits spend none).
    pub completion_tokens: u64,
    /// Prompt tokens the original calls behind the cache hits spent. Added to
    /// `prompt_tokens`, it is what the calls used whether or not the cache answered.
    #[serde(default)]
    pub cached_prompt_tokens: u64,
    /// Completion tokens the original calls behind the cache hits spent.
    #[serde(default)]
    pub cached_completion_tokens: u64,
    /// Of `prompt_tokens`, those the model served from its own prefix cache instead of
    /// prefilling them (OpenAI's `cached_tokens`; the embedded model's prefix cache).
    #[serde(default)]
    pub prefix_cached_tokens: u64,
    /// Wall time spent waiting for calls, summed over calls, in milliseconds.
    pub wall_ms: u64,
}

impl Totals {
    /// What was counted after `earlier`, a snapshot of the same tally: every field's
    /// difference (0 where `earlier` is larger).
    #[must_use]
    pub fn since(&self, earlier: &Totals) -> Totals {
        Totals {
            calls: self.calls.saturating_sub(earlier.calls),
            errors: self.errors.saturating_sub(earlier.errors),
            cache_hits: self.cache_hits.saturating_sub(earlier.cache_hits),
            prompt_tokens: self.prompt_tokens.saturating_sub(earlier.prompt_tokens),
            completion_tokens: self.completion_tokens.saturating_sub(earlier.completion_tokens),
            cached_prompt_tokens: self.cached_prompt_tokens.saturating_sub(earlier.cached_prompt_tokens),
            cached_completion_tokens: self.cached_completion_tokens.saturating_sub(earlier.cached_completion_tokens),
            prefix_cached_tokens: self.prefix_cached_tokens.saturating_sub(earlier.prefix_cached_tokens),
            wall_ms: self.wall_ms.saturating_sub(earlier.wall_ms),
        }
    }

    fn add(&mut self, other: &Totals) {
        self.calls += other.calls;
        self.errors += other.errors;
        self.cache_hits += other.cache_hits;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cached_prompt_tokens += other.cached_prompt_tokens;
        self.cached_completion_tokens += other.cached_completion_tokens;
        self.prefix_cached_tokens += other.prefix_cached_tokens;
        self.wall_ms += other.wall_ms;
    }
}

/// A serialisable copy of an [`Accounting`] tally, for run summaries.
///
/// This is part of the `--json` run-summary format (version 1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountingSnapshot {
    /// Per configured model name.
    pub per_model: BTreeMap<String, Totals>,
    /// Per purpose.
    pub per_purpose: BTreeMap<Purpose, Totals>,
    /// Everything.
    pub total: Totals,
}

impl Accounting {
    /// An empty tally.
    #[must_use]
    pub fn new() -> Accounting {
        Accounting::default()
    }

    /// Records one call to `model` for `purpose`.
    pub fn record(&self, model: &str, purpose: Purpose, result: Result<&ChatResponse, &LlmError>, wall: Duration) {
        let mut call = Totals { calls: 1, wall_ms: wall.as_millis() as u64, ..Totals::default() };
        match result {
            Ok(response) if response.cached => {
                call.cache_hits = 1;
                call.cached_prompt_tokens = response.usage.prompt_tokens;
                call.cached_completion_tokens = response.usage.completion_tokens;
            }
            Ok(response) => {
                call.prompt_tokens = response.usage.prompt_tokens;
                call.completion_tokens = response.usage.completion_tokens;
                call.prefix_cached_tokens = response.usage.cached_tokens;
            }
            Err(_) => call.errors = 1,
        }
        let mut tally = self.tally.lock().expect("accounting lock");
        tally.entry((model.to_owned(), purpose)).or_default().add(&call);
    }

    /// The counts so far.
    #[must_use]
    pub fn snapshot(&self) -> AccountingSnapshot {
        let tally = self.tally.lock().expect("accounting lock");
        let mut res = AccountingSnapshot::default();
        for ((model, purpose), totals) in tally.iter() {
            res.per_model.entry(model.clone()).or_default().add(totals);
            res.per_purpose.entry(*purpose).or_default().add(totals);
            res.total.add(totals);
        }
        res
    }
}

/// A [`ChatModel`] that records every call of its inner model in an [`Accounting`].
///
/// Wrappers nest: a model already counted into a run-wide tally can be wrapped again
/// with a fresh [`Accounting`] to count one run on its own (eval does this per run).
///
/// # Example
///
/// ```no_run
/// # async fn demo(model: std::sync::Arc<dyn flowmem_llm::ChatModel>, request: flowmem_llm::ChatRequest) -> Result<(), flowmem_llm::LlmError> {
/// use flowmem_llm::{AccountedModel, Accounting, ChatModel};
///
/// let per_run = AccountedModel::new(model, Accounting::new());
/// per_run.chat(&request).await?;
/// assert_eq!(per_run.accounting().snapshot().total.calls, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct AccountedModel {
    inner: Arc<dyn ChatModel>,
    accounting: Accounting,
}

impl std::fmt::Debug for AccountedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccountedModel").field("inner", &self.inner.name()).finish_non_exhaustive()
    }
}

impl AccountedModel {
    /// Wraps `inner`, recording into `accounting`.
    #[must_use]
    pub fn new(inner: Arc<dyn ChatModel>, accounting: Accounting) -> AccountedModel {
        AccountedModel { inner, accounting }
    }

    /// The tally this model records into.
    #[must_use]
    pub fn accounting(&self) -> &Accounting {
        &self.accounting
    }
}

#[async_trait::async_trait]
impl ChatModel for AccountedModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn cache_id(&self) -> String {
        self.inner.cache_id()
    }

    fn room(&self, request: &ChatRequest) -> Option<i64> {
        self.inner.room(request)
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let res = self.inner.chat(request).await;
        self.accounting.record(self.inner.name(), request.purpose, res.as_ref(), started.elapsed());
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FinishReason, Usage};

    fn reply(prompt: u64, completion: u64, cached: bool) -> ChatResponse {
        ChatResponse {
            content: Some("x".into()),
            tool_calls: Vec::new(),
            finish_reason: FinishReason::Stop,
            usage: Usage { prompt_tokens: prompt, completion_tokens: completion, cached_tokens: 0 },
            latency: Duration::ZERO,
            cached,
        }
    }

    #[test]
    fn sums_per_model_and_purpose() {
        let accounting = Accounting::new();
        let shared = accounting.clone();
        shared.record("big", Purpose::Judge, Ok(&reply(10, 2, false)), Duration::from_millis(5));
        shared.record("big", Purpose::Optimizer, Ok(&reply(7, 3, false)), Duration::from_millis(5));
        shared.record("small", Purpose::Judge, Ok(&reply(100, 100, true)), Duration::ZERO);
        let err = LlmError::Unavailable { model: "small".into(), reason: "x".into() };
        shared.record("small", Purpose::Agent, Err(&err), Duration::from_millis(1));

        let snapshot = accounting.snapshot();
        assert_eq!(snapshot.total.calls, 4);
        assert_eq!(snapshot.total.prompt_tokens, 17);
        assert_eq!(snapshot.total.completion_tokens, 5);
        assert_eq!(snapshot.total.cache_hits, 1);
        assert_eq!((snapshot.total.cached_prompt_tokens, snapshot.total.cached_completion_tokens), (100, 100));
        assert_eq!(snapshot.total.errors, 1);
        assert_eq!(snapshot.total.wall_ms, 11);
        assert_eq!(snapshot.per_model["big"].calls, 2);
        assert_eq!(snapshot.per_model["small"].errors, 1);
        assert_eq!(snapshot.per_purpose[&Purpose::Judge].calls, 2);
        assert_eq!(snapshot.per_purpose[&Purpose::Judge].prompt_tokens, 10);
        let json = serde_json::to_value(&snapshot).unwrap();
        assert_eq!(json["per_purpose"]["optimizer"]["completion_tokens"], 3);
    }
}
