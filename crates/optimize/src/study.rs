//! FlowScout's evaluation protocol in one resumable run: [`study`].
//!
//! The paper judges a workflow by four questions, and a study answers all four on the
//! same split of the same records:
//!
//! - **RQ1**, effectiveness and stability: ReAct, the mined process model run as-is and
//!   the scouted workflow on the same test queries (TC, ES, task success and their
//!   relative differences), then each of them `repeats` times on the first
//!   `stability_queries` test queries for the per-query CV of ES.
//! - **RQ2**, cost: the validation score per iteration and the best candidate's
//!   iteration, runtime per query for each system, and each search's wall time, LLM
//!   calls, tokens and cache savings.
//! - **RQ3**, ablations: FlowScout, NoMCTS (the mined workflow, no search), NoMiner (MCTS
//!   from a plan→tool→synthesize chain) and Beam (beam search), the searching ones under
//!   the same candidate budget, each best workflow on the test queries.
//! - **RQ4**, transfer: the scouted workflow against an equivalent tool set whose tools
//!   carry other names ([`unbind_unknown_tools`]), and under another executor model, as
//!   retained TC and ES ([`retention`]).
//!
//! The work is a list of cells ([`study_cells`]): four scout runs, then evaluations. Each
//! cell writes its own directory and, last, `cell.json`; a cell with `cell.json` is never
//! run again, and a scout cell that was cut short resumes from its `state.json`. The
//! results ([`StudyResults`]) are assembled from the files alone, so a study resumed after
//! a kill ends with the same tables as one that ran straight through.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use flowmem_eval::{
    EvalConfig, EvalReport, ReactSystem, ScoreConfig, SplitRatios, System, SystemSummary, WorkflowSystem,
    cv_boxplot_svg, evaluate_concurrently, relative_change, split, write_report,
};
use flowmem_exec::{AgentConfig, Runtime, ToolCatalog, check, unbind_unknown_tools, visible_tools};
use flowmem_llm::Totals;
use flowmem_model::{Record, WorkflowGraph};
use flowmem_report::Markup;
use flowmem_tools::StateIsolation;
use serde::{Deserialize, Serialize};

use crate::propose::PlanDecoding;
use crate::scout::{
    DEFAULT_MAX_EDITS, ScoutError, ScoutParts, ScoutSettings, default_max_edits, prepare_run, read_json, scout,
    write_text,
};
use crate::search::{Checkpoint, Proposer, SearchError, SearchState, Strategy};
use crate::svg::validation_curve;

/// The study's settings, saved in `DIR/study.settings.json` when it starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudySettings {
    /// The records file (for the record; the caller loads it).
    pub records: PathBuf,
    /// The split seed: every system sees the same opt/val/test split.
    pub seed: u64,
    /// The candidate budget `J` of each searching variant.
    pub iterations: u32,
    /// Stop a search after this many iterations without validation improvement (`P`).
    pub patience: u32,
    /// Beam search's width (the paper's Beam keeps 3).
    pub beam_width: usize,
    /// Runs per query in the stability test (the paper's 10).
    pub repeats: u32,
    /// Test queries in the stability test (the paper's 50; fewer when the test split is
    /// smaller).
    pub stability_queries: usize,
    /// The weight of TC in the reward.
    pub alpha: f64,
    /// Runs in flight at once.
    pub concurrency: usize,
    /// The ReAct baseline's step budget.
    pub agent_max_steps: u32,
    /// How the optimizer writes a plan.
    pub plan_decoding: PlanDecoding,
    /// The most edits one plan may hold (6 in study directories that predate the
    /// setting).
    #[serde(default = "default_max_edits")]
    pub max_edits: usize,
    /// The executor model's name, for the report.
    pub executor: String,
    /// The equivalent tool set of the tool-set swap (its configuration, for the
    /// report); `None` leaves the swap out.
    pub tool_swap: Option<String>,
    /// The other executor of the backbone swap; `None` leaves the swap out.
    pub model_swap: Option<String>,
}

impl StudySettings {
    /// The paper's protocol for `records`: seed 0, `J = 30`, `P = 5`, Beam(3), 10
    /// repeats on 50 queries, `α = 0.5`, 4 runs at once, 12 ReAct steps, no swaps.
    #[must_use]
    pub fn paper_defaults(records: PathBuf, executor: String) -> StudySettings {
        StudySettings {
            records,
            seed: 0,
            iterations: 30,
            patience: 5,
            beam_width: 3,
            repeats: 10,
            stability_queries: 50,
            alpha: 0.5,
            concurrency: 4,
            agent_max_steps: 12,
            plan_decoding: PlanDecoding::PerEdit,
            max_edits: DEFAULT_MAX_EDITS,
            executor,
            tool_swap: None,
            model_swap: None,
        }
    }
}

/// A variant of FlowScout in the ablation (RQ3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StudyVariant {
    /// Mined `G⁰` and MCTS.
    FlowScout,
    /// The mined `G⁰` as-is: no search (also RQ1's process-model baseline).
    NoMcts,
    /// MCTS from the plan→tool→synthesize chain instead of the mined skeleton.
    NoMiner,
    /// Mined `G⁰` and beam search.
    Beam,
}

impl StudyVariant {
    /// Every variant, in the report's order.
    pub const ALL: [StudyVariant; 4] =
        [StudyVariant::FlowScout, StudyVariant::NoMcts, StudyVariant::NoMiner, StudyVariant::Beam];

    /// The variant's name in files and tables.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            StudyVariant::FlowScout => "flowscout",
            StudyVariant::NoMcts => "nomcts",
            StudyVariant::NoMiner => "nominer",
            StudyVariant::Beam => "beam",
        }
    }

    /// The system name of the variant's best workflow in the test cells: NoMCTS's is the
    /// mined workflow, RQ1's `mined`.
    #[must_use]
    pub fn system(self) -> &'static str {
        match self {
            StudyVariant::NoMcts => "mined",
            other => other.name(),
        }
    }

    /// The scout settings of this variant: the study's, with the variant's strategy and
    /// start, and no final test (the study tests every system itself).
    #[must_use]
    pub fn scout_settings(self, study: &StudySettings) -> ScoutSettings {
        let mut settings = ScoutSettings::paper_defaults(study.records.clone());
        settings.seed = study.seed;
        settings.search.iterations = study.iterations;
        settings.search.patience = study.patience;
        settings.strategy = match self {
            StudyVariant::FlowScout | StudyVariant::NoMiner => Strategy::Mcts,
            StudyVariant::NoMcts => Strategy::NoSearch,
            StudyVariant::Beam => Strategy::Beam { width: study.beam_width },
        };
        settings.miner = self != StudyVariant::NoMiner;
        settings.alpha = study.alpha;
        settings.concurrency = study.concurrency.max(1);
        settings.agent_max_steps = study.agent_max_steps;
        settings.plan_decoding = study.plan_decoding;
        settings.max_edits = study.max_edits;
        settings.final_test = false;
        settings
    }
}

/// One unit of a study's work, with its own directory under the study's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StudyCell {
    /// A scout run of a variant: `scout/<variant>/`.
    Scout(StudyVariant),
    /// A system on every test query once: `test/<system>/`.
    Test(&'static str),
    /// A system `repeats` times on the stability queries: `stability/<system>/`.
    Stability(&'static str),
    /// The scouted workflow on the equivalent tool set: `swap/tools/`.
    SwapTools,
    /// The scouted workflow under the other executor: `swap/model/`.
    SwapModel,
}

/// The systems of RQ1, baseline first.
const RQ1_SYSTEMS: [&str; 3] = ["react", "mined", "flowscout"];

impl StudyCell {
    /// The cell's directory, relative to the study's.
    #[must_use]
    pub fn dir(&self) -> PathBuf {
        match self {
            StudyCell::Scout(variant) => Path::new("scout").join(variant.name()),
            StudyCell::Test(system) => Path::new("test").join(system),
            StudyCell::Stability(system) => Path::new("stability").join(system),
            StudyCell::SwapTools => Path::new("swap").join("tools"),
            StudyCell::SwapModel => Path::new("swap").join("model"),
        }
    }

    /// The cell's name in progress lines and `cell.json`: its directory with `/`.
    #[must_use]
    pub fn name(&self) -> String {
        self.dir().to_string_lossy().replace('\\', "/")
    }
}

/// Every cell of a study with `settings`, in the order they run: the four scout runs,
/// each system on the test queries, the stability runs, then the swaps asked for.
#[must_use]
pub fn study_cells(settings: &StudySettings) -> Vec<StudyCell> {
    let mut cells: Vec<StudyCell> = StudyVariant::ALL.iter().map(|v| StudyCell::Scout(*v)).collect();
    cells.push(StudyCell::Test("react"));
    cells.extend(StudyVariant::ALL.iter().map(|v| StudyCell::Test(v.system())));
    cells.extend(RQ1_SYSTEMS.iter().map(|system| StudyCell::Stability(system)));
    if settings.tool_swap.is_some() {
        cells.push(StudyCell::SwapTools);
    }
    if settings.model_swap.is_some() {
        cells.push(StudyCell::SwapModel);
    }
    cells
}

/// What a finished cell cost, in `<cell>/cell.json`.
///
/// Counted in the process that finished the cell: after a resume, a scout cell's calls
/// include those its LLM cache answered again (`cache_hits`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellRecord {
    /// The cell's name.
    pub cell: String,
    /// LLM calls, tokens and cache hits while the cell ran.
    pub llm: Totals,
    /// Wall time, in seconds.
    pub wall_secs: f64,
}

/// The LLM-call estimate of a study, printed before it starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudyEstimate {
    /// Sizes of the opt, val and test splits.
    pub split: (usize, usize, usize),
    /// Per cell: its name, whether it is already done, and the calls it may make.
    pub cells: Vec<(String, bool, u64)>,
    /// Calls of the cells still to run.
    pub remaining_calls: u64,
}

/// Estimates the LLM calls of every cell: a workflow run makes about one call per node
/// of the mined workflow (plus one judge call), a ReAct run at most its step budget plus
/// one, an expansion at most `settings.max_edits + 1` optimizer calls, and every
/// candidate runs on the opt and val splits. It is an estimate for planning, not a bound.
///
/// # Errors
///
/// Records too few to split.
pub fn estimate(dir: &Path, settings: &StudySettings, records: &[Record]) -> Result<StudyEstimate, ScoutError> {
    let parts = split(records.to_vec(), |r| r.id.as_str(), settings.seed, SplitRatios::FLOWSCOUT)
        .map_err(|err| ScoutError::Setup(err.to_string()))?;
    let (opt, val, test) = (parts.opt.len() as u64, parts.val.len() as u64, parts.test.len() as u64);
    let mined = crate::scout::initial_workflow(&parts.opt, true, 0.2);
    let per_workflow_run = mined.nodes.len() as u64 + 1;
    let per_react_run = u64::from(settings.agent_max_steps) + 1;
    let stability_queries = (settings.stability_queries as u64).min(test);
    let search = |candidates: u64, per_run: u64| {
        (opt + val) * per_run + candidates * ((settings.max_edits as u64 + 1) + (opt + val) * per_run)
    };
    let budget = u64::from(settings.iterations);
    let cells = study_cells(settings)
        .into_iter()
        .map(|cell| {
            let calls = match &cell {
                StudyCell::Scout(StudyVariant::NoMcts) => search(0, per_workflow_run),
                StudyCell::Scout(StudyVariant::NoMiner) => search(budget, 4),
                StudyCell::Scout(_) => search(budget, per_workflow_run),
                StudyCell::Test("react") => test * per_react_run,
                StudyCell::Test(_) | StudyCell::SwapTools | StudyCell::SwapModel => test * per_workflow_run,
                StudyCell::Stability("react") => stability_queries * u64::from(settings.repeats) * per_react_run,
                StudyCell::Stability(_) => stability_queries * u64::from(settings.repeats) * per_workflow_run,
            };
            (cell.name(), dir.join(cell.dir()).join("cell.json").is_file(), calls)
        })
        .collect::<Vec<_>>();
    let remaining_calls = cells.iter().filter(|(_, done, _)| !done).map(|(_, _, calls)| calls).sum();
    Ok(StudyEstimate { split: (parts.opt.len(), parts.val.len(), parts.test.len()), cells, remaining_calls })
}

/// Where a study may be interrupted; the caller's hook returns `false` to stop there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StudyCheckpoint {
    /// A scout cell reached one of its search checkpoints.
    Scout(StudyVariant, Checkpoint),
    /// A cell finished and wrote its `cell.json`.
    CellDone(String),
}

/// What a study needs besides its settings and records.
pub struct StudyParts<'a> {
    /// Executor, tools and prompts for the searches (the executor may answer from a cache).
    pub search_runtime: Runtime,
    /// Executor, tools and prompts for the test and stability cells: repeats must be real
    /// runs, so this executor should not answer from a cache.
    pub test_runtime: Runtime,
    /// Tool-state isolation for stateful servers; each cell runs under keys of its own.
    pub isolation: Option<StateIsolation>,
    /// How runs are scored (the searches leave the task check out).
    pub scoring: ScoreConfig<'a>,
    /// The optimizer.
    pub proposer: &'a dyn Proposer,
    /// The equivalent tool set, when the settings ask for the tool-set swap.
    pub tool_swap: Option<ToolSwap<'a>>,
    /// The test runtime with the other executor, when the settings ask for the swap.
    pub model_swap: Option<Runtime>,
    /// The LLM tally so far, read before and after each cell.
    pub tally: &'a (dyn Fn() -> Totals + Send + Sync),
    /// Called at every checkpoint; `false` interrupts the study (resume later).
    pub checkpoint: &'a (dyn Fn(StudyCheckpoint) -> bool + Send + Sync),
    /// Called when a cell starts: its name, its position from 1, and the number of cells.
    pub on_cell: &'a (dyn Fn(&str, usize, usize) + Send + Sync),
    /// Called as a cell progresses: runs done and in total (an evaluation cell), or
    /// iterations done and the budget (a scout cell).
    pub on_progress: &'a (dyn Fn(usize, usize) + Send + Sync),
}

/// The equivalent tool set of the tool-set swap (RQ4).
pub struct ToolSwap<'a> {
    /// The test runtime on the equivalent tools.
    pub runtime: Runtime,
    /// Scoring there: the task check must replay calls under the new names.
    pub scoring: ScoreConfig<'a>,
    /// Each renamed tool: its old name and the name it goes by in the equivalent set.
    /// The records' reference calls are renamed with it, so TC compares like with like.
    pub renames: BTreeMap<String, String>,
}

/// Writes `DIR/study.settings.json` for a new study, or reads it to resume one.
///
/// # Errors
///
/// A new study in a directory that already holds one, a resume without the file, or an
/// unreadable file.
pub fn prepare_study(dir: &Path, settings: Option<StudySettings>) -> Result<StudySettings, ScoutError> {
    crate::scout::settings_file(&dir.join("study.settings.json"), settings, "study")
}

/// Runs (or resumes) the study in `dir`: every cell not yet done, then the results, in
/// `study.json`, `study.md` and `study.html`.
///
/// # Errors
///
/// Records too few to split, a search failure, an interruption
/// (`ScoutError::Search(SearchError::Interrupted)`: resume later), a swap asked for
/// without its runtime, or a file that cannot be written.
pub async fn study(
    dir: &Path,
    settings: &StudySettings,
    records: Vec<Record>,
    parts: &StudyParts<'_>,
) -> Result<StudyResults, ScoutError> {
    let split_parts = split(records.clone(), |r| r.id.as_str(), settings.seed, SplitRatios::FLOWSCOUT)
        .map_err(|err| ScoutError::Setup(err.to_string()))?;
    let test = split_parts.test;
    if test.is_empty() {
        return Err(ScoutError::Setup("the test split is empty: a study needs at least 4 records".to_owned()));
    }
    let stability: Vec<Record> = test.iter().take(settings.stability_queries.max(1)).cloned().collect();
    let split_file = SplitFile {
        sizes: (split_parts.opt.len(), split_parts.val.len(), test.len()),
        test: test.iter().map(|r| r.id.clone()).collect(),
    };
    let path = dir.join(SPLIT_FILE);
    flowmem_model::write_json_atomic(&path, &split_file)
        .map_err(|err| ScoutError::File { path: path.clone(), message: err.source.to_string() })?;
    let cells = study_cells(settings);
    for (idx, cell) in cells.iter().enumerate() {
        let cell_dir = dir.join(cell.dir());
        if cell_dir.join("cell.json").is_file() {
            continue;
        }
        let name = cell.name();
        (parts.on_cell)(&name, idx + 1, cells.len());
        let before = (parts.tally)();
        let started = Instant::now();
        match cell {
            StudyCell::Scout(variant) => run_scout_cell(&cell_dir, *variant, settings, &records, parts).await?,
            StudyCell::Test(system) => {
                let on =
                    EvalSetting { runtime: &parts.test_runtime, scoring: &parts.scoring, records: &test, repeat: 1 };
                run_eval_cell(dir, &cell_dir, system, settings, &on, parts).await?;
            }
            StudyCell::Stability(system) => {
                let repeat = settings.repeats;
                let on =
                    EvalSetting { runtime: &parts.test_runtime, scoring: &parts.scoring, records: &stability, repeat };
                run_eval_cell(dir, &cell_dir, system, settings, &on, parts).await?;
            }
            StudyCell::SwapTools => {
                let Some(swap) = &parts.tool_swap else {
                    return Err(ScoutError::Setup("the tool-set swap needs the equivalent tool set".to_owned()));
                };
                let renamed = rename_calls(&test, &swap.renames);
                let on = EvalSetting { runtime: &swap.runtime, scoring: &swap.scoring, records: &renamed, repeat: 1 };
                run_eval_cell(dir, &cell_dir, "flowscout", settings, &on, parts).await?;
            }
            StudyCell::SwapModel => {
                let Some(runtime) = &parts.model_swap else {
                    return Err(ScoutError::Setup("the backbone swap needs the other executor".to_owned()));
                };
                let on = EvalSetting { runtime, scoring: &parts.scoring, records: &test, repeat: 1 };
                run_eval_cell(dir, &cell_dir, "flowscout", settings, &on, parts).await?;
            }
        }
        let record = CellRecord {
            cell: name.clone(),
            llm: (parts.tally)().since(&before),
            wall_secs: started.elapsed().as_secs_f64(),
        };
        let path = cell_dir.join("cell.json");
        flowmem_model::write_json_atomic(&path, &record)
            .map_err(|err| ScoutError::File { path: path.clone(), message: err.source.to_string() })?;
        if !(parts.checkpoint)(StudyCheckpoint::CellDone(name)) {
            return Err(ScoutError::Search(SearchError::Interrupted));
        }
    }
    let results = assemble(dir, settings)?;
    write_study(dir, &results)?;
    Ok(results)
}

async fn run_scout_cell(
    cell_dir: &Path,
    variant: StudyVariant,
    settings: &StudySettings,
    records: &[Record],
    parts: &StudyParts<'_>,
) -> Result<(), ScoutError> {
    let scout_settings = if cell_dir.join("run.json").is_file() {
        prepare_run(cell_dir, None)?
    } else {
        prepare_run(cell_dir, Some(variant.scout_settings(settings)))?
    };
    let checkpoint = |point: Checkpoint| (parts.checkpoint)(StudyCheckpoint::Scout(variant, point));
    let scout_parts = ScoutParts {
        runtime: parts.search_runtime.clone(),
        isolation: parts.isolation.as_ref().map(|iso| iso.with_key(format!("{}/study/{}", iso.key, variant.name()))),
        scoring: parts.scoring.clone(),
        proposer: parts.proposer,
        checkpoint: &checkpoint,
        on_iteration: &|iteration, _| (parts.on_progress)(iteration as usize, settings.iterations as usize),
        on_split: &|_| {},
        on_test: &|_| {},
    };
    scout(cell_dir, &scout_settings, records.to_vec(), &scout_parts).await.map(|_| ())
}

/// The workflow a system runs: a variant's best (`mined`: NoMCTS's, which is `G⁰`).
fn system_workflow(dir: &Path, system: &str) -> Result<WorkflowGraph, ScoutError> {
    let variant = StudyVariant::ALL
        .into_iter()
        .find(|v| v.system() == system)
        .ok_or_else(|| ScoutError::Setup(format!("no workflow system is called `{system}`")))?;
    read_json(&dir.join(StudyCell::Scout(variant).dir()).join("best.workflow.json"))
}

/// What an evaluation cell runs on: runtime, scoring, queries and repeats.
struct EvalSetting<'s, 'a> {
    runtime: &'s Runtime,
    scoring: &'s ScoreConfig<'a>,
    records: &'s [Record],
    repeat: u32,
}

/// `records` with their reference calls' tools renamed by `renames` (old → new).
fn rename_calls(records: &[Record], renames: &BTreeMap<String, String>) -> Vec<Record> {
    let mut records = records.to_vec();
    for call in records.iter_mut().flat_map(|record| record.orchestration.iter_mut()) {
        if let Some(name) = renames.get(&call.tool) {
            call.tool.clone_from(name);
        }
    }
    records
}

async fn run_eval_cell(
    dir: &Path,
    cell_dir: &Path,
    system: &str,
    settings: &StudySettings,
    on: &EvalSetting<'_, '_>,
    parts: &StudyParts<'_>,
) -> Result<(), ScoutError> {
    let (runtime, records) = (on.runtime, on.records);
    let key = cell_dir.strip_prefix(dir).unwrap_or(cell_dir).to_string_lossy().replace('\\', "/");
    let isolation = parts.isolation.as_ref().map(|iso| iso.with_key(format!("{}/study/{key}", iso.key)));
    let cfg = EvalConfig { repeat: on.repeat.max(1), scoring: on.scoring.clone() };
    let progress = |done: flowmem_eval::Progress<'_>| (parts.on_progress)(done.done, done.total);
    let report = if system == "react" {
        let agent = AgentConfig { max_steps: settings.agent_max_steps, instruction: None, guard: None };
        let react = ReactSystem::new("react", runtime.clone(), agent, isolation);
        evaluate_concurrently(&[&react as &dyn System], records, &cfg, settings.concurrency, &progress).await
    } else {
        let graph = system_workflow(dir, system)?;
        let names = visible_tools(runtime.tools.as_ref(), isolation.as_ref());
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let (graph, _) = unbind_unknown_tools(graph, &refs);
        let validated = check(graph, ToolCatalog::Known(&names))
            .map_err(|err| ScoutError::Setup(format!("`{system}`'s workflow is not valid on these tools: {err}")))?;
        let workflow = WorkflowSystem::new(system, runtime.clone(), validated, isolation);
        evaluate_concurrently(&[&workflow as &dyn System], records, &cfg, settings.concurrency, &progress).await
    };
    let report = report.with_reward(crate::scout::alpha_of(&StudyVariant::FlowScout.scout_settings(settings))?);
    write_report(&report, &format!("study: {key}"), cell_dir)
        .map_err(|err| ScoutError::File { path: cell_dir.to_owned(), message: err.to_string() })?;
    Ok(())
}

/// `retained / original`: the share of a score a workflow keeps after a swap, or `None`
/// when either is missing or the original is 0.
///
/// # Example
///
/// ```
/// assert_eq!(flowmem_optimize::retention(Some(0.5), Some(0.375)), Some(0.75));
/// assert_eq!(flowmem_optimize::retention(Some(0.0), Some(0.6)), None);
/// ```
#[must_use]
pub fn retention(original: Option<f64>, swapped: Option<f64>) -> Option<f64> {
    let (original, swapped) = (original?, swapped?);
    (original != 0.0).then(|| swapped / original)
}

/// One system's figures in a table: its summary and the runs file behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemFigures {
    /// The `runs.jsonl` holding the runs behind the figures, relative to the study.
    pub runs: String,
    /// The system's summary over those runs.
    #[serde(flatten)]
    pub summary: SystemSummary,
}

/// A workflow's relative differences from a baseline, in percent (FlowScout's way).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    /// The workflow.
    pub system: String,
    /// The baseline.
    pub baseline: String,
    /// TC, percent.
    pub tc_pct: Option<f64>,
    /// ES, percent.
    pub es_pct: Option<f64>,
    /// Task success, percent.
    pub task_success_pct: Option<f64>,
    /// Reduction of the mean CV of ES, percent (stability).
    pub cv_reduction_pct: Option<f64>,
}

/// A search's cost and outcome (RQ2, RQ3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchFigures {
    /// The variant.
    pub variant: StudyVariant,
    /// The scout cell.
    pub run: String,
    /// The candidate budget (0 for NoMCTS).
    pub budget: u32,
    /// Iterations run.
    pub iterations: u32,
    /// Candidates generated (failed expansions excluded).
    pub candidates: usize,
    /// The best candidate and the iteration that made it (0: `G⁰`).
    pub best_candidate: usize,
    /// The iteration of the best candidate.
    pub best_iteration: u32,
    /// Its validation score.
    pub best_val_score: f64,
    /// LLM calls, tokens and cache hits.
    pub llm: Totals,
    /// Wall time, in seconds.
    pub wall_secs: f64,
}

/// One point of the validation curve (the paper's Fig. 5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// The iteration (0: `G⁰`).
    pub iteration: u32,
    /// The candidate's validation score, `None` for a failed expansion.
    pub val_score: Option<f64>,
    /// The best validation score so far.
    pub best_val_score: f64,
}

/// A swap's outcome (RQ4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwapFigures {
    /// What was swapped in: the tool set's configuration or the model's name.
    pub to: String,
    /// The scouted workflow on the original setting.
    pub original: SystemFigures,
    /// On the swapped one.
    pub swapped: SystemFigures,
    /// Retained TC, `swapped / original`.
    pub retained_tc: Option<f64>,
    /// Retained ES.
    pub retained_es: Option<f64>,
}

/// A finished study: `study.json` (format version 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudyResults {
    /// The format version.
    pub version: u32,
    /// The settings.
    pub settings: StudySettings,
    /// Sizes of the opt, val and test splits.
    pub split: (usize, usize, usize),
    /// The test queries' ids, in the order every system ran them.
    pub test_queries: Vec<String>,
    /// RQ1: ReAct, the mined workflow and FlowScout on the test queries.
    pub rq1: Vec<SystemFigures>,
    /// RQ1: FlowScout against each baseline.
    pub rq1_differences: Vec<Difference>,
    /// RQ1 stability: the same systems, repeated on the stability queries.
    pub stability: Vec<SystemFigures>,
    /// RQ1 stability: FlowScout's CV reduction against each baseline.
    pub stability_differences: Vec<Difference>,
    /// RQ2: FlowScout's validation curve.
    pub curve: Vec<CurvePoint>,
    /// RQ2 and RQ3: each variant's search.
    pub searches: Vec<SearchFigures>,
    /// RQ2 runtime and RQ3 quality: every system on the test queries.
    pub test: Vec<SystemFigures>,
    /// RQ3: each variant against FlowScout.
    pub ablation_differences: Vec<Difference>,
    /// RQ4: the tool-set swap.
    pub tool_swap: Option<SwapFigures>,
    /// RQ4: the backbone swap.
    pub model_swap: Option<SwapFigures>,
}

fn read_report(dir: &Path, cell: &StudyCell) -> Result<EvalReport, ScoutError> {
    read_json(&dir.join(cell.dir()).join("report.json"))
}

fn figures(dir: &Path, cell: &StudyCell) -> Result<SystemFigures, ScoutError> {
    let report = read_report(dir, cell)?;
    let summary = report.systems.into_iter().next().ok_or_else(|| ScoutError::File {
        path: dir.join(cell.dir()).join("report.json"),
        message: "the report has no system".to_owned(),
    })?;
    Ok(SystemFigures { runs: format!("{}/runs.jsonl", cell.name()), summary })
}

fn difference(system: &SystemFigures, baseline: &SystemFigures) -> Difference {
    let (system, baseline) = (&system.summary, &baseline.summary);
    Difference {
        system: system.system.clone(),
        baseline: baseline.system.clone(),
        tc_pct: relative_change(Some(system.mean_tc), Some(baseline.mean_tc)),
        es_pct: relative_change(system.mean_es, baseline.mean_es),
        task_success_pct: relative_change(system.task_success_rate, baseline.task_success_rate),
        cv_reduction_pct: relative_change(system.mean_cv_es, baseline.mean_cv_es).map(|pct| -pct),
    }
}

fn search_figures(dir: &Path, variant: StudyVariant, settings: &StudySettings) -> Result<SearchFigures, ScoutError> {
    let cell = StudyCell::Scout(variant);
    let cell_dir = dir.join(cell.dir());
    let state: SearchState = read_json(&cell_dir.join("state.json"))?;
    let record: CellRecord = read_json(&cell_dir.join("cell.json"))?;
    let best_iteration = state.history.iter().find(|h| h.candidate == Some(state.best)).map_or(0, |h| h.iteration);
    Ok(SearchFigures {
        variant,
        run: cell.name(),
        budget: if variant == StudyVariant::NoMcts { 0 } else { settings.iterations },
        iterations: state.iteration,
        candidates: state.history.iter().filter(|h| h.candidate.is_some()).count(),
        best_candidate: state.best,
        best_iteration,
        best_val_score: state.best_val_score,
        llm: record.llm,
        wall_secs: record.wall_secs,
    })
}

/// Reads every finished cell of the study in `dir` into its results.
///
/// # Errors
///
/// A cell's file missing or unreadable: every cell must be done.
pub fn assemble(dir: &Path, settings: &StudySettings) -> Result<StudyResults, ScoutError> {
    let react = figures(dir, &StudyCell::Test("react"))?;
    let mut test = vec![react.clone()];
    for variant in StudyVariant::ALL {
        test.push(figures(dir, &StudyCell::Test(variant.system()))?);
    }
    let by_name = |list: &[SystemFigures], name: &str| list.iter().find(|f| f.summary.system == name).cloned();
    let rq1: Vec<SystemFigures> = RQ1_SYSTEMS.iter().filter_map(|name| by_name(&test, name)).collect();
    let flowscout = by_name(&test, "flowscout").ok_or_else(|| ScoutError::Setup("no flowscout test".to_owned()))?;
    let rq1_differences =
        rq1.iter().filter(|f| f.summary.system != "flowscout").map(|b| difference(&flowscout, b)).collect();
    let stability: Vec<SystemFigures> =
        RQ1_SYSTEMS.iter().map(|name| figures(dir, &StudyCell::Stability(name))).collect::<Result<_, _>>()?;
    let stability_differences = match by_name(&stability, "flowscout") {
        Some(ours) => {
            stability.iter().filter(|f| f.summary.system != "flowscout").map(|b| difference(&ours, b)).collect()
        }
        None => Vec::new(),
    };
    let searches: Vec<SearchFigures> =
        StudyVariant::ALL.iter().map(|v| search_figures(dir, *v, settings)).collect::<Result<_, _>>()?;
    let scout_state: SearchState =
        read_json(&dir.join(StudyCell::Scout(StudyVariant::FlowScout).dir()).join("state.json"))?;
    let root_val = root_val_score(dir)?;
    let mut curve = vec![CurvePoint { iteration: 0, val_score: Some(root_val), best_val_score: root_val }];
    curve.extend(scout_state.history.iter().map(|h| CurvePoint {
        iteration: h.iteration,
        val_score: h.val_score,
        best_val_score: h.best_val_score,
    }));
    let ablation_differences = StudyVariant::ALL
        .iter()
        .filter(|v| **v != StudyVariant::FlowScout)
        .filter_map(|v| by_name(&test, v.system()))
        .map(|variant| difference(&variant, &flowscout))
        .collect();
    let swap = |cell: StudyCell, to: &Option<String>| -> Result<Option<SwapFigures>, ScoutError> {
        let Some(to) = to else { return Ok(None) };
        let swapped = figures(dir, &cell)?;
        Ok(Some(SwapFigures {
            to: to.clone(),
            retained_tc: retention(Some(flowscout.summary.mean_tc), Some(swapped.summary.mean_tc)),
            retained_es: retention(flowscout.summary.mean_es, swapped.summary.mean_es),
            original: flowscout.clone(),
            swapped,
        }))
    };
    let tool_swap = swap(StudyCell::SwapTools, &settings.tool_swap)?;
    let model_swap = swap(StudyCell::SwapModel, &settings.model_swap)?;
    let split: SplitFile = read_json(&dir.join(SPLIT_FILE))?;
    Ok(StudyResults {
        version: 1,
        settings: settings.clone(),
        split: split.sizes,
        test_queries: split.test,
        rq1,
        rq1_differences,
        stability,
        stability_differences,
        curve,
        searches,
        test,
        ablation_differences,
        tool_swap,
        model_swap,
    })
}

/// `DIR/split.json`: the split's sizes and the test queries, written when a study starts.
const SPLIT_FILE: &str = "split.json";

#[derive(Debug, Serialize, Deserialize)]
struct SplitFile {
    sizes: (usize, usize, usize),
    test: Vec<String>,
}

/// `G⁰`'s validation score in the FlowScout run.
fn root_val_score(dir: &Path) -> Result<f64, ScoutError> {
    let path = crate::search::candidate_path(&dir.join(StudyCell::Scout(StudyVariant::FlowScout).dir()), 0, "val");
    let value: serde_json::Value = read_json(&path)?;
    value["reward"].as_f64().ok_or_else(|| ScoutError::File { path, message: "no `reward`".to_owned() })
}

/// The Markdown report: the paper's tables II–V analogues.
#[must_use]
pub fn render_study_markdown(results: &StudyResults) -> String {
    use std::fmt::Write;
    let num = |v: Option<f64>| v.map_or_else(|| "–".to_owned(), |v| format!("{v:.3}"));
    let pct = |v: Option<f64>| v.map_or_else(|| "–".to_owned(), |v| format!("{v:+.2}%"));
    let s = &results.settings;
    let mut out = String::new();
    let _ = writeln!(out, "# flowmem study\n");
    let _ = writeln!(
        out,
        "Records `{}`, seed {}, split opt/val/test {}/{}/{}; executor `{}`; candidate budget {}; stability {} repeats on {} queries.\n",
        s.records.display(),
        s.seed,
        results.split.0,
        results.split.1,
        results.split.2,
        s.executor,
        s.iterations,
        s.repeats,
        results.stability.first().map_or(0, |f| f.summary.n_records),
    );
    let table = |out: &mut String, rows: &[SystemFigures]| {
        let _ =
            writeln!(out, "| system | TC | ES | task success | runs | errors | ms/query | LLM calls/run | runs file |");
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
        for f in rows {
            let m = &f.summary;
            let _ = writeln!(
                out,
                "| {} | {:.3} | {} | {} | {} | {} | {:.0} | {:.1} | `{}` |",
                m.system,
                m.mean_tc,
                num(m.mean_es),
                num(m.task_success_rate),
                m.n_runs,
                m.n_errors,
                m.latency_ms_per_query,
                m.llm_calls_per_query,
                f.runs
            );
        }
    };
    let _ = writeln!(out, "## RQ1: effectiveness (Table II)\n");
    table(&mut out, &results.rq1);
    let _ = writeln!(out);
    for d in &results.rq1_differences {
        let _ = writeln!(
            out,
            "- {} vs {}: TC {}, ES {}, task success {}",
            d.system,
            d.baseline,
            pct(d.tc_pct),
            pct(d.es_pct),
            pct(d.task_success_pct)
        );
    }
    let _ = writeln!(out, "\n## RQ1: stability (Fig. 3)\n");
    let _ = writeln!(out, "| system | mean CV of ES | queries with a CV | runs | runs file |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    for f in &results.stability {
        let m = &f.summary;
        let _ =
            writeln!(out, "| {} | {} | {} | {} | `{}` |", m.system, num(m.mean_cv_es), m.cv_es.len(), m.n_runs, f.runs);
    }
    let _ = writeln!(out);
    for d in &results.stability_differences {
        let _ = writeln!(out, "- {} vs {}: CV of ES reduced by {}", d.system, d.baseline, pct(d.cv_reduction_pct));
    }
    let _ = writeln!(out, "\n## RQ2: search and runtime cost\n");
    let curve: Vec<String> =
        results.curve.iter().map(|p| format!("{}:{}", p.iteration, num(Some(p.best_val_score)))).collect();
    let _ = writeln!(out, "Best validation score per iteration (Fig. 5): {}\n", curve.join(" "));
    let _ = writeln!(
        out,
        "| variant | budget | iterations | candidates | best (iteration) | best val | wall s | LLM calls | cache hits | tokens | run |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    for search in &results.searches {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} ({}) | {:.3} | {:.1} | {} | {} | {} | `{}` |",
            search.variant.name(),
            search.budget,
            search.iterations,
            search.candidates,
            search.best_candidate,
            search.best_iteration,
            search.best_val_score,
            search.wall_secs,
            search.llm.calls,
            search.llm.cache_hits,
            search.llm.prompt_tokens + search.llm.completion_tokens,
            search.run
        );
    }
    let _ = writeln!(out, "\n## RQ3: ablations on the test queries (Table III)\n");
    table(&mut out, &results.test);
    let _ = writeln!(out);
    for d in &results.ablation_differences {
        let _ = writeln!(out, "- {} vs {}: TC {}, ES {}", d.system, d.baseline, pct(d.tc_pct), pct(d.es_pct));
    }
    let _ = writeln!(out, "\n## RQ4: transfer (Tables IV, V)\n");
    if results.tool_swap.is_none() && results.model_swap.is_none() {
        let _ = writeln!(out, "No swap was asked for.");
    }
    for (what, swap) in [("tool set", &results.tool_swap), ("executor", &results.model_swap)] {
        if let Some(swap) = swap {
            let _ = writeln!(
                out,
                "- {what} → `{}`: TC {:.3} → {:.3} (retained {}), ES {} → {} (retained {}); runs `{}`",
                swap.to,
                swap.original.summary.mean_tc,
                swap.swapped.summary.mean_tc,
                num(swap.retained_tc),
                num(swap.original.summary.mean_es),
                num(swap.swapped.summary.mean_es),
                num(swap.retained_es),
                swap.swapped.runs
            );
        }
    }
    out
}

#[derive(Serialize)]
struct StudyPage<'a> {
    title: &'a str,
    results: &'a StudyResults,
    cv_boxplot: Markup,
    curve_svg: Markup,
}

const STUDY_TEMPLATE: &str = include_str!("../templates/study.html.j2");

/// The HTML report: the tables with every number linked to its runs, the box plots of
/// the per-query CV of ES and the validation curve, self-contained.
///
/// # Errors
///
/// A FlowScout run whose `state.json` cannot be read (for the curve).
pub fn render_study_html(dir: &Path, results: &StudyResults) -> Result<String, ScoutError> {
    let stability: Vec<SystemSummary> = results.stability.iter().map(|f| f.summary.clone()).collect();
    let state: SearchState = read_json(&dir.join(StudyCell::Scout(StudyVariant::FlowScout).dir()).join("state.json"))?;
    let root = results.curve.first().map_or(0.0, |p| p.best_val_score);
    let page = StudyPage {
        title: "flowmem study",
        results,
        cv_boxplot: Markup::new(cv_boxplot_svg(&stability)),
        curve_svg: Markup::new(validation_curve(&state, root)),
    };
    Ok(flowmem_report::render_page("study.html.j2", STUDY_TEMPLATE, &page)
        .unwrap_or_else(|err| flowmem_report::error_page(&err)))
}

fn write_study(dir: &Path, results: &StudyResults) -> Result<(), ScoutError> {
    let path = dir.join("study.json");
    flowmem_model::write_json_atomic(&path, results)
        .map_err(|err| ScoutError::File { path: path.clone(), message: err.source.to_string() })?;
    write_text(&dir.join("study.md"), &render_study_markdown(results))?;
    write_text(&dir.join("study.html"), &render_study_html(dir, results)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_run_scouts_first_then_tests_and_swaps_when_asked() {
        let mut settings = StudySettings::paper_defaults(PathBuf::from("r.jsonl"), "m".to_owned());
        let names: Vec<String> = study_cells(&settings).iter().map(StudyCell::name).collect();
        assert_eq!(
            names,
            [
                "scout/flowscout",
                "scout/nomcts",
                "scout/nominer",
                "scout/beam",
                "test/react",
                "test/flowscout",
                "test/mined",
                "test/nominer",
                "test/beam",
                "stability/react",
                "stability/mined",
                "stability/flowscout"
            ]
        );
        settings.tool_swap = Some("aliased.toml".to_owned());
        settings.model_swap = Some("other".to_owned());
        let names: Vec<String> = study_cells(&settings).iter().map(StudyCell::name).collect();
        assert_eq!(names[names.len() - 2..], ["swap/tools".to_owned(), "swap/model".to_owned()]);
    }

    #[test]
    fn every_searching_variant_gets_the_same_budget_and_no_final_test() {
        let mut settings = StudySettings::paper_defaults(PathBuf::from("r.jsonl"), "m".to_owned());
        settings.iterations = 7;
        for variant in [StudyVariant::FlowScout, StudyVariant::NoMiner, StudyVariant::Beam] {
            let scout = variant.scout_settings(&settings);
            assert_eq!(scout.search.iterations, 7, "{variant:?}");
            assert!(!scout.final_test);
        }
        assert_eq!(StudyVariant::Beam.scout_settings(&settings).strategy, Strategy::Beam { width: 3 });
        assert_eq!(StudyVariant::NoMcts.scout_settings(&settings).strategy, Strategy::NoSearch);
        assert!(!StudyVariant::NoMiner.scout_settings(&settings).miner);
        assert!(StudyVariant::FlowScout.scout_settings(&settings).miner);
    }

    #[test]
    fn retention_is_the_swapped_share_of_the_original() {
        assert_eq!(retention(Some(0.5), Some(0.25)), Some(0.5));
        assert_eq!(retention(Some(0.5), Some(0.75)), Some(1.5));
        assert_eq!(retention(None, Some(0.75)), None);
        assert_eq!(retention(Some(0.5), None), None);
        assert_eq!(retention(Some(0.0), Some(0.1)), None);
    }
}
