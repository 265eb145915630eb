//! `flowmem agent --memory` and `flowmem learn --online` against the scripted
//! OpenAI-compatible server and the real `server-everything` MCP server.

use std::path::Path;
use std::process::Output;

use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};
use serde_json::{Value, json};

use crate::run::{everything_config, flowmem};

/// A working directory whose `flowmem.toml` offers server-everything's `echo` and `get-sum`.
fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let config = everything_config(&["echo", "get-sum"]);
    std::fs::write(dir.path().join("flowmem.toml"), config).unwrap();
    dir
}

fn stdout_json(output: &Output) -> Value {
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| panic!("not JSON ({err}): {output:?}"))
}

/// The stored workflows, as `flowmem --json memory list` prints them.
async fn workflows(dir: &Path) -> Vec<Value> {
    let output = flowmem(dir, &["--json", "memory", "list", "--memory", "memory.db"], "http://127.0.0.1:9").await;
    stdout_json(&output).as_array().unwrap().clone()
}

/// The name under which `flowmem agent --use actions` offers a workflow.
fn tool_name(id: &str) -> String {
    let id: String = id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').take(16).collect();
    format!("workflow_{id}")
}

fn stats(workflow: &Value) -> (u64, u64, u64) {
    let stats = &workflow["stats"];
    let count = |name: &str| stats[name].as_u64().unwrap_or(0);
    (count("retrieved"), count("used_success"), count("used_failure"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_with_memory_uses_workflows_in_prompt_and_as_actions_and_records_their_use() {
    let dir = workdir();
    let line = json!({
        "description": "Echo a greeting and add two numbers",
        "steps": [
            {"state": "start", "reasoning": "say it", "action": {"tool": "echo", "args": {"message": "{text}"}}},
            {"state": "said", "reasoning": "add", "action": {"tool": "get-sum", "args": {"a": "{a}", "b": "{b}"}}}
        ],
        "scope": {"domain": "demo"},
        "provenance": {"inducer": "import"}
    });
    std::fs::write(dir.path().join("workflows.jsonl"), format!("{line}\n")).unwrap();
    let imported =
        flowmem(dir.path(), &["memory", "import", "workflows.jsonl", "--memory", "memory.db"], "http://127.0.0.1:9")
            .await;
    assert_eq!(imported.status.code(), Some(0), "{imported:?}");
    let id = workflows(dir.path()).await[0]["id"].as_str().unwrap().to_owned();
    let query =
        ["agent", "--query", "echo a greeting and add numbers", "--memory", "memory.db", "--scope-domain", "demo"];

    // Prompt mode: the workflow is in the system prompt; the answered run counts a success.
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::text("Greeting echoed."))).await;
    let output = flowmem(dir.path(), &[&query[..], &["--use", "prompt"]].concat(), &server.base_url()).await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "Greeting echoed.\n");
    let system = server.chat_requests()[0].messages()[0]["content"].as_str().unwrap().to_owned();
    assert!(system.contains("Echo a greeting and add two numbers"), "{system}");
    assert_eq!(stats(&workflows(dir.path()).await[0]), (1, 1, 0), "retrieved once, used in a run that answered");

    // Actions mode: the workflow is a tool; calling it runs both steps on the real server.
    let tool = tool_name(&id);
    let script = Script::new()
        .when(Match::after_tool_result(), Reply::text("done"))
        .otherwise(Reply::tool_call(&tool, json!({"text": "hi", "a": 2, "b": 3})));
    let server = ScriptedLlmServer::start(script).await;
    let args = [&query[..], &["--use", "actions", "--trace", "trace.jsonl"]].concat();
    let output = flowmem(dir.path(), &args, &server.base_url()).await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let offered = &server.chat_requests()[0].body["tools"];
    let definition = offered
        .as_array()
        .unwrap()
        .iter()
        .find(|def| def["function"]["name"] == tool.as_str())
        .expect("the workflow is offered");
    assert_eq!(definition["function"]["parameters"]["required"], json!(["text", "a", "b"]));
    let trace = std::fs::read_to_string(dir.path().join("trace.jsonl")).unwrap();
    assert!(trace.contains("Echo: hi"), "the expanded steps ran: {trace}");
    // The retrieval is the trace's first node: the mode and each hit's scores.
    let first: Value = serde_json::from_str(trace.lines().next().unwrap()).unwrap();
    assert_eq!((first["node_id"].as_str(), first["node_kind"].as_str()), (Some("memory"), Some("retrieval:hybrid")));
    let retrieval: Value = serde_json::from_str(first["output"].as_str().unwrap()).unwrap();
    assert_eq!(retrieval["mode"], "hybrid");
    assert_eq!(retrieval["hits"][0]["id"], id.as_str());
    assert!(retrieval["hits"][0]["bm25"].is_number() && retrieval["hits"][0]["similarity"].is_number(), "{retrieval}");
    assert!(String::from_utf8_lossy(&output.stderr).contains(&format!("used: [{id}]")), "{output:?}");
    assert_eq!(stats(&workflows(dir.path()).await[0]), (2, 2, 0));

    // A call whose second step fails in the environment counts a failed use.
    let script = Script::new()
        .when(Match::after_tool_result(), Reply::text("gave up"))
        .otherwise(Reply::tool_call(&tool, json!({"text": "hi", "a": 2, "b": "not a number"})));
    let server = ScriptedLlmServer::start(script).await;
    let output = flowmem(dir.path(), &[&query[..], &["--use", "actions"]].concat(), &server.base_url()).await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let told = server.chat_requests()[1].messages().last().unwrap()["content"].to_string();
    assert!(told.contains("step 1 (`get-sum`) failed"), "the agent is told which step failed: {told}");
    assert_eq!(stats(&workflows(dir.path()).await[0]), (3, 2, 1));
}

/// The agent calls the given tools, then answers; the evaluator always says success.
fn stream_script(calls: &[(&str, Value)]) -> Script {
    Script::new()
        .when(Match::wants_json(), Reply::json(json!({"success": true, "reason": "scripted verdict"})))
        .when(Match::after_tool_result(), Reply::text("finished"))
        .otherwise(Reply::tool_calls(calls.iter().map(|(tool, args)| (*tool, args.clone()))))
}

fn write_records(dir: &Path, name: &str, records: &[(&str, &str)]) {
    let lines: Vec<String> = records
        .iter()
        .map(|(id, query)| {
            json!({"id": id, "query": query, "orchestration": [], "meta": {"domain": "demo"}}).to_string()
        })
        .collect();
    std::fs::write(dir.join(name), lines.join("\n") + "\n").unwrap();
}

fn user_queries(server: &ScriptedLlmServer) -> Vec<String> {
    server
        .chat_requests()
        .iter()
        .filter_map(|request| {
            request.messages().iter().find(|message| message["role"] == "user")?["content"].as_str().map(str::to_owned)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learn_online_writes_the_curve_resumes_and_snowballs() {
    let dir = workdir();
    let tasks = [
        ("r1", "first: say hello and add one and two"),
        ("r2", "second: say hello and add"),
        ("r3", "third: say hello and add"),
    ];
    write_records(dir.path(), "tasks.jsonl", &tasks);
    let two_calls = [("echo", json!({"message": "hello"})), ("get-sum", json!({"a": 1, "b": 2}))];
    let learn =
        ["--json", "learn", "--online", "tasks.jsonl", "--memory", "memory.db", "--out", "out", "--max-steps", "4"];

    // An interrupted run: only the first task.
    let server = ScriptedLlmServer::start(stream_script(&two_calls)).await;
    let first = stdout_json(&flowmem(dir.path(), &[&learn[..], &["--limit", "1"]].concat(), &server.base_url()).await);
    assert_eq!((first["n_resumed_runs"].as_u64(), first["n_new_runs"].as_u64()), (Some(0), Some(2)));

    // Running the same command again resumes: task 1 is not run again.
    let server = ScriptedLlmServer::start(stream_script(&two_calls)).await;
    let summary = stdout_json(&flowmem(dir.path(), &learn, &server.base_url()).await);
    assert_eq!((summary["n_resumed_runs"].as_u64(), summary["n_new_runs"].as_u64()), (Some(2), Some(4)));
    assert!(user_queries(&server).iter().all(|query| !query.contains("first:")), "{:?}", user_queries(&server));
    let curve = &summary["curve"];
    assert_eq!(curve["memory"]["cumulative_success_rate"], json!([1.0, 1.0, 1.0]));
    assert_eq!(curve["baseline"]["n_tasks"], 3);
    assert_eq!(curve["memory"]["steps_per_solved"], 2.0);
    assert_eq!(curve["success_source"], "evaluator");
    let on_disk: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out/learning_curve.json")).unwrap()).unwrap();
    assert_eq!(&on_disk, curve);
    let html = std::fs::read_to_string(dir.path().join("out/learning_curve.html")).unwrap();
    assert_eq!(html.matches("class=\"curve\"").count(), 2, "memory and baseline lines");

    // What was learned: one workflow, used by the later tasks that had it in their prompt.
    let learned = workflows(dir.path()).await;
    assert_eq!(learned.len(), 1, "{learned:?}");
    let part = learned[0]["id"].as_str().unwrap().to_owned();
    let tools: Vec<&str> =
        learned[0]["steps"].as_array().unwrap().iter().map(|step| step["action"]["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, ["echo", "get-sum"]);
    assert_eq!(stats(&learned[0]).1, 2, "used in the successful runs of tasks 2 and 3");

    // Another stream in the same directory is refused, naming the saved stream.
    write_records(dir.path(), "other.jsonl", &[tasks[0], tasks[2], tasks[1]]);
    let args = ["learn", "--online", "other.jsonl", "--memory", "memory.db", "--out", "out"];
    let refused = flowmem(dir.path(), &args, &server.base_url()).await;
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("out/stream.jsonl` line 2"), "{refused:?}");

    // Snowballing: a run whose calls contain the learned workflow's teaches a workflow
    // composed of it, and `memory show --tree` shows the hierarchy.
    write_records(dir.path(), "more.jsonl", &[("r4", "fourth: say hello, add, and say the sum")]);
    let three_calls = [two_calls[0].clone(), two_calls[1].clone(), ("echo", json!({"message": "3"}))];
    let server = ScriptedLlmServer::start(stream_script(&three_calls)).await;
    let args = ["--json", "learn", "--online", "more.jsonl", "--memory", "memory.db", "--out", "out2", "--no-baseline"];
    let summary = stdout_json(&flowmem(dir.path(), &args, &server.base_url()).await);
    assert_eq!(summary["curve"]["n_workflows_added"], 1);
    assert!(summary["curve"]["baseline"].is_null());
    let learned = workflows(dir.path()).await;
    let whole = learned.iter().find(|workflow| workflow["id"] != part.as_str()).expect("a second workflow");
    assert_eq!(whole["composed_of"], json!([part]), "a reference, not a copy");
    let whole_id = whole["id"].as_str().unwrap();
    let shown =
        flowmem(dir.path(), &["memory", "show", whole_id, "--tree", "--memory", "memory.db"], "http://127.0.0.1:9")
            .await;
    assert_eq!(shown.status.code(), Some(0), "{shown:?}");
    let text = String::from_utf8_lossy(&shown.stdout);
    let tree: Vec<&str> = text.lines().skip_while(|line| *line != "composition:").skip(1).collect();
    assert_eq!(tree.len(), 2, "{text}");
    assert!(tree[0].starts_with(&format!("  {whole_id}")) && tree[1].starts_with(&format!("    {part}")), "{text}");

    // The web UI's learning page finds both runs under `--runs` and draws their curves.
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_flowmem"));
    command.current_dir(dir.path()).args(["serve", "--listen", "127.0.0.1:0", "--memory", "memory.db", "--runs", "."]);
    let mut started =
        flowmem_testsupport::spawn_listening(command, "listening on ", std::time::Duration::from_secs(60));
    let base = started.address.trim_end_matches("/mcp").to_owned();
    let page = reqwest::get(format!("{base}/learning")).await.unwrap().text().await.unwrap();
    started.child.kill().unwrap();
    let _ = started.child.wait();
    for key in ["0.out", "0.out2"] {
        assert!(page.contains(&format!("id=\"online-{key}\"")), "{key} is shown: {page}");
    }
    assert_eq!(page.matches("<svg id=\"learning-curve\"").count(), 2, "{page}");
    assert!(page.contains("3 of 3 tasks solved with memory (cumulative success 100%; without memory 100%)"), "{page}");
    assert!(page.contains("2 workflows stored"), "memory's growth: {page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learn_online_with_lm_induction_stores_the_models_workflow() {
    let dir = workdir();
    write_records(dir.path(), "tasks.jsonl", &[("r1", "say hello and add one and two")]);
    let proposed = json!({"workflows": [{
        "description": "Greet someone and add two numbers",
        "steps": [
            {"state": "start", "reasoning": "greet first", "action": {"tool": "echo", "args": {"message": "{greeting}"}}},
            {"state": "greeted", "reasoning": "then add", "action": {"tool": "get-sum", "args": {"a": "{first_number}", "b": "{second_number}"}}}
        ]
    }]});
    let script = Script::new()
        .when(Match::any_message_contains("extract the common workflows"), Reply::json(proposed))
        .when(Match::wants_json(), Reply::json(json!({"success": true, "reason": "scripted verdict"})))
        .when(Match::after_tool_result(), Reply::text("finished"))
        .otherwise(Reply::tool_calls([("echo", json!({"message": "hello"})), ("get-sum", json!({"a": 1, "b": 2}))]));
    let server = ScriptedLlmServer::start(script).await;
    let args = [
        "--json",
        "learn",
        "--online",
        "tasks.jsonl",
        "--memory",
        "memory.db",
        "--out",
        "out",
        "--induce",
        "lm",
        "--no-baseline",
    ];
    let summary = stdout_json(&flowmem(dir.path(), &args, &server.base_url()).await);
    assert_eq!(summary["curve"]["n_workflows_added"], 1, "{summary}");
    let induce_prompt = user_queries(&server)
        .into_iter()
        .find(|text| text.contains("extract the common workflows"))
        .expect("the inducer was asked");
    assert!(
        induce_prompt.contains("say hello and add one and two"),
        "the judged-successful run is shown: {induce_prompt}"
    );
    let learned = workflows(dir.path()).await;
    assert_eq!(learned.len(), 1);
    assert_eq!(learned[0]["description"], "Greet someone and add two numbers");
    assert_eq!(learned[0]["provenance"]["inducer"], "lm");
    assert_eq!(learned[0]["steps"][1]["action"]["args"]["b"], "{second_number}");
}
