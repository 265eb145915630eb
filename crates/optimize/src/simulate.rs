//! The real simulator and validator: candidates are validated and compiled with
//! `flowmem-exec`, run on every record of a split, and scored with `flowmem-eval`.

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use flowmem_eval::{Alpha, ScoreConfig, ScoreMeans, TraceScore, score_trace, tool_trace_conformance};
use flowmem_exec::{
    ExecObserver, JsonlTraceWriter, RunInput, Runtime, ToolBox, ToolCatalog, ValidatedGraph, check, compile,
    isolated_runtime, run, visible_tools,
};
use flowmem_model::{AtomicFile, Record, ToolCall, Trace, WorkflowGraph, WriteError, error_chain};
use flowmem_tools::StateIsolation;

use crate::search::{Evaluation, SearchError, Simulator, Validator};
use crate::tree::TreeNodeId;

/// Runs one query through a validated graph on `runtime`, with the tool state isolated
/// under `isolation`'s key when set. Never fails: problems land in [`Trace::error`].
async fn run_workflow(
    graph: &ValidatedGraph,
    runtime: &Runtime,
    isolation: Option<&StateIsolation>,
    record: &Record,
    observer: &dyn ExecObserver,
) -> Trace {
    let runtime = match isolated_runtime(runtime, isolation).await {
        Ok(runtime) => runtime,
        Err(err) => return failed_trace(record, error_chain(&err)),
    };
    match compile(graph, runtime) {
        Ok(plan) => run(&plan, &RunInput { id: record.id.clone(), query: record.query.clone() }, observer).await,
        Err(err) => failed_trace(record, format!("compile: {err}")),
    }
}

fn failed_trace(record: &Record, error: String) -> Trace {
    Trace { query_id: record.id.clone(), query: record.query.clone(), error: Some(error), ..Trace::default() }
}

/// The feedback entry the optimizer reads for one run, built from eval's score.
fn feedback(record: &Record, trace: &Trace, score: &TraceScore) -> Value {
    let alignment = &score.tc.alignment;
    let matched: Vec<&str> =
        alignment.matched.iter().map(|pair| record.orchestration[pair.reference].tool.as_str()).collect();
    let missing: Vec<Value> = alignment.missing.iter().map(|&idx| call_summary(&record.orchestration[idx])).collect();
    let extra: Vec<Value> = alignment.extra.iter().map(|&idx| call_summary(&trace.tool_calls[idx])).collect();
    let failing: Vec<Value> = trace
        .observations
        .iter()
        .filter_map(|obs| obs.error.as_ref().map(|err| json!({"node": obs.node_id, "error": clip(err, 300)})))
        .collect();
    json!({
        "id": record.id,
        "query": clip(&record.query, 300),
        "tc": round3(score.tc.tc),
        "es": score.es.map(round3),
        "matched_calls": matched,
        "missing_calls": missing,
        "extra_calls": extra,
        "result": clip(trace.result.as_deref().unwrap_or(""), 400),
        "reference_result": clip(&record.reference_result, 400),
        "failing_nodes": failing,
        "ungrounded_arguments": ungrounded(trace),
        "mismatched_arguments": mismatched(record, trace, &alignment.missing, &alignment.extra),
        "problems": score.problems,
    })
}

/// The arguments tool nodes sent without grounding: `{node, arg, source}` per argument
/// whose observation says it was not grounded.
fn ungrounded(trace: &Trace) -> Vec<Value> {
    trace
        .observations
        .iter()
        .flat_map(|obs| {
            obs.grounding
                .iter()
                .filter(|arg| !arg.grounded)
                .map(|arg| json!({"node": obs.node_id, "arg": arg.arg, "source": arg.source}))
        })
        .collect()
}

/// Per reference call left unmatched, the first unmatched call of the same tool in the
/// run, and the arguments where the two differ: `{node, tool, arg, sent, expected}`.
fn mismatched(record: &Record, trace: &Trace, missing: &[usize], extra: &[usize]) -> Vec<Value> {
    let mut unused: Vec<usize> = extra.to_vec();
    let mut res = Vec::new();
    for &reference_idx in missing {
        let reference = &record.orchestration[reference_idx];
        let Some(pos) = unused.iter().position(|&idx| trace.tool_calls[idx].tool == reference.tool) else { continue };
        let sent = &trace.tool_calls[unused.remove(pos)];
        // The node that made the call, when an observation recorded it.
        let node = trace
            .observations
            .iter()
            .find(|obs| {
                obs.tool_call.as_ref().is_some_and(|call| call.call_id == sent.call_id && call.args == sent.args)
            })
            .map(|obs| obs.node_id.clone());
        let mut args: Vec<&String> = reference.args.keys().chain(sent.args.keys()).collect();
        args.sort();
        args.dedup();
        for arg in args {
            let (expected, got) = (reference.args.get(arg), sent.args.get(arg));
            let differs = match (expected, got) {
                (Some(expected), Some(got)) => !flowmem_model::canonical_eq(expected, got),
                _ => true,
            };
            if differs {
                res.push(json!({
                    "node": node, "tool": reference.tool, "arg": arg,
                    "sent": got.map(|v| clip(&v.to_string(), 120)), "expected": expected.map(|v| clip(&v.to_string(), 120)),
                }));
            }
        }
    }
    res
}

fn call_summary(call: &ToolCall) -> Value {
    let mut value = json!({"tool": call.tool, "args": clip(&Value::Object(call.args.clone()).to_string(), 200)});
    if let Some(err) = &call.error {
        value["error"] = Value::String(clip(err, 200));
    }
    value
}

fn clip(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let mut clipped: String = text.chars().take(max_chars).collect();
    clipped.push('…');
    clipped
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// How a candidate's evaluation on one split goes, for progress reports: one event per
/// finished run, then one with the split's evaluation.
#[derive(Debug, Clone, Copy)]
pub enum SplitProgress<'a> {
    /// A run finished; `done` of the split's `total` runs have.
    Run {
        /// The candidate (0 is `G⁰`).
        candidate: TreeNodeId,
        /// `opt` or `val`.
        split: &'a str,
        /// The record the run was on.
        record_id: &'a str,
        /// Runs of this split finished so far, this one included.
        done: usize,
        /// Runs of this split in all.
        total: usize,
    },
    /// Every run of the split finished; the candidate scored `evaluation` on it.
    Finished {
        /// The candidate (0 is `G⁰`).
        candidate: TreeNodeId,
        /// `opt` or `val`.
        split: &'a str,
        /// The candidate's scores on the split.
        evaluation: &'a Evaluation,
        /// Runs made.
        runs: usize,
        /// Wall time of the split's evaluation.
        elapsed: Duration,
    },
}

/// The simulator of FlowScout: runs a candidate on every record of a split, concurrently,
/// and scores it.
///
/// Each record runs under its own tool state (key `scout/NNNN/SPLIT/RECORD_ID`) when
/// `isolation` is set. Every split's traces are written as JSONL to
/// `DIR/traces/NNNN.{opt,val}.jsonl`.
pub struct ExecSimulator<'a> {
    /// Models, tools and prompts.
    pub runtime: Runtime,
    /// Tool-state isolation for stateful servers.
    pub isolation: Option<StateIsolation>,
    /// The optimisation split `D_opt`.
    pub opt: Vec<Record>,
    /// The validation split `D_val`.
    pub val: Vec<Record>,
    /// The weight of TC in the reward (see `flowmem_eval::reward_of_means`).
    pub alpha: Alpha,
    /// How runs are scored, by `flowmem_eval::score_trace`.
    pub scoring: ScoreConfig<'a>,
    /// Records run at once (at least 1).
    pub concurrency: usize,
    /// The run directory.
    pub dir: PathBuf,
    /// Told of every finished run and every finished split (`None`: nobody is).
    pub on_progress: Option<&'a (dyn Fn(SplitProgress<'_>) + Sync)>,
    /// The best validation score seen by this simulator, as `f64` bits.
    best_val: AtomicU64,
}

impl<'a> ExecSimulator<'a> {
    /// A simulator over the given parts.
    #[must_use]
    pub fn new(
        runtime: Runtime,
        opt: Vec<Record>,
        val: Vec<Record>,
        alpha: Alpha,
        scoring: ScoreConfig<'a>,
        dir: &Path,
    ) -> ExecSimulator<'a> {
        ExecSimulator {
            runtime,
            isolation: None,
            opt,
            val,
            alpha,
            scoring,
            concurrency: 4,
            dir: dir.to_owned(),
            on_progress: None,
            best_val: AtomicU64::new(f64::NEG_INFINITY.to_bits()),
        }
    }

    /// The best validation score this simulator has computed, if any.
    #[must_use]
    pub fn best_val_seen(&self) -> Option<f64> {
        let best = f64::from_bits(self.best_val.load(Ordering::Relaxed));
        best.is_finite().then_some(best)
    }

    async fn run_split(
        &self,
        candidate: TreeNodeId,
        split: &str,
        records: &[Record],
        graph: &WorkflowGraph,
    ) -> Result<Evaluation, SearchError> {
        let names = visible_tools(self.runtime.tools.as_ref(), self.isolation.as_ref());
        let validated = check(graph.clone(), ToolCatalog::Known(&names)).map_err(|err| SearchError::Simulation {
            candidate,
            reason: format!("the candidate is not valid: {err}"),
        })?;
        let path = self.dir.join("traces").join(format!("{candidate:04}.{split}.jsonl"));
        let io_err = |source| SearchError::Io { path: path.clone(), source };
        std::fs::create_dir_all(self.dir.join("traces")).map_err(io_err)?;
        let atomic_err = |err: WriteError| SearchError::Io { path: err.path, source: err.source };
        let writer = JsonlTraceWriter::new(BufWriter::new(AtomicFile::create(&path).map_err(atomic_err)?));
        let limit = tokio::sync::Semaphore::new(self.concurrency.max(1));
        let started = Instant::now();
        let done = AtomicUsize::new(0);
        let runs: Vec<_> = records
            .iter()
            .map(|record| async {
                let run = self.run_one(candidate, split, &validated, &writer, &limit, record).await;
                let done = done.fetch_add(1, Ordering::Relaxed) + 1;
                let total = records.len();
                tracing::info!(
                    "candidate {candidate:04} on {split}: run {done} of {total} done (record `{}`, TC {:.3})",
                    record.id,
                    run.0.tc.tc
                );
                if let Some(report) = self.on_progress {
                    report(SplitProgress::Run { candidate, split, record_id: &record.id, done, total });
                }
                run
            })
            .collect();
        let runs: Vec<(TraceScore, Value, Vec<String>)> = futures::future::join_all(runs).await;
        let file = writer.finish().map_err(io_err)?.into_inner().map_err(|err| io_err(err.into_error()))?;
        file.commit().map_err(atomic_err)?;
        let conformance = tool_trace_conformance(records, runs.iter().map(|(.., tools)| tools.as_slice()));
        let scores: Vec<(TraceScore, Value)> = runs.into_iter().map(|(score, feedback, _)| (score, feedback)).collect();
        let evaluation = Evaluation { conformance, ..aggregate(split, self.alpha, &scores) };
        if let Some(report) = self.on_progress {
            let elapsed = started.elapsed();
            report(SplitProgress::Finished { candidate, split, evaluation: &evaluation, runs: scores.len(), elapsed });
        }
        Ok(evaluation)
    }
}

impl ExecSimulator<'_> {
    /// Runs and scores one record once a slot of `limit` is free; also returns the tools
    /// the run called, in order.
    async fn run_one(
        &self,
        candidate: TreeNodeId,
        split: &str,
        validated: &ValidatedGraph,
        observer: &dyn ExecObserver,
        limit: &tokio::sync::Semaphore,
        record: &Record,
    ) -> (TraceScore, Value, Vec<String>) {
        // The semaphore is never closed, so acquiring only waits.
        let _permit = limit.acquire().await.ok();
        let isolation = self
            .isolation
            .as_ref()
            .map(|isolation| isolation.with_key(format!("scout/{candidate:04}/{split}/{}", record.id)));
        let trace = run_workflow(validated, &self.runtime, isolation.as_ref(), record, observer).await;
        let score = score_trace(record, &trace, &self.scoring).await;
        let feedback = feedback(record, &trace, &score);
        let tools = trace.tool_calls.iter().map(|call| call.tool.clone()).collect();
        (score, feedback, tools)
    }
}

/// Mean scores over a split (eval's [`ScoreMeans`]: ES over the judged runs only) and
/// its reward, with the per-record feedback. The feedback counts the runs the judge
/// failed on as `unjudged`, when there are any.
fn aggregate(split: &str, alpha: Alpha, scores: &[(TraceScore, Value)]) -> Evaluation {
    let mut means = ScoreMeans::default();
    for (score, _) in scores {
        means.add_score(score);
    }
    let reward = means.reward(alpha);
    let mut feedback = json!({
        "split": split,
        "reward": round3(reward),
        "tc": round3(means.mean_tc()),
        "es": means.mean_es().map(round3),
        "records": scores.iter().map(|(_, feedback)| feedback.clone()).collect::<Vec<_>>(),
    });
    if means.n_unjudged() > 0 {
        feedback["unjudged"] = json!(means.n_unjudged());
    }
    Evaluation { reward, tc: means.mean_tc(), es: means.mean_es(), feedback, conformance: None }
}

#[async_trait::async_trait]
impl Simulator for ExecSimulator<'_> {
    async fn simulate(&self, candidate: TreeNodeId, graph: &WorkflowGraph) -> Result<Evaluation, SearchError> {
        self.run_split(candidate, "opt", &self.opt, graph).await
    }

    async fn validate(&self, candidate: TreeNodeId, graph: &WorkflowGraph) -> Result<Evaluation, SearchError> {
        let eval = self.run_split(candidate, "val", &self.val, graph).await?;
        let mut current = self.best_val.load(Ordering::Relaxed);
        while eval.reward > f64::from_bits(current) {
            match self.best_val.compare_exchange(current, eval.reward.to_bits(), Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(seen) => current = seen,
            }
        }
        Ok(eval)
    }
}

/// `Valid(G, T)` by `flowmem-exec` against a fixed tool catalog.
pub struct ExecValidator {
    /// The tools a graph may bind to.
    pub tools: Vec<String>,
}

impl ExecValidator {
    /// A validator for the tools of `tools` (minus the reset tool under `isolation`).
    #[must_use]
    pub fn for_tools(tools: &dyn ToolBox, isolation: Option<&StateIsolation>) -> ExecValidator {
        ExecValidator { tools: visible_tools(tools, isolation) }
    }
}

impl Validator for ExecValidator {
    fn violations(&self, graph: &WorkflowGraph) -> Vec<String> {
        flowmem_exec::violations(graph, ToolCatalog::Known(&self.tools)).iter().map(ToString::to_string).collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use flowmem_model::{ArgGrounding, NodeObservation, Record, ToolCall, Trace};

    use super::{mismatched, ungrounded};

    #[test]
    fn feedback_names_ungrounded_and_mismatched_arguments() {
        let reference = ToolCall::new("get_order_details", json!({"order_id": "#W1"})).unwrap();
        let record: Record = serde_json::from_value(json!({"id": "r", "query": "q"})).unwrap();
        let record = Record { orchestration: vec![reference], ..record };
        let mut sent = ToolCall::new("get_order_details", json!({"order_id": "#W9", "extra": 1})).unwrap();
        sent.call_id = Some("c1".into());
        let observation = NodeObservation {
            node_id: "order".into(),
            tool_call: Some(sent.clone()),
            grounding: vec![
                ArgGrounding { arg: "extra".into(), source: "context".into(), candidates: 0, grounded: true },
                ArgGrounding {
                    arg: "order_id".into(),
                    source: "model (the binding gave no value)".into(),
                    candidates: 0,
                    grounded: false,
                },
            ],
            ..NodeObservation::default()
        };
        let trace = Trace { tool_calls: vec![sent], observations: vec![observation], ..Trace::default() };
        assert_eq!(
            ungrounded(&trace),
            [json!({"node": "order", "arg": "order_id", "source": "model (the binding gave no value)"})]
        );
        assert_eq!(
            mismatched(&record, &trace, &[0], &[0]),
            [
                json!({"node": "order", "tool": "get_order_details", "arg": "extra", "sent": "1", "expected": null}),
                json!({"node": "order", "tool": "get_order_details", "arg": "order_id", "sent": "\"#W9\"", "expected": "\"#W1\""}),
            ]
        );
        assert!(mismatched(&record, &trace, &[0], &[]).is_empty(), "no call of that tool to compare with");
    }
}
