//! `flowmem stats`: counts in text and JSON, on hand-made and real files.

use crate::support::{TestDir, data};

const RECORDS: &str = r#"{"id": "1", "query": "q", "orchestration": [{"tool": "find", "args": {}}, {"tool": "get", "args": {}}, {"tool": "get", "args": {}}]}
{"id": "2", "query": "q", "orchestration": [{"tool": "find", "args": {}}, {"tool": "get", "args": {}}, {"tool": "cancel", "args": {}, "error": "denied"}]}
{"id": "3", "query": "q", "orchestration": []}
"#;

#[test]
fn text_output() {
    let dir = TestDir::new();
    dir.write("records.jsonl", RECORDS);
    let run = dir.run(&["stats", "records.jsonl", "--top", "2"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        "file            records.jsonl
records         3
tool calls      6 (2.00 per item, at most 3; 1 item(s) without calls; 1 failed)
distinct tools  3
transitions     3 distinct

top tools
      3  get
      2  find

top transitions
      2  find -> get
      1  get -> cancel
"
    );
}

#[test]
fn json_output() {
    let dir = TestDir::new();
    dir.write("records.jsonl", RECORDS);
    let run = dir.run(&["stats", "--json", "records.jsonl", "--top", "1"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(doc["version"], 1);
    let stats = &doc["stats"];
    assert_eq!((stats["n_items"].as_u64(), stats["n_tool_calls"].as_u64()), (Some(3), Some(6)));
    assert_eq!(stats["n_distinct_tools"], 3);
    assert_eq!(stats["top_transitions"], serde_json::json!([{"from": "find", "to": "get", "count": 2}]));
}

#[test]
fn stats_of_an_imported_data_set() {
    let dir = TestDir::new();
    let tasks = data("tau2-bench/airline/tasks.json");
    assert_eq!(dir.run(&["import", "-q", "-f", "tau2-bench", &tasks, "-o", "airline.jsonl"]).code, 0);
    let run = dir.run(&["stats", "--json", "airline.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let stats = &serde_json::from_str::<serde_json::Value>(&run.stdout).unwrap()["stats"];
    // SOURCE.md: 50 tasks, 142 actions, 7 tasks without actions, 14 airline tools.
    assert_eq!(stats["n_records"], 50);
    assert_eq!(stats["n_tool_calls"], 142);
    assert_eq!(stats["n_items_without_tool_calls"], 7);
    let n_tools = stats["n_distinct_tools"].as_u64().unwrap();
    assert!((1..=14).contains(&n_tools), "{n_tools}");
    let counts: Vec<u64> =
        stats["top_transitions"].as_array().unwrap().iter().map(|t| t["count"].as_u64().unwrap()).collect();
    assert!(counts.windows(2).all(|pair| pair[0] >= pair[1]), "{counts:?}");
}

#[test]
fn a_bad_line_is_an_error_naming_file_line_and_path() {
    let dir = TestDir::new();
    dir.write("bad.jsonl", "{\"id\": \"1\", \"query\": \"q\", \"orchestration\": [{\"tool\": 5}]}\n");
    let run = dir.run(&["stats", "bad.jsonl"]);
    assert_eq!(run.code, 2);
    assert_eq!(
        run.stderr,
        "error: cannot compute stats of `bad.jsonl`: invalid record in `bad.jsonl:1` at `$.orchestration[0].tool`: invalid type: integer `5`, expected a string\n"
    );
}
