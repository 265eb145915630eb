//! `flowmem study` against the scripted LLM server and the real `server-everything`: the
//! dry run's estimate, and a study killed (SIGKILL) twice that resumes to the same
//! tables as one that ran straight through.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};

use crate::run::everything_server;

const OTHER: &str = "scripted-other";

/// Deterministic at every request, so a killed run that asks again gets the same answer:
/// the optimizer rewrites the answer prompt, the executor calls `get-sum` (under either
/// name) and answers, the other model answers wrongly, the judge scores the answer.
fn script() -> Script {
    let judge = |score: f64| {
        Reply::json(
            json!({"rationale": "s", "correctness": score, "completeness": score, "relevance": score, "clarity": score}),
        )
    };
    Script::new()
        .models(["scripted-model", OTHER])
        .when(Match::last_user_contains("Applied."), Reply::json(json!({"edit": {"op": "done"}})))
        .when(
            Match::any_message_contains("You improve a tool-using agent workflow"),
            Reply::json(json!({"rationale": "s", "edit": {"op": "rewrite_prompt", "id": "synthesize", "instruction": "ANSWER-V2"}})),
        )
        .when(
            Match::custom(|r| {
                let text = r.to_string();
                text.contains("You are evaluating the result") && text.matches("The sum is 3.").count() >= 2
            }),
            judge(1.0),
        )
        .when(Match::last_user_contains("You are evaluating the result"), judge(0.0))
        .when(Match::offers_tool("sum-of-two"), Reply::tool_call("sum-of-two", json!({"a": 1, "b": 2})))
        .when(Match::offers_tool("get-sum"), Reply::tool_call("get-sum", json!({"a": 1, "b": 2})))
        .when(Match::model(OTHER), Reply::text("No idea."))
        .when(Match::after_tool_result(), Reply::text("The sum is 3."))
        .when(Match::any_message_contains("ANSWER-V2"), Reply::text("The sum is 3."))
        .otherwise(Reply::text("I am not sure."))
}

fn write_inputs(dir: &Path) {
    let records: Vec<String> = (0..10)
        .map(|i| {
            json!({"id": format!("sum-{i}"), "query": format!("add 1 and 2 (case {i})"), "reference_result": "The sum is 3.",
                "orchestration": [{"tool": "get-sum", "args": {"a": 1, "b": 2}}]})
            .to_string()
        })
        .collect();
    std::fs::write(dir.join("records.jsonl"), records.join("\n") + "\n").unwrap();
    let config = format!(
        "[tools]\ntimeout_secs = 30\n[[tools.mcp]]\nname = \"everything\"\ncommand = {:?}\nargs = [\"stdio\"]\nallow = [\"get-sum\"]\n",
        everything_server().display().to_string()
    );
    std::fs::write(dir.join("flowmem.toml"), config).unwrap();
    std::fs::write(dir.join("aliases.toml"), "[[tools.alias]]\ntool = \"get-sum\"\nname = \"sum-of-two\"\n").unwrap();
}

fn command(dir: &Path, base_url: &str, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_flowmem"));
    command.current_dir(dir).args(args).kill_on_drop(true);
    for var in ["OPENAI_API_KEY", "FLOWMEM_CONFIG", "FLOWMEM_MODEL"] {
        command.env_remove(var);
    }
    command.env("OPENAI_BASE_URL", base_url);
    command
}

const STUDY: &[&str] = &[
    "study",
    "--records",
    "records.jsonl",
    "--config",
    "flowmem.toml",
    "--model",
    "scripted-model",
    "--iterations",
    "2",
    "--repeats",
    "2",
    "--stability-queries",
    "2",
    "--concurrency",
    "1",
    "--swap-tools",
    "aliases.toml",
    "--swap-model",
    OTHER,
];

fn args(out: &str) -> Vec<&str> {
    let mut args = STUDY.to_vec();
    args.extend(["--out", out]);
    args
}

/// `study.json` without wall times, latencies and LLM tallies (a resume re-asks calls).
fn tables(path: &Path) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.retain(|key, _| !matches!(key.as_str(), "wall_secs" | "latency_ms_per_query" | "llm"));
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut value: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    strip(&mut value);
    value
}

/// Starts the study and SIGKILLs it as soon as `file` exists under `out`.
async fn kill_when(dir: &Path, base_url: &str, argv: &[&str], file: &str) {
    let mut child = command(dir, base_url, argv)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let target = dir.join(file);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !target.exists() {
        assert!(tokio::time::Instant::now() < deadline, "`{file}` never appeared");
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the study ended ({status}) before `{file}` appeared");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn study_dry_run_prints_the_estimate_and_creates_nothing() {
    let server = ScriptedLlmServer::start(script()).await;
    let dir = tempfile::tempdir().unwrap();
    write_inputs(dir.path());
    let mut argv = args("out");
    argv.extend(["--dry-run", "--json"]);
    let output = command(dir.path(), &server.base_url(), &argv).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let estimate: Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    assert_eq!(estimate["split"], json!([5, 2, 3]));
    let cells: Vec<&str> = estimate["cells"].as_array().unwrap().iter().map(|c| c[0].as_str().unwrap()).collect();
    assert_eq!(cells.len(), 14, "{cells:?}");
    assert_eq!(cells[0], "scout/flowscout");
    assert_eq!(cells[13], "swap/model");
    assert!(estimate["remaining_calls"].as_u64().unwrap() > 0);
    assert!(!dir.path().join("out").exists(), "a dry run creates nothing");
    assert!(server.requests().is_empty(), "a dry run asks no model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_study_killed_twice_resumes_to_the_same_tables() {
    let server = ScriptedLlmServer::start(script()).await;
    let dir = tempfile::tempdir().unwrap();
    write_inputs(dir.path());
    let base_url = server.base_url();

    let straight = command(dir.path(), &base_url, &args("straight")).output().await.unwrap();
    assert!(straight.status.success(), "{}", String::from_utf8_lossy(&straight.stderr));
    let md = String::from_utf8_lossy(&straight.stdout);
    assert!(md.contains("## RQ1: effectiveness") && md.contains("## RQ4"), "{md}");

    // Killed in the middle of the first search, then between evaluation cells.
    kill_when(dir.path(), &base_url, &args("killed"), "killed/scout/flowscout/candidates/0001.opt.json").await;
    assert!(!dir.path().join("killed/scout/flowscout/cell.json").exists());
    let resume = ["study", "--resume", "killed", "--config", "flowmem.toml", "--model", "scripted-model"];
    kill_when(dir.path(), &base_url, &resume, "killed/test/react/cell.json").await;
    assert!(!dir.path().join("killed/study.json").exists(), "the second kill came before the end");
    let done = command(dir.path(), &base_url, &resume).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "{stderr}");
    assert!(stderr.contains("scout/flowscout: done"), "the estimate shows the finished cells: {stderr}");

    assert_eq!(tables(&dir.path().join("killed/study.json")), tables(&dir.path().join("straight/study.json")));
    let results = tables(&dir.path().join("killed/study.json"));
    assert_eq!(results["tool_swap"]["retained_tc"], 1.0, "{}", results["tool_swap"]);
    assert_eq!(results["model_swap"]["retained_es"], 0.0, "{}", results["model_swap"]);
}
