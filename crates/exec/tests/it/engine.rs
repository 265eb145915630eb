//! The engine over the scripted LLM server and the real `server-everything` MCP server:
//! every node kind and control construct, routes taken and skipped, retries, overlap,
//! hint enforcement, and complete traces on failure.

use std::sync::Arc;
use std::time::Duration;

use flowmem_exec::{ExecEvent, JsonlTraceWriter, Observers, RecordingObserver, RunInput, run};
use flowmem_model::{NodeObservation, Trace, TraceEvent};
use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};
use serde_json::json;

use crate::support;

fn input(query: &str) -> RunInput {
    RunInput { id: "q1".to_owned(), query: query.to_owned() }
}

fn observations<'t>(trace: &'t Trace, node_id: &str) -> Vec<&'t NodeObservation> {
    trace.observations.iter().filter(|observation| observation.node_id == node_id).collect()
}

fn skipped(events: &[ExecEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            ExecEvent::NodeSkipped { node_id, .. } => Some(node_id.clone()),
            _ => None,
        })
        .collect()
}

/// Every node kind: plan, extract, reason, verify, judge, synthesize LLM nodes; tool
/// nodes; branch, parallel, join and loop control nodes. `route_to` is the judge's choice.
fn everything_graph() -> serde_json::Value {
    json!({
        "name": "everything",
        "nodes": [
            {"id": "plan", "kind": "llm", "role": "plan", "instruction": "NODE-plan"},
            {"id": "fan", "kind": "parallel"},
            {"id": "say", "kind": "tool", "hints": ["echo"], "instruction": "NODE-say: echo the plan {{ plan }}"},
            {"id": "sum", "kind": "tool", "hints": ["get-sum"], "instruction": "NODE-sum"},
            {"id": "facts", "kind": "llm", "role": "extract", "instruction": "NODE-facts"},
            {"id": "join", "kind": "join"},
            {"id": "retry", "kind": "loop", "max_iterations": 3, "until": {"type": "tool_succeeded"}},
            {"id": "attempt", "kind": "tool", "hints": ["get-sum"], "instruction": "NODE-attempt"},
            {"id": "check", "kind": "llm", "role": "verify", "instruction": "NODE-check"},
            {"id": "route", "kind": "branch", "condition": {"type": "judge", "question": "ROUTE-Q: is {{ query }} answered?"}},
            {"id": "think", "kind": "llm", "role": "reason", "instruction": "NODE-think"},
            {"id": "decide", "kind": "llm", "role": "judge", "instruction": "NODE-decide"},
            {"id": "answer", "kind": "llm", "role": "synthesize", "instruction": "NODE-answer"}
        ],
        "edges": [
            {"from": "plan", "to": "fan"},
            {"from": "fan", "to": "say"},
            {"from": "fan", "to": "sum"},
            {"from": "fan", "to": "facts"},
            {"from": "say", "to": "join"},
            {"from": "sum", "to": "join"},
            {"from": "facts", "to": "join"},
            {"from": "join", "to": "retry"},
            {"from": "retry", "to": "attempt", "label": "body"},
            {"from": "attempt", "to": "retry", "kind": "back"},
            {"from": "retry", "to": "check", "label": "exit"},
            {"from": "check", "to": "route"},
            {"from": "route", "to": "think", "label": "more"},
            {"from": "route", "to": "answer", "label": "done"},
            {"from": "think", "to": "decide"},
            {"from": "decide", "to": "answer"}
        ],
        "entry": "plan",
        "exit": "answer"
    })
}

fn everything_script(route: &str) -> Script {
    Script::new()
        .when(Match::last_user_contains("NODE-plan"), Reply::text("1. echo 2. add").usage(11, 3))
        .when(Match::last_user_contains("NODE-say"), Reply::tool_call("echo", json!({"message": "hello"})))
        .when(Match::last_user_contains("NODE-sum"), Reply::tool_call("get-sum", json!({"a": 2, "b": 3})))
        .when(Match::last_user_contains("NODE-facts"), Reply::text("a: 2"))
        .when_seq(
            Match::last_user_contains("NODE-attempt"),
            [
                // A string where a number belongs: the tool call fails, and the loop retries.
                Reply::tool_call("get-sum", json!({"a": 1, "b": "two"})),
                Reply::tool_call("get-sum", json!({"a": 1, "b": 2})),
            ],
        )
        .when(Match::last_user_contains("NODE-check"), Reply::text("OK"))
        .when(Match::last_user_contains("ROUTE-Q"), Reply::json(json!({"choice": route})))
        .when(Match::last_user_contains("NODE-think"), Reply::text("thinking"))
        .when(Match::last_user_contains("NODE-decide"), Reply::text("go on"))
        .when(Match::last_user_contains("NODE-answer"), Reply::text("The sum is 3.").usage(40, 5))
}

/// Runs the graph of every node kind on "add 1 and 2", its branch answering `route`, and
/// shuts the tools down.
async fn run_everything(route: &str) -> (ScriptedLlmServer, Trace, RecordingObserver) {
    let llm = support::llm(everything_script(route)).await;
    let tools = support::everything().await;
    let plan = support::plan(everything_graph(), support::runtime(&llm, tools.clone()));
    let log = RecordingObserver::default();
    let trace = run(&plan, &input("add 1 and 2"), &log).await;
    tools.shutdown().await;
    (llm, trace, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_kind_runs_and_the_branch_not_chosen_is_skipped() {
    let (llm, trace, log) = run_everything("done").await;

    assert_eq!(trace.error, None, "{trace:#?}");
    assert_eq!(trace.result.as_deref(), Some("The sum is 3."));
    // π̂: echo and get-sum in parallel, then the failed and the successful attempt.
    let names: Vec<&str> = trace.tool_calls.iter().map(|call| call.tool.as_str()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(names[..2].contains(&"echo") && names[..2].contains(&"get-sum"), "{names:?}");
    let echo = trace.tool_calls.iter().find(|call| call.tool == "echo").unwrap();
    assert!(echo.result.as_ref().unwrap().to_string().contains("hello"), "{echo:?}");
    let sum = trace.tool_calls[..2].iter().find(|call| call.tool == "get-sum").unwrap();
    assert!(sum.result.as_ref().unwrap().to_string().contains('5'), "{sum:?}");
    assert!(trace.tool_calls[2].failed(), "{:?}", trace.tool_calls[2]);
    assert!(!trace.tool_calls[3].failed(), "{:?}", trace.tool_calls[3]);
    // The branch took `done`: `think` and `decide` were skipped, never run.
    let events = log.events();
    assert_eq!(skipped(&events), ["think", "decide"]);
    assert!(observations(&trace, "think").is_empty());
    let route = observations(&trace, "route");
    assert_eq!(route[0].output.as_deref(), Some("done"));
    assert!(route[0].prompt.as_ref().unwrap().contains("ROUTE-Q: is add 1 and 2 answered?"), "{:?}", route[0].prompt);
    // Every other node left an observation with its kind.
    for (node_id, kind) in [
        ("plan", "llm:plan"),
        ("fan", "parallel"),
        ("say", "tool"),
        ("sum", "tool"),
        ("facts", "llm:extract"),
        ("join", "join"),
        ("check", "llm:verify"),
        ("answer", "llm:synthesize"),
    ] {
        let found = observations(&trace, node_id);
        assert_eq!(found.len(), 1, "{node_id}");
        assert_eq!(found[0].node_kind, kind, "{node_id}");
        assert_eq!(found[0].error, None, "{node_id}");
    }
    // Inputs, prompts, tokens and tool calls are observed.
    let plan_obs = observations(&trace, "plan")[0];
    assert_eq!((plan_obs.prompt_tokens, plan_obs.completion_tokens), (11, 3));
    let say = observations(&trace, "say")[0];
    assert!(say.prompt.as_ref().unwrap().contains("NODE-say: echo the plan 1. echo 2. add"), "{say:?}");
    assert_eq!(say.tool_call.as_ref().unwrap().args["message"], "hello");
    let answer = observations(&trace, "answer")[0];
    // The input refers to the upstream observations by entry number, copying nothing.
    let upstream: Vec<&str> = trace.inputs_of(answer).iter().map(|item| item.node_id.as_str()).collect();
    for node_id in ["plan", "say", "sum", "facts", "attempt", "check"] {
        assert!(upstream.contains(&node_id), "{node_id} missing from {upstream:?}");
    }
    // Tool nodes offered only their hinted tool and required a call.
    let requests = llm.chat_requests();
    let sum_request = requests
        .iter()
        .find(|request| request.last_text("user").is_some_and(|text| text.contains("NODE-sum")))
        .unwrap();
    assert_eq!(sum_request.body["tools"].as_array().unwrap().len(), 1);
    assert_eq!(sum_request.body["tools"][0]["function"]["name"], "get-sum");
    assert_eq!(sum_request.body["tool_choice"], "required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_route_runs_its_nodes_and_skips_the_direct_edge() {
    let (_llm, trace, log) = run_everything("more").await;
    assert_eq!(trace.error, None, "{trace:#?}");
    assert_eq!(observations(&trace, "think").len(), 1);
    assert_eq!(observations(&trace, "decide")[0].node_kind, "llm:judge");
    // `answer` joins the skipped `done` edge and the active one from `decide`.
    assert_eq!(observations(&trace, "answer").len(), 1);
    assert!(skipped(&log.events()).is_empty());
    assert_eq!(trace.result.as_deref(), Some("The sum is 3."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_retries_after_a_tool_error_and_then_succeeds() {
    let (_llm, trace, _log) = run_everything("done").await;
    let attempts = observations(&trace, "attempt");
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    assert_eq!((attempts[0].iteration, attempts[1].iteration), (0, 1));
    let first_error = attempts[0].error.as_deref().unwrap();
    assert!(first_error.contains("/b"), "the schema violation names the argument: {first_error}");
    assert_eq!(attempts[1].error, None);
    assert!(attempts[1].output.as_deref().unwrap().contains('3'), "{:?}", attempts[1].output);
    // The second attempt saw the first one's error in its context.
    let seen: Vec<bool> = trace
        .inputs_of(attempts[1])
        .iter()
        .filter(|item| item.node_id == "attempt")
        .map(|item| item.error.is_some())
        .collect();
    assert_eq!(seen, [true]);
    let decisions: Vec<&str> =
        observations(&trace, "retry").iter().filter_map(|observation| observation.output.as_deref()).collect();
    assert_eq!(decisions.len(), 3, "{decisions:?}");
    assert!(decisions[1].starts_with("repeat after 1 of at most 3 runs"), "{decisions:?}");
    assert!(decisions[2].starts_with("exit after 2 of at most 3 runs (condition holds)"), "{decisions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_stops_at_its_bound_and_a_judge_can_end_it_early() {
    let graph = json!({
        "nodes": [
            {"id": "lp", "kind": "loop", "max_iterations": 2, "until": {"type": "judge", "question": "STOP-Q?"}},
            {"id": "work", "kind": "llm", "role": "reason", "instruction": "NODE-work"},
            {"id": "answer", "kind": "llm", "role": "synthesize", "instruction": "NODE-answer"}
        ],
        "edges": [
            {"from": "lp", "to": "work", "label": "body"},
            {"from": "work", "to": "lp", "kind": "back"},
            {"from": "lp", "to": "answer", "label": "exit"}
        ],
        "entry": "lp",
        "exit": "answer"
    });
    let script = Script::new()
        .when(Match::last_user_contains("NODE-work"), Reply::text("worked"))
        .when(Match::last_user_contains("STOP-Q"), Reply::json(json!({"choice": "no"})))
        .when(Match::last_user_contains("NODE-answer"), Reply::text("done"));
    let llm = support::llm(script).await;
    let tools = support::everything().await;
    let plan = support::plan(graph.clone(), support::runtime(&llm, tools.clone()));
    let trace = run(&plan, &input("q"), &RecordingObserver::default()).await;
    assert_eq!(trace.error, None, "{trace:#?}");
    assert_eq!(observations(&trace, "work").len(), 2, "the bound stops a judge that never says yes");

    let script = Script::new()
        .when(Match::last_user_contains("NODE-work"), Reply::text("worked"))
        .when(Match::last_user_contains("STOP-Q"), Reply::json(json!({"choice": "yes"})))
        .when(Match::last_user_contains("NODE-answer"), Reply::text("done"));
    let llm = support::llm(script).await;
    let plan = support::plan(graph, support::runtime(&llm, tools.clone()));
    let trace = run(&plan, &input("q"), &RecordingObserver::default()).await;
    tools.shutdown().await;
    assert_eq!(observations(&trace, "work").len(), 1, "the judge said stop after one run");
    assert_eq!(trace.result.as_deref(), Some("done"));
}

/// A judged loop on a route the branch did not take is skipped with its body: its judge
/// is never asked, it records no run, and what follows its exit on that route stays
/// skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_on_a_skipped_route_is_not_judged() {
    let graph = json!({
        "nodes": [
            {"id": "pick", "kind": "branch", "condition": {"type": "judge", "question": "PICK-Q?"}},
            {"id": "lp", "kind": "loop", "max_iterations": 3, "until": {"type": "judge", "question": "STOP-Q?"}},
            {"id": "work", "kind": "llm", "role": "reason", "instruction": "NODE-work"},
            {"id": "after", "kind": "llm", "role": "reason", "instruction": "NODE-after"},
            {"id": "met", "kind": "join"},
            {"id": "answer", "kind": "llm", "role": "synthesize", "instruction": "NODE-answer"}
        ],
        "edges": [
            {"from": "pick", "to": "lp", "label": "work"},
            {"from": "pick", "to": "met", "label": "skip"},
            {"from": "lp", "to": "work", "label": "body"},
            {"from": "work", "to": "lp", "kind": "back"},
            {"from": "lp", "to": "after", "label": "exit"},
            {"from": "after", "to": "met"},
            {"from": "met", "to": "answer"}
        ],
        "entry": "pick",
        "exit": "answer"
    });
    let script = Script::new()
        .when(Match::last_user_contains("PICK-Q"), Reply::json(json!({"choice": "skip"})))
        .when(Match::last_user_contains("STOP-Q"), Reply::json(json!({"choice": "yes"})))
        .when(Match::last_user_contains("NODE-answer"), Reply::text("done"))
        .otherwise(Reply::text("ran"));
    let llm = support::llm(script).await;
    let tools = support::everything().await;
    let plan = support::plan(graph, support::runtime(&llm, tools.clone()));
    let observer = RecordingObserver::default();
    let trace = run(&plan, &input("q"), &observer).await;
    tools.shutdown().await;
    assert_eq!(trace.error, None, "{trace:#?}");
    assert_eq!(trace.result.as_deref(), Some("done"));
    let asked: Vec<String> =
        llm.chat_requests().iter().filter_map(|r| r.last_text("user").map(str::to_owned)).collect();
    assert_eq!(asked.len(), 2, "the branch's judge and the answer only: {asked:?}");
    assert!(asked.iter().all(|text| !text.contains("STOP-Q")), "{asked:?}");
    assert!(observations(&trace, "lp").is_empty(), "a skipped loop records no run: {:?}", observations(&trace, "lp"));
    let skipped = skipped(&observer.events());
    for node in ["lp", "work", "after"] {
        assert!(skipped.contains(&node.to_owned()), "{node} is skipped: {skipped:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_members_overlap_in_time() {
    let delay = Duration::from_millis(400);
    let graph = json!({
        "nodes": [
            {"id": "fan", "kind": "parallel"},
            {"id": "m1", "kind": "llm", "role": "reason", "instruction": "NODE-m1"},
            {"id": "m2", "kind": "llm", "role": "reason", "instruction": "NODE-m2"},
            {"id": "m3", "kind": "tool", "hints": ["echo"], "instruction": "NODE-m3"},
            {"id": "join", "kind": "join"}
        ],
        "edges": [
            {"from": "fan", "to": "m1"}, {"from": "fan", "to": "m2"}, {"from": "fan", "to": "m3"},
            {"from": "m1", "to": "join"}, {"from": "m2", "to": "join"}, {"from": "m3", "to": "join"}
        ],
        "entry": "fan",
        "exit": "join"
    });
    let script = Script::new()
        .when(Match::last_user_contains("NODE-m1"), Reply::text("one").delay(delay))
        .when(Match::last_user_contains("NODE-m2"), Reply::text("two").delay(delay))
        .when(Match::last_user_contains("NODE-m3"), Reply::tool_call("echo", json!({"message": "three"})).delay(delay));
    let llm = support::llm(script).await;
    let tools = support::everything().await;
    let plan = support::plan(graph, support::runtime(&llm, tools.clone()));
    let trace = run(&plan, &input("q"), &RecordingObserver::default()).await;
    tools.shutdown().await;
    assert_eq!(trace.error, None, "{trace:#?}");
    let members: Vec<&NodeObservation> = ["m1", "m2", "m3"].iter().map(|id| observations(&trace, id)[0]).collect();
    let latest_start = members.iter().map(|observation| observation.started_at_ms).fold(f64::MIN, f64::max);
    let earliest_end =
        members.iter().map(|observation| observation.started_at_ms + observation.latency_ms).fold(f64::MAX, f64::min);
    assert!(latest_start < earliest_end, "members did not overlap: {members:#?}");
    assert!(members.iter().all(|observation| observation.latency_ms >= 400.0));
    assert_eq!(llm.max_in_flight(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_outside_the_hints_is_rejected_and_the_trace_stays_complete() {
    let graph = json!({
        "nodes": [
            {"id": "plan", "kind": "llm", "role": "plan", "instruction": "NODE-plan"},
            {"id": "fan", "kind": "parallel"},
            {"id": "bad", "kind": "tool", "hints": ["echo"], "instruction": "NODE-bad"},
            {"id": "good", "kind": "tool", "hints": ["get-sum"], "instruction": "NODE-good"},
            {"id": "join", "kind": "join"},
            {"id": "answer", "kind": "llm", "role": "synthesize", "instruction": "NODE-answer"}
        ],
        "edges": [
            {"from": "plan", "to": "fan"}, {"from": "fan", "to": "bad"}, {"from": "fan", "to": "good"},
            {"from": "bad", "to": "join"}, {"from": "good", "to": "join"}, {"from": "join", "to": "answer"}
        ],
        "entry": "plan",
        "exit": "answer"
    });
    let script = Script::new()
        .when(Match::last_user_contains("NODE-plan"), Reply::text("plan"))
        // `get-sum` exists, but is not among `bad`'s hints.
        .when(Match::last_user_contains("NODE-bad"), Reply::tool_call("get-sum", json!({"a": 1, "b": 1})))
        .when(
            Match::last_user_contains("NODE-good"),
            Reply::tool_call("get-sum", json!({"a": 4, "b": 4})).delay(Duration::from_millis(200)),
        )
        .when(Match::last_user_contains("NODE-answer"), Reply::text("never"));
    let llm = support::llm(script).await;
    let tools = support::everything().await;
    let plan = support::plan(graph, support::runtime(&llm, tools.clone()));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    let writer = Arc::new(JsonlTraceWriter::new(std::fs::File::create(&path).unwrap()));
    let log = Arc::new(RecordingObserver::default());
    let observers = Observers(vec![writer.clone(), log.clone()]);
    let trace = run(&plan, &input("q"), &observers).await;
    tools.shutdown().await;

    let error = trace.error.as_deref().unwrap();
    assert!(
        error.starts_with(
            "node `bad` failed: the model chose tool `get-sum`, which is outside the allowed tools [echo]"
        ),
        "{error}"
    );
    let bad = observations(&trace, "bad")[0];
    assert_eq!(bad.error.as_deref(), Some(&error["node `bad` failed: ".len()..]));
    assert!(bad.tool_call.as_ref().unwrap().error.as_deref().unwrap().starts_with("rejected:"));
    // The rejected call never ran; the sibling in flight finished and was recorded.
    assert_eq!(trace.tool_calls.len(), 1, "{:?}", trace.tool_calls);
    assert_eq!(trace.tool_calls[0].args["a"], 4);
    assert_eq!(observations(&trace, "good")[0].error, None);
    assert_eq!(observations(&trace, "plan").len(), 1);
    assert!(observations(&trace, "answer").is_empty());
    assert_eq!(trace.result, None);
    assert!(matches!(log.events().last(), Some(ExecEvent::RunFinished { .. })));

    drop(observers);
    let writer = Arc::try_unwrap(writer).ok().unwrap();
    writer.finish().unwrap();
    let lines: Vec<TraceEvent> =
        std::fs::read_to_string(&path).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let kinds: Vec<&str> = lines
        .iter()
        .map(|line| match line {
            TraceEvent::Node(_) => "node",
            TraceEvent::ToolCall { .. } => "tool_call",
            TraceEvent::Final { .. } => "final",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds.iter().filter(|kind| **kind == "node").count(), trace.observations.len());
    assert_eq!(kinds.iter().filter(|kind| **kind == "tool_call").count(), 1);
    assert_eq!(kinds.last(), Some(&"final"));
    let TraceEvent::Final { error: Some(final_error), .. } = lines.last().unwrap() else { panic!("{lines:?}") };
    assert_eq!(final_error, error);
    let raw = std::fs::read_to_string(&path).unwrap();
    let call_line = raw.lines().find(|line| line.contains("\"kind\":\"tool_call\"")).unwrap();
    let call: serde_json::Value = serde_json::from_str(call_line).unwrap();
    assert_eq!(call["tool"], "get-sum");
    assert_eq!(call["args"], json!({"a": 4, "b": 4}));
    assert!(call["result"].is_string() || call["result"].is_object(), "{call}");
    assert_eq!(call["node_id"], "good");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_model_ends_the_run_with_every_observation_kept() {
    let graph = json!({
        "nodes": [
            {"id": "plan", "kind": "llm", "role": "plan", "instruction": "NODE-plan"},
            {"id": "act", "kind": "tool", "instruction": "NODE-act"},
            {"id": "answer", "kind": "llm", "role": "synthesize", "instruction": "NODE-answer"}
        ],
        "edges": [{"from": "plan", "to": "act"}, {"from": "act", "to": "answer"}],
        "entry": "plan",
        "exit": "answer"
    });
    let script = Script::new()
        .when(Match::last_user_contains("NODE-plan"), Reply::text("plan"))
        .when(Match::last_user_contains("NODE-act"), Reply::tool_call("echo", json!({"message": "hi"})))
        .when(Match::last_user_contains("NODE-answer"), Reply::status(400, "context length exceeded"));
    let llm = support::llm(script).await;
    let tools = support::everything().await;
    let plan = support::plan(graph, support::runtime(&llm, tools.clone()));
    // An unhinted tool node may use any available tool.
    assert!(plan.bound_tools("act").unwrap().len() > 5);
    let trace = run(&plan, &input("q"), &RecordingObserver::default()).await;
    tools.shutdown().await;
    assert!(trace.error.as_deref().unwrap().starts_with("node `answer` failed: "), "{:?}", trace.error);
    let ids: Vec<&str> = trace.observations.iter().map(|observation| observation.node_id.as_str()).collect();
    assert_eq!(ids, ["plan", "act", "answer"]);
    assert!(observations(&trace, "answer")[0].error.as_deref().unwrap().contains("400"));
    assert!(observations(&trace, "answer")[0].prompt.is_some(), "the rendered prompt is kept on failure");
    assert_eq!(trace.tool_calls.len(), 1);
    assert_eq!(trace.tool_calls[0].result.as_ref().unwrap(), &json!("Echo: hi"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_node_asks_once_more_after_arguments_that_are_not_json() {
    let graph = json!({
        "nodes": [
            {"id": "act", "kind": "tool", "hints": ["echo"], "instruction": "NODE-act"},
            {"id": "answer", "kind": "llm", "role": "synthesize", "instruction": "NODE-answer"}
        ],
        "edges": [{"from": "act", "to": "answer"}],
        "entry": "act",
        "exit": "answer"
    });
    let script = Script::new()
        .when(Match::last_user_contains("NODE-act"), Reply::tool_call_raw("echo", "{\"message\": \"hi"))
        .when(Match::last_user_contains("could not be used"), Reply::tool_call("echo", json!({"message": "hi"})))
        .when(Match::last_user_contains("NODE-answer"), Reply::text("Said hi."));
    let llm = support::llm(script).await;
    let tools = support::everything().await;
    let plan = support::plan(graph, support::runtime(&llm, tools.clone()));
    let trace = run(&plan, &input("q"), &RecordingObserver::default()).await;
    assert_eq!(trace.error, None, "{trace:#?}");
    assert_eq!(trace.result.as_deref(), Some("Said hi."));
    assert_eq!(trace.tool_calls.len(), 1);
    let requests = llm.chat_requests();
    let note = requests[1].last_text("user").unwrap();
    assert!(note.starts_with("Your last reply could not be used: the arguments of `echo`"), "{note}");
    assert!(requests[1].messages()[0]["content"].as_str().unwrap().contains("NODE-act"), "the same node's request");

    // A second unusable reply fails the node.
    let script = Script::new().when(Match::last_user_contains("NODE-act"), Reply::tool_call_raw("echo", "[]"));
    let llm =
        support::llm(script.when(Match::last_user_contains("could not"), Reply::tool_call_raw("echo", "7"))).await;
    let plan = support::plan(graph_of_one_tool(), support::runtime(&llm, tools.clone()));
    let trace = run(&plan, &input("q"), &RecordingObserver::default()).await;
    tools.shutdown().await;
    let error = trace.error.unwrap_or_default();
    assert!(error.starts_with("node `act` failed") && error.contains("not a JSON object"), "{error}");
    assert_eq!(llm.chat_requests().len(), 2, "one re-ask, not more");
}

fn graph_of_one_tool() -> serde_json::Value {
    json!({
        "nodes": [{"id": "act", "kind": "tool", "hints": ["echo"], "instruction": "NODE-act"}],
        "edges": [],
        "entry": "act",
        "exit": "act"
    })
}
