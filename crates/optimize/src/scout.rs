//! FlowScout end to end: split the records, build `G⁰`, search, test the best candidate
//! against the ReAct baseline, and write the run directory's report.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::json;

use flowmem_eval::{
    Alpha, EvalConfig, EvalReport, Progress, ReactSystem, ScoreConfig, SplitRatios, System, WorkflowSystem,
    evaluate_concurrently, split, write_report,
};
use flowmem_exec::{AgentConfig, Runtime, ToolCatalog, check, visible_tools};
use flowmem_mining::{
    BindingConfig, Classifier, EventLog, Variant, discover, mine_dataflow, order_routes, tree_to_bound_skeleton,
};
use flowmem_model::{Record, WorkflowGraph};
use flowmem_report::{Markup, error_page, render_page};
use flowmem_tools::StateIsolation;

use crate::propose::PlanDecoding;
use crate::search::{
    Checkpoint, EditCounts, ExpansionStats, Proposer, SearchError, SearchParts, SearchState, Strategy, candidate_path,
    expansion_stats, run_search,
};
use crate::simulate::{ExecSimulator, ExecValidator, SplitProgress};
use crate::svg::{search_tree, validation_curve, workflow_graph};
use crate::tree::{SearchConfig, TreeNodeId};

/// The settings of a scout run, kept in `DIR/run.json` so that a resume reuses them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoutSettings {
    /// The records file the run was started with (for the record; the caller loads it).
    pub records: PathBuf,
    /// The split seed.
    pub seed: u64,
    /// The search budget and schedule.
    pub search: SearchConfig,
    /// MCTS, beam search, or no search.
    pub strategy: Strategy,
    /// Mine `G⁰` from the opt split (`false`: the plan→tool→synthesize chain).
    pub miner: bool,
    /// IMf's noise threshold.
    pub noise: f64,
    /// The weight of TC in the reward.
    pub alpha: f64,
    /// Records run at once.
    pub concurrency: usize,
    /// Repeats per record in the final test.
    pub repeat: u32,
    /// The ReAct baseline's step budget.
    pub agent_max_steps: u32,
    /// How the optimizer is asked for plans (edit by edit unless set; older run
    /// directories lack the field and resume edit by edit).
    #[serde(default)]
    pub plan_decoding: PlanDecoding,
    /// The most edits one plan of the optimizer may hold (6 in run directories that
    /// predate the setting).
    #[serde(default = "default_max_edits")]
    pub max_edits: usize,
    /// Test the best workflow against the baselines on the test split at the end
    /// (`flowmem study` turns it off and tests every system itself).
    #[serde(default = "yes")]
    pub final_test: bool,
}

fn yes() -> bool {
    true
}

/// The optimizer's edit budget per plan unless set: the most a plan's schema admits.
pub const DEFAULT_MAX_EDITS: usize = crate::plan_schema::MAX_PLAN_EDITS;

pub(crate) fn default_max_edits() -> usize {
    DEFAULT_MAX_EDITS
}

impl ScoutSettings {
    /// The paper's defaults for `records`: seed 0, `J = 30`, `P = 5`, MCTS, mined `G⁰`
    /// with IMf 0.2, `α = 0.5`, 4 records at once, one repeat, at most
    /// [`DEFAULT_MAX_EDITS`] edits per plan.
    #[must_use]
    pub fn paper_defaults(records: PathBuf) -> ScoutSettings {
        ScoutSettings {
            records,
            seed: 0,
            search: SearchConfig::paper_defaults(),
            strategy: Strategy::Mcts,
            miner: true,
            noise: 0.2,
            alpha: 0.5,
            concurrency: 4,
            repeat: 1,
            agent_max_steps: 12,
            plan_decoding: PlanDecoding::PerEdit,
            max_edits: DEFAULT_MAX_EDITS,
            final_test: true,
        }
    }
}

/// What went wrong in a scout run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScoutError {
    /// The search failed or was interrupted.
    #[error(transparent)]
    Search(#[from] SearchError),
    /// The records cannot be split or scored as asked.
    #[error("{0}")]
    Setup(String),
    /// A run-directory file could not be read or written.
    #[error("cannot access `{path}`: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// Writes `DIR/run.json` for a new run, or reads it for `--resume`.
///
/// # Errors
///
/// A new run in a directory that already holds one, a resume without `run.json`, or an
/// unreadable file.
pub fn prepare_run(dir: &Path, settings: Option<ScoutSettings>) -> Result<ScoutSettings, ScoutError> {
    settings_file(&dir.join("run.json"), settings, "run")
}

/// The settings file of a long run at `path` (`what`: "run", "study"): written for a new
/// run (refused where one already lives), or read back to resume one.
pub(crate) fn settings_file<T: serde::Serialize + serde::de::DeserializeOwned>(
    path: &Path,
    settings: Option<T>,
    what: &str,
) -> Result<T, ScoutError> {
    let file_err = |message: String| ScoutError::File { path: path.to_owned(), message };
    match settings {
        None => {
            let text =
                std::fs::read_to_string(path).map_err(|err| file_err(format!("{err}; is this a {what} directory?")))?;
            serde_json::from_str(&text).map_err(|err| file_err(err.to_string()))
        }
        Some(settings) => {
            if path.exists() {
                return Err(file_err(format!(
                    "a {what} already lives here; resume it with --resume, or pick another --out"
                )));
            }
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|err| file_err(err.to_string()))?;
            }
            flowmem_model::write_json_atomic(path, &settings).map_err(|err| file_err(err.source.to_string()))?;
            Ok(settings)
        }
    }
}

/// The no-miner start: `plan → act → answer`, one LLM plan node, one unhinted tool node,
/// one synthesize node.
#[must_use]
pub fn chain_workflow() -> WorkflowGraph {
    let value = json!({
        "name": "chain",
        "nodes": [
            {"id": "plan", "kind": "llm", "role": "plan"},
            {"id": "act", "kind": "tool"},
            {"id": "answer", "kind": "llm", "role": "synthesize"}
        ],
        "edges": [{"from": "plan", "to": "act"}, {"from": "act", "to": "answer"}],
        "entry": "plan",
        "exit": "answer"
    });
    // Invariant: the literal above is a well-formed graph.
    serde_json::from_value(value).unwrap_or_else(|err| unreachable!("chain workflow literal: {err}"))
}

/// `G⁰`: the IMf skeleton mined from `records`' orchestration logs (with its plan and
/// synthesize nodes, each choice's routes in the order the logs take them), its tool
/// arguments bound to where the records' values came from
/// (the query, earlier results when the calls have them, earlier arguments, constants),
/// or [`chain_workflow`] when `miner` is off or no record has a call.
#[must_use]
pub fn initial_workflow(records: &[Record], miner: bool, noise: f64) -> WorkflowGraph {
    if !miner || records.iter().all(|record| record.orchestration.is_empty()) {
        return chain_workflow();
    }
    let log = EventLog::from_records(records, Classifier::ToolName);
    // The routes the log takes most often are offered first.
    let tree = order_routes(&discover(&log, Variant::ImF { noise }), &log);
    tree_to_bound_skeleton(&tree, &log, &mine_dataflow(records), &BindingConfig::skeleton())
}

/// What a scout run needs besides its settings and records.
pub struct ScoutParts<'a> {
    /// Executor model, tools and prompts for candidates and the baseline.
    pub runtime: Runtime,
    /// Tool-state isolation for stateful servers.
    pub isolation: Option<StateIsolation>,
    /// How runs are scored, by `flowmem_eval::score_trace`: TC matching, the ES judge
    /// (`None`: TC only) and the deterministic task check. The search leaves the task
    /// check out (it is no part of the reward); the final test applies all of it. The
    /// reward's α is [`ScoutSettings::alpha`].
    pub scoring: ScoreConfig<'a>,
    /// The optimizer.
    pub proposer: &'a dyn Proposer,
    /// Called at every search checkpoint; `false` interrupts the run.
    pub checkpoint: &'a (dyn Fn(Checkpoint) -> bool + Send + Sync),
    /// Called after every committed iteration with the best validation score so far.
    pub on_iteration: &'a (dyn Fn(u32, Option<f64>) + Send + Sync),
    /// Called for every run of a candidate on the opt or val split, and for every split a
    /// candidate finishes (the splits of `G⁰` and of each candidate, not the final test).
    pub on_split: &'a (dyn Fn(SplitProgress<'_>) + Sync),
    /// Called for every final-test run.
    pub on_test: &'a (dyn Fn(Progress<'_>) + Sync),
}

/// The outcome of a scout run.
#[derive(Debug, Clone)]
pub struct ScoutOutcome {
    /// The search's final state.
    pub state: SearchState,
    /// The best candidate's graph (also in `DIR/best.workflow.json`).
    pub best: WorkflowGraph,
    /// The final test report, when the test split is not empty.
    pub test: Option<EvalReport>,
    /// Sizes of the opt, val and test splits.
    pub split_sizes: (usize, usize, usize),
    /// How the search's expansions went: the expansion success rate, edits proposed,
    /// applied and dropped by kind, optimizer calls per candidate.
    pub expansions: ExpansionStats,
}

/// Runs (or resumes) FlowScout in `dir`.
///
/// # Errors
///
/// Records too few to split, a search failure or interruption, or a report file that
/// cannot be written.
pub async fn scout(
    dir: &Path,
    settings: &ScoutSettings,
    records: Vec<Record>,
    parts: &ScoutParts<'_>,
) -> Result<ScoutOutcome, ScoutError> {
    let parts_split = split(records, |record| record.id.as_str(), settings.seed, SplitRatios::FLOWSCOUT)
        .map_err(|err| ScoutError::Setup(err.to_string()))?;
    let split_sizes = (parts_split.opt.len(), parts_split.val.len(), parts_split.test.len());
    let g0 = initial_workflow(&parts_split.opt, settings.miner, settings.noise);
    let search_scoring = ScoreConfig { checker: None, ..parts.scoring.clone() };
    let mut simulator = ExecSimulator::new(
        parts.runtime.clone(),
        parts_split.opt.clone(),
        parts_split.val,
        alpha_of(settings)?,
        search_scoring,
        dir,
    );
    simulator.isolation = parts.isolation.clone();
    simulator.concurrency = settings.concurrency;
    simulator.on_progress = Some(parts.on_split);
    let validator = ExecValidator::for_tools(parts.runtime.tools.as_ref(), parts.isolation.as_ref());
    let resumed_best = read_state(dir)?.map(|state| state.best_val_score);
    let checkpoint = |point: Checkpoint| {
        if let Checkpoint::Committed(iteration) = point {
            let best = match (resumed_best, simulator.best_val_seen()) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            (parts.on_iteration)(iteration, best);
        }
        (parts.checkpoint)(point)
    };
    let search_parts =
        SearchParts { proposer: parts.proposer, simulator: &simulator, validator: &validator, checkpoint: &checkpoint };
    let state = run_search(dir, &g0, &settings.search, settings.strategy, &search_parts).await?;
    let best_file = candidate_path(dir, state.best, "workflow");
    let best: WorkflowGraph = read_json(&best_file)?;
    let best_path = dir.join("best.workflow.json");
    flowmem_model::write_json_atomic(&best_path, &best)
        .map_err(|err| ScoutError::File { path: best_path.clone(), message: err.source.to_string() })?;
    let g0_saved: WorkflowGraph = read_json(&candidate_path(dir, 0, "workflow"))?;
    let test = if parts_split.test.is_empty() || !settings.final_test {
        None
    } else {
        Some(final_test(dir, settings, &parts_split.test, &best, &g0_saved, state.best != 0, parts).await?)
    };
    let root_val: f64 = read_json::<crate::search::Evaluation>(&candidate_path(dir, 0, "val"))?.reward;
    let best_val: crate::search::Evaluation = read_json(&candidate_path(dir, state.best, "val"))?;
    let expansions = expansion_stats(dir, &state)?;
    let page = render_report(&state, &expansions, root_val, (&best, &best_val), test.as_ref());
    write_text(&dir.join("report.html"), &page)?;
    Ok(ScoutOutcome { state, best, test, split_sizes, expansions })
}

fn read_state(dir: &Path) -> Result<Option<SearchState>, ScoutError> {
    let path = dir.join("state.json");
    if !path.exists() {
        return Ok(None);
    }
    read_json(&path).map(Some)
}

/// The best candidate, the ReAct baseline and (when the search moved away from it) the
/// mined `G⁰` as-is on the test split, through `flowmem-eval`; the report goes to
/// `DIR/test/`.
async fn final_test(
    dir: &Path,
    settings: &ScoutSettings,
    test: &[Record],
    best: &WorkflowGraph,
    g0: &WorkflowGraph,
    include_g0: bool,
    parts: &ScoutParts<'_>,
) -> Result<EvalReport, ScoutError> {
    let names = visible_tools(parts.runtime.tools.as_ref(), parts.isolation.as_ref());
    let validate = |graph: &WorkflowGraph| {
        check(graph.clone(), ToolCatalog::Known(&names))
            .map_err(|err| ScoutError::Setup(format!("the best workflow is not valid: {err}")))
    };
    // Each system runs under state keys of its own, so systems never share a state.
    let isolation =
        |system: &str| parts.isolation.as_ref().map(|iso| iso.with_key(format!("{}/test/{system}", iso.key)));
    let runtime = || parts.runtime.clone();
    let flowscout = WorkflowSystem::new("flowscout", runtime(), validate(best)?, isolation("flowscout"));
    let agent = AgentConfig { max_steps: settings.agent_max_steps, instruction: None, guard: None };
    let react = ReactSystem::new("react", runtime(), agent, isolation("react"));
    let mined = WorkflowSystem::new("g0", runtime(), validate(g0)?, isolation("g0"));
    let mut systems: Vec<&dyn System> = vec![&flowscout, &react];
    if include_g0 {
        systems.push(&mined);
    }
    let cfg = EvalConfig { repeat: settings.repeat, scoring: parts.scoring.clone() };
    let report = evaluate_concurrently(&systems, test, &cfg, settings.concurrency, parts.on_test).await;
    let test_dir = dir.join("test");
    write_report(&report, "FlowScout: best workflow vs ReAct on the test split", &test_dir)
        .map_err(|err| ScoutError::File { path: test_dir, message: err.to_string() })?;
    Ok(report)
}

/// `DIR/report.html`: the validation curve, the search tree with the best path, the best
/// workflow with its validation figures (TC, and the fitness and precision of its tool
/// traces), and the test table.
#[must_use]
pub fn render_report(
    state: &SearchState,
    expansions: &ExpansionStats,
    root_val: f64,
    (best, best_val): (&WorkflowGraph, &crate::search::Evaluation),
    test: Option<&EvalReport>,
) -> String {
    let opt = |value: Option<f64>| value.map_or_else(|| "–".to_owned(), |v| format!("{v:.3}"));
    let ctx = ReportContext {
        title: "FlowScout run",
        expansions: ExpansionView {
            expansions: expansions.expansions,
            candidates: expansions.candidates,
            success_rate: expansions.success_rate.map_or_else(|| "–".to_owned(), |r| format!("{:.0}%", r * 100.0)),
            optimizer_calls: expansions.optimizer_calls,
            calls_per_candidate: expansions.calls_per_candidate.map_or_else(|| "–".to_owned(), |c| format!("{c:.1}")),
            edits: expansions.edits.iter().map(|(op, counts)| (op.as_str(), *counts)).collect(),
        },
        iterations: state.iteration,
        best: state.best,
        best_val_score: format!("{:.4}", state.best_val_score),
        best_val: ValidationView {
            tc: format!("{:.3}", best_val.tc),
            es: opt(best_val.es),
            fitness: opt(best_val.conformance.map(|c| c.fitness)),
            precision: opt(best_val.conformance.map(|c| c.precision)),
        },
        failed_expansions: state.failed_expansions,
        stopped: state.stopped.map_or_else(|| "no".to_owned(), |reason| format!("{reason:?}")),
        validation_curve: Markup::new(validation_curve(state, root_val)),
        search_tree: Markup::new(search_tree(state)),
        workflow_graph: Markup::new(workflow_graph(best)),
        test: test.map(test_rows),
    };
    // The template is compiled in and its context is typed, so a failure is a bug here;
    // the error then stands in for the page.
    render_page("scout_report.html.j2", REPORT_TEMPLATE, &ctx).unwrap_or_else(|err| error_page(&err))
}

const REPORT_TEMPLATE: &str = include_str!("../templates/scout_report.html.j2");

#[derive(Serialize)]
struct ReportContext<'a> {
    title: &'a str,
    expansions: ExpansionView<'a>,
    iterations: u32,
    best: TreeNodeId,
    best_val_score: String,
    best_val: ValidationView,
    failed_expansions: u32,
    stopped: String,
    validation_curve: Markup,
    search_tree: Markup,
    workflow_graph: Markup,
    test: Option<Vec<ScoutTestRow>>,
}

#[derive(Serialize)]
struct ExpansionView<'a> {
    expansions: u32,
    candidates: u32,
    success_rate: String,
    optimizer_calls: u32,
    calls_per_candidate: String,
    edits: Vec<(&'a str, EditCounts)>,
}

/// The best candidate's figures on the validation split.
#[derive(Serialize)]
struct ValidationView {
    tc: String,
    es: String,
    fitness: String,
    precision: String,
}

/// One system's row of a scout run's test table, its figures formatted as the report
/// and the web UI show them (`–` for a figure not measured).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ScoutTestRow {
    /// The system: `flowscout`, `react` or `g0`.
    pub system: String,
    /// Its role in the comparison.
    pub role: String,
    /// Runs.
    pub n_runs: usize,
    /// Runs that errored.
    pub n_errors: usize,
    /// Mean tool-invocation correctness, to 3 places.
    pub tc: String,
    /// Conformance fitness of its tool traces.
    pub fitness: String,
    /// Conformance precision of its tool traces.
    pub precision: String,
    /// Mean execution score.
    pub es: String,
    /// Task success rate.
    pub task_success: String,
    /// Mean coefficient of variation of ES over repeats.
    pub cv: String,
    /// LLM calls per query, to 1 place.
    pub llm_calls: String,
    /// Tokens per query.
    pub tokens: String,
    /// Latency per query, in ms.
    pub latency_ms: String,
}

/// The test table of a scout run's test report (`DIR/test/report.json`).
#[must_use]
pub fn test_rows(report: &EvalReport) -> Vec<ScoutTestRow> {
    let opt = |value: Option<f64>| value.map_or_else(|| "–".to_owned(), |v| format!("{v:.3}"));
    report
        .systems
        .iter()
        .map(|s| ScoutTestRow {
            system: s.system.clone(),
            role: format!("{:?}", s.role),
            n_runs: s.n_runs,
            n_errors: s.n_errors,
            tc: format!("{:.3}", s.mean_tc),
            fitness: opt(s.conformance.map(|c| c.fitness)),
            precision: opt(s.conformance.map(|c| c.precision)),
            es: opt(s.mean_es),
            task_success: opt(s.task_success_rate),
            cv: opt(s.mean_cv_es),
            llm_calls: format!("{:.1}", s.llm_calls_per_query),
            tokens: format!("{:.0}", s.tokens_per_query),
            latency_ms: format!("{:.0}", s.latency_ms_per_query),
        })
        .collect()
}

pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ScoutError> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| ScoutError::File { path: path.to_owned(), message: err.to_string() })?;
    serde_json::from_str(&text).map_err(|err| ScoutError::File { path: path.to_owned(), message: err.to_string() })
}

pub(crate) fn write_text(path: &Path, text: &str) -> Result<(), ScoutError> {
    flowmem_model::write_text_atomic(path, text)
        .map_err(|err| ScoutError::File { path: path.to_owned(), message: err.source.to_string() })
}

/// The α of `settings`, checked.
///
/// # Errors
///
/// When α lies outside `[0, 1]`.
pub fn alpha_of(settings: &ScoutSettings) -> Result<Alpha, ScoutError> {
    Alpha::new(settings.alpha).map_err(|err| ScoutError::Setup(err.to_string()))
}
