//! The ReAct baseline: reason-act steps over real MCP tools, the same trace shape, and
//! the run-time guard that checks each call against a skeleton.

use std::sync::Arc;

use flowmem_exec::{
    AgentConfig, CallGuard, ExecEvent, GuardPolicy, JsonlTraceWriter, Observers, RecordingObserver, RunInput, run_agent,
};
use flowmem_mining::{ProcessTree, tree_to_petri_net};
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

fn guard(policy: GuardPolicy) -> CallGuard {
    let tree = ProcessTree::parse("->( 'get-sum', 'echo' )").unwrap();
    CallGuard::new(tree_to_petri_net(&tree), policy, "sum-then-echo")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_flags_a_call_off_the_skeleton_lets_it_run_and_writes_it_to_the_trace_file() {
    let script = Script::in_order([
        Reply::tool_call("echo", json!({"message": "early"})),
        Reply::tool_call("get-sum", json!({"a": 2, "b": 3})),
        Reply::tool_call("echo", json!({"message": "5"})),
        Reply::text("5"),
    ]);
    let llm = support::llm(script).await;
    let tools = support::everything().await;
    let runtime = support::runtime(&llm, tools.clone());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    let writer = Arc::new(JsonlTraceWriter::new(std::fs::File::create(&path).unwrap()));
    let log = Arc::new(RecordingObserver::default());
    let observers = Observers(vec![writer.clone(), log.clone()]);
    let cfg = AgentConfig { max_steps: 5, instruction: None, guard: Some(guard(GuardPolicy::Flag)) };
    let trace = run_agent(&runtime, &cfg, &input(), &observers).await;
    tools.shutdown().await;

    assert_eq!(trace.error, None, "{trace:#?}");
    let calls: Vec<&str> = trace.tool_calls.iter().map(|call| call.tool.as_str()).collect();
    assert_eq!(calls, ["echo", "get-sum", "echo"], "a flagged call still runs");
    assert_eq!(trace.tool_calls[0].result.as_ref().unwrap(), &json!("Echo: early"));
    // Only the stray first call deviates: the guard goes on from where the skeleton was.
    assert_eq!(trace.deviations.len(), 1, "{:?}", trace.deviations);
    let stray = &trace.deviations[0];
    assert_eq!((stray.index, stray.tool.as_deref(), stray.blocked), (0, Some("echo"), false));
    assert_eq!(stray.expected, ["get-sum"]);
    assert!(stray.call_id.is_some());
    let events = log.events();
    let flagged: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            ExecEvent::ToolDeviated { node_id, .. } => Some(node_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(flagged, ["step-0"]);

    drop(observers);
    Arc::try_unwrap(writer).ok().unwrap().finish().unwrap();
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&path).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let kinds: Vec<&str> =
        lines.iter().filter(|line| line["kind"] != "node").map(|line| line["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["deviation", "tool_call", "tool_call", "tool_call", "final"], "{lines:#?}");
    let line = lines.iter().find(|line| line["kind"] == "deviation").unwrap();
    assert_eq!((line["tool"].as_str(), line["expected"].clone()), (Some("echo"), json!(["get-sum"])));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_guard_answers_a_stray_call_without_running_it_and_flags_an_early_end() {
    let script = Script::in_order([
        Reply::tool_call("echo", json!({"message": "early"})),
        Reply::tool_call("get-sum", json!({"a": 2, "b": 3})),
        Reply::text("5"),
    ]);
    let llm = support::llm(script).await;
    let tools = support::everything().await;
    let runtime = support::runtime(&llm, tools.clone());
    let cfg = AgentConfig { max_steps: 5, instruction: None, guard: Some(guard(GuardPolicy::Block)) };
    let trace = run_agent(&runtime, &cfg, &input(), &RecordingObserver::default()).await;
    tools.shutdown().await;

    assert_eq!(trace.result.as_deref(), Some("5"), "{trace:#?}");
    let calls: Vec<&str> = trace.tool_calls.iter().map(|call| call.tool.as_str()).collect();
    assert_eq!(calls, ["get-sum"], "the blocked echo never ran");
    assert_eq!(trace.deviations.len(), 2, "{:?}", trace.deviations);
    let (blocked, end) = (&trace.deviations[0], &trace.deviations[1]);
    assert_eq!((blocked.index, blocked.tool.as_deref(), blocked.blocked), (0, Some("echo"), true));
    assert_eq!(blocked.expected, ["get-sum"]);
    // The answer came where the skeleton still wanted the echo.
    assert_eq!((end.index, end.tool.as_deref(), end.blocked), (2, None, false));
    assert_eq!(end.expected, ["echo"]);
    // The model was told why, and what the skeleton expected.
    let requests = llm.chat_requests();
    let told = requests[1].messages().iter().find(|message| message["role"] == "tool").cloned().unwrap();
    let text = told["content"].as_str().unwrap();
    assert!(
        text.contains("`echo` was blocked") && text.contains("sum-then-echo") && text.contains("get-sum"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_reply_is_asked_once_more_and_a_second_ends_the_run() {
    // Broken arguments, then a good call and the answer: the run goes on.
    let llm = support::llm(Script::in_order([
        Reply::tool_call_raw("echo", "{\"message\": "),
        Reply::tool_call("echo", json!({"message": "5"})),
        Reply::text("It is 5."),
    ]))
    .await;
    let tools = support::everything().await;
    let runtime = support::runtime(&llm, tools.clone());
    let cfg = AgentConfig { max_steps: 5, instruction: None, guard: None };
    let trace = run_agent(&runtime, &cfg, &input(), &RecordingObserver::default()).await;
    assert_eq!(trace.error, None, "{trace:#?}");
    assert_eq!(trace.result.as_deref(), Some("It is 5."));
    assert_eq!(trace.tool_calls.len(), 1);
    let requests = llm.chat_requests();
    assert_eq!(requests.len(), 3);
    let note = requests[1].last_text("user").unwrap();
    assert!(note.starts_with("Your last reply could not be used: the arguments of `echo`"), "{note}");
    // The note was for that step only: the next step's conversation does not carry it.
    assert!(
        !requests[2].messages().iter().any(|m| m["content"].as_str().is_some_and(|t| t.contains("could not be used")))
    );

    // Two unusable replies in one step end the run with the second's error.
    let llm = support::llm(Script::new().otherwise(Reply::tool_call_raw("echo", "[1]"))).await;
    let runtime = support::runtime(&llm, tools.clone());
    let trace = run_agent(&runtime, &cfg, &input(), &RecordingObserver::default()).await;
    tools.shutdown().await;
    let error = trace.error.unwrap_or_default();
    assert!(error.starts_with("agent step 0 failed") && error.contains("not a JSON object"), "{error}");
    assert_eq!(llm.chat_requests().len(), 2, "one re-ask, not more");
}

/// Under `context_chars`, a step sends the newest tool results that fit and a note in
/// place of each earlier one, with its call id kept; the trace keeps every result whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn earlier_results_are_left_out_to_fit_the_context() {
    let long = "x".repeat(60);
    let llm = support::llm(Script::in_order([
        Reply::tool_call("echo", json!({"message": format!("first {long}")})),
        Reply::tool_call("echo", json!({"message": format!("second {long}")})),
        Reply::tool_call("echo", json!({"message": format!("third {long}")})),
        Reply::text("Done."),
    ]))
    .await;
    let tools = support::everything().await;
    let mut runtime = support::runtime(&llm, tools.clone());
    let mut prompts = flowmem_exec::exec_prompts(None).expect("templates register");
    // Two results of about 75 characters fit in 160, three do not.
    flowmem_exec::limit_context(&mut prompts, 160);
    runtime.prompts = Arc::new(prompts);
    let cfg = AgentConfig { max_steps: 5, instruction: None, guard: None };
    let trace = run_agent(&runtime, &cfg, &input(), &RecordingObserver::default()).await;
    tools.shutdown().await;
    assert_eq!(trace.result.as_deref(), Some("Done."), "{trace:#?}");

    let requests = llm.chat_requests();
    let results = |i: usize| -> Vec<(String, String)> {
        requests[i]
            .messages()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| (m["tool_call_id"].as_str().unwrap().to_owned(), m["content"].as_str().unwrap().to_owned()))
            .collect()
    };
    assert!(results(2).iter().all(|(_, text)| text.starts_with("Echo: ")), "two fit: {:?}", results(2));
    let last = results(3);
    assert_eq!(last.len(), 3, "every call keeps a result");
    assert!(last[0].1.starts_with("(this result, ") && last[0].1.contains("left out"), "{last:?}");
    assert!(last[1].1.starts_with("Echo: second") && last[2].1.starts_with("Echo: third"), "{last:?}");
    let assistant_ids: Vec<String> = requests[3]
        .messages()
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .flat_map(|calls| calls.iter().map(|c| c["id"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(assistant_ids, last.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>());
    // The trace keeps the first result whole.
    assert!(trace.tool_calls[0].result.as_ref().unwrap().to_string().contains("first"));
}
