//! `flowmem import`: summaries, exit codes, strictness, and never a half-written output.

use crate::support::{TestDir, data};

const TASKS: &str = r#"{"id": 0, "instruction": "q0", "actions": [{"name": "a", "kwargs": {"x": 1}}], "outputs": []}
{"id": 1, "instruction": "q1", "actions": [{"name": "b", "kwargs": [1]}]}
{"id": 2, "instruction": "q2", "actions": []}
"#;

#[test]
fn imports_a_real_data_set_and_summarises_on_stderr() {
    let dir = TestDir::new();
    let tasks = data("tau-bench/retail/tasks_test.jsonl");
    let run = dir.run(&["import", "--format", "tau-bench", &tasks, "-o", "retail.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "");
    assert_eq!(run.stderr, "read 115 tau-bench item(s) from 1 file\nwrote 115 records to `retail.jsonl`\n");
    // SOURCE.md: retail test has 115 tasks.
    assert_eq!(dir.read("retail.jsonl").lines().count(), 115);
}

#[test]
fn json_summary_goes_to_stdout() {
    let dir = TestDir::new();
    let tasks = data("tau2-bench/retail/tasks.json");
    let run = dir.run(&["import", "--json", "-f", "tau2-bench", &tasks, "-o", "out.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let summary: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON on stdout");
    assert_eq!(summary["version"], 1);
    assert_eq!(summary["format"], "tau2-bench");
    assert_eq!(summary["kind"], "record");
    assert_eq!(summary["output"], "out.jsonl");
    // SOURCE.md: τ²-bench retail has 114 tasks.
    assert_eq!((summary["read"].as_u64(), summary["written"].as_u64()), (Some(114), Some(114)));
    assert_eq!(summary["skipped"], serde_json::json!([]));
}

#[test]
fn bad_items_are_skipped_with_their_place() {
    let dir = TestDir::new();
    dir.write("tasks.jsonl", TASKS);
    let run = dir.run(&["import", "--format", "tau-bench", "tasks.jsonl", "-o", "out.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stderr,
        "read 3 tau-bench item(s) from 1 file\n\
         wrote 2 records to `out.jsonl`\n\
         warning: skipped 1 item(s):\n  \
         `tasks.jsonl:2` at `$.actions[0].kwargs`: arguments must be a JSON object, found array\n"
    );
    let ids: Vec<String> = dir
        .read("out.jsonl")
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["0", "2"]);
}

#[test]
fn json_summary_lists_skips_with_location() {
    let dir = TestDir::new();
    dir.write("tasks.jsonl", TASKS);
    let run = dir.run(&["import", "--json", "--format", "tau-bench", "tasks.jsonl", "-o", "out.jsonl"]);
    let summary: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON on stdout");
    assert_eq!(
        summary["skipped"],
        serde_json::json!([{
            "location": {"file": "tasks.jsonl", "line": 2, "json_path": "$.actions[0].kwargs"},
            "reason": "arguments must be a JSON object, found array"
        }])
    );
}

#[test]
fn strict_stops_at_the_first_bad_item_and_writes_nothing() {
    let dir = TestDir::new();
    dir.write("tasks.jsonl", TASKS);
    let run = dir.run(&["import", "--strict", "--format", "tau-bench", "tasks.jsonl", "-o", "out.jsonl"]);
    assert_eq!(run.code, 2);
    assert_eq!(
        run.stderr,
        "error: invalid tau-bench item in `tasks.jsonl:2` at `$.actions[0].kwargs`: arguments must be a JSON object, found array\n\
         hint: rerun without --strict to skip bad items and import the rest\n"
    );
    assert!(!dir.path("out.jsonl").exists());
}

#[test]
fn nothing_imported_exits_1_and_keeps_the_old_output() {
    let dir = TestDir::new();
    dir.write("tasks.jsonl", "{\"id\": 1}\nnot json\n");
    dir.write("out.jsonl", "previous\n");
    let run = dir.run(&["import", "--format", "tau-bench", "tasks.jsonl", "-o", "out.jsonl"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("`tasks.jsonl:1` at `$.instruction`: missing field `instruction`"), "{}", run.stderr);
    assert!(run.stderr.contains("`tasks.jsonl:2`: not valid JSON: expected ident at column 2"), "{}", run.stderr);
    assert!(
        run.stderr.ends_with("error: nothing imported from 2 tau-bench item(s); `out.jsonl` was not written\n"),
        "{}",
        run.stderr
    );
    assert_eq!(dir.read("out.jsonl"), "previous\n");
}

#[test]
fn a_missing_input_is_an_error() {
    let dir = TestDir::new();
    let run = dir.run(&["import", "--format", "openai", "nope.jsonl", "-o", "out.jsonl"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.starts_with("error: cannot import `nope.jsonl` as openai: cannot read `nope.jsonl`: "),
        "{}",
        run.stderr
    );
}

#[test]
fn an_unwritable_output_is_an_error_and_leaves_no_temporary() {
    let dir = TestDir::new();
    dir.write("tasks.jsonl", TASKS);
    let run = dir.run(&["import", "--format", "tau-bench", "tasks.jsonl", "-o", "missing/out.jsonl"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("error: cannot write the imported items to `missing/out.jsonl`"), "{}", run.stderr);
    let names: Vec<_> = std::fs::read_dir(dir.path(".")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, [std::ffi::OsString::from("tasks.jsonl")]);
}

#[test]
fn several_paths_and_directories_combine() {
    let dir = TestDir::new();
    let airline = data("tau-bench/airline");
    let retail = data("tau-bench/retail/tasks_dev.jsonl");
    let run = dir.run(&["import", "--format", "tau-bench", &airline, &retail, "-o", "out.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // SOURCE.md: airline test has 50 tasks, retail dev 20.
    assert!(run.stderr.starts_with("read 70 tau-bench item(s) from 2 files\n"), "{}", run.stderr);
    assert_eq!(dir.read("out.jsonl").lines().count(), 70);
}

#[test]
fn stabletoolbench_summary_says_messages_are_truncated() {
    let dir = TestDir::new();
    let evalset = data("stabletoolbench/default_evalset_gpt-3.5-turbo_CoT/G1_tool.json");
    let run = dir.run(&["import", "--format", "stabletoolbench", &evalset, "-o", "out.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("note: StableToolBench truncates every logged message to 100 characters"),
        "{}",
        run.stderr
    );
}

#[test]
fn quiet_prints_nothing_on_success() {
    let dir = TestDir::new();
    dir.write("tasks.jsonl", TASKS);
    let run = dir.run(&["import", "-q", "--format", "tau-bench", "tasks.jsonl", "-o", "out.jsonl"]);
    assert_eq!((run.code, run.stdout.as_str(), run.stderr.as_str()), (0, "", ""));
}

#[test]
fn xes_logs_import_one_trajectory_per_case() {
    let dir = TestDir::new();
    let log = data("xes/helpdesk.xes.gz");
    let run = dir.run(&["import", "--format", "xes", &log, "-o", "helpdesk.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // SOURCE.md: helpdesk has 4580 cases and 21348 events.
    let lines: Vec<serde_json::Value> =
        dir.read("helpdesk.jsonl").lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(lines.len(), 4580);
    let events: usize = lines.iter().map(|t| t["steps"].as_array().unwrap().len()).sum();
    assert_eq!(events, 21348);
    assert_eq!(lines[0]["steps"][0]["action"]["kind"], "tool_call");
}

/// An OTLP fixture made by real instrumentation (`scripts/reference/otlp_fixtures.py`).
fn otlp_fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures/otlp").join(name);
    path.to_string_lossy().into_owned()
}

#[test]
fn otlp_traces_import_one_trajectory_per_conversation_or_trace() {
    let dir = TestDir::new();
    let spans = otlp_fixture("genai-spans.otlp.pb");
    let run = dir.run(&["import", "--json", "--format", "otlp", &spans, "-o", "runs.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let summary: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON on stdout");
    assert_eq!((summary["kind"].as_str(), summary["written"].as_u64()), (Some("trajectory"), Some(2)));
    assert_eq!((summary["skipped"].clone(), summary["gaps"].clone()), (serde_json::json!([]), serde_json::json!([])));
    let runs: Vec<serde_json::Value> =
        dir.read("runs.jsonl").lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(runs[0]["id"], "support-7f3a", "the first run names its conversation");
    let tools: Vec<&str> = runs[0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|step| step["action"]["kind"] == "tool_call")
        .map(|step| step["action"]["tool"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["get_order_details", "cancel_pending_order"]);
}

#[test]
fn otlp_spans_without_content_import_and_list_their_gaps() {
    let dir = TestDir::new();
    let spans = otlp_fixture("genai-no-content.otlp.pb");
    let run = dir.run(&["import", "--format", "otlp", &spans, "-o", "runs.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("wrote 1 trajectories to `runs.jsonl`"), "{}", run.stderr);
    assert!(run.stderr.contains("warning: 6 part(s) of imported items could not be reconstructed:"), "{}", run.stderr);
    assert!(
        run.stderr.contains("genai-no-content.otlp.pb` at `$.resourceSpans[0].scopeSpans[0].spans["),
        "{}",
        run.stderr
    );
}

#[test]
fn otlp_spans_and_their_log_events_join_across_paths() {
    let dir = TestDir::new();
    let spans = otlp_fixture("genai-events.otlp.pb");
    let logs = otlp_fixture("genai-events.logs.otlp.pb");
    let run = dir.run(&["import", "--json", "--format", "otlp", &spans, &logs, "-o", "runs.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let summary: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON on stdout");
    assert_eq!(summary["gaps"], serde_json::json!([]), "the events give every model call its messages");
    let first: serde_json::Value = serde_json::from_str(dir.read("runs.jsonl").lines().next().unwrap()).unwrap();
    assert_eq!(first["query"], "Please cancel my pending order #W5918442, I no longer need it.");
}
