//! The OTLP/HTTP receiver of `flowmem serve --otlp`, started for real on loopback:
//! an agent instrumented with OpenTelemetry's GenAI instrumentation (the official
//! `openai` SDK, `opentelemetry-instrumentation-openai-v2`, `opentelemetry-util-genai`)
//! sends its spans with the OpenTelemetry SDK's own OTLP/HTTP exporters, through
//! `scripts/reference/otlp_fixtures.py`, the script that made the importer's fixtures;
//! and hostile requests, built from those fixtures' real spans, get collector answers.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowmem_model::{Action, Trajectory};
use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer, deps_dir, order_loop, repo_root, require_path};
use serde_json::{Value, json};

use crate::serve::{Served, create_token};
use crate::support::TestDir;

/// The judge approves every run; the agent's model plays the order loop.
fn script() -> Script {
    let judge = Script::new()
        .models(["scripted-model"])
        .when(Match::wants_json(), Reply::json(json!({"success": true, "reason": "the order was cancelled as asked"})));
    order_loop(judge).otherwise(Reply::text("unexpected request"))
}

fn base(served: &Served) -> String {
    served.url.trim_end_matches("/mcp").to_owned()
}

fn start(dir: &TestDir, server: &ScriptedLlmServer, extra: &[&str]) -> Served {
    start_on(dir, server, "memory.db", extra)
}

/// [`start`] on the memory `memory`: a file in `dir`, or a PostgreSQL URL.
fn start_on(dir: &TestDir, server: &ScriptedLlmServer, memory: &str, extra: &[&str]) -> Served {
    let base_url = server.base_url();
    let mut args = vec!["-v", "--memory", memory, "--otlp", "--otlp-scope", "retail"];
    args.extend_from_slice(extra);
    Served::start(dir, &args, &[("OPENAI_BASE_URL", base_url.as_str()), ("FLOWMEM_MODEL", "scripted-model")])
}

fn fixture(name: &str) -> PathBuf {
    repo_root().join("crates/model/tests/fixtures/otlp").join(name)
}

/// Runs one variant of the reference script with its exporters pointed at `endpoint`,
/// and returns what the agent did (its runs).
fn run_instrumented_agent(variant: &str, llm: &str, endpoint: &str, token: &str, out: &std::path::Path) -> Vec<Value> {
    let python = require_path(&deps_dir().join("otel-venv/bin/python"), "bash scripts/setup/25-otel-sdk.sh");
    let script = repo_root().join("scripts/reference/otlp_fixtures.py");
    let output = Command::new(python)
        .arg(script)
        .args(["--variant", variant])
        .arg(out)
        .env("SCRIPTED_BASE_URL", llm)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_EXPORTER_OTLP_HEADERS", format!("Authorization=Bearer%20{token}"))
        .output()
        .expect("running the instrumented agent");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{variant}: {stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let last = stdout.trim().lines().last().unwrap_or("");
    serde_json::from_str::<Value>(last)
        .unwrap_or_else(|err| panic!("{variant} printed no runs ({err}): {stdout}"))
        .as_array()
        .expect("a list of runs")
        .clone()
}

async fn get(client: &reqwest::Client, url: &str, token: &str) -> Value {
    let response = client.get(url).bearer_auth(token).send().await.expect("GET");
    assert!(response.status().is_success(), "GET {url}: {}", response.status());
    response.json().await.expect("JSON")
}

/// Polls `/v1/flowmem/status` until `done` runs were learned from.
async fn wait_done(client: &reqwest::Client, base: &str, token: &str, done: i64, served: &Served) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let status = get(client, &format!("{base}/v1/flowmem/status"), token).await;
        if status["conversations"]["done"].as_i64() >= Some(done) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "{done} runs not learned from in time: {status}\n{}",
            served.stderr.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The recorded runs, by id, with their rows.
async fn recorded(client: &reqwest::Client, base: &str, token: &str) -> Vec<Value> {
    let list = get(client, &format!("{base}/v1/flowmem/conversations"), token).await;
    let mut rows = Vec::new();
    for row in list["conversations"].as_array().unwrap() {
        let id = row["id"].as_str().unwrap();
        rows.push(get(client, &format!("{base}/v1/flowmem/conversations/{id}"), token).await);
    }
    rows
}

fn as_json(value: &Value) -> Value {
    match value {
        Value::String(text) => serde_json::from_str(text).unwrap_or_else(|_| value.clone()),
        other => other.clone(),
    }
}

/// Checks that a recorded trajectory is what the agent did in `run`.
fn check_run(trajectory: &Trajectory, run: &Value) {
    let calls: Vec<_> = trajectory.tool_calls().collect();
    let steps = run["steps"].as_array().unwrap();
    assert_eq!(calls.len(), steps.len(), "{trajectory:#?}");
    for (call, step) in calls.iter().zip(steps) {
        assert_eq!(call.tool, step["tool"].as_str().unwrap());
        assert_eq!(Value::Object(call.args.clone()), step["arguments"], "arguments of {}", call.tool);
        assert_eq!(call.result.as_ref().map(as_json), Some(step["result"].clone()), "result of {}", call.tool);
    }
    assert_eq!(trajectory.final_answer.as_deref(), run["final_answer"].as_str());
    assert!(matches!(trajectory.steps.last().map(|step| &step.action), Some(Action::Message { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instrumented_agent_pointed_at_the_receiver_teaches_the_memory() {
    let server = Arc::new(ScriptedLlmServer::start(script()).await);
    let dir = TestDir::new();
    let token = create_token(&dir, "write");
    let served = start(&dir, &server, &["--otlp-quiet-secs", "1.5"]);
    let base = base(&served);
    let client = reqwest::Client::new();

    // Spans with content on them (two runs, one in a conversation), then content as log
    // events, which the SDK sends to /v1/logs apart from the spans.
    let llm = server.base_url();
    let out = dir.path("agent-out");
    std::fs::create_dir_all(&out).unwrap();
    let (endpoint, secret, out2) = (base.clone(), token.clone(), out.clone());
    let mut runs = tokio::task::spawn_blocking(move || {
        let mut runs = run_instrumented_agent("genai-spans", &llm, &endpoint, &secret, &out2);
        runs.extend(run_instrumented_agent("genai-events", &llm, &endpoint, &secret, &out2));
        runs
    })
    .await
    .unwrap();
    assert_eq!(runs.len(), 3);
    let status = wait_done(&client, &base, &token, 3, &served).await;
    assert_eq!(status["otlp"]["queued_runs"], 3, "{status}");
    assert_eq!(status["otlp"]["rejected_spans"], 0, "{status}");
    assert_eq!(status["otlp"]["buffered_traces"], 0, "every trace left the buffer: {status}");

    // Each run was recorded as the agent did it, judged, and learned from.
    let rows = recorded(&client, &base, &token).await;
    assert_eq!(rows.len(), 3, "{rows:#?}");
    for row in &rows {
        assert_eq!(row["state"], "done", "{row}");
        assert_eq!(row["record"]["source"], "otlp");
        assert_eq!(row["record"]["scope"], json!({"domain": "retail"}));
        let trajectory: Trajectory = serde_json::from_value(row["record"]["trajectory"].clone()).unwrap();
        // Two runs ask the same; a run in a conversation is queued under its id, any
        // other under its trace's.
        let id = row["id"].as_str().unwrap();
        let at = runs.iter().position(|run| {
            run["query"] == trajectory.query.as_str()
                && match run["conversation_id"].as_str() {
                    Some(conversation) => id == format!("otlp:{conversation}"),
                    None => id.len() == "otlp:".len() + 32,
                }
        });
        let run = runs.remove(at.unwrap_or_else(|| panic!("a run the agent did not do: {id} {}", trajectory.query)));
        check_run(&trajectory, &run);
        assert_eq!(row["result"]["judgement"]["success"], true, "{row}");
        assert_eq!(row["result"]["judgement"]["by"], "scripted-model", "{row}");
    }
    assert!(runs.is_empty());
    // The approved runs became a workflow in the memory, in the receiver's scope.
    let stored: usize = rows
        .iter()
        .map(|row| {
            row["result"]["stored"].as_array().map_or(0, Vec::len)
                + row["result"]["merged"].as_array().map_or(0, Vec::len)
        })
        .sum();
    assert!(stored >= 3, "every approved run stored or merged a workflow: {rows:#?}");
    let listed = dir.run(&["memory", "list", "--memory", "memory.db", "--json"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    let workflows = listed.as_array().or_else(|| listed["workflows"].as_array()).expect("a list of workflows");
    assert!(!workflows.is_empty(), "{listed}");
    assert!(
        workflows.iter().all(|workflow| workflow.to_string().contains("retail")),
        "learned in the receiver's scope: {listed}"
    );
    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");
}

/// The fixture's OTLP JSON document (real spans of the GenAI instrumentation).
fn fixture_document() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("genai-spans.otlp.json")).unwrap()).unwrap()
}

fn spans_mut(document: &mut Value) -> &mut Vec<Value> {
    document["resourceSpans"][0]["scopeSpans"][0]["spans"].as_array_mut().unwrap()
}

fn attribute_mut<'a>(span: &'a mut Value, key: &str) -> &'a mut Value {
    let attributes = span["attributes"].as_array_mut().unwrap();
    let at = attributes.iter().position(|attribute| attribute["key"] == key).unwrap();
    &mut attributes[at]["value"]
}

async fn post(client: &reqwest::Client, url: &str, token: &str, content_type: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
    let response =
        client.post(url).bearer_auth(token).header("content-type", content_type).body(body).send().await.expect("POST");
    let status = response.status().as_u16();
    (status, response.bytes().await.unwrap().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_collector_answers_and_what_is_good_is_learned() {
    let server = Arc::new(ScriptedLlmServer::start(script()).await);
    let dir = TestDir::new();
    let token = create_token(&dir, "write");
    let reader = create_token(&dir, "read");
    let served = start(&dir, &server, &["--otlp-quiet-secs", "0.5", "--otlp-abandon-secs", "2"]);
    let traces = format!("{}/v1/traces", base(&served));
    let client = reqwest::Client::new();
    let protobuf = std::fs::read(fixture("genai-spans.otlp.pb")).unwrap();

    // Not OTLP's media type, a read token, no token.
    let (status, body) = post(&client, &traces, &token, "text/plain", b"hello".to_vec()).await;
    assert_eq!(status, 415, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("application/x-protobuf"));
    let (status, _) = post(&client, &traces, &reader, "application/x-protobuf", protobuf.clone()).await;
    assert_eq!(status, 403, "a read token may not teach the memory");
    let response = client.post(&traces).header("content-type", "application/json").body("{}").send().await.unwrap();
    assert_eq!(response.status().as_u16(), 401);

    // Truncated protobuf: nothing readable is 400 with a Status naming the cut; a cut
    // after some spans keeps them and says what was lost.
    let (status, body) = post(&client, &traces, &token, "application/x-protobuf", protobuf[..7].to_vec()).await;
    assert_eq!(status, 400);
    assert!(!body.is_empty(), "a google.rpc.Status body");
    let (status, body) = post(&client, &traces, &token, "application/json", b"{\"resourceSpans\": [".to_vec()).await;
    assert_eq!(status, 400);
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("\"code\":3") && text.contains("nothing in the request could be read"), "{text}");

    // A span 50 MB long is rejected alone; the rest of its request is accepted.
    let mut document = fixture_document();
    let huge = "x".repeat(50_000_000);
    *attribute_mut(&mut spans_mut(&mut document)[1], "gen_ai.tool.call.result") = json!({"stringValue": huge});
    let n_spans = spans_mut(&mut document).len();
    let (status, body) =
        post(&client, &traces, &token, "application/json", serde_json::to_vec(&document).unwrap()).await;
    assert_eq!(status, 200);
    let reply: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(reply["partialSuccess"]["rejectedSpans"], "1", "{reply}");
    assert!(reply["partialSuccess"]["errorMessage"].as_str().unwrap().contains("50.0 MB"), "{reply}");

    let client_base = base(&served);
    let status = wait_done(&client, &client_base, &token, 2, &served).await;
    assert_eq!(status["otlp"]["received_spans"], n_spans - 1, "{status}");
    let rows = recorded(&client, &client_base, &token).await;
    // The run that lost its tool span still has its calls, from the model's side, and
    // says what it lacks.
    let lost = rows.iter().find(|row| row["id"] == "otlp:support-7f3a").expect("the conversation's run");
    assert_eq!(lost["state"], "done", "{lost}");

    // Attributes of the wrong type and a span whose parent never comes: accepted, the
    // trace is assembled once abandoned, and the gaps name the spans.
    let mut document = fixture_document();
    let spans = spans_mut(&mut document);
    let second_trace = spans.last().unwrap()["traceId"].clone();
    spans.retain(|span| span["traceId"] == second_trace);
    let root = spans.iter().position(|span| span.get("parentSpanId").is_none_or(|p| p.as_str() == Some(""))).unwrap();
    let root_id = spans.remove(root)["spanId"].clone();
    for span in spans.iter_mut() {
        // Make it a new trace, so it is not the one learned above.
        span["traceId"] = json!("0af7651916cd43dd8448eb211c80319c");
    }
    let tool = spans.iter().position(|span| span["name"].as_str().unwrap().starts_with("execute_tool")).unwrap();
    *attribute_mut(&mut spans[tool], "gen_ai.tool.call.arguments") = json!({"intValue": "7"});
    let (status, body) =
        post(&client, &traces, &token, "application/json", serde_json::to_vec(&document).unwrap()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let status = wait_done(&client, &client_base, &token, 3, &served).await;
    assert_eq!(status["otlp"]["buffered_traces"], 0, "{status}");
    let rows = recorded(&client, &client_base, &token).await;
    let orphan =
        rows.iter().find(|row| row["id"] == "otlp:0af7651916cd43dd8448eb211c80319c").expect("the rootless run");
    let gaps = orphan["record"]["gaps"].to_string();
    assert!(gaps.contains(root_id.as_str().unwrap()), "the missing parent is named: {gaps}");
    assert!(gaps.contains("gen_ai.tool.call.arguments"), "the wrong-typed attribute is named: {gaps}");

    // Still serving.
    let health = client.get(format!("{client_base}/healthz")).send().await.unwrap();
    assert!(health.status().is_success());
    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_spans_survive_a_restart_and_are_learned_once() {
    buffered_spans_survive_a_restart_and_are_learned_once_on("memory.db").await;
}

/// The same in a PostgreSQL memory: the span buffer, the queue and the learned
/// workflows live in the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_spans_survive_a_restart_and_are_learned_once_in_postgresql() {
    let memory = flowmem_testsupport::PgCluster::shared().fresh_database();
    buffered_spans_survive_a_restart_and_are_learned_once_on(&memory).await;
}

async fn buffered_spans_survive_a_restart_and_are_learned_once_on(memory: &str) {
    let server = Arc::new(ScriptedLlmServer::start(script()).await);
    let dir = TestDir::new();
    let token = crate::serve::create_token_for(&dir, memory, "write");
    // A quiet period no test waits for: the spans stay buffered until the stop.
    let served = start_on(&dir, &server, memory, &["--otlp-quiet-secs", "600"]);
    let client = reqwest::Client::new();
    let protobuf = std::fs::read(fixture("genai-spans.otlp.pb")).unwrap();
    let (status, body) =
        post(&client, &format!("{}/v1/traces", base(&served)), &token, "application/x-protobuf", protobuf).await;
    assert_eq!(status, 200);
    assert_eq!(body, Vec::<u8>::new(), "full success is an empty ExportTraceServiceResponse");
    let status = get(&client, &format!("{}/v1/flowmem/status", base(&served)), &token).await;
    assert_eq!(status["otlp"]["buffered_traces"], 2, "{status}");
    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");

    let served = start_on(&dir, &server, memory, &["--otlp-quiet-secs", "0.2"]);
    let served_base = base(&served);
    wait_done(&client, &served_base, &token, 2, &served).await;
    let rows = recorded(&client, &served_base, &token).await;
    assert_eq!(rows.len(), 2, "each run queued once: {rows:#?}");
    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");
}
