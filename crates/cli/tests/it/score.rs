//! `flowmem score` on τ²-bench airline records against runs built from their golden logs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use flowmem_model::{Action, ImportFormat, Item, Record, Step, ToolCall, Trajectory, import, write_jsonl_atomic};

fn shared_data(relative: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data").join(relative);
    assert!(path.exists(), "missing test data `{}`: the repository must sit next to `shared/`", path.display());
    path
}

fn tau2_records(domain: &str) -> Vec<Record> {
    let imported = import(ImportFormat::Tau2Bench, &shared_data(&format!("tau2-bench/{domain}/tasks.json"))).unwrap();
    imported
        .items
        .into_iter()
        .filter_map(|item| match item {
            Item::Record(record) => Some(record),
            Item::Trajectory(_) => None,
        })
        .collect()
}

fn trajectory(id: &str, attempt: u32, calls: &[ToolCall], answer: &str) -> Trajectory {
    let mut run: Trajectory = serde_json::from_value(serde_json::json!({"id": id, "query": "q"})).unwrap();
    run.attempt = Some(attempt);
    run.steps = calls
        .iter()
        .map(|call| {
            let mut call = call.clone();
            // A run's calls carry no reference-side comparison hints.
            call.compare_args = None;
            Step { observation: None, reasoning: None, action: Action::ToolCall(call) }
        })
        .collect();
    run.final_answer = Some(answer.to_string());
    run
}

fn flowmem(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flowmem")).args(args).current_dir(dir).output().unwrap()
}

#[test]
fn score_reports_tc_alignment_and_unmatched_runs_on_tau2_airline() {
    let records = tau2_records("airline");
    assert_eq!(records.len(), 50);
    let dir = tempfile::tempdir().unwrap();
    write_jsonl_atomic(&dir.path().join("records.jsonl"), records.iter()).unwrap();

    let mut runs = Vec::new();
    let mut expected = Vec::new();
    for record in records.iter().filter(|r| r.orchestration.len() >= 2) {
        let calls = &record.orchestration;
        let answer = record.required_outputs.join("; ");
        runs.push(trajectory(&record.id, 0, calls, &answer));
        expected.push((record.id.clone(), 1.0));
        let dropped = &calls[..calls.len() - 1];
        runs.push(trajectory(&record.id, 1, dropped, &answer));
        expected.push((record.id.clone(), dropped.len() as f64 / calls.len() as f64));
    }
    // One reordered run: its last two calls swapped.
    let reorder = records
        .iter()
        .find(|r| r.orchestration.len() == 2 && !r.orchestration[0].same_call(&r.orchestration[1]))
        .unwrap();
    let swapped = vec![reorder.orchestration[1].clone(), reorder.orchestration[0].clone()];
    runs.push(trajectory(&reorder.id, 2, &swapped, ""));
    expected.push((reorder.id.clone(), 0.5));
    runs.push(trajectory("no-such-task", 0, &[], ""));
    write_jsonl_atomic(&dir.path().join("runs.jsonl"), runs.iter()).unwrap();

    let out = flowmem(&["score", "--records", "records.jsonl", "--runs", "runs.jsonl", "--json"], dir.path());
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["runs"], expected.len());
    assert_eq!(report["unmatched"], serde_json::json!(["no-such-task"]));
    let per_run = report["per_run"].as_array().unwrap();
    for (entry, (id, tc)) in per_run.iter().zip(&expected) {
        assert_eq!(entry["id"], id.as_str());
        assert!((entry["tc"].as_f64().unwrap() - tc).abs() < 1e-12, "{entry}");
        for key in ["matched", "missing", "extra"] {
            assert!(entry[key].is_array(), "{key} in {entry}");
        }
    }
    // The dropped-call run of the first record misses exactly its last call.
    let first = records.iter().find(|r| r.orchestration.len() >= 2).unwrap();
    let missing = &per_run[1]["missing"];
    assert_eq!(missing.as_array().unwrap().len(), 1);
    assert_eq!(missing[0]["tool"], first.orchestration.last().unwrap().tool.as_str());
    assert_eq!(missing[0]["index"], first.orchestration.len() - 1);
    // The swapped run matches one call and has one missing and one extra.
    let last = per_run.last().unwrap();
    assert_eq!(
        (
            last["matched"].as_array().unwrap().len(),
            last["missing"].as_array().unwrap().len(),
            last["extra"].as_array().unwrap().len()
        ),
        (1, 1, 1)
    );
    let mean = expected.iter().map(|(_, tc)| tc).sum::<f64>() / expected.len() as f64;
    assert!((report["mean_tc"].as_f64().unwrap() - mean).abs() < 1e-12);
    // Golden runs carry the required outputs in their answers.
    assert!(per_run.iter().filter(|e| e["outputs_found"] == true).count() >= 1);

    let human = flowmem(&["score", "--records", "records.jsonl", "--runs", "runs.jsonl"], dir.path());
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("mean TC") && text.contains("unmatched runs: no-such-task"), "{text}");
    assert!(String::from_utf8_lossy(&human.stderr).contains("1 runs have no record"));

    let strict =
        flowmem(&["score", "--records", "records.jsonl", "--runs", "runs.jsonl", "--fail-under", "0.99"], dir.path());
    assert_eq!(strict.status.code(), Some(1));
}

#[test]
fn no_matching_run_exits_one_and_a_bad_line_exits_two_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("records.jsonl"), "{\"id\": \"1\", \"query\": \"q\"}\n").unwrap();
    std::fs::write(dir.path().join("runs.jsonl"), "{\"id\": \"2\", \"query\": \"q\"}\n").unwrap();
    let out = flowmem(&["score", "--records", "records.jsonl", "--runs", "runs.jsonl"], dir.path());
    assert_eq!(out.status.code(), Some(1));

    std::fs::write(
        dir.path().join("bad.jsonl"),
        "{\"id\": \"1\", \"query\": \"q\"}\n{\"id\": \"1\", \"query\": \"q\", \"steps\": 3}\n",
    )
    .unwrap();
    let out = flowmem(&["score", "--records", "records.jsonl", "--runs", "bad.jsonl"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.jsonl:2") && stderr.contains("$.steps"), "{stderr}");

    let out =
        flowmem(&["score", "--records", "records.jsonl", "--runs", "runs.jsonl", "--ignore-args", "oops"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TOOL=ARG"));
}
