//! Running systems (a workflow, the ReAct baseline) on records and measuring each run.

use std::collections::HashMap;
use std::time::Instant;

use futures::StreamExt;

use flowmem_llm::Totals;
use flowmem_model::{Record, Trace};

use crate::report::{EvalReport, RunMeasurement, SystemRole, summarize};
use crate::scoring::{ScoreConfig, score_trace};

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
    /// LLM use of the run itself, counted by an [`AccountedModel`](flowmem_llm::AccountedModel)
    /// of its own. Tokens are reported with the cache hits' (`prompt_tokens +
    /// cached_prompt_tokens`), so a run costs the same whether or not the cache answered.
    pub usage: Totals,
}

/// How `evaluate` runs and scores systems.
pub struct EvalConfig<'a> {
    /// How many times each system runs each record (at least 1).
    pub repeat: u32,
    /// How each run is scored (see [`score_trace`]).
    pub scoring: ScoreConfig<'a>,
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
/// run is scored by [`score_trace`]: TC against the record; with a judge, ES (a run
/// without a result scores ES 0 without a judge call); with a checker, task success. A
/// judge or checker failure is recorded on the run (`error`) and that score left out; a
/// run whose judge failed is marked [`RunMeasurement::judge_failed`].
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
    evaluate_resumed(systems, records, cfg, concurrency, Vec::new(), progress).await
}

/// [`evaluate_concurrently`], continuing an evaluation that was interrupted after the
/// runs in `finished` (as an [`EvalJournal`](crate::EvalJournal) returns them).
///
/// A run whose system, repeat and record id match a finished measurement is not made
/// again: the measurement takes its place in the report (a record id that occurs twice
/// in `records` is matched once per occurrence). Finished measurements that match no run
/// of this evaluation are left out. `progress` sees only the new runs, with
/// [`Progress::done`] counting the finished ones too.
pub async fn evaluate_resumed(
    systems: &[&dyn System],
    records: &[Record],
    cfg: &EvalConfig<'_>,
    concurrency: usize,
    finished: Vec<RunMeasurement>,
    progress: &(dyn Fn(Progress<'_>) + Sync),
) -> EvalReport {
    let repeat = cfg.repeat.max(1);
    let total = systems.len() * records.len() * repeat as usize;
    let jobs = systems.iter().flat_map(|system| {
        (0..repeat).flat_map(move |repeat_idx| records.iter().map(move |record| (*system, repeat_idx, record)))
    });
    let mut saved: HashMap<(String, u32, String), Vec<RunMeasurement>> = HashMap::new();
    for run in finished.into_iter().rev() {
        saved.entry((run.system.clone(), run.repeat, run.record_id.clone())).or_default().push(run);
    }
    let mut runs: Vec<(usize, RunMeasurement)> = Vec::with_capacity(total);
    let mut to_run = Vec::with_capacity(total);
    for (job_idx, (system, repeat_idx, record)) in jobs.enumerate() {
        let key = (system.name().to_owned(), repeat_idx, record.id.clone());
        match saved.get_mut(&key).and_then(Vec::pop) {
            Some(run) => runs.push((job_idx, run)),
            None => to_run.push((job_idx, (system, repeat_idx, record))),
        }
    }
    // Polled on this task rather than spawned: the runs borrow the systems and records,
    // and they spend their time waiting on models and tools, not on this thread.
    let mut new_runs = futures::stream::iter(to_run)
        .map(|(job_idx, (system, repeat_idx, record))| async move {
            (job_idx, measure(system, record, repeat_idx, cfg).await)
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(done) = new_runs.next().await {
        runs.push(done);
        // Invariant: a measurement was just pushed.
        if let Some((_, last)) = runs.last() {
            progress(Progress { measurement: last, done: runs.len(), total });
        }
    }
    runs.sort_by_key(|(job_idx, _)| *job_idx);
    summarize(runs.into_iter().map(|(_, run)| run).collect()).with_conformance(records)
}

async fn measure(system: &dyn System, record: &Record, repeat: u32, cfg: &EvalConfig<'_>) -> RunMeasurement {
    let started = Instant::now();
    let run = system.run(record).await;
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let trace = &run.trace;
    let score = score_trace(record, trace, &cfg.scoring).await;
    RunMeasurement {
        system: system.name().to_string(),
        role: system.role(),
        record_id: record.id.clone(),
        repeat,
        tc: score.tc.tc,
        es: score.es,
        judge_failed: score.judge_failed,
        task_success: score.task_success,
        latency_ms,
        llm_calls: run.usage.calls,
        prompt_tokens: run.usage.prompt_tokens + run.usage.cached_prompt_tokens,
        completion_tokens: run.usage.completion_tokens + run.usage.cached_completion_tokens,
        tool_calls: trace.tool_calls.len() as u64,
        error: (!score.problems.is_empty()).then(|| score.problems.join("; ")),
        tools: trace.tool_calls.iter().map(|call| call.tool.clone()).collect(),
    }
}
