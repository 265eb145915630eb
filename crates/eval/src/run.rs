//! Running systems (a workflow, the ReAct baseline) on records and measuring each run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures::StreamExt;

use flowmem_llm::{ChatModel, ChatRequest, ChatResponse, LlmError, Prompts};
use flowmem_model::{Record, Trace, error_chain};

use crate::es::{JudgeInput, judge_es};
use crate::report::{EvalReport, RunMeasurement, SystemRole, summarize};
use crate::tc::{TcConfig, tool_correctness};

/// Something that answers a record's query: a compiled workflow, the ReAct agent, a
/// memory-augmented agent.
#[async_trait::async_trait]
pub trait System: Send + Sync {
    /// The system's name in reports.
    fn name(&self) -> &str;

    /// Whether it is a workflow under test or a baseline.
    fn role(&self) -> SystemRole;

    /// Runs one record's query and returns the trace, with the LLM use of this run.
    ///
    /// A run never fails as a whole: failures land in [`Trace::error`] and the run is
    /// scored as it stands.
    async fn run(&self, record: &Record) -> SystemRun;
}

/// What one run of a system produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SystemRun {
    /// The trace: tool calls `π̂`, result `r̂`, observations.
    pub trace: Trace,
    /// LLM use of the run itself.
    pub usage: UsageTotals,
}

/// Counts of LLM use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageTotals {
    /// Chat calls.
    pub calls: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
}

/// A [`ChatModel`] wrapper that counts calls and tokens, so a system can report the LLM
/// use of each run without trusting its own bookkeeping.
pub struct CountingModel {
    inner: Arc<dyn ChatModel>,
    calls: AtomicU64,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
}

impl CountingModel {
    /// Wraps `inner` with fresh counters.
    #[must_use]
    pub fn new(inner: Arc<dyn ChatModel>) -> CountingModel {
        CountingModel {
            inner,
            calls: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            completion_tokens: AtomicU64::new(0),
        }
    }

    /// The totals so far.
    #[must_use]
    pub fn totals(&self) -> UsageTotals {
        UsageTotals {
            calls: self.calls.load(Ordering::Relaxed),
            prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
            completion_tokens: self.completion_tokens.load(Ordering::Relaxed),
        }
    }
}

#[async_trait::async_trait]
impl ChatModel for CountingModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let response = self.inner.chat(request).await?;
        self.prompt_tokens.fetch_add(response.usage.prompt_tokens, Ordering::Relaxed);
        self.completion_tokens.fetch_add(response.usage.completion_tokens, Ordering::Relaxed);
        Ok(response)
    }
}

/// How `evaluate` scores runs.
pub struct EvalConfig<'a> {
    /// How many times each system runs each record (at least 1).
    pub repeat: u32,
    /// How TC compares calls.
    pub tc: TcConfig,
    /// The ES judge and its prompts; `None` leaves ES out.
    pub judge: Option<(&'a dyn ChatModel, &'a Prompts)>,
    /// The deterministic task check; `None` leaves task success out.
    pub checker: Option<&'a dyn TaskOracle>,
}

/// A deterministic check of one run's outcome (τ-bench's database comparison).
#[async_trait::async_trait]
pub trait TaskOracle: Send + Sync {
    /// Whether the run achieved the record's task.
    ///
    /// # Errors
    ///
    /// A message when the check itself could not be carried out.
    async fn task_success(&self, record: &Record, trace: &Trace) -> Result<bool, String>;
}

/// One finished measurement, for progress reporting.
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    /// The measurement just made.
    pub measurement: &'a RunMeasurement,
    /// Runs finished so far.
    pub done: usize,
    /// Runs in total.
    pub total: usize,
}

/// Runs every system on every record `cfg.repeat` times, scores each run, and
/// aggregates the report.
///
/// Runs go one at a time, in the order system, repeat, record, so that the LLM service
/// (or the embedded model) and the stateful tool servers see one query at a time. Each
/// run is scored with TC against the record; with a judge, ES (a run without a result
/// scores ES 0 without a judge call); with a checker, task success. A judge or checker
/// failure is recorded on the run (`error`) and that score left out.
///
/// This is [`evaluate_concurrently`] with a concurrency of 1.
pub async fn evaluate(
    systems: &[&dyn System],
    records: &[Record],
    cfg: &EvalConfig<'_>,
    progress: &(dyn Fn(Progress<'_>) + Sync),
) -> EvalReport {
    evaluate_concurrently(systems, records, cfg, 1, progress).await
}

/// [`evaluate`] with up to `concurrency` runs in flight at once (at least 1).
///
/// Runs start in the order system, repeat, record and are scored as they finish;
/// `progress` sees them in finishing order, but the report lists them in starting order,
/// so it does not depend on timing. Each run's latency is its own wall time, which
/// includes any wait for a model or tool server shared with the runs beside it. The
/// systems must tolerate concurrent runs: [`ReactSystem`](crate::ReactSystem) and
/// [`WorkflowSystem`](crate::WorkflowSystem) give each run in flight its own state key.
pub async fn evaluate_concurrently(
    systems: &[&dyn System],
    records: &[Record],
    cfg: &EvalConfig<'_>,
    concurrency: usize,
    progress: &(dyn Fn(Progress<'_>) + Sync),
) -> EvalReport {
    let repeat = cfg.repeat.max(1);
    let total = systems.len() * records.len() * repeat as usize;
    let jobs = systems.iter().flat_map(|system| {
        (0..repeat).flat_map(move |repeat_idx| records.iter().map(move |record| (*system, repeat_idx, record)))
    });
    // Polled on this task rather than spawned: the runs borrow the systems and records,
    // and they spend their time waiting on models and tools, not on this thread.
    let mut finished = futures::stream::iter(jobs.enumerate())
        .map(|(job_idx, (system, repeat_idx, record))| async move {
            (job_idx, measure(system, record, repeat_idx, cfg).await)
        })
        .buffer_unordered(concurrency.max(1));
    let mut runs: Vec<(usize, RunMeasurement)> = Vec::with_capacity(total);
    while let Some(done) = finished.next().await {
        runs.push(done);
        // Invariant: a measurement was just pushed.
        if let Some((_, last)) = runs.last() {
            progress(Progress { measurement: last, done: runs.len(), total });
        }
    }
    runs.sort_by_key(|(job_idx, _)| *job_idx);
    summarize(runs.into_iter().map(|(_, run)| run).collect())
}

async fn measure(system: &dyn System, record: &Record, repeat: u32, cfg: &EvalConfig<'_>) -> RunMeasurement {
    let started = Instant::now();
    let run = system.run(record).await;
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let trace = &run.trace;
    let tc = tool_correctness(&record.orchestration, &trace.tool_calls, &cfg.tc).tc;
    let mut errors: Vec<String> = trace.error.iter().cloned().collect();
    let es = match cfg.judge {
        None => None,
        Some(_) if trace.result.as_deref().is_none_or(|r| r.trim().is_empty()) => Some(0.0),
        Some((model, prompts)) => {
            let input = JudgeInput {
                query: &record.query,
                reference: &record.reference_result,
                answer: trace.result.as_deref().unwrap_or(""),
                required_outputs: &record.required_outputs,
            };
            match judge_es(model, prompts, &input).await {
                Ok(judgement) => Some(judgement.es()),
                Err(err) => {
                    errors.push(format!("judge: {}", error_chain(&err)));
                    None
                }
            }
        }
    };
    let task_success = match cfg.checker {
        None => None,
        Some(checker) => match checker.task_success(record, trace).await {
            Ok(ok) => Some(ok),
            Err(err) => {
                errors.push(format!("task check: {err}"));
                None
            }
        },
    };
    RunMeasurement {
        system: system.name().to_string(),
        role: system.role(),
        record_id: record.id.clone(),
        repeat,
        tc,
        es,
        task_success,
        latency_ms,
        llm_calls: run.usage.calls,
        prompt_tokens: run.usage.prompt_tokens,
        completion_tokens: run.usage.completion_tokens,
        tool_calls: trace.tool_calls.len() as u64,
        error: (!errors.is_empty()).then(|| errors.join("; ")),
    }
}
