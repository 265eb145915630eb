//! The search driver: MCTS, beam search, or no search, with every step persisted so an
//! interrupted run resumes without losing or repeating an evaluated candidate.
//!
//! # The run directory
//!
//! - `candidates/NNNN.workflow.json`: every candidate graph (`0000` is `G⁰`).
//! - `candidates/NNNN.plan.json`: the edit plan that produced it, with its parent.
//! - `candidates/NNNN.opt.json` and `NNNN.val.json`: its evaluations on `D_opt` and `D_val`.
//! - `state.json`: the search tree (`C`, `W`, parents), the iteration counter, the best
//!   candidate and the validation history.
//!
//! Every file is written to a temporary name and renamed, so a kill leaves either the old
//! or the new version. A candidate's plan is written before it is evaluated and each
//! evaluation is written before the tree is updated; on resume, files already present are
//! read instead of asking the model or running the candidate again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use flowmem_model::WorkflowGraph;

use crate::edit::{EditPlan, GraphEdit, apply_edit};
use crate::plan_schema::MAX_PLAN_EDITS;
use crate::tree::{SearchConfig, SearchTree, TreeNodeId};

/// A candidate's scores on one split, with the feedback the optimizer reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// The reward of the means, `flowmem_eval::reward_of_means`: `R = α·TC + (1−α)·ES`,
    /// or TC alone when no run was judged.
    pub reward: f64,
    /// Mean tool-invocation correctness.
    pub tc: f64,
    /// Mean execution score over the judged runs; `None` when no run was judged.
    pub es: Option<f64>,
    /// The feedback `F` (tool-call alignments, result mismatches, failing nodes), as the
    /// optimizer prompt shows it.
    #[serde(default)]
    pub feedback: Value,
    /// How the candidate's tool traces on the split fit the process of the split's
    /// reference records (`flowmem_eval::tool_trace_conformance`); `None` when the
    /// records have no reference calls, or in a file written before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conformance: Option<flowmem_eval::ToolTraceConformance>,
}

/// Runs candidates: simulation on `D_opt` and validation on `D_val`.
#[async_trait::async_trait]
pub trait Simulator: Send + Sync {
    /// Runs `graph` on the optimisation split.
    ///
    /// # Errors
    ///
    /// Only for failures that make the run itself meaningless (a cancelled run, a full
    /// disk); a failing query is feedback, not an error.
    async fn simulate(&self, candidate: TreeNodeId, graph: &WorkflowGraph) -> Result<Evaluation, SearchError>;

    /// Runs `graph` on the validation split.
    ///
    /// # Errors
    ///
    /// As for [`Simulator::simulate`].
    async fn validate(&self, candidate: TreeNodeId, graph: &WorkflowGraph) -> Result<Evaluation, SearchError>;
}

/// What the optimizer is asked to improve, what it has already tried there, and the plan
/// under construction.
#[derive(Debug, Clone, Copy)]
pub struct ProposalInput<'a> {
    /// The candidate being expanded.
    pub graph: &'a WorkflowGraph,
    /// Its cached feedback `F_opt`.
    pub feedback: &'a Value,
    /// The plans of earlier expansions of the same candidate, in candidate order. Without
    /// them a deterministic optimizer (greedy decoding, or the LLM cache) would answer a
    /// second expansion exactly as it answered the first.
    pub tried: &'a [CandidatePlan],
    /// The graph as the edits applied so far left it (`graph` on the first turn): the
    /// next edit is decoded against it.
    pub current: &'a WorkflowGraph,
    /// The turns of this plan so far, oldest first (empty on the first turn).
    pub turns: &'a [PlanTurn],
}

/// The proposer's answer in one turn of building a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposedEdits {
    /// Why the plan should help; the first turn's answer carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    /// The edits, in order: one per turn when decoding edit by edit, the whole plan when
    /// a proposer answers at once. Empty: the plan is complete (the model chose `done`).
    pub edits: Vec<GraphEdit>,
}

impl ProposedEdits {
    /// The model's `done`: the plan is complete.
    #[must_use]
    pub fn done() -> ProposedEdits {
        ProposedEdits { rationale: None, edits: Vec::new() }
    }
}

/// One turn of a plan's construction and what became of it, as the proposer is shown it
/// on the next turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanTurn {
    /// What the proposer answered; `None` when its reply was not an edit at all.
    pub proposed: Option<ProposedEdits>,
    /// How many of its edits were applied, from the first.
    pub applied: usize,
    /// Why the first edit not applied was refused (the apply error or the graph's
    /// violations), why the reply was not an edit, or why the finished plan was not
    /// accepted. Empty when every edit applied.
    pub problems: Vec<String>,
}

/// An edit the optimizer proposed that is not in the candidate's plan, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DroppedEdit {
    /// The number of edits applied before it: its position in the plan.
    pub position: usize,
    /// The edit.
    pub edit: GraphEdit,
    /// Why it was dropped.
    pub reasons: Vec<String>,
}

/// Proposes edit plans (the optimizer LLM), one turn at a time.
#[async_trait::async_trait]
pub trait Proposer: Send + Sync {
    /// Proposes the next edits of the plan for `input.graph`: on the first turn the
    /// rationale and the first edit (or a whole plan), later the next edit against
    /// `input.current`, or [`ProposedEdits::done`].
    ///
    /// # Errors
    ///
    /// [`SearchError::InvalidProposal`] when the reply is not an edit (the driver shows
    /// the model why and asks again), or another error when the model cannot be reached.
    async fn propose(&self, input: &ProposalInput<'_>) -> Result<ProposedEdits, SearchError>;

    /// The most edits a plan may hold.
    fn max_edits(&self) -> usize {
        MAX_PLAN_EDITS
    }
}

/// Checks `Valid(G, T)`: an empty list means the graph may run.
pub trait Validator: Send + Sync {
    /// Every violation, each naming its node.
    fn violations(&self, graph: &WorkflowGraph) -> Vec<String>;
}

/// Which search to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Strategy {
    /// FlowScout's MCTS.
    Mcts,
    /// Beam search keeping the `width` best candidates per step.
    Beam {
        /// Candidates kept per step.
        width: usize,
    },
    /// No search: `G⁰` only (the no-MCTS ablation).
    NoSearch,
}

/// Where the search may be interrupted; the driver calls the caller's hook at each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checkpoint {
    /// A candidate's plan and graph were written.
    Proposed(TreeNodeId),
    /// A candidate's optimisation-split evaluation was written.
    Simulated(TreeNodeId),
    /// An iteration was committed to `state.json`.
    Committed(u32),
}

/// One iteration's outcome, for the validation curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationRecord {
    /// The iteration, from 1 (0 is `G⁰`).
    pub iteration: u32,
    /// The candidate created, or `None` for a failed expansion.
    pub candidate: Option<TreeNodeId>,
    /// The parent that was expanded.
    pub parent: TreeNodeId,
    /// The candidate's validation score.
    pub val_score: Option<f64>,
    /// The best validation score so far.
    pub best_val_score: f64,
}

/// The persisted state of a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchState {
    /// The configuration the run started with.
    pub config: SearchConfig,
    /// The strategy.
    pub strategy: Strategy,
    /// The MCTS statistics.
    pub tree: SearchTree,
    /// Iterations done.
    pub iteration: u32,
    /// The best candidate on validation.
    pub best: TreeNodeId,
    /// Its validation score.
    pub best_val_score: f64,
    /// Iterations since the best validation score last improved.
    pub since_improvement: u32,
    /// Expansions whose plan never validated.
    pub failed_expansions: u32,
    /// One entry per iteration.
    pub history: Vec<IterationRecord>,
    /// Beam search: the current beam, and the next member to expand.
    #[serde(default)]
    pub beam: Vec<TreeNodeId>,
    /// Beam search: position in the current beam.
    #[serde(default)]
    pub beam_cursor: usize,
    /// Beam search: children made during the current step.
    #[serde(default)]
    pub beam_children: Vec<TreeNodeId>,
    /// Why the search stopped, once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<StopReason>,
}

/// Why a search stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `J` iterations ran.
    Budget,
    /// `P` iterations passed without validation improvement.
    Patience,
    /// Every node's child slots are used by failed expansions.
    Exhausted,
    /// The strategy does not search.
    NoSearch,
}

/// What went wrong in a search.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SearchError {
    /// A run-directory file could not be read or written.
    #[error("cannot access `{path}`")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A run-directory file is not what this version wrote.
    #[error("`{path}` is not a valid run file")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The optimizer model failed (after its own retries).
    #[error("the optimizer failed: {0}")]
    Proposer(String),
    /// The optimizer replied with something that is not an edit plan. The driver counts
    /// this as a rejected attempt and re-asks with the problem.
    #[error("{0}")]
    InvalidProposal(String),
    /// The optimizer model refused the request itself, the same way whatever it is asked
    /// (the conversation of a plan built edit by edit outgrew its context, say). The
    /// driver ends the plan with the edits it has instead of asking again.
    #[error("the optimizer cannot answer this request: {0}")]
    Unanswerable(String),
    /// Running a candidate failed as a whole.
    #[error("running candidate {candidate} failed: {reason}")]
    Simulation {
        /// The candidate.
        candidate: TreeNodeId,
        /// Why.
        reason: String,
    },
    /// The caller stopped the search at a checkpoint; the run directory can be resumed.
    #[error("the search was interrupted; resume it from its run directory")]
    Interrupted,
    /// `--resume` on a directory with no `state.json`, or a new run on one with it.
    #[error("{0}")]
    RunDirectory(String),
}

/// The persisted plan of a candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidatePlan {
    /// The expanded parent.
    pub parent: TreeNodeId,
    /// The plan: the rationale and the edits that were applied, when at least one was.
    pub plan: Option<EditPlan>,
    /// The problems of every refused turn, in order.
    pub rejected: Vec<Vec<String>>,
    /// The edits proposed but not applied, with why.
    #[serde(default)]
    pub dropped: Vec<DroppedEdit>,
    /// The optimizer requests the plan took (0 in run directories older than this field).
    #[serde(default)]
    pub optimizer_calls: u32,
}

/// Everything the driver needs besides the run directory.
pub struct SearchParts<'a> {
    /// Proposes edit plans.
    pub proposer: &'a dyn Proposer,
    /// Runs candidates.
    pub simulator: &'a dyn Simulator,
    /// Judges validity.
    pub validator: &'a dyn Validator,
    /// Called at every checkpoint; returning `false` interrupts the search there.
    pub checkpoint: &'a (dyn Fn(Checkpoint) -> bool + Send + Sync),
}

/// How many refused turns a plan may have before it ends with the edits it has: each
/// refusal (an edit that does not apply or validate, a reply that is not an edit) is
/// shown to the optimizer, which is asked again from there.
pub const PLAN_REPAIRS: usize = 2;

/// Starts a new search in `dir` from `g0`, or continues the one persisted there when
/// `dir/state.json` exists.
///
/// # Errors
///
/// [`SearchError::Interrupted`] when the checkpoint hook stops the run (resume later), a
/// proposer or simulator failure, or a run-directory file that cannot be read or written.
pub async fn run_search(
    dir: &Path,
    g0: &WorkflowGraph,
    config: &SearchConfig,
    strategy: Strategy,
    parts: &SearchParts<'_>,
) -> Result<SearchState, SearchError> {
    let mut state = match read_json::<SearchState>(&dir.join("state.json"))? {
        Some(state) => state,
        None => start(dir, g0, config, strategy, parts).await?,
    };
    while state.stopped.is_none() {
        step(dir, &mut state, parts).await?;
        write_json(&dir.join("state.json"), &state)?;
        if !(parts.checkpoint)(Checkpoint::Committed(state.iteration)) {
            return Err(SearchError::Interrupted);
        }
    }
    Ok(state)
}

/// How a search's expansions went. MCTS learns only from the candidates it evaluates, so
/// the share of expansions that yield one is the first thing to read about a search.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExpansionStats {
    /// Expansions tried (every candidate but `G⁰`, failed ones included).
    pub expansions: u32,
    /// Expansions that yielded an evaluated candidate.
    pub candidates: u32,
    /// `candidates / expansions`; `None` before the first expansion.
    pub success_rate: Option<f64>,
    /// Optimizer requests over all expansions.
    pub optimizer_calls: u32,
    /// `optimizer_calls / candidates`; `None` while there is no candidate.
    pub calls_per_candidate: Option<f64>,
    /// Edits proposed, applied and dropped, by operation.
    pub edits: BTreeMap<String, EditCounts>,
}

/// Edits of one operation over a search.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditCounts {
    /// Proposed by the optimizer.
    pub proposed: u32,
    /// Kept in a candidate's plan.
    pub applied: u32,
    /// Dropped: refused, or after a refused edit of the same reply.
    pub dropped: u32,
}

/// Reads the plan files of the search in `dir` (candidates 1 to `state.tree.len() - 1`)
/// and counts how its expansions went.
///
/// # Errors
///
/// A plan file that cannot be read or parsed.
pub fn expansion_stats(dir: &Path, state: &SearchState) -> Result<ExpansionStats, SearchError> {
    let mut stats = ExpansionStats::default();
    for candidate in 1..state.tree.len() {
        let Some(plan) = read_json::<CandidatePlan>(&candidate_path(dir, candidate, "plan"))? else { continue };
        stats.expansions += 1;
        stats.optimizer_calls += plan.optimizer_calls;
        if let Some(kept) = &plan.plan {
            stats.candidates += 1;
            for edit in &kept.edits {
                let counts = stats.edits.entry(edit.op_name().to_owned()).or_default();
                counts.proposed += 1;
                counts.applied += 1;
            }
        }
        for dropped in &plan.dropped {
            let counts = stats.edits.entry(dropped.edit.op_name().to_owned()).or_default();
            counts.proposed += 1;
            counts.dropped += 1;
        }
    }
    stats.success_rate = (stats.expansions > 0).then(|| f64::from(stats.candidates) / f64::from(stats.expansions));
    stats.calls_per_candidate =
        (stats.candidates > 0).then(|| f64::from(stats.optimizer_calls) / f64::from(stats.candidates));
    Ok(stats)
}

/// The path of a candidate's file with `suffix` (`workflow`, `plan`, `opt`, `val`).
#[must_use]
pub fn candidate_path(dir: &Path, candidate: TreeNodeId, suffix: &str) -> PathBuf {
    dir.join("candidates").join(format!("{candidate:04}.{suffix}.json"))
}

async fn start(
    dir: &Path,
    g0: &WorkflowGraph,
    config: &SearchConfig,
    strategy: Strategy,
    parts: &SearchParts<'_>,
) -> Result<SearchState, SearchError> {
    write_json(&candidate_path(dir, 0, "workflow"), g0)?;
    let opt = cached_eval(dir, 0, "opt", || parts.simulator.simulate(0, g0)).await?;
    let val = cached_eval(dir, 0, "val", || parts.simulator.validate(0, g0)).await?;
    let state = SearchState {
        config: config.clone(),
        strategy,
        tree: SearchTree::new(opt.reward),
        iteration: 0,
        best: 0,
        best_val_score: val.reward,
        since_improvement: 0,
        failed_expansions: 0,
        history: Vec::new(),
        beam: vec![0],
        beam_cursor: 0,
        beam_children: Vec::new(),
        stopped: (strategy == Strategy::NoSearch).then_some(StopReason::NoSearch),
    };
    write_json(&dir.join("state.json"), &state)?;
    Ok(state)
}

/// One iteration: decide whether to stop, select, expand, simulate, backpropagate.
async fn step(dir: &Path, state: &mut SearchState, parts: &SearchParts<'_>) -> Result<(), SearchError> {
    if state.iteration >= state.config.iterations {
        state.stopped = Some(StopReason::Budget);
        return Ok(());
    }
    if state.since_improvement >= state.config.patience {
        state.stopped = Some(StopReason::Patience);
        return Ok(());
    }
    let Some(parent) = select_parent(state) else {
        state.stopped = Some(StopReason::Exhausted);
        return Ok(());
    };
    let candidate = state.tree.len();
    let parent_graph: WorkflowGraph = read_required(&candidate_path(dir, parent, "workflow"))?;
    let expansion = expand(dir, candidate, parent, &parent_graph, parts).await?;
    if !(parts.checkpoint)(Checkpoint::Proposed(candidate)) {
        return Err(SearchError::Interrupted);
    }
    state.iteration += 1;
    let Some(graph) = expansion else {
        state.tree.add_failed_child(parent);
        state.failed_expansions += 1;
        state.since_improvement += 1;
        record(state, None, parent, None);
        return Ok(());
    };
    let opt = cached_eval(dir, candidate, "opt", || parts.simulator.simulate(candidate, &graph)).await?;
    if !(parts.checkpoint)(Checkpoint::Simulated(candidate)) {
        return Err(SearchError::Interrupted);
    }
    let val = cached_eval(dir, candidate, "val", || parts.simulator.validate(candidate, &graph)).await?;
    let id = state.tree.add_child(parent, opt.reward);
    debug_assert_eq!(id, candidate, "candidate ids follow tree order");
    if val.reward > state.best_val_score {
        state.best = candidate;
        state.best_val_score = val.reward;
        state.since_improvement = 0;
    } else {
        state.since_improvement += 1;
    }
    state.beam_children.push(candidate);
    record(state, Some(candidate), parent, Some(val.reward));
    Ok(())
}

fn record(state: &mut SearchState, candidate: Option<TreeNodeId>, parent: TreeNodeId, val_score: Option<f64>) {
    if let Strategy::Beam { .. } = state.strategy {
        state.beam_cursor += 1;
    }
    state.history.push(IterationRecord {
        iteration: state.iteration,
        candidate,
        parent,
        val_score,
        best_val_score: state.best_val_score,
    });
}

fn select_parent(state: &mut SearchState) -> Option<TreeNodeId> {
    match state.strategy {
        Strategy::Mcts => state.tree.select(state.iteration, &state.config),
        Strategy::NoSearch => None,
        Strategy::Beam { width } => {
            if state.beam_cursor >= state.beam.len() {
                next_beam(state, width);
            }
            state.beam.get(state.beam_cursor).copied()
        }
    }
}

/// Keeps the `width` best of the current beam and its new children, by mean reward.
fn next_beam(state: &mut SearchState, width: usize) {
    let mut pool: Vec<TreeNodeId> = state.beam.iter().chain(&state.beam_children).copied().collect();
    pool.sort_by(|a, b| {
        let (qa, qb) = (state.tree.node(*a).mean_reward(), state.tree.node(*b).mean_reward());
        qb.total_cmp(&qa).then(a.cmp(b))
    });
    pool.dedup();
    pool.truncate(width.max(1));
    // Only the new children carry the search forward; a beam that produced none is done.
    state.beam = if state.beam_children.is_empty() { Vec::new() } else { pool };
    state.beam_cursor = 0;
    state.beam_children.clear();
}

/// Builds a plan for `candidate` one turn at a time: each proposed edit is applied to the
/// graph the earlier ones left and validated; an edit that fails is dropped and the
/// model, shown why, is asked again from there. The plan keeps every edit that applied;
/// it yields a candidate when it keeps at least one and gives a new workflow. A plan
/// persisted by an interrupted run is reused as is.
async fn expand(
    dir: &Path,
    candidate: TreeNodeId,
    parent: TreeNodeId,
    parent_graph: &WorkflowGraph,
    parts: &SearchParts<'_>,
) -> Result<Option<WorkflowGraph>, SearchError> {
    let plan_path = candidate_path(dir, candidate, "plan");
    if let Some(saved) = read_json::<CandidatePlan>(&plan_path)?
        && saved.parent == parent
    {
        return match saved.plan {
            Some(_) => Ok(Some(read_required(&candidate_path(dir, candidate, "workflow"))?)),
            None => Ok(None),
        };
    }
    let parent_eval: Evaluation = read_required(&candidate_path(dir, parent, "opt"))?;
    let siblings = siblings(dir, parent, candidate)?;
    let known = KnownWorkflows::load(dir, parent_graph, &siblings)?;
    let tried: Vec<CandidatePlan> = siblings.into_iter().map(|(_, plan)| plan).collect();
    let max_edits = parts.proposer.max_edits().clamp(1, MAX_PLAN_EDITS);
    let mut building = PlanBuilder::new(parent_graph);
    while building.applied.len() < max_edits && building.refusals <= PLAN_REPAIRS {
        let input = ProposalInput {
            graph: parent_graph,
            feedback: &parent_eval.feedback,
            tried: &tried,
            current: &building.current,
            turns: &building.turns,
        };
        if building.turns.last().is_some_and(|turn| !turn.problems.is_empty()) {
            tracing::info!(candidate, refusals = building.refusals, "re-asking the optimizer with what was refused");
        }
        building.calls += 1;
        let proposed = match parts.proposer.propose(&input).await {
            Ok(proposed) => proposed,
            Err(SearchError::InvalidProposal(problem)) => {
                tracing::info!(candidate, %problem, "optimizer reply refused: not an edit");
                building.refuse(None, vec![problem]);
                continue;
            }
            Err(SearchError::Unanswerable(problem)) => {
                tracing::info!(candidate, edits = building.applied.len(), %problem, "the plan ends: the optimizer cannot take another turn");
                building.turns.push(PlanTurn { proposed: None, applied: 0, problems: vec![problem] });
                break;
            }
            Err(err) => return Err(err),
        };
        if !proposed.edits.is_empty() {
            building.apply(candidate, proposed, max_edits, parts.validator);
            continue;
        }
        // `done`: the plan must have an edit and give a workflow not tried yet.
        let problem = if building.applied.is_empty() {
            Some("a plan needs at least one edit".to_owned())
        } else {
            known.repeat_of(&building.current)
        };
        match problem {
            Some(problem) => building.refuse(Some(proposed), vec![problem]),
            None => {
                building.turns.push(PlanTurn { proposed: Some(proposed), applied: 0, problems: Vec::new() });
                break;
            }
        }
    }
    let PlanBuilder { current, applied, rationale, dropped, turns, calls, .. } = building;
    let rejected: Vec<Vec<String>> =
        turns.iter().filter(|turn| !turn.problems.is_empty()).map(|turn| turn.problems.clone()).collect();
    let repeat = if applied.is_empty() { None } else { known.repeat_of(&current) };
    if applied.is_empty() || repeat.is_some() {
        tracing::warn!(
            candidate,
            parent,
            calls,
            dropped = dropped.len(),
            "expansion failed: the optimizer's plan kept no edit that gives a new valid workflow"
        );
        let mut rejected = rejected;
        rejected.extend(repeat.map(|repeat| vec![repeat]));
        let record = CandidatePlan { parent, plan: None, rejected, dropped, optimizer_calls: calls };
        write_json(&plan_path, &record)?;
        return Ok(None);
    }
    write_json(&candidate_path(dir, candidate, "workflow"), &current)?;
    let plan = EditPlan { rationale, edits: applied };
    let record = CandidatePlan { parent, plan: Some(plan), rejected, dropped, optimizer_calls: calls };
    write_json(&plan_path, &record)?;
    Ok(Some(current))
}

/// A plan under construction: the graph so far, the edits kept and dropped, the turns.
struct PlanBuilder {
    current: WorkflowGraph,
    applied: Vec<GraphEdit>,
    rationale: String,
    dropped: Vec<DroppedEdit>,
    turns: Vec<PlanTurn>,
    /// Turns refused so far; past [`PLAN_REPAIRS`] the plan ends with what it has.
    refusals: usize,
    calls: u32,
}

impl PlanBuilder {
    fn new(parent: &WorkflowGraph) -> PlanBuilder {
        PlanBuilder {
            current: parent.clone(),
            applied: Vec::new(),
            rationale: String::new(),
            dropped: Vec::new(),
            turns: Vec::new(),
            refusals: 0,
            calls: 0,
        }
    }

    fn refuse(&mut self, proposed: Option<ProposedEdits>, problems: Vec<String>) {
        self.refusals += 1;
        self.turns.push(PlanTurn { proposed, applied: 0, problems });
    }

    /// Applies the proposed edits in order, each to the graph the previous left, while
    /// they apply and validate and the plan has room; the first that does not is
    /// dropped with its reasons, and so are the rest of the turn's edits.
    fn apply(&mut self, candidate: TreeNodeId, proposed: ProposedEdits, max_edits: usize, validator: &dyn Validator) {
        if self.rationale.is_empty()
            && let Some(rationale) = &proposed.rationale
        {
            self.rationale.clone_from(rationale);
        }
        let mut applied = 0;
        let mut problems = Vec::new();
        for (idx, edit) in proposed.edits.iter().enumerate() {
            let outcome = if self.applied.len() >= max_edits {
                Err(vec![format!("the plan already holds the most edits allowed, {max_edits}")])
            } else {
                apply_edit(&self.current, edit).map_err(|err| vec![err.to_string()]).and_then(|graph| {
                    if graph == self.current {
                        return Err(vec!["the edit leaves the workflow unchanged".to_owned()]);
                    }
                    let violations = validator.violations(&graph);
                    if violations.is_empty() { Ok(graph) } else { Err(violations) }
                })
            };
            match outcome {
                Ok(graph) => {
                    tracing::info!(candidate, position = self.applied.len(), op = edit.op_name(), "edit applied");
                    self.current = graph;
                    self.applied.push(edit.clone());
                    applied += 1;
                }
                Err(reasons) => {
                    tracing::info!(candidate, op = edit.op_name(), ?reasons, "edit refused and dropped");
                    let position = self.applied.len();
                    self.dropped.push(DroppedEdit { position, edit: edit.clone(), reasons: reasons.clone() });
                    let unseen = vec!["an earlier edit of the same reply was refused".to_owned()];
                    for later in &proposed.edits[idx + 1..] {
                        self.dropped.push(DroppedEdit { position, edit: later.clone(), reasons: unseen.clone() });
                    }
                    problems = reasons;
                    self.refusals += 1;
                    break;
                }
            }
        }
        self.turns.push(PlanTurn { proposed: Some(proposed), applied, problems });
    }
}

/// The plan files of the candidates before `candidate` that expanded `parent`, failed
/// expansions included, with their ids. Read from disk, so a resumed run sees what the
/// original saw.
fn siblings(
    dir: &Path,
    parent: TreeNodeId,
    candidate: TreeNodeId,
) -> Result<Vec<(TreeNodeId, CandidatePlan)>, SearchError> {
    let mut plans = Vec::new();
    for earlier in 1..candidate {
        if let Some(plan) = read_json::<CandidatePlan>(&candidate_path(dir, earlier, "plan"))?
            && plan.parent == parent
        {
            plans.push((earlier, plan));
        }
    }
    Ok(plans)
}

/// The workflows a new candidate must not repeat: its parent and the siblings already
/// made, in canonical order. Loaded once per expansion, since every attempt checks them.
struct KnownWorkflows {
    parent: WorkflowGraph,
    siblings: Vec<(TreeNodeId, WorkflowGraph)>,
}

impl KnownWorkflows {
    fn load(
        dir: &Path,
        parent_graph: &WorkflowGraph,
        siblings: &[(TreeNodeId, CandidatePlan)],
    ) -> Result<KnownWorkflows, SearchError> {
        let mut graphs = Vec::new();
        for (sibling, _) in siblings.iter().filter(|(_, plan)| plan.plan.is_some()) {
            let graph: WorkflowGraph = read_required(&candidate_path(dir, *sibling, "workflow"))?;
            graphs.push((*sibling, in_canonical_order(&graph)));
        }
        Ok(KnownWorkflows { parent: in_canonical_order(parent_graph), siblings: graphs })
    }

    /// Why `graph` is not worth evaluating: it is its parent unchanged, or a sibling
    /// already made. Evaluating a candidate means running every query of two splits, and
    /// a repeat would only score what is known.
    fn repeat_of(&self, graph: &WorkflowGraph) -> Option<String> {
        let this = in_canonical_order(graph);
        if this == self.parent {
            return Some("the plan leaves the workflow unchanged".to_owned());
        }
        let (sibling, _) = self.siblings.iter().find(|(_, known)| *known == this)?;
        Some(format!("the plan gives the same workflow as candidate {sibling}, which was already tried"))
    }
}

/// `graph` with its nodes sorted by id and its edges by their fields: two plans that
/// build the same workflow in a different order (inserting on the edge `a → b`, or after
/// `a` alone when that is its only edge) compare equal.
fn in_canonical_order(graph: &WorkflowGraph) -> WorkflowGraph {
    let mut graph = graph.clone();
    graph.nodes.sort_by(|a, b| a.id.cmp(&b.id));
    graph.edges.sort_by_cached_key(|edge| {
        serde_json::to_string(edge).expect("an edge is a plain struct with string keys, so it serialises")
    });
    graph
}

async fn cached_eval<F, Fut>(dir: &Path, candidate: TreeNodeId, split: &str, run: F) -> Result<Evaluation, SearchError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Evaluation, SearchError>>,
{
    let path = candidate_path(dir, candidate, split);
    if let Some(saved) = read_json::<Evaluation>(&path)? {
        return Ok(saved);
    }
    let res = run().await?;
    write_json(&path, &res)?;
    Ok(res)
}

fn read_required<T: DeserializeOwned>(path: &Path) -> Result<T, SearchError> {
    read_json(path)?
        .ok_or_else(|| SearchError::RunDirectory(format!("`{}` is missing from the run directory", path.display())))
}

/// Reads a run directory's JSON file (`state.json`, a candidate's file): `None` when it
/// does not exist.
///
/// # Errors
///
/// [`SearchError::Io`] when it cannot be read, [`SearchError::Corrupt`] when it does not
/// parse as `T`; both name the file.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, SearchError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(SearchError::Io { path: path.to_owned(), source }),
    };
    serde_json::from_str(&text).map(Some).map_err(|source| SearchError::Corrupt { path: path.to_owned(), source })
}

/// Writes `value` as pretty JSON to `path`, atomically, creating its directory.
fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), SearchError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| SearchError::Io { path: path.to_owned(), source })?;
    }
    flowmem_model::write_json_atomic(path, value).map_err(|err| SearchError::Io { path: err.path, source: err.source })
}
