//! The JSONL helpers: round trips, kind detection, located errors, atomic writes.

use std::collections::HashMap;

use flowmem_model::{
    Item, ItemKind, JsonlError, Record, Trajectory, read_items, read_records, read_trajectories, write_jsonl_atomic,
};

use crate::support::write_temp;

const RECORDS: &str = r#"{"id": "1", "query": "q1", "reference_result": "r", "orchestration": [{"tool": "t", "args": {"a": 1}}]}

{"id": "2", "query": "q2", "orchestration": []}
"#;

const TRAJECTORIES: &str = r#"{"id": "run-1", "attempt": 2, "query": "q", "steps": [{"action": {"kind": "tool_call", "tool": "t", "args": {}}}, {"action": {"kind": "message", "content": "done"}}], "final_answer": "done"}
"#;

/// The error's message with the temporary directory cut off.
fn message(err: &JsonlError, dir: &tempfile::TempDir) -> String {
    format!("{err}").replace(&format!("{}/", dir.path().display()), "")
}

#[test]
fn records_round_trip() {
    let (dir, path) = write_temp("records.jsonl", RECORDS);
    let records = read_records(&path).unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].orchestration[0].args["a"], 1);
    let out = dir.path().join("again.jsonl");
    write_jsonl_atomic(&out, &records).unwrap();
    assert_eq!(read_records(&out).unwrap(), records);
}

#[test]
fn trajectories_round_trip() {
    let (dir, path) = write_temp("runs.jsonl", TRAJECTORIES);
    let trajectories = read_trajectories(&path).unwrap();
    assert_eq!(trajectories[0].attempt, Some(2));
    assert_eq!(trajectories[0].tool_calls().count(), 1);
    let out = dir.path().join("again.jsonl");
    write_jsonl_atomic(&out, &trajectories).unwrap();
    assert_eq!(read_trajectories(&out).unwrap(), trajectories);
}

#[test]
fn read_items_tells_records_from_trajectories() {
    let (_dir, records) = write_temp("records.jsonl", RECORDS);
    let items = read_items(&records).unwrap();
    assert!(items.iter().all(|item| item.kind() == ItemKind::Record));
    assert_eq!(items.len(), 2);
    let (_dir, runs) = write_temp("runs.jsonl", TRAJECTORIES);
    let items = read_items(&runs).unwrap();
    assert!(matches!(&items[..], [Item::Trajectory(Trajectory { id, .. })] if id == "run-1"));
}

#[test]
fn items_serialise_bare() {
    let (dir, path) = write_temp("records.jsonl", RECORDS);
    let items: Vec<Item> = read_records(&path).unwrap().into_iter().map(Item::from).collect();
    let out = dir.path().join("items.jsonl");
    write_jsonl_atomic(&out, &items).unwrap();
    let records: Vec<Record> = read_records(&out).unwrap();
    assert_eq!(records.len(), 2);
}

fn check_error(text: &str, read: fn(&std::path::Path) -> Result<(), JsonlError>, expect: &str) {
    let (dir, path) = write_temp("bad.jsonl", text);
    let err = read(&path).unwrap_err();
    let mut full = message(&err, &dir);
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        full.push_str(": ");
        full.push_str(&cause.to_string());
        source = cause.source();
    }
    assert_eq!(full, expect);
}

fn records_only(path: &std::path::Path) -> Result<(), JsonlError> {
    read_records(path).map(drop)
}

fn items_only(path: &std::path::Path) -> Result<(), JsonlError> {
    read_items(path).map(drop)
}

#[test]
fn a_bad_field_names_line_and_json_path() {
    check_error(
        "{\"id\": \"1\", \"query\": \"q\", \"orchestration\": []}\n{\"id\": \"2\", \"query\": \"q\", \"orchestration\": [{\"tool\": \"t\", \"args\": [1]}]}\n",
        records_only,
        "invalid record in `bad.jsonl:2` at `$.orchestration[0].args`: invalid type: sequence, expected a map",
    );
    check_error(
        "{\"id\": \"1\", \"query\": \"q\", \"orchestration\": [{\"tool\": \"t\", \"args\": [1]}]}\n",
        items_only,
        "invalid record in `bad.jsonl:1` at `$.orchestration[0].args`: invalid type: sequence, expected a map",
    );
}

#[test]
fn a_missing_field_names_its_parent() {
    check_error(
        "{\"id\": \"1\", \"orchestration\": []}\n",
        records_only,
        "invalid record in `bad.jsonl:1` at `$`: missing field `query`",
    );
}

#[test]
fn broken_json_names_the_line() {
    check_error(
        "{\"id\": \"1\", \"query\": \"q\", \"orchestration\": []}\n\n{\"id\": \n",
        records_only,
        "`bad.jsonl:3:7` is not valid JSON: EOF while parsing a value",
    );
}

#[test]
fn unknown_and_mixed_kinds_are_errors() {
    check_error(
        "{\"id\": \"1\", \"query\": \"q\"}\n",
        items_only,
        "`bad.jsonl:1` holds neither a record nor a trajectory\nhint: a record has `orchestration`, a trajectory has `steps`",
    );
    check_error(
        &format!("{}\n{}", RECORDS.lines().next().unwrap(), TRAJECTORIES),
        items_only,
        "`bad.jsonl:2` holds a trajectory, but the file's first item is a record",
    );
}

#[test]
fn a_failed_write_leaves_the_old_file_and_no_temporary() {
    let (dir, path) = write_temp("out.jsonl", "old\n");
    // A map with non-string keys cannot be serialised to JSON: the second item fails.
    let good: HashMap<String, u8> = HashMap::from([("a".to_owned(), 1)]);
    let bad: HashMap<(u8, u8), u8> = HashMap::from([((1, 2), 3)]);
    let items: Vec<serde_json::Value> = vec![serde_json::to_value(&good).unwrap()];
    write_jsonl_atomic(&path, &items).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"a\":1}\n");
    let err = write_jsonl_atomic(&path, [&bad, &bad]).unwrap_err();
    assert!(matches!(err, JsonlError::Serialize { index: 0, .. }), "{err:?}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"a\":1}\n");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("out.jsonl")]);
}

#[test]
fn a_write_into_a_missing_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = write_jsonl_atomic(&dir.path().join("no/such/dir/out.jsonl"), &[1]).unwrap_err();
    assert!(matches!(err, JsonlError::Write { .. }), "{err:?}");
}
