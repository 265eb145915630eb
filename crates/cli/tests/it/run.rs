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

/// Runs the binary in `dir` with the scripted server as the only model.
pub async fn flowmem(dir: &Path, args: &[&str], base_url: &str) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_flowmem"));
    command.current_dir(dir).args(args);
    for var in ["OPENAI_API_KEY", "FLOWMEM_CONFIG"] {
        command.env_remove(var);
    }
    command.env("OPENAI_BASE_URL", base_url).env("FLOWMEM_MODEL", "scripted-model");
    let run = command.output();
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
    let config = format!(
        "[[tools.mcp]]\nname = \"everything\"\ncommand = \"{}\"\nargs = [\"stdio\"]\nallow = [\"echo\"]\n",
        everything_server().display()
    );
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
