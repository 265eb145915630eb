//! The search driver: stopping rules, plan repair, resume, beam search.
//!
//! The proposer and simulator here are deterministic functions of the graph, so that an
//! interrupted-and-resumed run must reproduce an uninterrupted one exactly. The LLM-driven
//! proposer is tested against the scripted OpenAI server elsewhere.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{Value, json};

use flowmem_model::{Edge, EdgeKind, GraphNode, LlmRole, NodeKind, WorkflowGraph};
use flowmem_optimize::{
    CandidatePlan, Checkpoint, EditPlan, Evaluation, GraphEdit, ProposalInput, ProposedEdits, Proposer, SearchConfig,
    SearchError, SearchParts, SearchState, Simulator, StopReason, Strategy, Validator, candidate_path, run_search,
};

fn g0() -> WorkflowGraph {
    let node = |id: &str, kind| GraphNode { id: id.into(), kind, description: None };
    WorkflowGraph {
        name: Some("g0".into()),
        nodes: vec![
            node("plan", NodeKind::Llm { role: LlmRole::Plan, instruction: None, model: None }),
            node("synth", NodeKind::Llm { role: LlmRole::Synthesize, instruction: None, model: None }),
        ],
        edges: vec![Edge { from: "plan".into(), to: "synth".into(), kind: EdgeKind::Data, label: None }],
        entry: "plan".into(),
        exit: "synth".into(),
        queries: Vec::new(),
    }
}

/// Scores a graph by its size: deterministic, and different per depth.
struct SizeSimulator {
    opt: fn(usize) -> f64,
    val: fn(usize) -> f64,
    calls: Mutex<BTreeMap<(usize, &'static str), u32>>,
}

impl SizeSimulator {
    fn new(opt: fn(usize) -> f64, val: fn(usize) -> f64) -> SizeSimulator {
        SizeSimulator { opt, val, calls: Mutex::new(BTreeMap::new()) }
    }

    fn count(&self, candidate: usize, split: &'static str) {
        *self.calls.lock().unwrap().entry((candidate, split)).or_default() += 1;
    }

    fn max_calls_per_candidate(&self) -> u32 {
        self.calls.lock().unwrap().values().copied().max().unwrap_or(0)
    }
}

#[async_trait::async_trait]
impl Simulator for SizeSimulator {
    async fn simulate(&self, candidate: usize, graph: &WorkflowGraph) -> Result<Evaluation, SearchError> {
        self.count(candidate, "opt");
        let reward = (self.opt)(graph.nodes.len());
        Ok(Evaluation {
            reward,
            tc: reward,
            es: Some(reward),
            feedback: json!({"nodes": graph.nodes.len()}),
            conformance: None,
        })
    }

    async fn validate(&self, candidate: usize, graph: &WorkflowGraph) -> Result<Evaluation, SearchError> {
        self.count(candidate, "val");
        let reward = (self.val)(graph.nodes.len());
        Ok(Evaluation { reward, tc: reward, es: Some(reward), feedback: Value::Null, conformance: None })
    }
}

/// The problems of the turn before `input`'s, as the proposer is shown them.
fn last_problems(input: &ProposalInput<'_>) -> Vec<String> {
    input.turns.last().map(|turn| turn.problems.clone()).unwrap_or_default()
}

/// `plan` on a turn that asks for edits, `done` once the last turn applied one: what a
/// model that proposes whole plans answers.
fn answer(input: &ProposalInput<'_>, plan: &EditPlan) -> ProposedEdits {
    match input.turns.last() {
        Some(turn) if turn.applied > 0 => ProposedEdits::done(),
        _ => ProposedEdits { rationale: Some(plan.rationale.clone()), edits: plan.edits.clone() },
    }
}

/// Inserts a verify node after `plan`; the first `broken` answers name a missing node.
struct InsertingProposer {
    broken: usize,
    asked: Mutex<Vec<Vec<String>>>,
}

#[async_trait::async_trait]
impl Proposer for InsertingProposer {
    async fn propose(&self, input: &ProposalInput<'_>) -> Result<ProposedEdits, SearchError> {
        let graph = input.graph;
        let mut asked = self.asked.lock().unwrap();
        asked.push(last_problems(input));
        if input.turns.last().is_some_and(|turn| turn.applied > 0) {
            return Ok(ProposedEdits::done());
        }
        let after = if asked.len() <= self.broken { "no_such_node" } else { "plan" };
        let next = graph.outgoing("plan").next().map(|e| e.to.clone());
        // The id depends on the plans already tried, so a resumed run that lost them would
        // write different graphs than an uninterrupted one.
        let node = GraphNode {
            id: format!("v{}_{}", graph.nodes.len(), input.tried.len()),
            kind: NodeKind::Llm { role: LlmRole::Verify, instruction: None, model: None },
            description: None,
        };
        let plan = EditPlan {
            rationale: "verify early".into(),
            edits: vec![GraphEdit::AddNode { node, after: after.into(), before: next }],
        };
        Ok(answer(input, &plan))
    }
}

/// Rejects graphs with more than `max_nodes` nodes.
struct SizeValidator {
    max_nodes: usize,
}

impl Validator for SizeValidator {
    fn violations(&self, graph: &WorkflowGraph) -> Vec<String> {
        if graph.nodes.len() > self.max_nodes { vec![format!("too many nodes: {}", graph.nodes.len())] } else { vec![] }
    }
}

fn cfg(iterations: u32, patience: u32) -> SearchConfig {
    SearchConfig { iterations, patience, max_children: 3, lambda_max: 1.4, lambda_min: 0.1 }
}

async fn run(
    dir: &Path,
    config: &SearchConfig,
    strategy: Strategy,
    sim: &SizeSimulator,
    proposer: &dyn Proposer,
    stop_at: Option<Checkpoint>,
) -> Result<SearchState, SearchError> {
    let validator = SizeValidator { max_nodes: 100 };
    let hook = move |point: Checkpoint| Some(point) != stop_at;
    let parts = SearchParts { proposer, simulator: sim, validator: &validator, checkpoint: &hook };
    run_search(dir, &g0(), config, strategy, &parts).await
}

fn growing(n: usize) -> f64 {
    n as f64 / 100.0
}

fn flat(_n: usize) -> f64 {
    0.5
}

#[tokio::test]
async fn budget_stops_after_j_iterations() {
    let dir = tempfile::tempdir().unwrap();
    let sim = SizeSimulator::new(growing, growing);
    let proposer = InsertingProposer { broken: 0, asked: Mutex::new(vec![]) };
    let state = run(dir.path(), &cfg(4, 10), Strategy::Mcts, &sim, &proposer, None).await.unwrap();
    assert_eq!(state.stopped, Some(StopReason::Budget));
    assert_eq!(state.iteration, 4);
    assert_eq!(state.tree.len(), 5);
    assert_eq!(state.history.len(), 4);
    // The first three iterations fill the root's three child slots (3-children rule).
    assert_eq!(state.tree.node(0).children, vec![1, 2, 3]);
    // Every candidate is on disk, ready for `flowmem run`.
    for id in 0..5 {
        assert!(candidate_path(dir.path(), id, "workflow").exists());
    }
}

#[tokio::test]
async fn patience_stops_when_validation_does_not_improve() {
    let dir = tempfile::tempdir().unwrap();
    let sim = SizeSimulator::new(flat, flat);
    let proposer = InsertingProposer { broken: 0, asked: Mutex::new(vec![]) };
    let state = run(dir.path(), &cfg(30, 2), Strategy::Mcts, &sim, &proposer, None).await.unwrap();
    assert_eq!(state.stopped, Some(StopReason::Patience));
    assert_eq!(state.iteration, 2);
    assert_eq!(state.best, 0, "no candidate beat G0 on validation");
}

/// A deterministic optimizer (greedy decoding, or the LLM cache) answers the same prompt
/// the same way, so every expansion of a node must show it the plans tried there before.
/// Here the scripted model answers a prompt that lists no tried plan with plan A and one
/// that lists A with plan B: the root's two children differ, and the second request
/// carried the first plan.
#[tokio::test]
async fn a_second_expansion_of_a_node_is_shown_the_first_and_gets_a_different_child() {
    use flowmem_optimize::PlanDecoding;
    use flowmem_testsupport::{Match, Reply, Script};

    let plan_a = json!({"rationale": "a", "edit": {"op": "rewrite_prompt", "id": "plan", "instruction": "PLAN-A"}});
    let plan_b = json!({"rationale": "b", "edit": {"op": "rewrite_prompt", "id": "synth", "instruction": "PLAN-B"}});
    let script = Script::new()
        .when(Match::last_user_contains("Applied."), Reply::json(json!({"edit": {"op": "done"}})))
        .when(Match::last_user_contains("PLAN-A"), Reply::json(plan_b))
        .otherwise(Reply::json(plan_a));
    let (server, proposer) = scripted_proposer(script, PlanDecoding::PerEdit).await;
    let dir = tempfile::tempdir().unwrap();
    let sim = SizeSimulator::new(flat, flat);
    let state = run(dir.path(), &cfg(2, 10), Strategy::Mcts, &sim, &proposer, None).await.unwrap();

    assert_eq!(state.tree.node(0).children, vec![1, 2], "both iterations expand the root");
    let child = |id| std::fs::read_to_string(candidate_path(dir.path(), id, "workflow")).unwrap();
    assert!(child(1).contains("PLAN-A") && !child(1).contains("PLAN-B"), "{}", child(1));
    assert!(child(2).contains("PLAN-B") && !child(2).contains("PLAN-A"), "{}", child(2));
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 4, "an edit and `done` per expansion");
    let second = requests[2].last_text("user").unwrap();
    assert!(second.contains("already tried on this workflow"), "{second}");
    assert!(second.contains(r#"{"op":"rewrite_prompt","id":"plan","instruction":"PLAN-A"}"#), "{second}");
    assert!(!requests[0].last_text("user").unwrap().contains("already tried"));
}

/// Proposes `plans` in turn, then the last one for ever.
struct FixedProposer {
    plans: Vec<EditPlan>,
    asked: Mutex<Vec<Vec<String>>>,
}

impl FixedProposer {
    fn new(plans: Vec<EditPlan>) -> FixedProposer {
        FixedProposer { plans, asked: Mutex::new(vec![]) }
    }
}

#[async_trait::async_trait]
impl Proposer for FixedProposer {
    async fn propose(&self, input: &ProposalInput<'_>) -> Result<ProposedEdits, SearchError> {
        let mut asked = self.asked.lock().unwrap();
        asked.push(last_problems(input));
        let plan = &self.plans[(asked.len() - 1).min(self.plans.len() - 1)];
        Ok(answer(input, plan))
    }
}

fn plan_of(edit: GraphEdit) -> EditPlan {
    EditPlan { rationale: "r".into(), edits: vec![edit] }
}

/// A plan that repeats a sibling's workflow, or an edit that changes nothing, is refused
/// with the reason (the optimizer is asked again), and a plan that ends as a repeat is
/// never evaluated.
#[tokio::test]
async fn a_repeated_or_empty_change_is_rejected_before_it_is_evaluated() {
    let rewrite = plan_of(GraphEdit::RewritePrompt { id: "synth".into(), instruction: "Be brief.".into() });
    let proposer = FixedProposer::new(vec![rewrite]);
    let dir = tempfile::tempdir().unwrap();
    let sim = SizeSimulator::new(flat, flat);
    let state = run(dir.path(), &cfg(2, 10), Strategy::Mcts, &sim, &proposer, None).await.unwrap();
    assert_eq!(state.failed_expansions, 1, "the second expansion repeats the first");
    assert!(!candidate_path(dir.path(), 2, "opt").exists(), "a repeat is never executed");
    let asked = proposer.asked.lock().unwrap().clone();
    // Expansion 1: the edit, then `done`. Expansion 2: the edit, `done` refused as a
    // repeat, the same edit again refused as no change, and once more: three refusals.
    assert_eq!(asked.len(), 2 + 4, "{asked:?}");
    assert_eq!(asked[4], ["the plan gives the same workflow as candidate 1, which was already tried"]);
    assert_eq!(asked[5], ["the edit leaves the workflow unchanged"]);
    let failed: CandidatePlan =
        serde_json::from_str(&std::fs::read_to_string(candidate_path(dir.path(), 2, "plan")).unwrap()).unwrap();
    assert_eq!(failed.plan, None);
    assert_eq!(failed.optimizer_calls, 4);
    assert!(failed.rejected.iter().flatten().any(|p| p.contains("candidate 1")), "{:?}", failed.rejected);

    let same = g0().nodes[1].clone();
    let noop = plan_of(GraphEdit::ReplaceNode { id: same.id.clone(), node: same });
    let proposer = FixedProposer::new(vec![noop]);
    let dir = tempfile::tempdir().unwrap();
    let state = run(dir.path(), &cfg(1, 10), Strategy::Mcts, &sim, &proposer, None).await.unwrap();
    assert_eq!(state.failed_expansions, 1);
    assert_eq!(proposer.asked.lock().unwrap()[1], ["the edit leaves the workflow unchanged"]);

    // Inserting on the edge `plan → synth` and inserting after `plan` alone build the same
    // workflow with its edges in a different order: still a repeat.
    let node = GraphNode {
        id: "v".into(),
        kind: NodeKind::Llm { role: LlmRole::Verify, instruction: None, model: None },
        description: None,
    };
    let on_edge =
        plan_of(GraphEdit::AddNode { node: node.clone(), after: "plan".into(), before: Some("synth".into()) });
    let alone = plan_of(GraphEdit::AddNode { node, after: "plan".into(), before: None });
    let proposer = FixedProposer::new(vec![on_edge.clone(), on_edge, alone]);
    let dir = tempfile::tempdir().unwrap();
    run(dir.path(), &cfg(2, 10), Strategy::Mcts, &sim, &proposer, None).await.unwrap();
    let first = std::fs::read_to_string(candidate_path(dir.path(), 1, "workflow")).unwrap();
    assert!(first.contains("\"v\""), "{first}");
    // (The second plan is never asked for: that turn only says `done`.)
    assert_eq!(
        proposer.asked.lock().unwrap()[4],
        ["the plan gives the same workflow as candidate 1, which was already tried"]
    );
}

#[tokio::test]
async fn an_invalid_plan_is_shown_its_errors_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let sim = SizeSimulator::new(growing, growing);
    let proposer = InsertingProposer { broken: 1, asked: Mutex::new(vec![]) };
    let state = run(dir.path(), &cfg(1, 5), Strategy::Mcts, &sim, &proposer, None).await.unwrap();
    assert_eq!(state.failed_expansions, 0);
    let asked = proposer.asked.lock().unwrap();
    // The broken edit, its repair, then `done`.
    assert_eq!(asked.len(), 3);
    assert!(asked[0].is_empty());
    assert!(asked[1][0].contains("no node `no_such_node`"), "{:?}", asked[1]);
    assert!(asked[2].is_empty());
    let plan: CandidatePlan =
        serde_json::from_str(&std::fs::read_to_string(candidate_path(dir.path(), 1, "plan")).unwrap()).unwrap();
    assert_eq!(plan.plan.map(|p| p.edits.len()), Some(1));
    assert_eq!(plan.dropped.len(), 1, "the broken edit is recorded as dropped");
    assert!(plan.dropped[0].reasons[0].contains("no_such_node"), "{:?}", plan.dropped);
    assert_eq!(plan.optimizer_calls, 3);
}

#[tokio::test]
async fn a_plan_that_never_validates_is_given_up_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let sim = SizeSimulator::new(growing, growing);
    let proposer = InsertingProposer { broken: 100, asked: Mutex::new(vec![]) };
    let state = run(dir.path(), &cfg(2, 5), Strategy::Mcts, &sim, &proposer, None).await.unwrap();
    // One first try plus two repairs per expansion, two expansions.
    assert_eq!(proposer.asked.lock().unwrap().len(), 6);
    assert_eq!(state.failed_expansions, 2);
    assert_eq!(state.history[0].candidate, None);
    assert!(!candidate_path(dir.path(), 1, "opt").exists(), "a failed plan is never executed");
}

#[tokio::test]
async fn resume_after_a_kill_at_any_point_matches_an_uninterrupted_run() {
    let config = cfg(6, 10);
    let whole_dir = tempfile::tempdir().unwrap();
    let sim = SizeSimulator::new(growing, |n| ((n * 37) % 10) as f64 / 10.0);
    let proposer = InsertingProposer { broken: 0, asked: Mutex::new(vec![]) };
    let whole = run(whole_dir.path(), &config, Strategy::Mcts, &sim, &proposer, None).await.unwrap();

    for stop_at in [Checkpoint::Proposed(3), Checkpoint::Simulated(4), Checkpoint::Committed(2)] {
        let dir = tempfile::tempdir().unwrap();
        let sim2 = SizeSimulator::new(growing, |n| ((n * 37) % 10) as f64 / 10.0);
        let proposer2 = InsertingProposer { broken: 0, asked: Mutex::new(vec![]) };
        let err = run(dir.path(), &config, Strategy::Mcts, &sim2, &proposer2, Some(stop_at)).await.unwrap_err();
        assert!(matches!(err, SearchError::Interrupted), "{err}");
        let resumed = run(dir.path(), &config, Strategy::Mcts, &sim2, &proposer2, None).await.unwrap();
        assert_eq!(resumed, whole, "stopped at {stop_at:?}");
        assert_eq!(sim2.max_calls_per_candidate(), 1, "a candidate was evaluated twice (stopped at {stop_at:?})");
        for id in 0..whole.tree.len() {
            let a = std::fs::read_to_string(candidate_path(whole_dir.path(), id, "workflow")).unwrap();
            let b = std::fs::read_to_string(candidate_path(dir.path(), id, "workflow")).unwrap();
            assert_eq!(a, b, "candidate {id} differs (stopped at {stop_at:?})");
        }
    }
}

#[tokio::test]
async fn no_search_evaluates_g0_only() {
    let dir = tempfile::tempdir().unwrap();
    let sim = SizeSimulator::new(growing, growing);
    let proposer = InsertingProposer { broken: 0, asked: Mutex::new(vec![]) };
    let state = run(dir.path(), &cfg(30, 5), Strategy::NoSearch, &sim, &proposer, None).await.unwrap();
    assert_eq!(state.stopped, Some(StopReason::NoSearch));
    assert_eq!(state.tree.len(), 1);
    assert!(proposer.asked.lock().unwrap().is_empty());
}

#[tokio::test]
async fn beam_search_keeps_the_best_per_step_within_the_same_budget() {
    let dir = tempfile::tempdir().unwrap();
    let sim = SizeSimulator::new(growing, growing);
    let proposer = InsertingProposer { broken: 0, asked: Mutex::new(vec![]) };
    let state = run(dir.path(), &cfg(5, 10), Strategy::Beam { width: 2 }, &sim, &proposer, None).await.unwrap();
    assert_eq!(state.stopped, Some(StopReason::Budget));
    assert_eq!(state.tree.len(), 6, "five candidates beside G0");
    // Step 1 expands G0 once; the beam is then {1, 0} (1 has the higher reward), so step 2
    // expands 1 and then 0.
    let parents: Vec<usize> = state.history.iter().map(|h| h.parent).collect();
    assert_eq!(&parents[..3], &[0, 1, 0]);
}

#[tokio::test]
async fn report_pictures_show_every_candidate_and_the_best_path() {
    let dir = tempfile::tempdir().unwrap();
    let sim = SizeSimulator::new(growing, growing);
    let proposer = InsertingProposer { broken: 0, asked: Mutex::new(vec![]) };
    let state = run(dir.path(), &cfg(4, 10), Strategy::Mcts, &sim, &proposer, None).await.unwrap();
    let tree = flowmem_optimize::search_tree_svg(&state);
    assert_eq!(tree.matches("<g class=\"tree-node").count(), state.tree.len());
    assert_eq!(tree.matches("tree-node best").count(), 1);
    // The best path's edges are the thick red ones: one per step from the root.
    let best_depth = state.tree.path_to(state.best).len() - 1;
    assert_eq!(tree.matches("stroke-width=\"3\"").count(), best_depth);
    let curve = flowmem_optimize::validation_curve_svg(&state, 0.0);
    assert_eq!(curve.matches("class=\"candidate\"").count(), state.history.len());
    let best: WorkflowGraph =
        serde_json::from_str(&std::fs::read_to_string(candidate_path(dir.path(), state.best, "workflow")).unwrap())
            .unwrap();
    let picture = flowmem_optimize::workflow_graph_svg(&best);
    assert_eq!(picture.matches("class=\"graph-node\"").count(), best.nodes.len());
    assert_eq!(picture.matches("class=\"edge\"").count(), best.edges.len());
}

/// The scripted optimizer behind an [`LlmProposer`], and the requests it saw.
async fn scripted_proposer(
    script: flowmem_testsupport::Script,
    decoding: flowmem_optimize::PlanDecoding,
) -> (flowmem_testsupport::ScriptedLlmServer, flowmem_optimize::LlmProposer) {
    use flowmem_llm::{HttpModel, HttpModelConfig, Prompts, RetryPolicy};
    use flowmem_optimize::{LlmProposer, PROPOSE_EDITS, PROPOSE_NEXT_EDIT};

    let server = flowmem_testsupport::ScriptedLlmServer::start(script).await;
    let mut cfg_http = HttpModelConfig::new("scripted", server.base_url(), "scripted-model");
    cfg_http.retry = RetryPolicy { max_retries: 0, ..RetryPolicy::standard() };
    let mut prompts = Prompts::new();
    prompts.register_all(&[PROPOSE_EDITS, PROPOSE_NEXT_EDIT]).unwrap();
    let proposer = LlmProposer::new(
        std::sync::Arc::new(HttpModel::new(cfg_http).unwrap()),
        std::sync::Arc::new(prompts),
        vec![],
        6,
        decoding,
    );
    (server, proposer)
}

/// plan → t1 → t2 → synth, all LLM nodes.
fn chain_of_four() -> WorkflowGraph {
    let llm = |id: &str, role| GraphNode {
        id: id.into(),
        kind: NodeKind::Llm { role, instruction: None, model: None },
        description: None,
    };
    let edge = |from: &str, to: &str| Edge { from: from.into(), to: to.into(), kind: EdgeKind::Data, label: None };
    WorkflowGraph {
        name: None,
        nodes: vec![
            llm("plan", LlmRole::Plan),
            llm("t1", LlmRole::Reason),
            llm("t2", LlmRole::Reason),
            llm("synth", LlmRole::Synthesize),
        ],
        edges: vec![edge("plan", "t1"), edge("t1", "t2"), edge("t2", "synth")],
        entry: "plan".into(),
        exit: "synth".into(),
        queries: Vec::new(),
    }
}

/// Edit by edit, each request's schema is narrowed to the graph the earlier edits left:
/// edit 2 may name the node edit 1 added, and edit 4 may not name the node edit 3
/// removed. The plan keeps all three edits.
#[tokio::test]
async fn each_edit_is_decoded_against_the_graph_the_earlier_edits_left() {
    use flowmem_optimize::{CandidatePlan, PlanDecoding};
    use flowmem_testsupport::{Match, Reply, Script};

    let verify = |id: &str| json!({"id": id, "kind": "llm", "role": "verify"});
    let replies = [
        json!({"rationale": "check twice", "edit": {"op": "add_node", "after": "plan", "before": "synth", "node": verify("e1_check")}}),
        json!({"edit": {"op": "add_node", "after": "e1_check", "before": "synth", "node": verify("e2_more")}}),
        json!({"edit": {"op": "remove_node", "id": "e1_check"}}),
        json!({"edit": {"op": "done"}}),
    ];
    let script = Script::new()
        .when_seq(Match::any_message_contains("You improve a tool-using agent workflow"), replies.map(Reply::json));
    let (server, proposer) = scripted_proposer(script, PlanDecoding::PerEdit).await;
    let dir = tempfile::tempdir().unwrap();
    let sim = SizeSimulator::new(flat, flat);
    let state = run(dir.path(), &cfg(1, 10), Strategy::Mcts, &sim, &proposer, None).await.unwrap();
    assert_eq!(state.failed_expansions, 0);

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 4);
    let accepts = |request: usize, reply: serde_json::Value| {
        let schema = &requests[request].body["response_format"]["json_schema"]["schema"];
        jsonschema::validator_for(schema).unwrap().is_valid(&reply)
    };
    let remove = |id: &str| json!({"edit": {"op": "remove_node", "id": id}});
    assert!(!accepts(0, json!({"rationale": "r", "edit": {"op": "remove_node", "id": "e1_check"}})));
    assert!(accepts(1, remove("e1_check")), "edit 2 may name the node edit 1 added");
    assert!(accepts(2, remove("e1_check")) && accepts(2, remove("e2_more")));
    assert!(!accepts(3, remove("e1_check")), "edit 4 may not name the node edit 3 removed");
    assert!(accepts(3, remove("e2_more")));
    assert!(!accepts(0, json!({"edit": {"op": "done"}})), "the first turn cannot end the plan");
    assert!(accepts(3, json!({"edit": {"op": "done"}})));

    let plan: CandidatePlan =
        serde_json::from_str(&std::fs::read_to_string(candidate_path(dir.path(), 1, "plan")).unwrap()).unwrap();
    let ops: Vec<&str> = plan.plan.as_ref().unwrap().edits.iter().map(GraphEdit::op_name).collect();
    assert_eq!(ops, ["add_node", "add_node", "remove_node"]);
    assert_eq!(plan.plan.unwrap().rationale, "check twice");
    assert_eq!(plan.optimizer_calls, 4);
    let graph: WorkflowGraph =
        serde_json::from_str(&std::fs::read_to_string(candidate_path(dir.path(), 1, "workflow")).unwrap()).unwrap();
    let ids: Vec<&str> = graph.nodes.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids, ["plan", "synth", "e2_more"]);
}

/// When the plan's conversation no longer fits the optimizer's context (a 400
/// `context_length_exceeded`, as OpenAI answers and the embedded model's error maps to),
/// the plan ends at once with the edits it has: no re-asking with a longer prompt.
#[tokio::test]
async fn a_plan_whose_conversation_outgrows_the_context_ends_with_the_edits_it_has() {
    use flowmem_optimize::{CandidatePlan, PlanDecoding};
    use flowmem_testsupport::{Match, Reply, Script};

    let too_long = json!({"error": {"message": "This model's maximum context length is 4096 tokens.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}});
    let replies = [
        Reply::json(json!({"rationale": "check", "edit": {"op": "add_node", "after": "plan", "before": "synth",
            "node": {"id": "e1_check", "kind": "llm", "role": "verify"}}})),
        Reply::raw(400, too_long.to_string()),
    ];
    let script =
        Script::new().when_seq(Match::any_message_contains("You improve a tool-using agent workflow"), replies);
    let (server, proposer) = scripted_proposer(script, PlanDecoding::PerEdit).await;
    let dir = tempfile::tempdir().unwrap();
    let sim = SizeSimulator::new(flat, flat);
    let state = run(dir.path(), &cfg(1, 10), Strategy::Mcts, &sim, &proposer, None).await.unwrap();
    assert_eq!(state.failed_expansions, 0, "the edit made before the overflow is a candidate");
    assert_eq!(server.chat_requests().len(), 2, "the overflowing request is not asked again");
    let plan: CandidatePlan =
        serde_json::from_str(&std::fs::read_to_string(candidate_path(dir.path(), 1, "plan")).unwrap()).unwrap();
    assert_eq!(plan.optimizer_calls, 2);
    let ops: Vec<&str> = plan.plan.as_ref().unwrap().edits.iter().map(GraphEdit::op_name).collect();
    assert_eq!(ops, ["add_node"]);
    assert!(
        plan.rejected.iter().flatten().any(|problem| problem.contains("maximum context length")),
        "{:?}",
        plan.rejected
    );
}

/// A whole plan whose third edit fails keeps edits 1 and 2: the failure is shown to the
/// model, which is asked for the rest edit by edit (here it says `done`), and the dropped
/// edit is recorded with its reason.
#[tokio::test]
async fn a_failing_third_edit_leaves_a_candidate_with_the_first_two() {
    use flowmem_optimize::{CandidatePlan, PlanDecoding};
    use flowmem_testsupport::{Match, Reply, Script};

    let plan = json!({"rationale": "tighten", "edits": [
        {"op": "rewrite_prompt", "id": "t1", "instruction": "Be exact."},
        {"op": "remove_node", "id": "t2"},
        {"op": "rewrite_prompt", "id": "t2", "instruction": "Never applied."}
    ]});
    let script = Script::new()
        .when(Match::last_user_contains("Edit 3 was refused"), Reply::json(json!({"edit": {"op": "done"}})))
        .otherwise(Reply::json(plan));
    let (server, proposer) = scripted_proposer(script, PlanDecoding::Whole).await;
    let dir = tempfile::tempdir().unwrap();
    let sim = SizeSimulator::new(flat, flat);
    let validator = SizeValidator { max_nodes: 100 };
    let hook = |_: Checkpoint| true;
    let parts = SearchParts { proposer: &proposer, simulator: &sim, validator: &validator, checkpoint: &hook };
    let state = run_search(dir.path(), &chain_of_four(), &cfg(1, 10), Strategy::Mcts, &parts).await.unwrap();
    assert_eq!(state.failed_expansions, 0, "the valid prefix is a candidate");

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 2, "the whole plan, then one repair turn");
    let follow_up = requests[1].last_text("user").unwrap();
    assert!(follow_up.contains("Applied edits 1 to 2. Edit 3 was refused: "), "{follow_up}");
    assert!(follow_up.contains("no node `t2`"), "{follow_up}");
    let plan: CandidatePlan =
        serde_json::from_str(&std::fs::read_to_string(candidate_path(dir.path(), 1, "plan")).unwrap()).unwrap();
    let kept = plan.plan.unwrap();
    assert_eq!(kept.rationale, "tighten");
    assert_eq!(kept.edits.len(), 2);
    assert_eq!(plan.dropped.len(), 1);
    assert_eq!(plan.dropped[0].position, 2);
    assert_eq!(plan.dropped[0].edit.op_name(), "rewrite_prompt");
    assert!(plan.dropped[0].reasons[0].contains("no node `t2`"), "{:?}", plan.dropped);
    let graph: WorkflowGraph =
        serde_json::from_str(&std::fs::read_to_string(candidate_path(dir.path(), 1, "workflow")).unwrap()).unwrap();
    assert!(graph.node("t2").is_none());
    let stats = flowmem_optimize::expansion_stats(dir.path(), &state).unwrap();
    assert_eq!(stats.success_rate, Some(1.0));
    assert_eq!(stats.edits["rewrite_prompt"], flowmem_optimize::EditCounts { proposed: 2, applied: 1, dropped: 1 });
    assert_eq!(stats.edits["remove_node"], flowmem_optimize::EditCounts { proposed: 1, applied: 1, dropped: 0 });
}
