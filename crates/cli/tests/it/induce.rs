//! `flowmem induce --mode lm` against the scripted OpenAI-compatible server, and end to
//! end with the embedded model on τ²-bench retail tasks.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use flowmem_testsupport::{Reply, Script, ScriptedLlmServer, require_path};
use serde_json::{Value, json};

use crate::support::data;

/// Runs the binary in `dir` with a clean LLM environment plus `env`.
async fn flowmem(dir: &Path, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_flowmem"));
    command.current_dir(dir).args(args);
    for var in ["OPENAI_BASE_URL", "OPENAI_API_KEY", "FLOWMEM_MODEL", "FLOWMEM_CONFIG", "FLOWMEM_MEMORY"] {
        command.env_remove(var);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    tokio::time::timeout(timeout, command.output()).await.expect("flowmem hung").unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Two runs that look an order up and cancel it, with different ids.
fn write_runs(dir: &Path) -> PathBuf {
    let lines = [
        r##"{"id":"t1","query":"Cancel order #W100","success":true,"meta":{"domain":"retail"},"steps":[{"action":{"kind":"tool_call","tool":"get_order_details","args":{"order_id":"#W100"}}},{"action":{"kind":"tool_call","tool":"cancel_pending_order","args":{"order_id":"#W100","reason":"no longer needed"}}}]}"##,
        r##"{"id":"t2","query":"Cancel order #W200","success":true,"meta":{"domain":"retail"},"steps":[{"action":{"kind":"tool_call","tool":"get_order_details","args":{"order_id":"#W200"}}},{"action":{"kind":"tool_call","tool":"cancel_pending_order","args":{"order_id":"#W200","reason":"no longer needed"}}}]}"##,
    ];
    let path = dir.join("runs.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

fn workflow(description: &str, order_id: &str) -> Value {
    json!({"description": description, "steps": [
        {"state": "an order id is known", "reasoning": "check it", "action": {"tool": "get_order_details", "args": {"order_id": order_id}}},
        {"state": "the order is pending", "reasoning": "cancel it", "action": {"tool": "cancel_pending_order", "args": {"order_id": "{order_id}", "reason": "{reason}"}}}]})
}

#[tokio::test]
async fn lm_induction_reports_each_workflow_as_json_and_replays_from_the_cache() {
    let reply = json!({"workflows": [workflow("Cancel a pending order", "{order_id}"), workflow("Cancel order W100", "#W100")]});
    // One scripted reply: the second run must be served by the response cache.
    let server = ScriptedLlmServer::start(Script::in_order([Reply::json(reply)])).await;
    let dir = tempfile::tempdir().unwrap();
    write_runs(dir.path());
    let base_url = server.base_url();
    let env = [("OPENAI_BASE_URL", base_url.as_str())];
    let args = ["--json", "induce", "--mode", "lm", "runs.jsonl", "--memory", "memory.db", "--max-tokens", "500"];
    let long = Duration::from_secs(60);

    let output = flowmem(dir.path(), &args, &env, long).await;
    assert!(output.status.success(), "{output:?}");
    let json: Value = serde_json::from_str(&text(&output.stdout)).unwrap();
    assert_eq!(json["version"], 1);
    assert_eq!(json["mode"], "lm");
    assert!(json["model"].is_string());
    let workflows = json["workflows"].as_array().unwrap();
    assert_eq!(workflows.len(), 2, "{json:#}");
    assert_eq!(workflows[0]["status"], "stored");
    assert_eq!(workflows[0]["description"], "Cancel a pending order");
    assert!(workflows[0]["id"].as_str().unwrap().starts_with("wf-"));
    assert_eq!(workflows[0]["trajectory_ids"], json!(["t1", "t2"]));
    assert_eq!(workflows[1]["status"], "rejected");
    assert_eq!(workflows[1]["reason"]["kind"], "copied_literal");
    assert_eq!(workflows[1]["reason"]["trajectory_id"], "t1");
    assert!(workflows[1]["message"].as_str().unwrap().contains("should be a {variable}"));
    assert!(json["accounting"]["total"]["calls"].as_u64().unwrap() >= 1);

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body["response_format"]["type"], "json_schema");
    assert_eq!(requests[0].body["max_tokens"], 500);
    assert!(requests[0].last_text("user").unwrap().contains("Cancel order #W200"));

    // The same input into another memory: the reply comes from the cache.
    let other = ["--json", "induce", "--mode", "lm", "runs.jsonl", "--memory", "other.db", "--max-tokens", "500"];
    let output = flowmem(dir.path(), &other, &env, long).await;
    assert!(output.status.success(), "{output:?}");
    let json: Value = serde_json::from_str(&text(&output.stdout)).unwrap();
    assert_eq!(json["workflows"][0]["status"], "stored");
    assert_eq!(json["workflows"][0]["description"], "Cancel a pending order");
    assert_eq!(server.chat_requests().len(), 1);

    // The same input into the same memory: already learned, so nothing is asked again.
    let output = flowmem(dir.path(), &args, &env, long).await;
    assert!(output.status.success(), "{output:?}");
    let json: Value = serde_json::from_str(&text(&output.stdout)).unwrap();
    assert_eq!(json["workflows"], json!([]), "{json:#}");
    let skipped: Vec<&Value> = json["report"]["skipped"].as_array().unwrap().iter().collect();
    assert!(skipped.iter().all(|skip| skip["reason"]["kind"] == "already_learned"), "{json:#}");
    assert_eq!(skipped.len(), 2);
}

#[tokio::test]
async fn lm_induction_in_text_mode_prints_what_it_stored_and_rejected() {
    let reply = "Workflow: Cancel a pending order\nAction: get_order_details({\"order_id\": \"{order_id}\"})\nAction: cancel_pending_order({\"order_id\": \"{order_id}\", \"reason\": \"{reason}\"})\n\nWorkflow: Look only\nAction: get_order_details({\"order_id\": \"{order_id}\"})\n";
    let server = ScriptedLlmServer::start(Script::in_order([Reply::text(reply)])).await;
    let dir = tempfile::tempdir().unwrap();
    write_runs(dir.path());
    std::fs::write(
        dir.path().join("flowmem.toml"),
        format!("[models.inducer]\nbase_url = \"{}\"\nmodel = \"scripted-model\"\n\n[roles]\ninducer = \"inducer\"\n\n[llm]\ncache = \"off\"\n", server.base_url()),
    )
    .unwrap();
    let args = ["induce", "--mode", "lm", "--text", "runs.jsonl", "--memory", "memory.db"];
    let output = flowmem(dir.path(), &args, &[], Duration::from_secs(60)).await;
    assert!(output.status.success(), "{output:?}");
    let stdout = text(&output.stdout);
    let stderr = text(&output.stderr);
    assert!(stdout.starts_with("stored wf-") && stdout.contains("Cancel a pending order"), "{stdout}");
    assert!(stderr.contains("rejected `Look only`: 1 step(s)"), "{stderr}");
    assert!(stderr.contains("1 workflows stored, 0 merged into existing ones, 1 rejected"), "{stderr}");
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].body.get("response_format").is_none(), "--text asks for no schema");
    assert_eq!(requests[0].body["model"], "scripted-model", "the [roles] inducer model answers");
}

#[tokio::test]
async fn lm_induction_with_nothing_parseable_exits_1_and_stores_nothing() {
    let server = ScriptedLlmServer::start(Script::in_order([Reply::text("No."), Reply::text("Still no.")])).await;
    let dir = tempfile::tempdir().unwrap();
    write_runs(dir.path());
    let base_url = server.base_url();
    let args = ["--json", "induce", "--mode", "lm", "runs.jsonl", "--memory", "memory.db", "--model", "scripted-model"];
    let output = flowmem(dir.path(), &args, &[("OPENAI_BASE_URL", base_url.as_str())], Duration::from_secs(60)).await;
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let json: Value = serde_json::from_str(&text(&output.stdout)).unwrap();
    assert_eq!(json["workflows"], json!([]));
    assert_eq!(json["report"]["skipped"][0]["reason"]["kind"], "unparseable");
    assert_eq!(server.chat_requests().len(), 2, "the structured request was re-asked once");
    let list =
        flowmem(dir.path(), &["--json", "memory", "list", "--memory", "memory.db"], &[], Duration::from_secs(30)).await;
    assert_eq!(text(&list.stdout).trim(), "[]");
}

/// The first `n` τ²-bench retail tasks with at least two golden actions, as successful
/// trajectories whose steps are those actions: imported with `flowmem import`, as a
/// user would, then converted here.
async fn retail_trajectories(dir: &Path, n: usize) -> Vec<flowmem_model::Trajectory> {
    let tasks = data("tau2-bench/retail/tasks.json");
    let args = ["import", "--format", "tau2-bench", tasks.as_str(), "-o", "records.jsonl"];
    let output = flowmem(dir, &args, &[], Duration::from_secs(60)).await;
    assert!(output.status.success(), "{output:?}");
    let records = flowmem_model::read_records(&dir.join("records.jsonl")).unwrap();
    let trajectories: Vec<flowmem_model::Trajectory> = records
        .into_iter()
        .filter(|record| record.orchestration.len() >= 2)
        .take(n)
        .map(|record| {
            let steps: Vec<Value> = record
                .orchestration
                .iter()
                .map(|call| json!({"action": {"kind": "tool_call", "tool": call.tool, "args": call.args}}))
                .collect();
            serde_json::from_value(json!({
                "id": record.id, "query": record.query, "steps": steps, "success": true, "meta": record.meta,
            }))
            .unwrap()
        })
        .collect();
    assert_eq!(trajectories.len(), n);
    trajectories
}

#[allow(clippy::print_stdout, reason = "the figures of this run are the test's report")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lm_induction_with_the_embedded_model_stores_only_what_validates() {
    let model_path = require_path(&flowmem_llm_local::default_model_path(), "scripts/setup/30-model.sh");
    let dir = tempfile::tempdir().unwrap();
    let trajectories = retail_trajectories(dir.path(), 5).await;
    let lines: Vec<String> = trajectories.iter().map(|t| serde_json::to_string(t).unwrap()).collect();
    std::fs::write(dir.path().join("runs.jsonl"), lines.join("\n")).unwrap();

    // No configuration and no endpoint: the embedded model answers, under the reply
    // schema (constrained decoding), within a small token budget.
    let args = ["--json", "induce", "--mode", "lm", "runs.jsonl", "--memory", "memory.db", "--max-tokens", "400"];
    let started = Instant::now();
    let output = flowmem(dir.path(), &args, &[], Duration::from_secs(1200)).await;
    let wall = started.elapsed();
    let stdout = text(&output.stdout);
    assert!(matches!(output.status.code(), Some(0 | 1)), "{output:?}");
    let json: Value = serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("{err}: {stdout}"));
    // Shown with --nocapture: the wall time and what was stored and rejected.
    println!(
        "embedded LM induction ({}) of 5 retail runs took {:.1} s:\n{:#}",
        model_path.display(),
        wall.as_secs_f64(),
        json["workflows"]
    );
    assert_eq!(json["model"], flowmem_llm_local::MODEL_NAME);
    assert_eq!(json["report"]["n_used"], 5);
    assert_eq!(json["accounting"]["total"]["calls"], 1, "one prompt for one batch of 5");

    // The report accounts for every workflow the model proposed: each was stored,
    // merged or rejected with a reason; a reply with none readable is one skip.
    let report = &json["report"];
    let workflows = json["workflows"].as_array().unwrap();
    let proposed = report["proposed"].as_u64().unwrap() as usize;
    assert_eq!(workflows.len(), proposed, "{json:#}");
    if proposed == 0 {
        assert_eq!(report["skipped"][0]["reason"]["kind"], "unparseable", "{json:#}");
    }
    for line in workflows {
        match line["status"].as_str().unwrap() {
            "stored" | "merged" => assert!(line["id"].as_str().unwrap().starts_with("wf-")),
            "rejected" => assert!(line["reason"]["kind"].is_string() && !line["message"].as_str().unwrap().is_empty()),
            other => panic!("unknown status {other}"),
        }
    }
    let n_stored = workflows.iter().filter(|line| line["status"] == "stored").count();
    assert_eq!(output.status.code(), Some(if report["added"].as_array().unwrap().is_empty() { 1 } else { 0 }));

    // Everything stored passes the same validation the inducer applies.
    let list =
        flowmem(dir.path(), &["--json", "memory", "list", "--memory", "memory.db"], &[], Duration::from_secs(30)).await;
    assert!(list.status.success(), "{list:?}");
    let stored: Vec<flowmem_model::Workflow> = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(stored.len(), n_stored);
    for workflow in &stored {
        assert_eq!(flowmem_memory::induce::validate(workflow, &trajectories, 2), Ok(()), "{workflow:?}");
        assert_eq!(workflow.provenance.inducer, "lm");
        assert_eq!(workflow.scope.domain.as_deref(), Some("retail"));
    }
}
