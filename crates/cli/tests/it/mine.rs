//! `flowmem mine` as a subprocess.

use std::path::{Path, PathBuf};
use std::process::Command;

fn flowmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_flowmem"))
}

fn shared(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data").join(path)
}

#[test]
fn mines_an_xes_log_and_prints_pm4py_notation() {
    let out = flowmem().arg("mine").arg(shared("xes/running-example.xes")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.starts_with("->( 'register request', *( "), "{stdout}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("6 cases, 42 events, 6 variants, 8 activities"), "{stderr}");
}

#[test]
fn json_report_has_counts_tree_and_timings() {
    let out = flowmem()
        .args(["--json", "mine", "--miner", "imf", "--noise", "0.2", "--timings", "--output", "skeleton"])
        .arg(shared("xes/01_running-example.xes.gz"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["log"]["cases"], 6);
    assert_eq!(doc["miner"], "imf");
    assert_eq!(doc["output"]["entry"], "plan");
    assert!(doc["timings_ms"]["discover"].as_f64().is_some());
    // PM4Py's figures for its IMf(0.2) net on this log (the conformance fixture).
    assert_eq!(doc["conformance"]["token_replay_fitness"], 1.0);
    assert_eq!(doc["conformance"]["precision"], 0.7530864197530864);
}

#[test]
fn jsonl_records_are_mined_and_bad_lines_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("records.jsonl");
    let lines = [
        r#"{"id":"1","query":"q","orchestration":[{"tool":"find_user","args":{"name":"x"}},{"tool":"cancel"}]}"#,
        r#"{"id":"2","query":"q","orchestration":[{"tool":"find_user","args":{}},{"tool":"refund"}]}"#,
        "not json",
    ];
    std::fs::write(&path, lines.join("\n")).unwrap();
    let out = flowmem().arg("mine").arg(&path).args(["--output", "pnml"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("records.jsonl:3"), "{stderr}");
    assert!(stderr.contains("2 cases"), "{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("<pnml>") && stdout.contains("<text>refund</text>"), "{stdout}");
}

#[test]
fn an_empty_log_exits_with_status_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.jsonl");
    std::fs::write(&path, "").unwrap();
    let out = flowmem().arg("mine").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
}
