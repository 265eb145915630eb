//! `flowmem -v scout` against the scripted LLM server and the real `server-everything`:
//! the log lines show the optimizer's retried request and its rejected edit plan, and
//! without `-v` only the warning remains; Ctrl-C stops a search where it can resume.

use std::time::Duration;

use serde_json::json;

use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};

use crate::run::everything_config;
use crate::support::{TestDir, interrupt};

/// The optimizer's first request fails with a 500 (retried), its first edit cuts the
/// mined skeleton's only edge into `synthesize` (a graph whose exit cannot be reached:
/// refused, and the optimizer is asked again), its second edit is a valid prompt
/// rewrite, and then it says `done`.
fn script() -> Script {
    sums_script([
        Reply::server_error(),
        edit(json!({"op": "remove_edge", "from": "tool_1", "to": "synthesize"})),
        edit(json!({"op": "rewrite_prompt", "id": "synthesize", "instruction": "State the sum."})),
    ])
}

/// An optimizer reply holding one edit.
fn edit(edit: serde_json::Value) -> Reply {
    Reply::json(json!({"rationale": "scripted", "edit": edit}))
}

/// The scripted models of a scout run over the sums: the executor calls `get-sum` and
/// answers, the judge gives full marks, the optimizer's first asks get `optimizer` in
/// turn, and every follow-up after an applied edit is `done`.
fn sums_script(optimizer: impl IntoIterator<Item = Reply>) -> Script {
    let judge = Reply::json(
        json!({"rationale": "scripted", "correctness": 1, "completeness": 1, "relevance": 1, "clarity": 1}),
    );
    Script::new()
        .when(Match::last_user_contains("Applied."), Reply::json(json!({"edit": {"op": "done"}})))
        .when_seq(Match::any_message_contains("You improve a tool-using agent workflow"), optimizer)
        .when(Match::last_user_contains("You are evaluating the result"), judge)
        .when(Match::after_tool_result(), Reply::text("The sum is 3."))
        .when(Match::offers_tool("get-sum"), Reply::tool_call("get-sum", json!({"a": 1, "b": 2})))
        .otherwise(Reply::text("The sum is 3."))
}

async fn scout(
    dir: &TestDir,
    server: &ScriptedLlmServer,
    verbose: bool,
    out: &str,
    extra: &[&str],
) -> std::process::Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_flowmem"));
    if verbose {
        command.arg("-v");
    }
    command.current_dir(dir.path(".")).args([
        "scout",
        "--records",
        "records.jsonl",
        "--out",
        out,
        "--iterations",
        "1",
        "--concurrency",
        "1",
    ]);
    command.args(extra);
    for var in ["OPENAI_API_KEY", "FLOWMEM_CONFIG", "RUST_LOG"] {
        command.env_remove(var);
    }
    command.env("OPENAI_BASE_URL", server.base_url()).env("FLOWMEM_MODEL", "scripted-model");
    tokio::time::timeout(Duration::from_secs(180), command.output()).await.expect("flowmem scout hung").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verbose_scout_logs_the_retried_request_and_the_rejected_plan() {
    let dir = sums_dir();

    let server = ScriptedLlmServer::start(script()).await;
    let output = scout(&dir, &server, true, "run", &[]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let line = |needle: &str| stderr.lines().find(|line| line.contains(needle)).map(str::to_owned);
    let retry = line("retrying chat request").unwrap_or_else(|| panic!("no retry line in:\n{stderr}"));
    assert!(retry.contains("WARN") && retry.contains("500"), "{retry}");
    let rejected = line("edit refused").unwrap_or_else(|| panic!("no refused edit in:\n{stderr}"));
    assert!(rejected.contains("INFO") && rejected.contains("`synthesize`"), "{rejected}\n{stderr}");
    assert!(line("re-asking the optimizer").is_some(), "{stderr}");
    // -v logs every run of a candidate on its splits: G⁰ on the 3 opt records and the 1
    // val record of the 5 (the test split has the last).
    let run = line("candidate 0000 on opt: run 3 of 3 done").unwrap_or_else(|| panic!("no run line in:\n{stderr}"));
    assert!(run.contains("INFO") && run.contains("TC 1.000"), "{run}");
    assert!(line("candidate 0000 on val: run 1 of 1 done (record `sum-4`").is_some(), "{stderr}");

    assert!(dir.path("run/test/report.json").exists(), "the final test ran");
    // The summary prints the final test, a line per system.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("test split (runs per system: 1):"), "{stdout}");
    for system in ["flowscout", "react"] {
        let row = stdout.lines().find(|line| line.trim_start().starts_with(system));
        let row = row.unwrap_or_else(|| panic!("no {system} row in:\n{stdout}"));
        assert!(row.contains("TC ") && row.contains("task success"), "{row}");
    }

    // Without -v the warning still shows; the info lines do not. `--no-test` skips the
    // final test and keeps the search's outputs.
    let server = ScriptedLlmServer::start(script()).await;
    let output = scout(&dir, &server, false, "run-quiet", &["--no-test"]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("retrying chat request"), "{stderr}");
    assert!(!stderr.contains("edit refused"), "{stderr}");
    assert!(!stderr.contains("run 1 of"), "per-run lines are -v's: {stderr}");
    // A line per candidate and split, with its scores, shows without -v: progress in a
    // log, where bars are not drawn.
    for (split, runs) in [("opt", "3 runs"), ("val", "1 run")] {
        let prefix = format!("candidate 0000 on {split}: reward ");
        let line = stderr.lines().find(|line| line.starts_with(&prefix));
        let line = line.unwrap_or_else(|| panic!("no `{prefix}` line in:\n{stderr}"));
        assert!(line.contains(&format!("over {runs} in ")) && line.contains("(TC 1.000, ES 1.000)"), "{line}");
    }
    assert!(dir.path("run-quiet/best.workflow.json").exists(), "{stderr}");
    assert!(!dir.path("run-quiet/test").exists(), "--no-test ran the final test anyway");
    assert!(!String::from_utf8_lossy(&output.stdout).contains("test split"));
}

/// Sends SIGINT to the process `pid`, as Ctrl-C does.
/// The scripted optimizer's first reply, a valid edit, comes after `delay`.
fn slow_optimizer_script(delay: Duration) -> Script {
    sums_script([
        edit(json!({"op": "rewrite_prompt", "id": "synthesize", "instruction": "State the sum."})).delay(delay)
    ])
}

fn optimizer_requests(server: &ScriptedLlmServer) -> usize {
    let optimizer = Match::any_message_contains("You improve a tool-using agent workflow");
    server.chat_requests().iter().filter(|request| optimizer.matches(&request.body)).count()
}

/// Starts `flowmem scout` in `dir` against `server`, with `args` after `scout`.
fn spawn_scout(dir: &TestDir, server: &ScriptedLlmServer, args: &[&str]) -> tokio::process::Child {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_flowmem"));
    command.current_dir(dir.path(".")).arg("scout").args(args);
    for var in ["OPENAI_API_KEY", "FLOWMEM_CONFIG", "RUST_LOG"] {
        command.env_remove(var);
    }
    command
        .env("OPENAI_BASE_URL", server.base_url())
        .env("FLOWMEM_MODEL", "scripted-model")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    command.spawn().expect("starting flowmem scout")
}

async fn wait_for_optimizer(server: &ScriptedLlmServer) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while optimizer_requests(server) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "scout never asked the optimizer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A finished scout run over the sums in `DIR/runs/sums` (one iteration: the optimizer
/// rewrites the answer's prompt), for the tests that show runs: the web UI's, the API's.
pub(crate) async fn sums_scout_run() -> TestDir {
    let dir = sums_dir();
    let rewrite = edit(json!({"op": "rewrite_prompt", "id": "synthesize", "instruction": "State the sum."}));
    let optimizer = ScriptedLlmServer::start(sums_script([rewrite])).await;
    let scouted = scout(&dir, &optimizer, false, "runs/sums", &[]).await;
    assert!(scouted.status.success(), "{}", String::from_utf8_lossy(&scouted.stderr));
    dir
}

pub(crate) fn sums_dir() -> TestDir {
    let dir = TestDir::new();
    dir.write("flowmem.toml", &everything_config(&["get-sum"]));
    let records: Vec<String> = (0..5)
        .map(|i| {
            json!({"id": format!("sum-{i}"), "query": format!("add 1 and 2 (case {i})"),
                "reference_result": "The sum is 3.", "orchestration": [{"tool": "get-sum", "args": {"a": 1, "b": 2}}]})
            .to_string()
        })
        .collect();
    dir.write("records.jsonl", &(records.join("\n") + "\n"));
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_scout_at_a_checkpoint_and_twice_stops_it_at_once_and_both_resume() {
    let dir = sums_dir();
    let new_run = ["--records", "records.jsonl", "--out", "run", "--iterations", "1", "--concurrency", "1"];

    // Once: the optimizer's answer (2 s late) is kept, the search stops at the
    // checkpoint after the proposal, and the resume asks the optimizer nothing.
    let server = ScriptedLlmServer::start(slow_optimizer_script(Duration::from_secs(2))).await;
    let child = spawn_scout(&dir, &server, &new_run);
    wait_for_optimizer(&server).await;
    interrupt(child.id().unwrap());
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("stopping at the next checkpoint"), "{stderr}");
    assert!(stderr.contains("resume with `flowmem scout --resume run`"), "{stderr}");
    assert!(dir.path("run/candidates/0001.plan.json").exists(), "the proposal was not kept:\n{stderr}");
    assert!(!dir.path("run/best.workflow.json").exists());

    let server = ScriptedLlmServer::start(slow_optimizer_script(Duration::ZERO)).await;
    let child = spawn_scout(&dir, &server, &["--json", "--resume", "run"]);
    let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["iterations"], 1, "{summary}");
    assert_eq!(optimizer_requests(&server), 0, "the resume asked the optimizer again");
    assert!(dir.path("run/best.workflow.json").exists());

    // Twice: the optimizer would answer in 10 minutes; the second Ctrl-C does not wait.
    let server = ScriptedLlmServer::start(slow_optimizer_script(Duration::from_secs(600))).await;
    let new_run = ["--records", "records.jsonl", "--out", "run2", "--iterations", "1", "--concurrency", "1"];
    let child = spawn_scout(&dir, &server, &new_run);
    wait_for_optimizer(&server).await;
    let pid = child.id().unwrap();
    interrupt(pid);
    tokio::time::sleep(Duration::from_millis(500)).await;
    interrupt(pid);
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("a second Ctrl-C did not stop scout")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("resume with `flowmem scout --resume run2`"), "{stderr}");

    let server = ScriptedLlmServer::start(slow_optimizer_script(Duration::ZERO)).await;
    let child = spawn_scout(&dir, &server, &["--json", "--resume", "run2"]);
    let output = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output()).await.unwrap().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    // The dropped proposal is asked for again: its edit, then its `done`.
    assert_eq!(optimizer_requests(&server), 2);
    assert!(dir.path("run2/best.workflow.json").exists());
}
