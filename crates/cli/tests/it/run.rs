//! `flowmem run` against the scripted OpenAI-compatible server and server-everything.

use std::path::{Path, PathBuf};
use std::process::Output;

use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};
use serde_json::{Value, json};

pub fn everything_server() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.deps/node/node_modules/.bin/mcp-server-everything");
    assert!(path.exists(), "`{}` is missing; run `bash scripts/setup/20-mcp-servers.sh`", path.display());
    path
}

/// A `flowmem.toml` that offers server-everything's tools of `allow` and nothing else.
pub fn everything_config(allow: &[&str]) -> String {
    format!(
        "[[tools.mcp]]\nname = \"everything\"\ncommand = \"{}\"\nargs = [\"stdio\"]\nallow = {allow:?}\n",
        everything_server().display()
    )
}

/// The binary in `dir` with the scripted server at `base_url` as the only model.
pub fn scripted_command(dir: &Path, args: &[&str], base_url: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_flowmem"));
    command.current_dir(dir).args(args);
    for var in ["OPENAI_API_KEY", "FLOWMEM_CONFIG"] {
        command.env_remove(var);
    }
    command.env("OPENAI_BASE_URL", base_url).env("FLOWMEM_MODEL", "scripted-model");
    command
}

/// Runs the binary in `dir` with the scripted server as the only model.
pub async fn flowmem(dir: &Path, args: &[&str], base_url: &str) -> Output {
    let run = scripted_command(dir, args, base_url).output();
    tokio::time::timeout(std::time::Duration::from_secs(120), run).await.expect("flowmem hung").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_calls_the_tool_prints_the_answer_and_writes_the_trace() {
    let server = ScriptedLlmServer::start(
        Script::new()
            .when(Match::last_user_contains("NODE-say"), Reply::tool_call("echo", json!({"message": "wire"})))
            .when(Match::last_user_contains("NODE-answer"), Reply::text("The echo said wire.")),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = everything_config(&["echo"]);
    std::fs::write(dir.path().join("flowmem.toml"), config).unwrap();
    let graph = json!({
        "name": "echo-then-answer",
        "nodes": [
            {"id": "say", "kind": "tool", "hints": ["echo"], "instruction": "NODE-say: echo {{ query }}"},
            {"id": "answer", "kind": "llm", "role": "synthesize", "instruction": "NODE-answer"}
        ],
        "edges": [{"from": "say", "to": "answer"}],
        "entry": "say",
        "exit": "answer"
    });
    std::fs::write(dir.path().join("wf.json"), graph.to_string()).unwrap();

    let args = ["run", "wf.json", "--query", "say wire", "--trace", "trace.jsonl"];
    let output = flowmem(dir.path(), &args, &server.base_url()).await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "The echo said wire.\n");

    let requests = server.chat_requests();
    assert!(requests.iter().all(|request| request.body["model"] == "scripted-model"));
    let trace = std::fs::read_to_string(dir.path().join("trace.jsonl")).unwrap();
    let lines: Vec<Value> = trace.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert!(trace.contains("Echo: wire"), "the tool result is in the trace: {trace}");
    assert!(lines.iter().any(|line| line.to_string().contains("The echo said wire.")), "{trace}");

    // A graph naming a tool the servers do not offer is refused before any model call.
    let bad = graph.to_string().replace("\"echo\"]", "\"no-such-tool\"]");
    std::fs::write(dir.path().join("bad.json"), bad).unwrap();
    let n_before = server.chat_requests().len();
    let output = flowmem(dir.path(), &["run", "bad.json", "--query", "q"], &server.base_url()).await;
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("bad.json"), "{output:?}");
    assert_eq!(server.chat_requests().len(), n_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_guard_flags_a_call_off_a_workflow_skeleton_and_guard_block_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = everything_config(&["echo", "get-sum"]);
    std::fs::write(dir.path().join("flowmem.toml"), config).unwrap();
    // The skeleton: add, then echo, then answer.
    let graph = json!({
        "name": "sum-then-echo",
        "nodes": [
            {"id": "add", "kind": "tool", "hints": ["get-sum"], "instruction": "add"},
            {"id": "say", "kind": "tool", "hints": ["echo"], "instruction": "echo"},
            {"id": "answer", "kind": "llm", "role": "synthesize", "instruction": "answer"}
        ],
        "edges": [{"from": "add", "to": "say"}, {"from": "say", "to": "answer"}],
        "entry": "add",
        "exit": "answer"
    });
    std::fs::write(dir.path().join("skeleton.json"), graph.to_string()).unwrap();
    let script = || {
        Script::in_order([
            Reply::tool_call("echo", json!({"message": "early"})),
            Reply::tool_call("get-sum", json!({"a": 2, "b": 3})),
            Reply::text("5"),
        ])
    };

    // Flagging: the stray echo runs, is a `deviation` line before its `tool_call` line,
    // and the answer where the skeleton still wanted an echo is one too.
    let server = ScriptedLlmServer::start(script()).await;
    let args = ["agent", "--query", "add 2 and 3", "--guard", "skeleton.json", "--trace", "trace.jsonl"];
    let output = flowmem(dir.path(), &args, &server.base_url()).await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "5\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("call 1 to `echo` deviates from the guard's skeleton (expected get-sum)"), "{stderr}");
    assert!(stderr.contains("answered after 2 calls where the guard's skeleton expected echo"), "{stderr}");
    let lines: Vec<Value> = std::fs::read_to_string(dir.path().join("trace.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .filter(|line: &Value| line["kind"] != "node")
        .collect();
    let kinds: Vec<&str> = lines.iter().map(|line| line["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["deviation", "tool_call", "tool_call", "deviation", "final"], "{lines:#?}");
    assert_eq!((lines[0]["tool"].as_str(), lines[0]["expected"].clone()), (Some("echo"), json!(["get-sum"])));
    assert_eq!(lines[1]["result"], json!("Echo: early"), "a flagged call runs");

    // Blocking (the skeleton as a process tree this time): the echo never runs, and the
    // agent is told what the skeleton expected.
    std::fs::write(dir.path().join("skeleton.tree"), "->( 'get-sum', 'echo' )").unwrap();
    let server = ScriptedLlmServer::start(script()).await;
    let args = ["--json", "agent", "--query", "add 2 and 3", "--guard", "skeleton.tree", "--guard-block"];
    let output = flowmem(dir.path(), &args, &server.base_url()).await;
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["tool_calls"], 1, "{report}");
    assert_eq!(report["deviations"][0]["blocked"], true, "{report}");
    let told = server.chat_requests()[1].messages().last().unwrap()["content"].to_string();
    assert!(told.contains("`echo` was blocked") && told.contains("skeleton.tree"), "{told}");
}
