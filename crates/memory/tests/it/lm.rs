//! LM induction against the scripted OpenAI-compatible server on loopback, through the
//! real HTTP client: structured replies, AWM text replies, and broken replies.

use serde_json::{Value, json};

use flowmem_llm::{HttpModel, HttpModelConfig};
use flowmem_memory::induce::{self, Induction, LmConfig, SkipReason, Variant};
use flowmem_memory::{MemoryStore, OfflineConfig, StoreConfig, induce_offline, render};
use flowmem_model::{Scope, Trajectory};
use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};

/// Two retail runs that look an order up and cancel it, with different values.
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

fn good_workflow() -> Value {
    json!({"description": "Cancel a pending order for a user",
           "steps": [
             {"state": "The user gave an order id", "reasoning": "Check the order is pending",
              "action": {"tool": "get_order_details", "args": {"order_id": "{order_id}"}}},
             {"state": "The order is pending", "reasoning": "Cancel it with the user's reason",
              "action": {"tool": "cancel_pending_order", "args": {"order_id": "{order_id}", "reason": "no longer needed"}}}]})
}

async fn run(script: Script, structured: bool) -> (Induction, ScriptedLlmServer) {
    let server = ScriptedLlmServer::start(script).await;
    let model = HttpModel::new(HttpModelConfig::new("scripted", server.base_url(), "scripted-model")).unwrap();
    let prompts = render::prompts().unwrap();
    let lm_cfg = LmConfig {
        model: &model,
        prompts: &prompts,
        min_steps: 2,
        scope: None,
        structured,
        max_tokens: Some(800),
        max_result_chars: 200,
    };
    let induction = induce::lm(&trajectories(), &lm_cfg).await.unwrap();
    (induction, server)
}

#[tokio::test]
async fn a_structured_reply_is_parsed_and_each_workflow_validated() {
    let mut unknown_tool = good_workflow();
    unknown_tool["description"] = json!("Refund with a tool nobody called");
    unknown_tool["steps"][1]["action"]["tool"] = json!("issue_refund");
    let one_step = json!({"description": "Only look", "steps": [good_workflow()["steps"][0].clone()]});
    let mut copied = good_workflow();
    copied["description"] = json!("Cancel order W100");
    copied["steps"][0]["action"]["args"]["order_id"] = json!("#W100");
    let reply = json!({"workflows": [good_workflow(), unknown_tool, one_step, copied]});
    let (induction, server) = run(Script::in_order([Reply::json(reply)]), true).await;

    assert_eq!(induction.workflows.len(), 1, "{:?}", induction.skipped);
    let workflow = &induction.workflows[0];
    assert_eq!(workflow.description, "Cancel a pending order for a user");
    assert_eq!(workflow.scope.domain.as_deref(), Some("retail"), "the runs' common scope");
    assert_eq!(workflow.provenance.inducer, "lm");
    assert_eq!(workflow.provenance.model.as_deref(), Some("scripted"));
    assert!(workflow.provenance.prompt_version.as_deref().is_some_and(|v| v.starts_with("induce v1")));
    assert_eq!(workflow.provenance.trajectory_ids, ["t1", "t2"]);

    let reasons: Vec<&SkipReason> = induction.skipped.iter().map(|s| &s.reason).collect();
    assert!(matches!(reasons[0], SkipReason::UnknownTool { step: 1, tool } if tool == "issue_refund"));
    assert!(matches!(reasons[1], SkipReason::TooFewSteps { min_steps: 2, .. }));
    assert!(matches!(reasons[2], SkipReason::CopiedLiteral { step: 0, trajectory_id, .. } if trajectory_id == "t1"));

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(body["response_format"]["type"], "json_schema");
    let prompt = requests[0].last_text("user").unwrap();
    assert!(prompt.contains("Please cancel order #W200") && prompt.contains("finer granularity"), "{prompt}");
}

#[tokio::test]
async fn an_awm_text_reply_is_split_on_blank_lines() {
    let text = "Here are the workflows.\n\nWorkflow: Find a user's id by email\nState: The user gave their email\nReasoning: Every lookup needs the id\nAction: find_user_id_by_email({\"email\": \"{email}\"})\nState: The user id is known\nReasoning: Read the order\nAction: get_order_details(order_id=\"{order_id}\")\n\nWorkflow: Cancel a pending order\nAction: get_order_details({\"order_id\": \"{order_id}\"})\nAction: cancel_pending_order({\"order_id\": \"{order_id}\", \"reason\": \"{reason}\"})\n";
    let (induction, server) = run(Script::in_order([Reply::text(text)]), false).await;
    assert!(induction.skipped.is_empty(), "{:?}", induction.skipped);
    let descriptions: Vec<&str> = induction.workflows.iter().map(|w| w.description.as_str()).collect();
    assert_eq!(descriptions, ["Find a user's id by email", "Cancel a pending order"]);
    assert_eq!(induction.workflows[0].steps[1].action.args["order_id"], "{order_id}");
    assert_eq!(induction.workflows[0].steps[0].reasoning, "Every lookup needs the id");
    let body = &server.chat_requests()[0].body;
    assert!(body.get("response_format").is_none(), "text mode asks for no schema");
}

#[tokio::test]
async fn a_text_reply_to_a_structured_request_falls_back_to_the_text_parser() {
    let text = "Workflow: Cancel a pending order\nAction: get_order_details({\"order_id\": \"{order_id}\"})\nAction: cancel_pending_order({\"order_id\": \"{order_id}\"})";
    // The client re-asks once when the reply does not match the schema; both answers are text.
    let (induction, _server) = run(Script::new().otherwise(Reply::text(text)), true).await;
    assert_eq!(induction.workflows.len(), 1, "{:?}", induction.skipped);
    assert_eq!(induction.workflows[0].description, "Cancel a pending order");
}

#[tokio::test]
async fn broken_replies_are_reported_and_nothing_is_stored() {
    for broken in ["I am sorry, I cannot help with that.", "{\"workflows\": [{\"description\": ", "Workflow: x\nAction: f(oops"] {
        let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::text(broken))).await;
        let model = HttpModel::new(HttpModelConfig::new("scripted", server.base_url(), "scripted-model")).unwrap();
        let prompts = render::prompts().unwrap();
        let lm_cfg = LmConfig {
            model: &model,
            prompts: &prompts,
            min_steps: 2,
            scope: None,
            structured: false,
            max_tokens: None,
            max_result_chars: 200,
        };
        let dir = tempfile::tempdir().unwrap();
        let mut store = MemoryStore::open(&dir.path().join("memory.db"), StoreConfig::standard()).unwrap();
        let offline = OfflineConfig { variant: Variant::Lm(&lm_cfg), scope: None, batch_size: 5 };
        let report = induce_offline(&mut store, &trajectories(), &offline).await.unwrap();
        assert!(report.added.is_empty(), "{broken:?}");
        assert_eq!(report.skipped.len(), 1, "{broken:?}");
        assert!(matches!(&report.skipped[0].reason, SkipReason::Unparseable { .. }), "{broken:?}: {:?}", report.skipped);
        assert_eq!(store.count(&Scope::default()).unwrap(), 0);
    }
}

#[tokio::test]
async fn offline_lm_induction_stores_what_validates_per_scope_batch() {
    // With one run per prompt every concrete value is copied from that run, so this
    // workflow abstracts the reason too.
    let mut workflow = good_workflow();
    workflow["steps"][1]["action"]["args"]["reason"] = json!("{reason}");
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::json(json!({"workflows": [workflow]})))).await;
    let model = HttpModel::new(HttpModelConfig::new("scripted", server.base_url(), "scripted-model")).unwrap();
    let prompts = render::prompts().unwrap();
    let lm_cfg = LmConfig {
        model: &model,
        prompts: &prompts,
        min_steps: 2,
        scope: None,
        structured: true,
        max_tokens: None,
        max_result_chars: 200,
    };
    let dir = tempfile::tempdir().unwrap();
    let mut store = MemoryStore::open(&dir.path().join("memory.db"), StoreConfig::standard()).unwrap();
    // Batches of one: two prompts, the same workflow twice, merged by dedup.
    let offline = OfflineConfig { variant: Variant::Lm(&lm_cfg), scope: None, batch_size: 1 };
    let report = induce_offline(&mut store, &trajectories(), &offline).await.unwrap();
    assert_eq!(server.chat_requests().len(), 2);
    assert_eq!(report.added.len(), 2);
    let retail = Scope { site: None, domain: Some("retail".to_owned()) };
    let stored = store.list(&retail).unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].provenance.trajectory_ids, ["t1", "t2"]);
    assert_eq!(store.provenances(&stored[0].id).unwrap().len(), 2);
}
