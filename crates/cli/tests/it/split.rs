//! `flowmem split` on τ²-bench retail records.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use flowmem_model::{ImportFormat, import, read_records, write_jsonl_atomic};

fn shared_data(relative: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data").join(relative);
    assert!(path.exists(), "missing test data `{}`: the repository must sit next to `shared/`", path.display());
    path
}

fn flowmem(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flowmem")).args(args).current_dir(dir).output().unwrap()
}

fn ids(path: &Path) -> Vec<String> {
    read_records(path).unwrap().into_iter().map(|r| r.id).collect()
}

#[test]
fn split_is_five_two_three_and_ignores_input_order() {
    let imported = import(ImportFormat::Tau2Bench, &shared_data("tau2-bench/retail/tasks.json")).unwrap();
    let mut records: Vec<flowmem_model::Record> = imported
        .items
        .into_iter()
        .filter_map(|item| match item {
            flowmem_model::Item::Record(r) => Some(r),
            flowmem_model::Item::Trajectory(_) => None,
        })
        .collect();
    assert_eq!(records.len(), 114);
    let dir = tempfile::tempdir().unwrap();
    write_jsonl_atomic(&dir.path().join("records.jsonl"), records.iter()).unwrap();
    records.reverse();
    write_jsonl_atomic(&dir.path().join("reversed.jsonl"), records.iter()).unwrap();

    let out = flowmem(&["split", "records.jsonl", "--seed", "7", "--out", "a", "--json"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 114 × (0.5, 0.2, 0.3) = 57, 22.8, 34.2 → largest remainder gives val the extra one.
    assert_eq!(
        (summary["opt"].as_u64(), summary["val"].as_u64(), summary["test"].as_u64()),
        (Some(57), Some(23), Some(34))
    );

    let out = flowmem(&["split", "reversed.jsonl", "--seed", "7", "--out", "b"], dir.path());
    assert_eq!(out.status.code(), Some(0));
    let out = flowmem(&["split", "records.jsonl", "--seed", "8", "--out", "c"], dir.path());
    assert_eq!(out.status.code(), Some(0));
    let mut all = Vec::new();
    for part in ["opt", "val", "test"] {
        let a = ids(&dir.path().join("a").join(format!("{part}.jsonl")));
        let mut b = ids(&dir.path().join("b").join(format!("{part}.jsonl")));
        b.reverse();
        assert_eq!(a, b, "part {part} depends on the input order");
        all.extend(a);
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 114);
    assert_ne!(ids(&dir.path().join("a/opt.jsonl")), ids(&dir.path().join("c/opt.jsonl")));

    let out = flowmem(&["split", "records.jsonl", "--ratios", "5:2", "--out", "d"], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("OPT:VAL:TEST"));
}
