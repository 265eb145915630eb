//! The optimizer's prompt and reply, against the scripted OpenAI-compatible server.

use std::sync::Arc;

use flowmem_llm::{ChatModel, HttpModel, HttpModelConfig, Prompts, RetryPolicy};
use flowmem_model::WorkflowGraph;
use flowmem_optimize::{
    CandidatePlan, EditPlan, FEEDBACK_CHARS, GraphEdit, LlmProposer, PROPOSE_EDITS, PROPOSE_NEXT_EDIT, PlanDecoding,
    PlanTurn, ProposalInput, ProposedEdits, Proposer, apply_edit, edit_plan_schema_for, edit_step_schema,
};
use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};
use serde_json::json;

/// A graph with every construct the listing must show: roles, hints, an instruction, a
/// loop with a judge, a branch, a parallel fan-out, and labelled and back edges.
fn graph() -> WorkflowGraph {
    serde_json::from_value(json!({
        "name": "g",
        "nodes": [
            {"id": "plan", "kind": "llm", "role": "plan", "description": "a note for people only"},
            {"id": "find", "kind": "tool", "hints": ["find_user_id_by_name_zip"], "instruction": "Use the zip code."},
            {"id": "fan", "kind": "parallel"},
            {"id": "again", "kind": "loop", "max_iterations": 5, "until": {"type": "judge", "question": "Is the order known?"}},
            {"id": "order", "kind": "tool", "hints": ["get_order_details"]},
            {"id": "user", "kind": "tool"},
            {"id": "meet", "kind": "join"},
            {"id": "route", "kind": "branch", "condition": {"type": "tool_succeeded"}},
            {"id": "synth", "kind": "llm", "role": "synthesize"}
        ],
        "edges": [
            {"from": "plan", "to": "find"}, {"from": "find", "to": "fan"},
            {"from": "fan", "to": "again"}, {"from": "again", "to": "order", "label": "body"},
            {"from": "order", "to": "again", "kind": "back"}, {"from": "again", "to": "meet", "label": "exit"},
            {"from": "fan", "to": "user"}, {"from": "user", "to": "meet"}, {"from": "meet", "to": "route"},
            {"from": "route", "to": "synth", "label": "ok"}, {"from": "route", "to": "synth", "label": "error", "kind": "control"}
        ],
        "entry": "plan",
        "exit": "synth"
    }))
    .expect("test graph parses")
}

fn input<'a>(graph: &'a WorkflowGraph, feedback: &'a serde_json::Value) -> ProposalInput<'a> {
    ProposalInput { graph, feedback, tried: &[], current: graph, turns: &[] }
}

fn prompts() -> Arc<Prompts> {
    let mut prompts = Prompts::new();
    prompts.register_all(&[PROPOSE_EDITS, PROPOSE_NEXT_EDIT]).expect("optimizer templates");
    Arc::new(prompts)
}

fn proposer(model: Arc<dyn ChatModel>, tools: Vec<String>, max_edits: usize, decoding: PlanDecoding) -> LlmProposer {
    LlmProposer::new(model, prompts(), tools, max_edits, decoding)
}

/// A proposer asking the embedded model, offered two τ² retail tools.
fn embedded_proposer() -> LlmProposer {
    let model_file =
        flowmem_testsupport::require_path(&flowmem_llm_local::default_model_path(), "scripts/setup/30-model.sh");
    let mut config = flowmem_llm_local::LocalConfig::standard();
    config.path = model_file;
    let model: Arc<dyn ChatModel> = Arc::new(flowmem_llm_local::LocalModel::new(config));
    let tools = vec!["find_user_id_by_name_zip".to_owned(), "get_order_details".to_owned()];
    proposer(model, tools, 2, PlanDecoding::PerEdit)
}

fn http_model(server: &ScriptedLlmServer) -> Arc<dyn ChatModel> {
    let mut cfg = HttpModelConfig::new("scripted", server.base_url(), "scripted-model");
    cfg.retry = RetryPolicy { max_retries: 0, ..RetryPolicy::standard() };
    Arc::new(HttpModel::new(cfg).expect("model config"))
}

#[tokio::test]
async fn the_prompt_lists_nodes_and_edges_and_bounds_the_feedback() {
    let step = json!({"rationale": "retry the lookup", "edit": {"op": "rewrite_prompt", "id": "find", "instruction": "Ask for the zip."}});
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::json(step))).await;
    let mut prompts = Prompts::new();
    prompts.register_all(&[PROPOSE_EDITS, PROPOSE_NEXT_EDIT]).expect("optimizer templates");
    prompts.set_global(FEEDBACK_CHARS, &200);
    let tools = vec!["find_user_id_by_name_zip".into(), "get_order_details".into()];
    let proposer = LlmProposer::new(http_model(&server), Arc::new(prompts), tools, 4, PlanDecoding::PerEdit);
    let feedback = json!({"queries": [{"query": "x".repeat(5_000), "failing_nodes": ["find"]}]});

    let proposed = proposer.propose(&input(&graph(), &feedback)).await.expect("a valid edit");
    assert_eq!(proposed.rationale.as_deref(), Some("retry the lookup"));
    assert_eq!(proposed.edits.len(), 1);

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 1);
    let prompt = requests[0].last_text("user").expect("a user message").to_owned();
    for line in [
        "Current workflow, from plan to synth. Nodes:",
        "- plan: llm plan\n",
        "- find: tool hints [find_user_id_by_name_zip] instruction \"Use the zip code.\"\n",
        "- fan: parallel\n",
        "- again: loop max_iterations 5 until judge \"Is the order known?\"\n",
        "- user: tool\n",
        "- route: branch condition tool_succeeded\n",
        "- synth: llm synthesize\n",
        "Edges: plan -> find; find -> fan; fan -> again; again -> order [body]; order -> again (back); again -> meet [exit]; \
         fan -> user; user -> meet; meet -> route; route -> synth [ok]; route -> synth (control) [error]\n",
    ] {
        assert!(prompt.contains(line), "missing {line:?} in:\n{prompt}");
    }
    assert!(!prompt.contains("a note for people only"), "descriptions are left out:\n{prompt}");
    assert!(!prompt.contains("\"nodes\""), "the graph is listed, not dumped as JSON:\n{prompt}");
    // The feedback is clipped to its budget: 200 characters of the 5,000-character query.
    assert!(prompt.contains(&"x".repeat(150)));
    assert!(!prompt.contains(&"x".repeat(250)), "the feedback budget holds");
}

/// The plan's schema is narrowed to the graph: references must name its nodes, a new
/// node's id is a short identifier, hints name known tools, and the plan holds at most
/// `max_edits` edits. The request carries that schema.
#[tokio::test]
async fn the_plan_schema_admits_only_the_graphs_nodes() {
    let plan = json!({"rationale": "r", "edits": [{"op": "remove_node", "id": "user"}]});
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::json(plan))).await;
    let tools = vec!["find_user_id_by_name_zip".to_owned(), "get_order_details".to_owned()];
    let proposer = proposer(http_model(&server), tools.clone(), 2, PlanDecoding::Whole);
    let proposed = proposer.propose(&input(&graph(), &json!({}))).await.expect("a valid plan");
    assert_eq!(proposed.edits.len(), 1);
    let sent = server.chat_requests()[0].body["response_format"]["json_schema"]["schema"].clone();
    assert_eq!(sent, edit_plan_schema_for(&graph(), &tools, 2), "the request carries the narrowed schema");

    let schema = jsonschema::validator_for(&sent).expect("the narrowed schema compiles");
    let plan = |edits: serde_json::Value| json!({"rationale": "r", "edits": edits});
    let accepted = [
        json!([{"op": "remove_node", "id": "user"}]),
        json!([{"op": "add_edge", "from": "plan", "to": "synth"}]),
        json!([{"op": "add_node", "after": "find", "before": "fan", "node": {"id": "e1_check_2", "kind": "tool", "hints": ["get_order_details"]}}]),
        json!([{"op": "add_node", "after": "find", "node": {"id": "e1_v", "kind": "llm", "role": "verify"}}]),
        json!([{"op": "insert_control", "control": {"construct": "parallel", "nodes": ["order", "user"]}}]),
        json!([{"op": "refine_control", "id": "again", "max_iterations": 2}]),
        json!([{"op": "rewrite_prompt", "id": "synth", "instruction": "Be brief."}]),
        json!([{"op": "remove_edge", "from": "find", "to": "fan"}]),
        json!([{"op": "reconnect_edge", "from": "order", "to": "again", "new_to": "meet"}]),
        json!([{"op": "add_node", "after": "synth", "before": null, "node": {"id": "e1_v", "kind": "llm", "role": "verify"}}]),
        json!([{"op": "rebind_argument", "node": "user", "arg": "user_id", "source": {"from": "result", "node": "find", "path": "$"}}]),
        json!([{"op": "rebind_argument", "node": "order", "arg": "order_id", "source": {"from": "argument", "node": "find", "arg": "x"}}]),
        // (`user` runs alongside `order`, so it is no source of it.)
        json!([{"op": "rebind_argument", "node": "find", "arg": "zip", "source": {"from": "query", "shape": "number"}}]),
        json!([{"op": "rebind_argument", "node": "find", "arg": "zip", "source": {"from": "constant", "value": 19122}}]),
        // A branch takes a judge, or a fixed condition whose routes it has; a new route
        // out of it has a label.
        json!([{"op": "refine_control", "id": "route", "condition": {"type": "tool_succeeded"}}]),
        json!([{"op": "refine_control", "id": "route", "condition": {"type": "judge", "question": "ok?"}}]),
        json!([{"op": "add_edge", "from": "route", "to": "plan", "label": "again"}]),
        json!([{"op": "insert_control", "control": {"construct": "retry_loop", "around": "find", "max_iterations": 2, "until": {"type": "tool_succeeded"}}}]),
        json!([{"op": "insert_control", "control": {"construct": "branch", "before": "user", "question": "q", "alternative": {"id": "e1_alt", "kind": "tool"}}}]),
    ];
    for edits in accepted {
        let value = plan(edits);
        assert!(schema.is_valid(&value), "rejected {value}");
    }
    let refused = [
        json!([{"op": "remove_node", "id": "no_such_node"}]),
        json!([{"op": "add_edge", "from": "plan", "to": "elsewhere"}]),
        json!([{"op": "add_node", "after": "find", "node": {"id": "123456789012345678901234567890", "kind": "join"}}]),
        json!([{"op": "add_node", "after": "find", "node": {"id": "e1_t", "kind": "tool", "hints": ["not_a_tool"]}}]),
        json!([{"op": "add_node", "after": "find", "node": {"id": "find", "kind": "tool"}}]),
        json!([{"op": "add_node", "after": "find", "node": {"id": "e1_checker", "kind": "join"}}, {"op": "rewrite_prompt", "id": "plan", "instruction": "x".repeat(401)}]),
        json!([{"op": "insert_control", "control": {"construct": "retry_loop", "around": "ghost", "max_iterations": 2, "until": {"type": "always"}}}]),
        json!([{"op": "remove_node", "id": "user"}, {"op": "remove_node", "id": "order"}, {"op": "remove_node", "id": "fan"}]),
        // Each operation names only what it can apply to.
        json!([{"op": "remove_node", "id": "plan"}]),
        json!([{"op": "remove_node", "id": "synth"}]),
        json!([{"op": "rewrite_prompt", "id": "fan", "instruction": "x"}]),
        json!([{"op": "refine_control", "id": "find", "max_iterations": 2}]),
        // Edges are the graph's own.
        json!([{"op": "add_node", "after": "find", "before": "synth", "node": {"id": "e1_v", "kind": "llm", "role": "verify"}}]),
        json!([{"op": "add_node", "after": "find", "before": "find", "node": {"id": "e1_v", "kind": "llm", "role": "verify"}}]),
        json!([{"op": "remove_edge", "from": "plan", "to": "synth"}]),
        json!([{"op": "reconnect_edge", "from": "synth", "to": "plan", "new_to": "meet"}]),
        // A rebinding names a tool node, and as a source a tool node upstream of it.
        json!([{"op": "rebind_argument", "node": "plan", "arg": "x", "source": {"from": "query"}}]),
        json!([{"op": "rebind_argument", "node": "find", "arg": "zip", "source": {"from": "result", "node": "user", "path": "$"}}]),
        json!([{"op": "rebind_argument", "node": "find", "arg": "zip", "source": {"from": "result", "node": "plan", "path": "$"}}]),
        json!([{"op": "rebind_argument", "node": "user", "arg": "user_id", "source": {"from": "result", "node": "find", "path": "items"}}]),
        json!([{"op": "rebind_argument", "node": "user", "arg": "", "source": {"from": "query"}}]),
        json!([{"op": "rebind_argument", "node": "order", "arg": "order_id", "source": {"from": "argument", "node": "user", "arg": "x"}}]),
        // What would leave a control node without its labels, or add a control node
        // without its edges.
        json!([{"op": "add_node", "after": "fan", "node": {"id": "e1_v", "kind": "llm", "role": "verify"}}]),
        json!([{"op": "add_node", "after": "route", "before": null, "node": {"id": "e1_v", "kind": "llm", "role": "verify"}}]),
        json!([{"op": "add_node", "after": "find", "before": "fan", "node": {"id": "e1_b", "kind": "branch", "condition": {"type": "always"}}}]),
        json!([{"op": "remove_node", "id": "fan"}]),
        json!([{"op": "remove_node", "id": "again"}]),
        json!([{"op": "refine_control", "id": "route", "condition": {"type": "always"}}]),
        json!([{"op": "refine_control", "id": "route", "max_iterations": 2}]),
        json!([{"op": "refine_control", "id": "again", "max_iterations": 0}]),
        json!([{"op": "add_edge", "from": "again", "to": "synth"}]),
        json!([{"op": "add_edge", "from": "route", "to": "plan"}]),
        json!([{"op": "add_edge", "from": "plan", "to": "synth", "label": "x"}]),
        // An edge the graph has already, plain or routed, is not added again.
        json!([{"op": "add_edge", "from": "plan", "to": "find"}]),
        json!([{"op": "add_edge", "from": "route", "to": "synth", "label": "again"}]),
        json!([{"op": "insert_control", "control": {"construct": "retry_loop", "around": "fan", "max_iterations": 2, "until": {"type": "always"}}}]),
        json!([{"op": "insert_control", "control": {"construct": "retry_loop", "around": "synth", "max_iterations": 2, "until": {"type": "always"}}}]),
        json!([{"op": "insert_control", "control": {"construct": "branch", "before": "meet", "question": "q", "alternative": {"id": "e1_alt", "kind": "tool"}}}]),
        json!([{"op": "insert_control", "control": {"construct": "branch", "before": "user", "question": "q", "alternative": {"id": "e1_alt", "kind": "join"}}}]),
        json!([{"op": "insert_control", "control": {"construct": "parallel", "nodes": ["fan", "user"]}}]),
    ];
    for edits in refused {
        let value = plan(edits);
        assert!(!schema.is_valid(&value), "accepted {value}");
    }
}

/// New ids carry the next generation's prefix, so they can never repeat an id of the
/// graph, however many generations of edits it has been through.
#[test]
fn new_ids_are_prefixed_by_the_next_generation() {
    assert_eq!(flowmem_optimize::new_id_prefix(&graph()), "e1_");
    let mut grown = graph();
    for id in ["e2_verify", "e10_retry", "e3x_not_a_generation", "entry"] {
        let mut node = grown.nodes[0].clone();
        node.id = id.to_owned();
        grown.nodes.push(node);
    }
    assert_eq!(flowmem_optimize::new_id_prefix(&grown), "e11_");
    let schema = jsonschema::validator_for(&edit_plan_schema_for(&grown, &[], 2)).unwrap();
    let add = |id: &str| json!({"rationale": "r", "edits": [{"op": "add_node", "after": "plan", "node": {"id": id, "kind": "llm", "role": "verify"}}]});
    assert!(schema.is_valid(&add("e11_join")));
    assert!(!schema.is_valid(&add("e10_retry")), "an id of the graph is refused");
    assert!(!schema.is_valid(&add("join")));
}

/// The prompt lists what earlier expansions of the graph tried, an applied plan by its
/// edits and a failed one by its last problem, and the request leaves room for a plan of
/// six bounded edits.
#[tokio::test]
async fn the_prompt_lists_the_plans_already_tried() {
    let step = json!({"rationale": "r", "edit": {"op": "remove_node", "id": "user"}});
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::json(step))).await;
    let proposer = proposer(http_model(&server), vec![], 3, PlanDecoding::PerEdit);
    let applied: EditPlan = serde_json::from_value(
        json!({"rationale": "x", "edits": [{"op": "rewrite_prompt", "id": "synth", "instruction": "Be brief."}]}),
    )
    .unwrap();
    let tried = [
        CandidatePlan { parent: 0, plan: Some(applied), rejected: vec![], dropped: vec![], optimizer_calls: 2 },
        CandidatePlan {
            parent: 0,
            plan: None,
            rejected: vec![vec!["FIRST-PROBLEM".into()], vec!["node id `find` is already in use".into()]],
            dropped: vec![],
            optimizer_calls: 3,
        },
    ];
    let graph = graph();
    let input = ProposalInput { graph: &graph, feedback: &json!({}), tried: &tried, current: &graph, turns: &[] };
    proposer.propose(&input).await.expect("a valid plan");

    let request = &server.chat_requests()[0];
    let prompt = request.last_text("user").unwrap();
    assert!(
        prompt.contains("These plans were already tried on this workflow. Propose a different refinement:"),
        "{prompt}"
    );
    assert!(prompt.contains(r#"- [{"op":"rewrite_prompt","id":"synth","instruction":"Be brief."}]"#), "{prompt}");
    assert!(prompt.contains("- a plan that could not be applied: node id `find` is already in use"), "{prompt}");
    assert!(!prompt.contains("FIRST-PROBLEM"), "only the last attempt's problems are shown:\n{prompt}");
    assert!(prompt.contains(r#"A new node's id starts with "e1_""#), "{prompt}");
    assert_eq!(request.body["max_tokens"], 1536, "{}", request.body);
}

/// The prompt shows each tool node's bindings, so the optimizer can rebind an argument
/// the feedback names.
#[tokio::test]
async fn the_prompt_shows_the_bindings_of_tool_nodes() {
    let step = json!({"rationale": "r", "edit": {"op": "rebind_argument", "node": "order", "arg": "order_id",
        "source": {"from": "result", "node": "find", "path": "$.orders[*]"}}});
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::json(step))).await;
    let proposer = proposer(http_model(&server), vec![], 2, PlanDecoding::PerEdit);
    let mut graph = graph();
    let order = graph.nodes.iter_mut().find(|node| node.id == "order").unwrap();
    order.kind = serde_json::from_value(json!({"kind": "tool", "hints": ["get_order_details"], "bindings": {
        "order_id": {"observed": 3, "sources": [{"from": "query", "shape": "id", "support": 2},
                                                {"from": "argument", "node": "find", "arg": "zip", "support": 1}]}}}))
    .unwrap();
    let proposed = proposer.propose(&input(&graph, &json!({}))).await.expect("a valid edit");
    assert_eq!(proposed.edits[0].op_name(), "rebind_argument");
    let requests = server.chat_requests();
    let prompt = requests[0].last_text("user").unwrap();
    assert!(
        prompt.contains("- order: tool hints [get_order_details]; order_id from query (id) or argument zip of find\n"),
        "{prompt}"
    );
    assert!(prompt.contains("- rebind_argument {node, arg, source}"), "{prompt}");
}

/// The narrowed schema, rebindings included, compiles into the embedded model's grammar,
/// and the plan it decodes validates and applies to the graph.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_model_decodes_a_plan_under_the_narrowed_schema() {
    let proposer = embedded_proposer();
    let graph = graph();
    let feedback = json!([{"id": "0", "tc": 0.0, "ungrounded_arguments": [{"node": "order", "arg": "order_id", "source": "model"}]}]);
    let proposed =
        proposer.propose(&input(&graph, &feedback)).await.expect("the grammar compiles and the edit is valid");
    let [edit] = proposed.edits.as_slice() else { panic!("one edit per turn: {proposed:?}") };
    let schema = jsonschema::validator_for(&edit_step_schema(&graph, &proposer.tools, true, false)).unwrap();
    let reply = json!({"rationale": proposed.rationale, "edit": edit});
    assert!(schema.is_valid(&reply), "{reply}");

    // The next turn's schema (an edit, or `done`) compiles too, on the graph the first
    // edit left (or the same graph, had it been refused).
    let (current, turn) = match apply_edit(&graph, edit) {
        Ok(next) => (next, PlanTurn { proposed: Some(proposed.clone()), applied: 1, problems: vec![] }),
        Err(err) => {
            (graph.clone(), PlanTurn { proposed: Some(proposed.clone()), applied: 0, problems: vec![err.to_string()] })
        }
    };
    let turns = [turn];
    let input = ProposalInput { graph: &graph, feedback: &feedback, tried: &[], current: &current, turns: &turns };
    let next = proposer.propose(&input).await.expect("the next turn's grammar compiles");
    let can_finish = turns[0].applied > 0;
    let schema = jsonschema::validator_for(&edit_step_schema(&current, &proposer.tools, false, can_finish)).unwrap();
    let edit = next.edits.first().map_or(json!({"op": "done"}), |edit| serde_json::to_value(edit).unwrap());
    assert!(schema.is_valid(&json!({"edit": edit})), "{edit}");
}

/// Later turns repeat the conversation: the model's reply, then what became of it and
/// what changed, and the question for the next edit under the schema narrowed to the
/// graph as it now is.
#[tokio::test]
async fn a_later_turn_shows_what_became_of_each_reply_and_is_narrowed_to_the_current_graph() {
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::json(json!({"edit": {"op": "done"}})))).await;
    let proposer = proposer(http_model(&server), vec![], 4, PlanDecoding::PerEdit);
    let graph = graph();
    let added = GraphEdit::AddNode {
        node: serde_json::from_value(json!({"id": "e1_check", "kind": "tool"})).unwrap(),
        after: "find".into(),
        before: Some("fan".into()),
    };
    let removed = GraphEdit::RemoveNode { id: "user".into() };
    let ghost = GraphEdit::RemoveNode { id: "user".into() };
    let current = apply_edit(&apply_edit(&graph, &added).unwrap(), &removed).unwrap();
    let turns = [
        PlanTurn {
            proposed: Some(ProposedEdits { rationale: Some("check first".into()), edits: vec![added] }),
            applied: 1,
            problems: vec![],
        },
        PlanTurn {
            proposed: Some(ProposedEdits { rationale: None, edits: vec![removed] }),
            applied: 1,
            problems: vec![],
        },
        PlanTurn {
            proposed: Some(ProposedEdits { rationale: None, edits: vec![ghost] }),
            applied: 0,
            problems: vec!["no node `user`".into()],
        },
        PlanTurn { proposed: None, applied: 0, problems: vec!["the reply was not an edit: EOF".into()] },
    ];
    let input = ProposalInput { graph: &graph, feedback: &json!({}), tried: &[], current: &current, turns: &turns };
    let proposed = proposer.propose(&input).await.expect("done parses");
    assert_eq!(proposed, ProposedEdits::done());

    let request = &server.chat_requests()[0];
    let messages = request.body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    // The reply that was no edit has no assistant turn of its own.
    assert_eq!(roles, ["user", "assistant", "user", "assistant", "user", "assistant", "user", "user"]);
    let text = |i: usize| messages[i]["content"].as_str().unwrap().to_owned();
    assert!(text(1).starts_with(r#"{"rationale":"check first","edit":{"op":"add_node""#), "{}", text(1));
    assert!(text(2).contains("Applied.") && text(2).contains("Nodes added: e1_check (tool)."), "{}", text(2));
    assert!(text(2).contains("Edges added: find -> e1_check; e1_check -> fan."), "{}", text(2));
    assert!(text(2).contains("A new node's id now starts with \"e2_\""), "{}", text(2));
    assert_eq!(text(3), r#"{"edit":{"op":"remove_node","id":"user"}}"#);
    assert!(text(4).contains("Nodes removed: user (tool)."), "{}", text(4));
    assert!(text(4).contains("The plan holds 2 of at most 4 edits."), "{}", text(4));
    assert!(text(6).contains("Refused: no node `user`. The workflow is unchanged."), "{}", text(6));
    assert!(text(7).contains("Your reply was not an edit: the reply was not an edit: EOF."), "{}", text(7));

    let schema = &request.body["response_format"]["json_schema"]["schema"];
    assert_eq!(schema, &edit_step_schema(&current, &[], false, true));
    let validator = jsonschema::validator_for(schema).unwrap();
    let edit = |edit: serde_json::Value| json!({"edit": edit});
    assert!(validator.is_valid(&edit(json!({"op": "done"}))));
    assert!(validator.is_valid(&edit(json!({"op": "remove_node", "id": "e1_check"}))), "an added node is named");
    assert!(!validator.is_valid(&edit(json!({"op": "remove_node", "id": "user"}))), "a removed node is not");
    assert!(!validator.is_valid(&json!({"rationale": "r", "edit": {"op": "done"}})), "later turns carry no rationale");
}

/// The feedback between its heading and the next paragraph of the first message.
fn feedback_of(first_message: &str) -> &str {
    let start = first_message.find("optimisation queries:\n").expect("the feedback heading") + 22;
    let end = first_message[start..].find("\n\nRead the feedback").expect("the paragraph after it");
    &first_message[start..start + end]
}

/// A first message too long for the model's context (a 400 `context_length_exceeded`
/// with llama.cpp's token counts) is asked again with its feedback cut by what it was
/// over, plus room for the reply. The plan's next turn opens with the message that fit,
/// so its conversation still only grows at its end.
#[tokio::test]
async fn a_first_message_over_the_context_is_asked_again_with_shorter_feedback() {
    use flowmem_testsupport::Match;

    let too_long = json!({"error": {"message": "the request exceeds the available context size",
        "type": "exceed_context_size_error", "n_prompt_tokens": 5_000, "n_ctx": 4_096}});
    let step = json!({"rationale": "r", "edit": {"op": "rewrite_prompt", "id": "find", "instruction": "Ask twice."}});
    let script = Script::new()
        .when_seq(
            Match::any_message_contains("You improve a tool-using agent workflow"),
            [Reply::raw(400, too_long.to_string())],
        )
        .when(Match::last_user_contains("Applied."), Reply::json(json!({"edit": {"op": "done"}})))
        .otherwise(Reply::json(step));
    let server = ScriptedLlmServer::start(script).await;
    let proposer = proposer(http_model(&server), vec![], 4, PlanDecoding::PerEdit);
    let feedback = json!({"queries": [{"query": "q", "failing_nodes": ["find"], "trace": "y".repeat(20_000)}]});
    let graph = graph();

    let first = proposer.propose(&input(&graph, &feedback)).await.expect("the shortened message is answered");
    assert_eq!(first.edits.len(), 1);
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 2, "asked once more, shortened");
    let (full, fitted) = (requests[0].last_text("user").unwrap(), requests[1].last_text("user").unwrap());
    let full_len = feedback_of(full).chars().count();
    assert!(full_len > 20_000, "the first try has the whole feedback");
    // 5,000 tokens with 256 kept for the reply, against 4,096: 1,160 tokens over, cut at
    // four characters a token.
    let kept = full_len - 1_160 * 4;
    assert!(feedback_of(fitted).starts_with(&feedback_of(full)[..kept]), "the feedback keeps its start");
    assert!(
        feedback_of(fitted).ends_with(&format!(" […{} more characters]", full_len - kept)),
        "{}",
        feedback_of(fitted)
    );
    assert_eq!(
        full.replace(feedback_of(full), ""),
        fitted.replace(feedback_of(fitted), ""),
        "only the feedback changes"
    );

    let applied = apply_edit(&graph, &first.edits[0]).expect("the edit applies");
    let turns = [PlanTurn { proposed: Some(first), applied: 1, problems: vec![] }];
    let next = ProposalInput { graph: &graph, feedback: &feedback, tried: &[], current: &applied, turns: &turns };
    let done = proposer.propose(&next).await.expect("the next turn is answered");
    assert!(done.edits.is_empty(), "`done`");
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 3, "the next turn fits at once");
    assert_eq!(requests[2].messages()[0]["content"], fitted, "it opens with the message that fit");
}

/// When the model does not say by how much, the feedback is halved until it fits or is
/// gone; a first message that is over without any feedback cannot be answered.
#[tokio::test]
async fn a_first_message_over_the_context_without_feedback_is_unanswerable() {
    let too_long = json!({"error": {"message": "too long", "code": "context_length_exceeded"}});
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::raw(400, too_long.to_string()))).await;
    let proposer = proposer(http_model(&server), vec![], 4, PlanDecoding::Whole);
    let feedback = json!({"trace": "z".repeat(4_000)});

    let err = proposer.propose(&input(&graph(), &feedback)).await.expect_err("it never fits");
    assert!(
        matches!(&err, flowmem_optimize::SearchError::Unanswerable(problem) if problem.contains("too long")),
        "{err:?}"
    );
    let lengths: Vec<usize> = server
        .chat_requests()
        .iter()
        .map(|request| {
            let feedback = feedback_of(request.last_text("user").unwrap());
            feedback.split(" […").next().unwrap().chars().count()
        })
        .collect();
    // `{"trace":"z…z"}` is 4,012 characters, then halved: 2,006, 1,003, 501, 250, and
    // nothing below 200.
    assert_eq!(lengths, [4_012, 2_006, 1_003, 501, 250, 0]);
}

/// With the embedded model (4,096 tokens), feedback several times that long is cut
/// until the first message fits, and the model answers with a valid edit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_model_answers_a_first_message_whose_feedback_overflows_its_context() {
    let proposer = embedded_proposer();
    let graph = graph();
    let runs: Vec<_> = (0..150)
        .map(|idx| {
            json!({"id": format!("q{idx}"), "tc": 0.25, "missing_calls": ["get_order_details"],
            "answer": format!("I could not find order #W{idx:07} for the customer at zip 9{idx:04}.")})
        })
        .collect();
    let feedback = json!(runs);
    let full = serde_json::to_string(&feedback).unwrap().chars().count();
    assert!(full > 4 * 4_096, "the feedback alone is over the context: {full} characters");

    let proposed = proposer.propose(&input(&graph, &feedback)).await.expect("the shortened message is answered");
    let [edit] = proposed.edits.as_slice() else { panic!("one edit per turn: {proposed:?}") };
    let schema = jsonschema::validator_for(&edit_step_schema(&graph, &proposer.tools, true, false)).unwrap();
    assert!(schema.is_valid(&json!({"rationale": proposed.rationale, "edit": edit})), "{edit:?}");
}
