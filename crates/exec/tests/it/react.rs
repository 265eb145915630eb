//! The ReAct baseline: reason-act steps over real MCP tools, the same trace shape.

use flowmem_exec::{AgentConfig, ExecEvent, RecordingObserver, RunInput, run_agent};
use flowmem_testsupport::{Reply, Script};
use serde_json::json;

use crate::support;

fn input() -> RunInput {
    RunInput { id: "a1".to_owned(), query: "What is 2 plus 3? Then echo it.".to_owned() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_calls_tools_until_it_answers() {
    let script = Script::in_order([
        Reply::tool_call("get-sum", json!({"a": 2, "b": 3})).usage(50, 9),
        Reply::tool_calls([("echo", json!({"message": "5"})), ("get-sum", json!({"a": 1, "b": "x"}))]),
        Reply::text("2 plus 3 is 5.").usage(90, 6),
    ]);
    let llm = support::llm(script).await;
    let tools = support::everything().await;
    let runtime = support::runtime(&llm, tools.clone());
    let log = RecordingObserver::default();
    let cfg = AgentConfig { max_steps: 5, instruction: Some("MEMORY-MARK".to_owned()), guard: None };
    let trace = run_agent(&runtime, &cfg, &input(), &log).await;
    tools.shutdown().await;

    assert_eq!(trace.error, None, "{trace:#?}");
    assert_eq!(trace.result.as_deref(), Some("2 plus 3 is 5."));
    let calls: Vec<&str> = trace.tool_calls.iter().map(|call| call.tool.as_str()).collect();
    assert_eq!(calls, ["get-sum", "echo", "get-sum"]);
    assert!(trace.tool_calls[0].result.as_ref().unwrap().to_string().contains('5'));
    assert!(trace.tool_calls[2].failed(), "bad arguments are an observation, not the end");
    let steps: Vec<&str> = trace.observations.iter().map(|observation| observation.node_id.as_str()).collect();
    assert_eq!(steps, ["step-0", "step-1", "step-2"]);
    assert_eq!(trace.observations[0].node_kind, "agent:step");
    assert_eq!((trace.observations[0].prompt_tokens, trace.observations[0].completion_tokens), (50, 9));
    assert_eq!(trace.observations[0].tool_call.as_ref().unwrap().tool, "get-sum");
    // The system prompt carries the instruction; the tool results go back to the model.
    let requests = llm.chat_requests();
    assert!(requests[0].messages()[0]["content"].as_str().unwrap().contains("MEMORY-MARK"));
    assert!(requests[0].body["tools"].as_array().unwrap().len() > 5, "every tool is offered");
    let last = requests[2].messages();
    let tool_messages: Vec<&serde_json::Value> = last.iter().filter(|message| message["role"] == "tool").collect();
    assert_eq!(tool_messages.len(), 3);
    assert!(tool_messages[2]["content"].as_str().unwrap().starts_with("error: "), "{tool_messages:?}");
    let n_tool_events = log.events().iter().filter(|event| matches!(event, ExecEvent::ToolCalled { .. })).count();
    assert_eq!(n_tool_events, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_stops_at_the_step_limit_with_the_trace_kept() {
    let llm = support::llm(Script::new().otherwise(Reply::tool_call("echo", json!({"message": "again"})))).await;
    let tools = support::everything().await;
    let runtime = support::runtime(&llm, tools.clone());
    let cfg = AgentConfig { max_steps: 3, instruction: None, guard: None };
    let trace = run_agent(&runtime, &cfg, &input(), &RecordingObserver::default()).await;
    tools.shutdown().await;
    assert_eq!(trace.error.as_deref(), Some("no final answer within 3 steps"));
    assert_eq!(trace.result, None);
    assert_eq!(trace.observations.len(), 3);
    assert_eq!(trace.tool_calls.len(), 3);
    assert!(trace.tool_calls.iter().all(|call| call.result.as_ref().unwrap() == &json!("Echo: again")));
}
