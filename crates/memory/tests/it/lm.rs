//! LM induction against the scripted OpenAI-compatible server on loopback, through the
//! real HTTP client (`flowmem_llm::HttpModel`).
//!
//! The request sequence matters: a structured request whose reply does not match the
//! reply schema is re-asked once by the client (with the `repair_json` prompt), so a
//! script for such a case holds two replies, and each test asserts how many requests
//! the server got. A text-mode request carries no schema and is asked once.

use serde_json::{Value, json};

use flowmem_memory::induce::{self, Inducer, Induction, LmConfig, SkipReason};
use flowmem_memory::{AddOutcome, MemoryStore, OfflineConfig, OfflineReport, StoreConfig, induce_offline, render};
use flowmem_model::{Scope, Trajectory};
use flowmem_testsupport::{RecordedRequest, Reply, Script, ScriptedLlmServer};

use crate::scripted_model;

/// Two retail runs that find a user, look an order up and cancel it, with different
/// values except the cancellation reason.
fn trajectories() -> Vec<Trajectory> {
    let run = |id: &str, email: &str, order: &str| -> Trajectory {
        serde_json::from_value(json!({
            "id": id, "query": format!("Please cancel order {order}"), "success": true,
            "meta": {"domain": "retail"},
            "steps": [
                {"action": {"kind": "tool_call", "tool": "find_user_id_by_email", "args": {"email": email}, "result": "user_1"}},
                {"action": {"kind": "tool_call", "tool": "get_order_details", "args": {"order_id": order}, "result": {"status": "pending"}}},
                {"action": {"kind": "tool_call", "tool": "cancel_pending_order", "args": {"order_id": order, "reason": "no longer needed"}}}
            ]}))
        .expect("the literal is a trajectory")
    };
    vec![run("t1", "ann@example.com", "#W100"), run("t2", "bob@example.com", "#W200")]
}

fn step(tool: &str, args: Value) -> Value {
    json!({"state": format!("ready for {tool}"), "reasoning": format!("call {tool}"), "action": {"tool": tool, "args": args}})
}

/// Looks a user's order up: find the user, then read the order.
fn lookup() -> Value {
    json!({"description": "Look up a user's order by email",
           "steps": [step("find_user_id_by_email", json!({"email": "{email}"})),
                     step("get_order_details", json!({"order_id": "{order_id}"}))]})
}

/// Cancels a pending order; the reason is a fixed value shared by both runs.
fn cancel() -> Value {
    json!({"description": "Cancel a pending order",
           "steps": [step("get_order_details", json!({"order_id": "{order_id}"})),
                     step("cancel_pending_order", json!({"order_id": "{order_id}", "reason": "no longer needed"}))]})
}

fn lm_cfg<'a>(model: &'a flowmem_llm::HttpModel, prompts: &'a flowmem_llm::Prompts, structured: bool) -> LmConfig<'a> {
    LmConfig { model, prompts, min_steps: 2, scope: None, structured, max_tokens: None, max_result_chars: 200 }
}

/// Runs LM induction on [`trajectories`] against `script`; returns the induction and
/// the requests the server got.
async fn induce_with(script: Script, structured: bool) -> (Induction, Vec<RecordedRequest>) {
    let server = ScriptedLlmServer::start(script).await;
    let model = scripted_model(&server);
    let prompts = render::prompts().unwrap();
    let induction = induce::lm(&trajectories(), &lm_cfg(&model, &prompts, structured)).await.unwrap();
    (induction, server.chat_requests())
}

/// Runs offline LM induction into a fresh memory; returns the report, what the memory
/// holds and the requests the server got.
async fn store_with(
    script: Script,
    structured: bool,
    batch_size: usize,
) -> (OfflineReport, MemoryStore, Vec<RecordedRequest>, tempfile::TempDir) {
    let server = ScriptedLlmServer::start(script).await;
    let model = scripted_model(&server);
    let prompts = render::prompts().unwrap();
    let cfg = lm_cfg(&model, &prompts, structured);
    let dir = tempfile::tempdir().unwrap();
    let mut store = MemoryStore::open(&dir.path().join("memory.db"), StoreConfig::standard()).unwrap();
    let offline = OfflineConfig { inducer: Inducer::Lm(&cfg), scope: None, batch_size, embedder: None };
    let report = induce_offline(&mut store, &trajectories(), &offline).await.unwrap();
    (report, store, server.chat_requests(), dir)
}

fn reasons(induction: &Induction) -> Vec<&SkipReason> {
    induction.skipped.iter().map(|skipped| &skipped.reason).collect()
}

#[tokio::test]
async fn a_structured_reply_gives_several_workflows_each_stored_separately() {
    let mut copied = cancel();
    copied["description"] = json!("Cancel order W100");
    copied["steps"][0]["action"]["args"]["order_id"] = json!("#W100");
    let reply = json!({"workflows": [lookup(), cancel(), copied]});
    let (report, store, requests, _dir) = store_with(Script::in_order([Reply::json(reply)]), true, 5).await;

    // A reply that matches the schema is asked for once.
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(body["response_format"]["type"], "json_schema");
    let schema = &body["response_format"]["json_schema"]["schema"];
    let steps = &schema["properties"]["workflows"]["items"]["properties"]["steps"];
    assert_eq!(steps["minItems"], 2);
    let actions = steps["items"]["properties"]["action"]["anyOf"].as_array().unwrap();
    let tools: Vec<&str> = actions.iter().map(|a| a["properties"]["tool"]["const"].as_str().unwrap()).collect();
    assert_eq!(tools, ["cancel_pending_order", "find_user_id_by_email", "get_order_details"]);
    assert!(actions[0]["properties"]["args"]["properties"]["reason"].is_object(), "argument names come from the runs");
    let prompt = requests[0].last_text("user").unwrap();
    assert!(prompt.contains("Please cancel order #W200") && prompt.contains("finer granularity"), "{prompt}");

    assert_eq!(report.proposed, 3);
    let descriptions: Vec<&str> = report.added.iter().map(|added| added.description.as_str()).collect();
    assert_eq!(descriptions, ["Look up a user's order by email", "Cancel a pending order"]);
    assert!(report.added.iter().all(|added| matches!(added.outcome, AddOutcome::Inserted { .. })));
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].description.as_deref(), Some("Cancel order W100"));
    assert!(
        matches!(&report.skipped[0].reason, SkipReason::CopiedLiteral { step: 0, arg, value, trajectory_id }
            if arg == "order_id" && value == "\"#W100\"" && trajectory_id == "t1"),
        "{:?}",
        report.skipped
    );

    let retail = Scope { site: None, domain: Some("retail".to_owned()) };
    let stored = store.list(&retail).unwrap();
    assert_eq!(stored.len(), 2, "each workflow is stored on its own");
    for workflow in &stored {
        assert_eq!(workflow.provenance.inducer, "lm");
        assert_eq!(workflow.provenance.model.as_deref(), Some("scripted"));
        assert!(workflow.provenance.prompt_version.as_deref().is_some_and(|v| v.starts_with("induce v1")));
        assert_eq!(workflow.provenance.trajectory_ids, ["t1", "t2"]);
    }
    let cancel_stored = stored.iter().find(|w| w.description == "Cancel a pending order").unwrap();
    assert_eq!(cancel_stored.steps[1].action.args["reason"], "no longer needed", "a value both runs share is kept");
}

#[tokio::test]
async fn a_reply_breaking_the_schema_is_re_asked_and_the_repaired_reply_used() {
    let mut unknown = lookup();
    unknown["steps"][1]["action"]["tool"] = json!("issue_refund");
    let script =
        Script::in_order([Reply::json(json!({"workflows": [unknown]})), Reply::json(json!({"workflows": [lookup()]}))]);
    let (induction, requests) = induce_with(script, true).await;
    assert_eq!(requests.len(), 2, "one re-ask");
    let repair = requests[1].last_text("user").unwrap();
    assert!(repair.contains("`workflows`") && repair.contains("/workflows/0/steps/1/action"), "{repair}");
    assert_eq!(requests[1].messages()[1]["role"], "assistant", "the first reply is shown back");
    assert!(induction.skipped.is_empty(), "{:?}", induction.skipped);
    assert_eq!(induction.workflows.len(), 1);
    assert_eq!(induction.workflows[0].description, "Look up a user's order by email");
}

#[tokio::test]
async fn a_model_insisting_on_an_unknown_tool_gets_that_workflow_rejected() {
    let mut unknown = cancel();
    unknown["description"] = json!("Refund with a tool nobody called");
    unknown["steps"][1]["action"]["tool"] = json!("issue_refund");
    let reply = Reply::json(json!({"workflows": [lookup(), unknown]}));
    // The reply breaks the schema (the tool is not one of the runs'), so the client
    // re-asks; the model answers the same, and the raw reply is checked workflow by
    // workflow.
    let (induction, requests) = induce_with(Script::in_order([reply.clone(), reply]), true).await;
    assert_eq!(requests.len(), 2);
    assert_eq!(induction.workflows.len(), 1);
    assert_eq!(induction.workflows[0].description, "Look up a user's order by email");
    assert!(
        matches!(reasons(&induction)[..], [SkipReason::UnknownTool { step: 1, tool }] if tool == "issue_refund"),
        "{:?}",
        induction.skipped
    );
    assert_eq!(induction.skipped[0].description.as_deref(), Some("Refund with a tool nobody called"));
}

const TEXT_REPLY: &str = "Here are the workflows.

Workflow: Find a user's id by email and read the order
State: The user gave their email
Reasoning: Every lookup needs the id
Action: find_user_id_by_email({\"email\": \"{email}\"})
State: The user id is known
Reasoning: Read the order
Action: get_order_details({\"order_id\": \"{order_id}\"})

Workflow: Cancel a pending order
Action: get_order_details({\"order_id\": \"{order_id}\"})
Action: cancel_pending_order({\"order_id\": \"{order_id}\", \"reason\": \"{reason}\"})

Workflow: Just look
Action: get_order_details({\"order_id\": \"{order_id}\"})

Workflow: Refund
Action: get_order_details({\"order_id\": \"{order_id}\"})
Action: issue_refund({\"order_id\": \"{order_id}\"})

Workflow: Cancel Bob's order
Action: get_order_details({\"order_id\": \"{order_id}\"})
Action: cancel_pending_order({\"order_id\": \"#W200\", \"reason\": \"{reason}\"})

Workflow: Half written
Action: get_order_details({\"order_id\": \"{order_id}\"})
Action: cancel_pending_order({\"order_id\": 
";

#[tokio::test]
async fn an_awm_text_reply_is_split_on_blank_lines_and_each_block_checked() {
    let (induction, requests) = induce_with(Script::in_order([Reply::text(TEXT_REPLY)]), false).await;
    assert_eq!(requests.len(), 1);
    assert!(requests[0].body.get("response_format").is_none(), "text mode asks for no schema");
    assert!(requests[0].last_text("user").unwrap().contains("separate the blocks with a blank line"));

    assert_eq!(induction.proposed, 6, "five readable blocks and one broken one");
    let descriptions: Vec<&str> = induction.workflows.iter().map(|w| w.description.as_str()).collect();
    assert_eq!(descriptions, ["Find a user's id by email and read the order", "Cancel a pending order"]);
    assert_eq!(induction.workflows[0].steps[0].reasoning, "Every lookup needs the id");
    assert_eq!(induction.workflows[0].steps[1].state, "The user id is known");
    assert_eq!(induction.workflows[1].steps[1].action.args["reason"], "{reason}");

    // Unreadable blocks are reported first, then the checks' rejections in reply order.
    let mut rejected: Vec<(&str, &SkipReason)> =
        induction.skipped.iter().map(|s| (s.description.as_deref().unwrap(), &s.reason)).collect();
    rejected.rotate_left(1);
    assert_eq!(rejected.len(), 4, "{rejected:?}");
    assert!(
        matches!(rejected[0], ("Just look", SkipReason::TooFewSteps { min_steps: 2, tools }) if tools == &["get_order_details"])
    );
    assert!(matches!(rejected[1], ("Refund", SkipReason::UnknownTool { step: 1, tool }) if tool == "issue_refund"));
    assert!(
        matches!(rejected[2], ("Cancel Bob's order", SkipReason::CopiedLiteral { step: 1, arg, trajectory_id, .. })
        if arg == "order_id" && trajectory_id == "t2")
    );
    assert!(
        matches!(rejected[3], ("Half written", SkipReason::Unparseable { message }) if message.starts_with("line 28")),
        "{rejected:?}"
    );
}

#[tokio::test]
async fn a_text_reply_to_a_structured_request_falls_back_to_the_text_parser() {
    // Text is not JSON, so the client re-asks once; the model answers in text again.
    let text = "Workflow: Cancel a pending order\nAction: get_order_details({\"order_id\": \"{order_id}\"})\nAction: cancel_pending_order({\"order_id\": \"{order_id}\"})";
    let (induction, requests) = induce_with(Script::in_order([Reply::text(text), Reply::text(text)]), true).await;
    assert_eq!(requests.len(), 2);
    assert!(requests[1].last_text("user").unwrap().contains("not JSON"));
    assert_eq!(induction.workflows.len(), 1, "{:?}", induction.skipped);
    assert_eq!(induction.workflows[0].description, "Cancel a pending order");
}

#[tokio::test]
async fn broken_replies_are_reported_and_nothing_is_stored() {
    let broken = [
        "I am sorry, I cannot help with that.",
        "{\"workflows\": [{\"description\": ",
        "{\"workflows\": []}",
        "Workflow: x\nAction: get_order_details(oops",
    ];
    for reply in broken {
        for structured in [false, true] {
            // A structured request is re-asked once; text mode is asked once.
            let script = Script::in_order(vec![Reply::text(reply); if structured { 2 } else { 1 }]);
            let (report, store, requests, _dir) = store_with(script, structured, 5).await;
            let case = format!("{reply:?} (structured: {structured})");
            assert_eq!(requests.len(), if structured { 2 } else { 1 }, "{case}");
            assert!(report.added.is_empty(), "{case}");
            assert_eq!(report.skipped.len(), 1, "{case}");
            let SkipReason::Unparseable { message } = &report.skipped[0].reason else {
                panic!("{case}: {:?}", report.skipped)
            };
            assert!(message.contains("as JSON") && message.contains("as AWM text"), "{case}: {message}");
            if structured {
                assert!(message.contains("after one re-ask"), "the client's complaint is kept: {message}");
            }
            assert_eq!(report.skipped[0].trajectory_ids, ["t1", "t2"]);
            assert_eq!(store.count(&Scope::default()).unwrap(), 0, "{case}");
        }
    }
}

#[tokio::test]
async fn a_failing_model_is_an_error_and_stores_nothing() {
    let server = ScriptedLlmServer::start(Script::in_order([Reply::status(400, "no such model")])).await;
    let model = scripted_model(&server);
    let prompts = render::prompts().unwrap();
    let cfg = lm_cfg(&model, &prompts, true);
    let dir = tempfile::tempdir().unwrap();
    let mut store = MemoryStore::open(&dir.path().join("memory.db"), StoreConfig::standard()).unwrap();
    let offline = OfflineConfig { inducer: Inducer::Lm(&cfg), scope: None, batch_size: 5, embedder: None };
    let err = induce_offline(&mut store, &trajectories(), &offline).await.unwrap_err();
    assert!(
        matches!(err, flowmem_memory::InduceError::Llm(flowmem_llm::LlmError::Status { status: 400, .. })),
        "{err:?}"
    );
    assert_eq!(store.count(&Scope::default()).unwrap(), 0);
}

#[tokio::test]
async fn batches_of_one_merge_the_same_workflow_and_keep_both_provenances() {
    // With one run per prompt every concrete value is copied from that run, so this
    // workflow abstracts the reason too.
    let mut workflow = cancel();
    workflow["steps"][1]["action"]["args"]["reason"] = json!("{reason}");
    let reply = Reply::json(json!({"workflows": [workflow]}));
    let (report, store, requests, _dir) = store_with(Script::in_order([reply.clone(), reply]), true, 1).await;
    assert_eq!(requests.len(), 2, "one prompt per batch");
    assert!(requests[0].last_text("user").unwrap().contains("#W100"));
    assert!(requests[1].last_text("user").unwrap().contains("#W200"));
    assert!(matches!(report.added[0].outcome, AddOutcome::Inserted { .. }));
    assert!(matches!(report.added[1].outcome, AddOutcome::Merged { .. }));
    let stored = store.list(&Scope { site: None, domain: Some("retail".to_owned()) }).unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].provenance.trajectory_ids, ["t1", "t2"]);
    assert_eq!(store.provenances(&stored[0].id).unwrap().len(), 2);
}
