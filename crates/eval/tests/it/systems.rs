//! State isolation of the systems against the real τ²-bench retail MCP server, with the
//! ReAct agent driven by the scripted OpenAI-compatible server.

use std::sync::Arc;

use flowmem_eval::{ReactSystem, StateServer, System};
use flowmem_exec::{AgentConfig, IsolatedTools, Runtime, ToolBox, exec_prompts, visible_tools};
use flowmem_llm::{HttpModel, HttpModelConfig};
use flowmem_model::Record;
use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};
use flowmem_tools::StateIsolation;
use serde_json::Value;

use crate::evaluate::tau2_records;
use crate::task_check::tau2_registry;

fn db_of(server: &StateServer, key: &str) -> Value {
    let text = std::fs::read_to_string(server.state_path(key)).unwrap();
    serde_json::from_str::<Value>(&text).unwrap()["db"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_react_run_gets_a_fresh_hidden_state() {
    let state_dir = tempfile::tempdir().unwrap();
    let registry = tau2_registry("retail", state_dir.path()).await;
    let isolation = StateIsolation::tau2("flowmem-eval/run");
    let visible = visible_tools(&registry, Some(&isolation));
    assert!(visible.iter().any(|name| name == "cancel_pending_order"));
    assert!(!visible.iter().any(|name| name == "reset_state" || name == "get_call_log"), "{visible:?}");

    // A record whose golden log cancels an order: the agent makes that call, then answers.
    let records: Vec<Record> = tau2_records("retail");
    let record = records.iter().find(|r| r.orchestration.iter().any(|c| c.tool == "cancel_pending_order")).unwrap();
    let cancel = record.orchestration.iter().find(|c| c.tool == "cancel_pending_order").unwrap();
    let llm = ScriptedLlmServer::start(
        Script::new()
            .when(Match::after_tool_result(), Reply::text("The order is cancelled."))
            .otherwise(Reply::tool_call("cancel_pending_order", Value::Object(cancel.args.clone()))),
    )
    .await;
    let model = HttpModel::new(HttpModelConfig::new("scripted", llm.base_url(), "scripted-model")).unwrap();
    let runtime = Runtime {
        executor: Arc::new(model),
        models: Default::default(),
        tools: Arc::new(registry.clone()),
        prompts: Arc::new(exec_prompts(None).unwrap()),
        grounding: flowmem_exec::Grounding::default(),
    };
    let react = ReactSystem::new(
        "react",
        runtime,
        AgentConfig { max_steps: 3, instruction: None, guard: None },
        Some(isolation.clone()),
    );

    let server = StateServer::tau2(state_dir.path());
    for repeat in 0..2 {
        let run = react.run(record).await;
        let trace = &run.trace;
        assert_eq!(trace.error, None, "repeat {repeat}: {trace:?}");
        assert_eq!(trace.tool_calls.len(), 1);
        let call = &trace.tool_calls[0];
        // Cancelling twice in one state fails; it succeeds again only on a fresh state.
        assert!(!call.failed(), "repeat {repeat}: the order was not pending, so the state was not reset: {call:?}");
        assert!(call.args.get("state_key").is_none(), "the trace must not show the state key");
        assert!(call.same_call(cancel), "the agent's arguments changed on the way");
        assert_eq!(run.usage.calls, 2, "the counting model saw both agent steps");
    }
    let order_id = cancel.args["order_id"].as_str().unwrap();
    let order = &db_of(&server, &isolation.key)["orders"][order_id];
    assert_eq!(order["status"], "cancelled", "the cancellation reached the isolated state: {order}");

    // The agent was offered neither the state tools nor the state argument.
    for request in llm.chat_requests() {
        let tools = request.body["tools"].as_array().unwrap();
        assert!(
            !tools.iter().any(|t| t["function"]["name"] == "reset_state" || t["function"]["name"] == "get_call_log")
        );
        assert!(tools.iter().all(|t| t["function"]["parameters"]["properties"].get("state_key").is_none()));
    }
    registry.shutdown().await;
}

#[tokio::test]
async fn isolated_tools_hide_the_state_plumbing_and_reset_between_runs() {
    let state_dir = tempfile::tempdir().unwrap();
    let registry = tau2_registry("retail", state_dir.path()).await;
    let isolation = StateIsolation::tau2("flowmem-eval/run");
    let key = isolation.key.clone();
    let tools = IsolatedTools::new(Arc::new(registry.clone()), isolation);

    let definitions = tools.definitions();
    assert!(definitions.iter().any(|d| d.name == "cancel_pending_order"));
    assert!(!definitions.iter().any(|d| d.name == "reset_state" || d.name == "get_call_log"));
    for def in &definitions {
        assert!(def.parameters["properties"].get("state_key").is_none(), "{} still offers state_key", def.name);
    }

    // A record whose golden log cancels an order: the write lands in the isolation key.
    let records: Vec<Record> = tau2_records("retail");
    let record = records.iter().find(|r| r.orchestration.iter().any(|c| c.tool == "cancel_pending_order")).unwrap();
    tools.reset().await.unwrap();
    let server = StateServer::tau2(state_dir.path());
    let fresh = db_of(&server, &key);
    for call in &record.orchestration {
        let made = tools.call(&call.tool, call.args.clone()).await;
        assert!(made.args.get("state_key").is_none(), "the trace must not show the state key");
        assert!(made.same_call(call), "{} changed its arguments", call.tool);
    }
    let after = db_of(&server, &key);
    assert_ne!(fresh, after, "the cancellation did not reach the isolated state");
    tools.reset().await.unwrap();
    assert_eq!(db_of(&server, &key), fresh);
    registry.shutdown().await;
}
