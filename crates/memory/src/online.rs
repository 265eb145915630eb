//! Online AWM: solve a stream of tasks, judge each run, learn from the ones judged
//! successful, and measure the learning curve against the same agent without memory.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use flowmem_exec::{ExecObserver, IsolatedTools, RunInput, Runtime, TaskOracle, ToolBox, run_agent};
use flowmem_llm::{ChatModel, Prompts};
use flowmem_model::{
    Action, JsonlError, Outcome, Record, Scope, Step, ToolCall, Trace, Trajectory, WriteError, error_chain,
    write_json_atomic, write_text_atomic,
};
use flowmem_tools::StateIsolation;

use crate::agent::{MemoryAgentConfig, record_uses, run_with_memory};
use crate::compose::composition;
use crate::error::OnlineError;
use crate::induce::{Inducer, induce};
use crate::judge::{Agreement, Judgement, RunToJudge, agreement, judge_run};
use crate::store::{AddOutcome, MemoryStore, UseOutcome};

/// The progress file in the output directory: one JSON line per finished run or
/// induction, appended and flushed as soon as it happens.
pub const PROGRESS_FILE: &str = "progress.jsonl";
/// The learning curve, as JSON.
pub const CURVE_JSON_FILE: &str = "learning_curve.json";
/// The learning curve, as an HTML report with an inline SVG plot.
pub const CURVE_HTML_FILE: &str = "learning_curve.html";
/// The task stream as first given, one record a line, so a resumed run sees the same
/// tasks in the same order.
pub const STREAM_FILE: &str = "stream.jsonl";

/// Options of [`learn_online`].
pub struct OnlineConfig<'a> {
    /// The executor model and the real tools.
    pub runtime: &'a Runtime,
    /// The LM evaluator.
    pub evaluator: &'a dyn ChatModel,
    /// Prompt templates holding `evaluate` (see [`render::prompts`](crate::render::prompts)).
    pub prompts: &'a Prompts,
    /// The memory agent. A scope without site and domain means "each record's own".
    pub agent: MemoryAgentConfig,
    /// The inducer used on runs judged successful.
    pub inducer: Inducer<'a>,
    /// Induce once this many runs judged successful are pending (at least 1).
    pub batch_size: usize,
    /// Process at most this many tasks of the stream.
    pub limit: Option<usize>,
    /// Also run the same agent without memory on each task, for the comparison curve.
    pub baseline: bool,
    /// Ground truth (τ-bench's database check), when available.
    pub oracle: Option<&'a dyn TaskOracle>,
    /// Receives every execution event of every run.
    pub observer: &'a dyn ExecObserver,
    /// Isolated tool state per run, for stateful servers (the τ²-bench ones): every run
    /// of either agent starts from a fresh state under the isolation key, and the key
    /// is hidden from the agent and from the recorded calls.
    pub isolation: Option<StateIsolation>,
    /// Called after each line appended to the progress file, for progress bars.
    pub on_progress: &'a (dyn Fn(&OnlineProgress<'_>) + Send + Sync),
}

/// How far an online run is, reported after each progress line.
#[derive(Debug, Clone, Copy)]
pub struct OnlineProgress<'a> {
    /// The line just appended.
    pub line: &'a ProgressLine,
    /// Runs finished, including those resumed from the progress file.
    pub n_runs_done: usize,
    /// Runs the whole stream needs (tasks × agents).
    pub n_runs_total: usize,
}

/// Which agent a run belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arm {
    /// The agent with the online memory.
    Memory,
    /// The same agent without memory.
    Baseline,
}

/// One finished run in the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRun {
    /// The 0-based position of the task in the stream.
    pub index: usize,
    /// The record's id.
    pub record_id: String,
    /// Which agent ran.
    pub arm: Arm,
    /// The evaluator's label and reason. When the evaluator's reply was not a valid
    /// judgement, this is a failure whose reason says so, and [`TaskRun::judge_error`]
    /// holds the evaluator's error: the run teaches nothing.
    pub judgement: Judgement,
    /// Why the evaluator gave no valid judgement of this run, when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_error: Option<String>,
    /// Ground truth, when an oracle is configured and could check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truth: Option<bool>,
    /// Why ground truth is missing although an oracle is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oracle_error: Option<String>,
    /// The success that counts: ground truth when known, otherwise the judgement.
    pub success: bool,
    /// The agent's actions: tool calls as the agent made them (a workflow call is one).
    pub steps: usize,
    /// Workflows given to the agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offered: Vec<String>,
    /// Workflows used (called, in actions mode; offered, in prompt mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub used: Vec<String>,
    /// For workflow calls that failed: the workflow id and the failed step's error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_workflow_steps: Vec<String>,
    /// The run as a trajectory, kept for memory-arm runs judged successful until they
    /// are induced from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trajectory: Option<Trajectory>,
}

/// One line of the progress file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProgressLine {
    /// A finished run.
    Run(Box<TaskRun>),
    /// An induction from the pending successful runs.
    Induced {
        /// The stream index of the last task before it.
        after_task: usize,
        /// The runs induced from.
        trajectory_ids: Vec<String>,
        /// What the store did with each induced workflow.
        added: Vec<AddOutcome>,
        /// How many proposals or trajectories the inducer left out.
        n_skipped: usize,
    },
}

/// One agent's curve and figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ArmCurve {
    /// Tasks run.
    pub n_tasks: usize,
    /// Tasks solved.
    pub n_solved: usize,
    /// Cumulative success rate after each task seen (index `i` is after `i + 1` tasks).
    pub cumulative_success_rate: Vec<f64>,
    /// Mean agent actions per solved task.
    pub steps_per_solved: Option<f64>,
    /// Share of runs that used a workflow among runs offered at least one.
    pub utilisation_rate: Option<f64>,
}

/// Where the success figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SuccessSource {
    /// Every run had ground truth.
    GroundTruth,
    /// Some or all runs had only the evaluator's label.
    Evaluator,
}

/// The learning curve of an online run (AWM Fig. 5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LearningCurve {
    /// Where success comes from.
    pub success_source: SuccessSource,
    /// The agent with memory.
    pub memory: ArmCurve,
    /// The agent without memory, when it was run.
    pub baseline: Option<ArmCurve>,
    /// The evaluator against ground truth, over every run that has both.
    pub agreement: Option<Agreement>,
    /// Inductions made and workflows they inserted or merged.
    pub n_inductions: usize,
    /// Workflows added (inserted or merged) over the stream.
    pub n_workflows_added: usize,
    /// Runs the evaluator gave no valid judgement of ([`TaskRun::judge_error`]). They
    /// count as failures where ground truth is missing, and are left out of
    /// [`LearningCurve::agreement`].
    #[serde(default)]
    pub n_unjudged: usize,
}

/// What [`learn_online`] did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[must_use]
pub struct OnlineReport {
    /// Runs found in the progress file and not repeated.
    pub n_resumed_runs: usize,
    /// Runs made by this call.
    pub n_new_runs: usize,
    /// The curve over everything in the progress file.
    pub curve: LearningCurve,
    /// The JSON and HTML files written.
    pub files: Vec<PathBuf>,
}

/// Runs online AWM over `records` in order, resuming from `dir`'s progress file.
///
/// For each task: run the memory agent with the current memory, judge the run with the
/// evaluator, check it against ground truth when an oracle is configured, record the
/// workflow uses in the store's statistics, and keep the run as a trajectory if the
/// evaluator judged it successful (AWM induces from `L_eval = 1` runs only; ground
/// truth is never used for learning). With `baseline`, the same agent without memory
/// runs the same task. Once `batch_size` successful runs are pending, and at the end,
/// they are induced from; each new workflow that contains a stored one is stored as
/// composed of it ([`composition`]), one SQLite transaction per workflow.
///
/// With [`OnlineConfig::isolation`], each run of either agent starts from a fresh tool
/// state, so tasks do not see each other's writes.
///
/// The first call saves `records` as `dir/stream.jsonl` ([`read_stream`] reads it back).
/// Every run and induction is appended to `dir/progress.jsonl` and flushed before the
/// next starts, so a killed run resumes from there: finished runs are not repeated and
/// pending trajectories are restored. A kill between a memory write and its progress
/// line makes the resumed run induce that batch again, which the store's dedup merges.
///
/// # Errors
///
/// [`OnlineError::Progress`] when the progress file is corrupt or belongs to another
/// stream, [`OnlineError::Stream`] when the saved stream differs from `records`,
/// [`OnlineError::StateReset`] when a fresh tool state cannot be had,
/// [`OnlineError::Io`] when files cannot be written, and the agent's,
/// evaluator's, inducer's and store's errors. Runs finished before an error stay in the
/// progress file.
pub async fn learn_online(
    store: &mut MemoryStore,
    records: &[Record],
    dir: &Path,
    cfg: &OnlineConfig<'_>,
) -> Result<OnlineReport, OnlineError> {
    std::fs::create_dir_all(dir).map_err(io(dir, "creating the output directory"))?;
    let progress_path = dir.join(PROGRESS_FILE);
    let mut lines = read_progress(&progress_path)?;
    let n_tasks = cfg.limit.map_or(records.len(), |limit| limit.min(records.len()));
    let saved = read_stream(dir)?;
    if let Some(saved) = &saved {
        check_saved_stream(&dir.join(STREAM_FILE), saved, records)?;
    }
    check_stream(&progress_path, &lines, records)?;
    if saved.is_none() {
        save_stream(dir, records)?;
    }
    let n_resumed_runs = lines.iter().filter(|line| matches!(line, ProgressLine::Run(_))).count();
    let n_runs_total = n_tasks * if cfg.baseline { 2 } else { 1 };
    let mut pending = pending_trajectories(&lines);
    let mut file = flowmem_model::open_append(&progress_path).map_err(|err| OnlineError::Io {
        path: progress_path.clone(),
        what: "opening",
        source: err.source,
    })?;
    let isolated =
        cfg.isolation.clone().map(|isolation| Arc::new(IsolatedTools::exclusive(cfg.runtime.tools.clone(), isolation)));
    let runtime = match &isolated {
        Some(tools) => Runtime { tools: tools.clone() as Arc<dyn ToolBox>, ..cfg.runtime.clone() },
        None => cfg.runtime.clone(),
    };
    let mut n_new_runs = 0;
    let mut log = |lines: &mut Vec<ProgressLine>, line: ProgressLine| -> Result<(), OnlineError> {
        append(&mut file, &progress_path, lines, line)?;
        let n_runs_done = lines.iter().filter(|line| matches!(line, ProgressLine::Run(_))).count();
        if let Some(line) = lines.last() {
            (cfg.on_progress)(&OnlineProgress { line, n_runs_done, n_runs_total });
        }
        Ok(())
    };
    for (index, record) in records.iter().enumerate().take(n_tasks) {
        let done = |arm: Arm| {
            lines.iter().any(|line| matches!(line, ProgressLine::Run(run) if run.index == index && run.arm == arm))
        };
        let (memory_done, baseline_done) = (done(Arm::Memory), done(Arm::Baseline));
        if !memory_done {
            fresh_state(isolated.as_deref()).await?;
            let run = run_memory_arm(store, &runtime, index, record, cfg).await?;
            if let Some(trajectory) = &run.trajectory {
                pending.push(trajectory.clone());
            }
            log(&mut lines, ProgressLine::Run(Box::new(run)))?;
            n_new_runs += 1;
        }
        if cfg.baseline && !baseline_done {
            fresh_state(isolated.as_deref()).await?;
            let run = run_baseline_arm(&runtime, index, record, cfg).await?;
            log(&mut lines, ProgressLine::Run(Box::new(run)))?;
            n_new_runs += 1;
        }
        if pending.len() >= cfg.batch_size.max(1) {
            let line = induce_pending(store, &mut pending, index, cfg).await?;
            log(&mut lines, line)?;
        }
    }
    if !pending.is_empty() && n_tasks > 0 {
        let line = induce_pending(store, &mut pending, n_tasks - 1, cfg).await?;
        log(&mut lines, line)?;
    }
    let curve = learning_curve(&lines);
    let files = write_curve(&curve, dir)?;
    Ok(OnlineReport { n_resumed_runs, n_new_runs, curve, files })
}

async fn fresh_state(isolated: Option<&IsolatedTools>) -> Result<(), OnlineError> {
    match isolated {
        Some(tools) => tools.reset().await.map_err(OnlineError::StateReset),
        None => Ok(()),
    }
}

/// Reads the task stream saved in `dir` by an earlier [`learn_online`]; a directory
/// without one gives `None`.
///
/// # Errors
///
/// [`OnlineError::Stream`] naming the line that is not a record, and
/// [`OnlineError::Io`] when the file cannot be read.
pub fn read_stream(dir: &Path) -> Result<Option<Vec<Record>>, OnlineError> {
    let path = dir.join(STREAM_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(OnlineError::Io { path, what: "reading", source: err }),
    };
    let mut records = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record = serde_json::from_str(line).map_err(|err| OnlineError::Stream {
            path: path.clone(),
            line: number + 1,
            message: err.to_string(),
        })?;
        records.push(record);
    }
    Ok(Some(records))
}

/// Checks that `records` is the stream saved by the first run.
fn check_saved_stream(path: &Path, saved: &[Record], records: &[Record]) -> Result<(), OnlineError> {
    let saved_ids = saved.iter().map(|record| record.id.as_str());
    let given_ids = records.iter().map(|record| record.id.as_str());
    if let Some(position) = saved_ids.zip(given_ids).position(|(saved, given)| saved != given) {
        return Err(OnlineError::Stream {
            path: path.to_path_buf(),
            line: position + 1,
            message: format!(
                "task {position} is record `{}` here but `{}` in the records given; the run in this directory is over another stream",
                saved[position].id, records[position].id
            ),
        });
    }
    if saved.len() != records.len() {
        return Err(OnlineError::Stream {
            path: path.to_path_buf(),
            line: saved.len().min(records.len()) + 1,
            message: format!("the saved stream has {} tasks but {} records were given", saved.len(), records.len()),
        });
    }
    Ok(())
}

/// Saves the stream of a first run, atomically, so a kill never leaves half a stream.
fn save_stream(dir: &Path, records: &[Record]) -> Result<(), OnlineError> {
    let path = dir.join(STREAM_FILE);
    flowmem_model::write_jsonl_atomic(&path, records).map_err(|err| match err {
        JsonlError::Write { path, source } => OnlineError::Io { path, what: "writing", source },
        // A record that does not serialise: name it like a write failure.
        other => OnlineError::Io { path, what: "serializing the stream", source: std::io::Error::other(other) },
    })
}

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> OnlineError + 'a {
    move |source| OnlineError::Io { path: path.to_path_buf(), what, source }
}

/// Reads a progress file; a missing file is an empty progress.
///
/// # Errors
///
/// [`OnlineError::Progress`] naming the line that does not parse, and
/// [`OnlineError::Io`] when the file cannot be read.
pub fn read_progress(path: &Path) -> Result<Vec<ProgressLine>, OnlineError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(OnlineError::Io { path: path.to_path_buf(), what: "reading", source: err }),
    };
    let mut lines = Vec::new();
    for (number, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io(path, "reading"))?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed = serde_json::from_str(&line).map_err(|err| OnlineError::Progress {
            path: path.to_path_buf(),
            line: number + 1,
            message: err.to_string(),
        })?;
        lines.push(parsed);
    }
    Ok(lines)
}

fn check_stream(path: &Path, lines: &[ProgressLine], records: &[Record]) -> Result<(), OnlineError> {
    for (number, line) in lines.iter().enumerate() {
        if let ProgressLine::Run(run) = line {
            let expected = records.get(run.index).map(|record| record.id.as_str());
            if expected != Some(run.record_id.as_str()) {
                return Err(OnlineError::Progress {
                    path: path.to_path_buf(),
                    line: number + 1,
                    message: format!(
                        "task {} is record `{}` here but `{}` in the records given; this progress belongs to another stream",
                        run.index,
                        run.record_id,
                        expected.unwrap_or("(none)")
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The memory-arm trajectories judged successful since the last induction.
fn pending_trajectories(lines: &[ProgressLine]) -> Vec<Trajectory> {
    let start = lines.iter().rposition(|line| matches!(line, ProgressLine::Induced { .. })).map_or(0, |at| at + 1);
    lines[start..]
        .iter()
        .filter_map(|line| match line {
            ProgressLine::Run(run) if run.arm == Arm::Memory => run.trajectory.clone(),
            _ => None,
        })
        .collect()
}

fn append(file: &mut File, path: &Path, lines: &mut Vec<ProgressLine>, line: ProgressLine) -> Result<(), OnlineError> {
    let mut text = serde_json::to_string(&line).map_err(|err| OnlineError::Io {
        path: path.to_path_buf(),
        what: "serializing a progress line",
        source: std::io::Error::other(err),
    })?;
    text.push('\n');
    file.write_all(text.as_bytes()).map_err(io(path, "appending"))?;
    file.sync_data().map_err(io(path, "flushing"))?;
    lines.push(line);
    Ok(())
}

fn input_of(record: &Record) -> RunInput {
    RunInput { id: record.id.clone(), query: record.query.clone() }
}

fn scope_for(cfg: &MemoryAgentConfig, record: &Record) -> Scope {
    if cfg.scope.site.is_some() || cfg.scope.domain.is_some() {
        cfg.scope.clone()
    } else {
        Scope { site: record.meta.site.clone(), domain: record.meta.domain.clone() }
    }
}

async fn run_memory_arm(
    store: &mut MemoryStore,
    runtime: &Runtime,
    index: usize,
    record: &Record,
    cfg: &OnlineConfig<'_>,
) -> Result<TaskRun, OnlineError> {
    let agent = MemoryAgentConfig { scope: scope_for(&cfg.agent, record), ..cfg.agent.clone() };
    let run = run_with_memory(runtime, &agent, store, &input_of(record), cfg.observer).await?;
    let used = run.used_workflows(agent.mode);
    let failed_workflow_steps = run
        .uses
        .iter()
        .filter_map(|used| used.error.as_ref().map(|error| format!("{}: {error}", used.workflow_id)))
        .collect();
    let mut task = measure(index, record, Arm::Memory, &run.trace, &run.calls, cfg).await?;
    let outcome = if task.success { UseOutcome::Success } else { UseOutcome::Failure };
    record_uses(store, &used, outcome)?;
    if task.judgement.success {
        task.trajectory = Some(trajectory_of(record, &run.trace, &run.calls));
    }
    task.offered = run.offered;
    task.used = used;
    task.failed_workflow_steps = failed_workflow_steps;
    Ok(task)
}

async fn run_baseline_arm(
    runtime: &Runtime,
    index: usize,
    record: &Record,
    cfg: &OnlineConfig<'_>,
) -> Result<TaskRun, OnlineError> {
    let trace = run_agent(runtime, &cfg.agent.agent, &input_of(record), cfg.observer).await;
    measure(index, record, Arm::Baseline, &trace, &trace.tool_calls, cfg).await
}

async fn measure(
    index: usize,
    record: &Record,
    arm: Arm,
    trace: &Trace,
    calls: &[ToolCall],
    cfg: &OnlineConfig<'_>,
) -> Result<TaskRun, OnlineError> {
    let judged = judge_run(
        cfg.evaluator,
        cfg.prompts,
        &RunToJudge { query: &record.query, calls, answer: trace.result.as_deref(), error: trace.error.as_deref() },
    )
    .await;
    // A reply that is not a judgement fails this run's judgement, not the stream: the
    // run is kept, unlearned, with the reason. An evaluator that cannot be reached
    // stops the stream, which resumes from this task.
    let (judgement, judge_error) = match judged {
        Ok(judgement) => (judgement, None),
        Err(err) if is_invalid_judgement(&err) => {
            let mut error = error_chain(&err);
            if let OnlineError::Llm(flowmem_llm::LlmError::InvalidReply { raw, .. }) = &err {
                let shown: String = raw.chars().take(200).collect();
                error.push_str(&format!("; the reply: {shown:?}"));
            }
            tracing::warn!(record = %record.id, %error, "the evaluator gave no valid judgement; the run teaches nothing");
            (Judgement { success: false, reason: "no valid judgement".to_owned() }, Some(error))
        }
        Err(err) => return Err(err),
    };
    let (truth, oracle_error) = match cfg.oracle {
        Some(oracle) => {
            let expanded = Trace { tool_calls: calls.to_vec(), ..trace.clone() };
            match oracle.task_success(record, &expanded).await {
                Ok(truth) => (Some(truth), None),
                Err(err) => (None, Some(error_chain(&err))),
            }
        }
        None => (None, None),
    };
    Ok(TaskRun {
        index,
        record_id: record.id.clone(),
        arm,
        success: truth.unwrap_or(judgement.success),
        judgement,
        judge_error,
        truth,
        oracle_error,
        steps: trace.tool_calls.len(),
        offered: Vec::new(),
        used: Vec::new(),
        failed_workflow_steps: Vec::new(),
        trajectory: None,
    })
}

/// Whether `err` says the evaluator answered, but not with a judgement.
fn is_invalid_judgement(err: &OnlineError) -> bool {
    matches!(
        err,
        OnlineError::Judge { .. }
            | OnlineError::Llm(
                flowmem_llm::LlmError::InvalidReply { .. } | flowmem_llm::LlmError::ToolArguments { .. }
            )
    )
}

fn trajectory_of(record: &Record, trace: &Trace, calls: &[ToolCall]) -> Trajectory {
    Trajectory {
        id: record.id.clone(),
        attempt: None,
        query: record.query.clone(),
        steps: calls
            .iter()
            .map(|call| Step { observation: None, reasoning: None, action: Action::ToolCall(call.clone()) })
            .collect(),
        final_answer: trace.result.clone(),
        reference: None,
        success: Some(Outcome::Bool(true)),
        meta: record.meta.clone(),
    }
}

async fn induce_pending(
    store: &mut MemoryStore,
    pending: &mut Vec<Trajectory>,
    after_task: usize,
    cfg: &OnlineConfig<'_>,
) -> Result<ProgressLine, OnlineError> {
    let trajectories = std::mem::take(pending);
    let induction = induce(&trajectories, cfg.inducer).await?;
    let mut added = Vec::with_capacity(induction.workflows.len());
    for mut workflow in induction.workflows {
        let stored = store.list(&workflow.scope)?;
        workflow.composed_of = composition(&workflow, &stored);
        added.push(store.add(&workflow)?);
    }
    Ok(ProgressLine::Induced {
        after_task,
        trajectory_ids: trajectories.iter().map(|trajectory| trajectory.id.clone()).collect(),
        added,
        n_skipped: induction.skipped.len(),
    })
}

/// The learning curve of the runs in a progress file.
#[must_use]
pub fn learning_curve(lines: &[ProgressLine]) -> LearningCurve {
    let runs: Vec<&TaskRun> = lines
        .iter()
        .filter_map(|line| match line {
            ProgressLine::Run(run) => Some(run.as_ref()),
            ProgressLine::Induced { .. } => None,
        })
        .collect();
    let arm = |which: Arm| {
        let mut ordered: Vec<&TaskRun> = runs.iter().copied().filter(|run| run.arm == which).collect();
        ordered.sort_by_key(|run| run.index);
        arm_curve(&ordered)
    };
    let has_baseline = runs.iter().any(|run| run.arm == Arm::Baseline);
    let all_truth = !runs.is_empty() && runs.iter().all(|run| run.truth.is_some());
    let with_truth: Vec<(bool, bool)> = runs
        .iter()
        .filter(|run| run.judge_error.is_none())
        .filter_map(|run| run.truth.map(|truth| (run.judgement.success, truth)))
        .collect();
    let (n_inductions, n_workflows_added) = lines.iter().fold((0, 0), |(n, w), line| match line {
        ProgressLine::Induced { added, .. } => (n + 1, w + added.len()),
        ProgressLine::Run(_) => (n, w),
    });
    LearningCurve {
        success_source: if all_truth { SuccessSource::GroundTruth } else { SuccessSource::Evaluator },
        memory: arm(Arm::Memory),
        baseline: has_baseline.then(|| arm(Arm::Baseline)),
        agreement: (!with_truth.is_empty()).then(|| agreement(with_truth)),
        n_inductions,
        n_workflows_added,
        n_unjudged: runs.iter().filter(|run| run.judge_error.is_some()).count(),
    }
}

fn arm_curve(runs: &[&TaskRun]) -> ArmCurve {
    let mut curve = ArmCurve { n_tasks: runs.len(), ..ArmCurve::default() };
    let mut solved_steps = 0;
    for (seen, run) in runs.iter().enumerate() {
        if run.success {
            curve.n_solved += 1;
            solved_steps += run.steps;
        }
        curve.cumulative_success_rate.push(curve.n_solved as f64 / (seen + 1) as f64);
    }
    if curve.n_solved > 0 {
        curve.steps_per_solved = Some(solved_steps as f64 / curve.n_solved as f64);
    }
    let offered = runs.iter().filter(|run| !run.offered.is_empty()).count();
    if offered > 0 {
        let used = runs.iter().filter(|run| !run.offered.is_empty() && !run.used.is_empty()).count();
        curve.utilisation_rate = Some(used as f64 / offered as f64);
    }
    curve
}

fn write_curve(curve: &LearningCurve, dir: &Path) -> Result<Vec<PathBuf>, OnlineError> {
    let written = |err: WriteError| OnlineError::Io { path: err.path, what: "writing", source: err.source };
    let json_path = dir.join(CURVE_JSON_FILE);
    write_json_atomic(&json_path, curve).map_err(written)?;
    let html_path = dir.join(CURVE_HTML_FILE);
    write_text_atomic(&html_path, &crate::curve_html::render_curve_html(curve)).map_err(written)?;
    Ok(vec![json_path, html_path])
}
