//! The scout runs the web UI and the REST API show: run directories (`flowmem scout
//! --out DIR`) found under the server's `--runs` roots, read from their files as
//! `flowmem scout` left them. A root that is itself a run is shown too.
//!
//! A run is named in URLs by a key, `ROOT.NAME`: the root's position on the command line
//! and the directory's name inside it (`ROOT` alone for a root that is a run), so a URL
//! can only ever name a directory directly inside a configured root.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use flowmem_eval::EvalReport;
use flowmem_memory::{CURVE_JSON_FILE, LearningCurve, curve_chart};
use flowmem_model::{GraphDiff, WorkflowGraph};
use flowmem_optimize::{
    CandidatePlan, Evaluation, ScoutTestRow, SearchState, TreeNodeId, candidate_path, read_run_json,
    search_tree_linked_svg, validation_curve_svg, workflow_graph_marked_svg,
};
use flowmem_report::Markup;

/// A run directory and its key.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct RunRow {
    /// The run's key in URLs: `ROOT.NAME`, or `ROOT` for a root that is a run.
    key: String,
    /// Its directory.
    path: String,
    /// Iterations done.
    iterations: u32,
    /// Candidates in its search tree, `G⁰` included.
    candidates: usize,
    /// The best candidate on validation.
    best: TreeNodeId,
    /// Its validation score, to 3 places (`–` when the state could not be read).
    best_val_score: String,
    /// Why the search stopped, or `no`.
    stopped: String,
}

/// Every run under `roots`, root by root, each root's runs by name.
pub(crate) fn list(roots: &[PathBuf]) -> Vec<RunRow> {
    let mut rows = Vec::new();
    for (key, path) in directories(roots, is_run) {
        // A run mid-write or damaged is listed with what could be read.
        let state = read_run_json::<SearchState>(&path.join("state.json")).ok().flatten();
        rows.push(RunRow {
            key,
            path: path.display().to_string(),
            iterations: state.as_ref().map_or(0, |s| s.iteration),
            candidates: state.as_ref().map_or(0, |s| s.tree.len()),
            best: state.as_ref().map_or(0, |s| s.best),
            best_val_score: state.as_ref().map_or_else(|| "–".to_owned(), |s| format!("{:.3}", s.best_val_score)),
            stopped: state.as_ref().and_then(|s| s.stopped).map_or_else(|| "no".to_owned(), |r| format!("{r:?}")),
        });
    }
    rows
}

/// An online learning run (`flowmem learn --out DIR`) found under the roots.
#[derive(Debug, Serialize)]
pub(crate) struct OnlineRun {
    key: String,
    path: String,
    chart: Markup,
    tasks: usize,
    solved: usize,
    /// The last cumulative success rate with memory, and without (when a baseline ran).
    rate: String,
    baseline_rate: Option<String>,
    inductions: usize,
    workflows_added: usize,
}

/// Every online learning run under `roots` (a directory holding its learning curve),
/// keyed as scout runs are. One whose curve does not parse is named in `problems`.
pub(crate) fn online(roots: &[PathBuf]) -> (Vec<OnlineRun>, Vec<String>) {
    let (mut found, mut problems) = (Vec::new(), Vec::new());
    for (key, dir) in directories(roots, |dir| dir.join(CURVE_JSON_FILE).is_file()) {
        let path = dir.join(CURVE_JSON_FILE);
        let curve = match read_run_json::<LearningCurve>(&path) {
            Ok(Some(curve)) => curve,
            Ok(None) => continue,
            Err(err) => {
                problems.push(err.to_string());
                continue;
            }
        };
        let last = |rates: &[f64]| rates.last().map_or_else(|| "–".to_owned(), |r| format!("{:.0}%", r * 100.0));
        found.push(OnlineRun {
            key,
            path: dir.display().to_string(),
            chart: Markup::new(curve_chart(&curve)),
            tasks: curve.memory.n_tasks,
            solved: curve.memory.n_solved,
            rate: last(&curve.memory.cumulative_success_rate),
            baseline_rate: curve.baseline.as_ref().map(|b| last(&b.cumulative_success_rate)),
            inductions: curve.n_inductions,
            workflows_added: curve.n_workflows_added,
        });
    }
    (found, problems)
}

/// The directories under `roots` that `wanted` picks, each with its key: every root
/// itself, then its subdirectories by name.
fn directories(roots: &[PathBuf], wanted: impl Fn(&Path) -> bool) -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    for (i, root) in roots.iter().enumerate() {
        if wanted(root) {
            found.push((i.to_string(), root.clone()));
        }
        let mut names: Vec<String> = std::fs::read_dir(root)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|entry| wanted(&entry.path()))
            .filter_map(|entry| entry.file_name().into_string().ok())
            .collect();
        names.sort();
        found.extend(names.into_iter().map(|name| (format!("{i}.{name}"), root.join(name))));
    }
    found
}

fn is_run(dir: &Path) -> bool {
    dir.join("state.json").is_file()
}

/// The directory `key` names, if it is a run under `roots`.
pub(crate) fn resolve(roots: &[PathBuf], key: &str) -> Option<PathBuf> {
    let (index, name) = match key.split_once('.') {
        Some((index, name)) => (index, Some(name)),
        None => (key, None),
    };
    let root = roots.get(index.parse::<usize>().ok()?)?;
    let dir = match name {
        None => root.clone(),
        Some(name) => {
            let plain = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0']);
            if !plain {
                return None;
            }
            root.join(name)
        }
    };
    is_run(&dir).then_some(dir)
}

/// The test split's table of the run in `dir`, when it got that far.
fn test_rows(dir: &Path) -> Result<Option<Vec<ScoutTestRow>>, String> {
    let test: Option<EvalReport> =
        read_run_json(&dir.join("test").join("report.json")).map_err(|err| err.to_string())?;
    Ok(test.as_ref().map(flowmem_optimize::test_rows))
}

fn read_state(dir: &Path) -> Result<SearchState, String> {
    read_run_json(&dir.join("state.json"))
        .map_err(|err| err.to_string())?
        .ok_or_else(|| format!("{} is gone", dir.join("state.json").display()))
}

/// A run as the REST API gives it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct RunDetail {
    /// Iterations done.
    iterations: u32,
    /// The best candidate on validation, and its score.
    best: TreeNodeId,
    best_val_score: f64,
    /// Expansions whose plan never validated.
    failed_expansions: u32,
    /// Why the search stopped, if it has.
    stopped: Option<String>,
    /// One entry per iteration: the candidate made, its parent, its validation score and
    /// the best so far.
    history: Vec<IterationPoint>,
    /// Every candidate of the search tree, by id (0 is `G⁰`).
    tree: Vec<TreeNodeView>,
    /// The test split's table, when the run got that far.
    test: Option<Vec<ScoutTestRow>>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct IterationPoint {
    iteration: u32,
    candidate: Option<TreeNodeId>,
    parent: TreeNodeId,
    val_score: Option<f64>,
    best_val_score: f64,
}

#[derive(Debug, Serialize, JsonSchema)]
struct TreeNodeView {
    id: TreeNodeId,
    parent: Option<TreeNodeId>,
    /// MCTS visits `C`.
    visits: u64,
    /// The mean reward `Q`.
    mean_reward: f64,
    /// A failed expansion (no candidate graph).
    failed: bool,
}

/// The run in `dir`, for the REST API.
pub(crate) fn detail(dir: &Path) -> Result<RunDetail, String> {
    let state = read_state(dir)?;
    Ok(RunDetail {
        iterations: state.iteration,
        best: state.best,
        best_val_score: state.best_val_score,
        failed_expansions: state.failed_expansions,
        stopped: state.stopped.map(|reason| format!("{reason:?}")),
        history: state
            .history
            .iter()
            .map(|h| IterationPoint {
                iteration: h.iteration,
                candidate: h.candidate,
                parent: h.parent,
                val_score: h.val_score,
                best_val_score: h.best_val_score,
            })
            .collect(),
        tree: (0..state.tree.len())
            .map(|id| {
                let node = state.tree.node(id);
                TreeNodeView {
                    id,
                    parent: node.parent,
                    visits: node.visits,
                    mean_reward: node.mean_reward(),
                    failed: node.failed,
                }
            })
            .collect(),
        test: test_rows(dir)?,
    })
}

/// One candidate of a run, for the REST API.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct CandidateDetail {
    id: TreeNodeId,
    parent: Option<TreeNodeId>,
    /// Its graph, as in `candidates/NNNN.workflow.json` (a workflow graph file; its
    /// tool nodes may carry mined `bindings`).
    graph: Option<Value>,
    /// The edit plan that made it from its parent, with the edits dropped and refused.
    plan: Option<Value>,
    /// Its scores on `D_opt` and `D_val`.
    opt: Option<ScoreView>,
    val: Option<ScoreView>,
    /// What changed from its parent's graph.
    diff: Option<GraphDiff>,
}

/// What a run directory holds of one candidate: its graph, the plan that made it, its
/// scores, and what changed from its parent's graph.
struct Candidate {
    parent: Option<TreeNodeId>,
    graph: Option<WorkflowGraph>,
    plan: Option<CandidatePlan>,
    opt: Option<Evaluation>,
    val: Option<Evaluation>,
    diff: Option<GraphDiff>,
}

/// Reads candidate `id` (in `state`'s tree) of the run in `dir`.
fn read_candidate(dir: &Path, state: &SearchState, id: TreeNodeId) -> Result<Candidate, String> {
    let graph_of = |id| read_run_json::<WorkflowGraph>(&candidate_path(dir, id, "workflow")).map_err(|e| e.to_string());
    let score = |suffix| read_run_json::<Evaluation>(&candidate_path(dir, id, suffix)).map_err(|e| e.to_string());
    let graph = graph_of(id)?;
    let parent = state.tree.node(id).parent;
    let diff = match (parent, &graph) {
        (Some(parent), Some(graph)) => graph_of(parent)?.map(|old| old.diff(graph)),
        _ => None,
    };
    Ok(Candidate {
        parent,
        graph,
        plan: read_run_json(&candidate_path(dir, id, "plan")).map_err(|e| e.to_string())?,
        opt: score("opt")?,
        val: score("val")?,
        diff,
    })
}

/// Candidate `id` of the run in `dir`; `None` when the tree has no such candidate.
pub(crate) fn candidate_detail(dir: &Path, id: TreeNodeId) -> Result<Option<CandidateDetail>, String> {
    let state = read_state(dir)?;
    if id >= state.tree.len() {
        return Ok(None);
    }
    let candidate = read_candidate(dir, &state, id)?;
    Ok(Some(CandidateDetail {
        id,
        parent: candidate.parent,
        plan: candidate.plan.map(|plan| serde_json::to_value(plan).unwrap_or(Value::Null)),
        opt: candidate.opt.as_ref().map(ScoreView::of),
        val: candidate.val.as_ref().map(ScoreView::of),
        graph: candidate.graph.map(|graph| serde_json::to_value(graph).unwrap_or(Value::Null)),
        diff: candidate.diff,
    }))
}

/// One run, as its page shows it.
#[derive(Debug, Serialize)]
pub(crate) struct RunView {
    iterations: u32,
    best: TreeNodeId,
    best_val_score: String,
    failed_expansions: u32,
    stopped: String,
    curve: Markup,
    tree: Markup,
    /// The candidate clicked in the tree (the best one when none was).
    candidate: CandidateView,
    /// The test split's table, when the run got that far.
    test: Option<Vec<ScoutTestRow>>,
}

#[derive(Debug, Serialize)]
struct CandidateView {
    id: TreeNodeId,
    parent: Option<TreeNodeId>,
    graph: Option<Markup>,
    opt: Option<ScoreView>,
    val: Option<ScoreView>,
    rationale: Option<String>,
    edits: Vec<String>,
    dropped: Vec<String>,
    rejected: Vec<String>,
    diff: Option<GraphDiff>,
    visits: u64,
    mean_reward: String,
}

#[derive(Debug, Serialize, JsonSchema)]
struct ScoreView {
    reward: String,
    tc: String,
    es: String,
}

impl ScoreView {
    fn of(evaluation: &Evaluation) -> ScoreView {
        ScoreView {
            reward: format!("{:.3}", evaluation.reward),
            tc: format!("{:.3}", evaluation.tc),
            es: evaluation.es.map_or_else(|| "–".to_owned(), |es| format!("{es:.3}")),
        }
    }
}

/// The run in `dir` with candidate `selected` opened (the best when `None` or unknown);
/// `href` gives the link of a tree node. `Err` names the file that could not be read.
pub(crate) fn view(
    dir: &Path,
    selected: Option<TreeNodeId>,
    href: &dyn Fn(TreeNodeId) -> String,
) -> Result<RunView, String> {
    let state = read_state(dir)?;
    let root_val: Option<Evaluation> = read_run_json(&candidate_path(dir, 0, "val")).map_err(|err| err.to_string())?;
    let id = selected.filter(|id| *id < state.tree.len()).unwrap_or(state.best);
    let candidate = candidate(dir, &state, id)?;
    let test = test_rows(dir)?;
    Ok(RunView {
        iterations: state.iteration,
        best: state.best,
        best_val_score: format!("{:.4}", state.best_val_score),
        failed_expansions: state.failed_expansions,
        stopped: state.stopped.map_or_else(|| "no".to_owned(), |reason| format!("{reason:?}")),
        curve: Markup::new(validation_curve_svg(&state, root_val.map_or(0.0, |val| val.reward))),
        tree: Markup::new(search_tree_linked_svg(&state, href)),
        candidate,
        test,
    })
}

fn candidate(dir: &Path, state: &SearchState, id: TreeNodeId) -> Result<CandidateView, String> {
    let Candidate { parent, graph, plan, opt, val, diff } = read_candidate(dir, state, id)?;
    let node = state.tree.node(id);
    let kept = plan.as_ref().and_then(|p| p.plan.as_ref());
    Ok(CandidateView {
        id,
        parent,
        graph: graph.as_ref().map(|graph| Markup::new(workflow_graph_marked_svg(graph, diff.as_ref()))),
        opt: opt.as_ref().map(ScoreView::of),
        val: val.as_ref().map(ScoreView::of),
        rationale: kept.map(|p| p.rationale.clone()),
        edits: kept.map_or_else(Vec::new, |p| p.edits.iter().map(one_line).collect()),
        dropped: plan.as_ref().map_or_else(Vec::new, |p| p.dropped.iter().map(one_line).collect()),
        rejected: plan
            .as_ref()
            .map_or_else(Vec::new, |p| p.rejected.iter().map(|problems| problems.join("; ")).collect()),
        diff,
        visits: node.visits,
        mean_reward: format!("{:.3}", node.mean_reward()),
    })
}

/// `value` as one line of JSON.
fn one_line<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}
