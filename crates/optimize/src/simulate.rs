//! The real simulator and validator: candidates are validated and compiled with
//! `flowmem-exec`, run on every record of a split, and scored with `flowmem-eval`.

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use flowmem_eval::{Alpha, JudgeInput, TcConfig, judge_es, reward, tool_correctness};
use flowmem_exec::{
    ExecObserver, JsonlTraceWriter, RunInput, Runtime, ToolBox, ToolCatalog, ValidatedGraph, check, compile, run,
};
use flowmem_llm::{ChatModel, Prompts};
use flowmem_model::{Record, ToolCall, Trace, WorkflowGraph};

use crate::search::{Evaluation, SearchError, Simulator, Validator};
use crate::tree::TreeNodeId;
use flowmem_eval::{IsolatedTools, StateIsolation, visible_tools};

/// How runs are scored.
#[derive(Clone)]
pub struct Scoring {
    /// The weight of TC in `R = α·TC + (1−α)·ES`.
    pub alpha: Alpha,
    /// How TC compares calls.
    pub tc: TcConfig,
    /// The ES judge and its prompts (holding `judge_es`). Without a judge ES is not
    /// measured and the reward is TC alone.
    pub judge: Option<(Arc<dyn ChatModel>, Arc<Prompts>)>,
}

/// The scores of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunScore {
    /// Tool-invocation correctness against the record's orchestration.
    pub tc: f64,
    /// The execution score, when a judge is configured.
    pub es: Option<f64>,
    /// The reward.
    pub reward: f64,
    /// Per-record feedback for the optimizer.
    pub feedback: Value,
}

/// Runs one query through a validated graph on `runtime`, with the tool state isolated
/// under `key` when `isolation` is set. Never fails: problems land in [`Trace::error`].
pub async fn run_workflow(
    graph: &ValidatedGraph,
    runtime: &Runtime,
    isolation: Option<&StateIsolation>,
    key: String,
    record: &Record,
    observer: &dyn ExecObserver,
) -> Trace {
    let runtime = match isolated_runtime(runtime, isolation, key).await {
        Ok(runtime) => runtime,
        Err(err) => return failed_trace(record, err),
    };
    match compile(graph, runtime) {
        Ok(plan) => run(&plan, &RunInput { id: record.id.clone(), query: record.query.clone() }, observer).await,
        Err(err) => failed_trace(record, format!("compile: {err}")),
    }
}

/// `runtime` with its tools wrapped in eval's [`IsolatedTools`] under the state `key`
/// (freshly reset), when isolating.
///
/// # Errors
///
/// When the state reset fails.
pub async fn isolated_runtime(
    runtime: &Runtime,
    isolation: Option<&StateIsolation>,
    key: String,
) -> Result<Runtime, String> {
    let Some(isolation) = isolation else {
        return Ok(runtime.clone());
    };
    let tools = IsolatedTools::new(Arc::clone(&runtime.tools), StateIsolation { key, ..isolation.clone() });
    tools.reset().await?;
    let mut runtime = runtime.clone();
    runtime.tools = Arc::new(tools);
    Ok(runtime)
}

fn failed_trace(record: &Record, error: String) -> Trace {
    Trace { query_id: record.id.clone(), query: record.query.clone(), error: Some(error), ..Trace::default() }
}

/// Scores one trace against its record: TC with the alignment, ES with the judge, and the
/// feedback entry the optimizer reads.
pub async fn score_trace(record: &Record, trace: &Trace, scoring: &Scoring) -> RunScore {
    let tc = tool_correctness(&record.orchestration, &trace.tool_calls, &scoring.tc);
    let mut problems: Vec<String> = trace.error.iter().cloned().collect();
    let result = trace.result.as_deref().unwrap_or("");
    let es = match &scoring.judge {
        None => None,
        Some(_) if result.trim().is_empty() => Some(0.0),
        Some((model, prompts)) => {
            let input = JudgeInput {
                query: &record.query,
                reference: &record.reference_result,
                answer: result,
                required_outputs: &record.required_outputs,
            };
            match judge_es(model.as_ref(), prompts, &input).await {
                Ok(judgement) => Some(judgement.es()),
                Err(err) => {
                    problems.push(format!("judge: {err}"));
                    Some(0.0)
                }
            }
        }
    };
    let value = match es {
        Some(es) => reward(tc.tc, es, scoring.alpha),
        None => tc.tc,
    };
    let alignment = &tc.alignment;
    let matched: Vec<&str> =
        alignment.matched.iter().map(|pair| record.orchestration[pair.reference].tool.as_str()).collect();
    let missing: Vec<Value> = alignment.missing.iter().map(|&idx| call_summary(&record.orchestration[idx])).collect();
    let extra: Vec<Value> = alignment.extra.iter().map(|&idx| call_summary(&trace.tool_calls[idx])).collect();
    let failing: Vec<Value> = trace
        .observations
        .iter()
        .filter_map(|obs| obs.error.as_ref().map(|err| json!({"node": obs.node_id, "error": clip(err, 300)})))
        .collect();
    let feedback = json!({
        "id": record.id,
        "query": clip(&record.query, 300),
        "tc": round3(tc.tc),
        "es": es.map(round3),
        "matched_calls": matched,
        "missing_calls": missing,
        "extra_calls": extra,
        "result": clip(result, 400),
        "reference_result": clip(&record.reference_result, 400),
        "failing_nodes": failing,
        "problems": problems,
    });
    RunScore { tc: tc.tc, es, reward: value, feedback }
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

/// The simulator of FlowScout: runs a candidate on every record of a split, concurrently,
/// and scores it.
///
/// Each record runs under its own tool state (key `scout/NNNN/SPLIT/RECORD_ID`) when
/// `isolation` is set. Every split's traces are written as JSONL to
/// `DIR/traces/NNNN.{opt,val}.jsonl`.
pub struct ExecSimulator {
    /// Models, tools and prompts.
    pub runtime: Runtime,
    /// Tool-state isolation for stateful servers.
    pub isolation: Option<StateIsolation>,
    /// The optimisation split `D_opt`.
    pub opt: Vec<Record>,
    /// The validation split `D_val`.
    pub val: Vec<Record>,
    /// How runs are scored.
    pub scoring: Scoring,
    /// Records run at once (at least 1).
    pub concurrency: usize,
    /// The run directory.
    pub dir: PathBuf,
    /// The best validation score seen by this simulator, as `f64` bits.
    best_val: AtomicU64,
}

impl ExecSimulator {
    /// A simulator over the given parts.
    #[must_use]
    pub fn new(runtime: Runtime, opt: Vec<Record>, val: Vec<Record>, scoring: Scoring, dir: &Path) -> ExecSimulator {
        ExecSimulator {
            runtime,
            isolation: None,
            opt,
            val,
            scoring,
            concurrency: 4,
            dir: dir.to_owned(),
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
        let names = visible_tools(Arc::clone(&self.runtime.tools), self.isolation.as_ref());
        let validated = check(graph.clone(), ToolCatalog::Known(&names)).map_err(|err| SearchError::Simulation {
            candidate,
            reason: format!("the candidate is not valid: {err}"),
        })?;
        let path = self.dir.join("traces").join(format!("{candidate:04}.{split}.jsonl"));
        let io_err = |source| SearchError::Io { path: path.clone(), source };
        std::fs::create_dir_all(self.dir.join("traces")).map_err(io_err)?;
        let tmp = path.with_extension("jsonl.tmp");
        let writer = JsonlTraceWriter::new(BufWriter::new(std::fs::File::create(&tmp).map_err(io_err)?));
        let limit = tokio::sync::Semaphore::new(self.concurrency.max(1));
        let runs: Vec<_> =
            records.iter().map(|record| self.run_one(candidate, split, &validated, &writer, &limit, record)).collect();
        let scores: Vec<RunScore> = futures::future::join_all(runs).await;
        writer.finish().map_err(io_err)?;
        std::fs::rename(&tmp, &path).map_err(io_err)?;
        Ok(aggregate(split, &scores))
    }
}

impl ExecSimulator {
    /// Runs and scores one record once a slot of `limit` is free.
    async fn run_one(
        &self,
        candidate: TreeNodeId,
        split: &str,
        validated: &ValidatedGraph,
        observer: &dyn ExecObserver,
        limit: &tokio::sync::Semaphore,
        record: &Record,
    ) -> RunScore {
        // The semaphore is never closed, so acquiring only waits.
        let _permit = limit.acquire().await.ok();
        let key = format!("scout/{candidate:04}/{split}/{}", record.id);
        let trace = run_workflow(validated, &self.runtime, self.isolation.as_ref(), key, record, observer).await;
        score_trace(record, &trace, &self.scoring).await
    }
}

/// Mean scores over a split, with the per-record feedback.
fn aggregate(split: &str, scores: &[RunScore]) -> Evaluation {
    let n = scores.len().max(1) as f64;
    let mean = |f: &dyn Fn(&RunScore) -> f64| scores.iter().map(f).sum::<f64>() / n;
    let tc = mean(&|s| s.tc);
    let es = mean(&|s| s.es.unwrap_or(0.0));
    let reward = mean(&|s| s.reward);
    let feedback = json!({
        "split": split,
        "reward": round3(reward),
        "tc": round3(tc),
        "es": scores.iter().any(|s| s.es.is_some()).then_some(round3(es)),
        "records": scores.iter().map(|s| s.feedback.clone()).collect::<Vec<_>>(),
    });
    Evaluation { reward, tc, es, feedback }
}

#[async_trait::async_trait]
impl Simulator for ExecSimulator {
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
    pub fn for_tools(tools: Arc<dyn ToolBox>, isolation: Option<&StateIsolation>) -> ExecValidator {
        ExecValidator { tools: visible_tools(tools, isolation) }
    }
}

impl Validator for ExecValidator {
    fn violations(&self, graph: &WorkflowGraph) -> Vec<String> {
        flowmem_exec::violations(graph, ToolCatalog::Known(&self.tools)).iter().map(ToString::to_string).collect()
    }
}
