//! Hand-made broken inputs: every skip names the file, the line and the JSON path, and
//! the good items around a bad one still import.

use flowmem_model::{ImportError, ImportFormat, import};

use crate::support::{skip_messages, write_temp};

fn check(format: ImportFormat, name: &str, text: &str, n_items: usize, expect: &[&str]) {
    let (dir, path) = write_temp(name, text);
    let imported = import(format, &path).expect("the import runs");
    assert_eq!(skip_messages(&imported, dir.path()), expect);
    assert_eq!(imported.items.len(), n_items, "imported items");
}

#[test]
fn tau_bench_bad_lines_are_skipped_with_their_place() {
    check(
        ImportFormat::TauBench,
        "tasks_test.jsonl",
        r#"{"id": 0, "instruction": "q0", "actions": [{"name": "a", "kwargs": {"x": 1}}], "outputs": []}
{"id": 1, "instruction": "q1", "actions": [{"name": "a", "kwargs": {}}, {"name": "b", "kwargs": [1, 2]}]}

{"id": 2, "instruction": "q2", "actions": [
{"id": 3, "actions": []}
{"id": 4.5, "instruction": "q4", "actions": []}
{"id": 5, "instruction": "q5", "actions": [{"kwargs": {}}]}
{"id": 6, "instruction": "q6", "actions": [], "outputs": ["ok", 7]}
{"id": 7, "instruction": "q7", "actions": []}
"#,
        2,
        &[
            "`tasks_test.jsonl:2` at `$.actions[1].kwargs`: arguments must be a JSON object, found array",
            "`tasks_test.jsonl:4`: not valid JSON: EOF while parsing a list at column 43",
            "`tasks_test.jsonl:5` at `$.instruction`: missing field `instruction`",
            "`tasks_test.jsonl:6` at `$.id`: expected an id (a string or an integer), found a number",
            "`tasks_test.jsonl:7` at `$.actions[0].name`: missing field `name`",
            "`tasks_test.jsonl:8` at `$.outputs[1]`: expected a string, found a number",
        ],
    );
}

#[test]
fn tau2_bench_problems_point_at_the_line_of_the_bad_field() {
    check(
        ImportFormat::Tau2Bench,
        "tasks.json",
        r#"[
{"id": "a", "user_scenario": {"instructions": "plain text"},
 "evaluation_criteria": {"actions": [{"action_id": "a_0", "name": "get", "arguments": {}}]}},
{"id": "b", "user_scenario": {"instructions": {"reason_for_call": "r"}},
 "evaluation_criteria": {"actions": [
   {"action_id": "b_0", "name": "get", "arguments": {}},
   {"action_id": "b_1", "arguments": {}}
 ]}},
{"id": "c", "user_scenario": {"instructions": {"reason_for_call": "r"}},
 "evaluation_criteria": {"actions": [{"name": "get",
   "arguments": "{\"not\": \"parsed\"}"}]}},
{"id": "d", "user_scenario": {"instructions": {"domain": "retail"}}},
{"id": "e", "user_scenario": {"instructions": {"reason_for_call": "r"}},
 "evaluation_criteria": {"actions": [{"name": "x", "compare_args": "all"}]}},
"not a task",
{"id": "f", "user_scenario": {"instructions": {"known_info": "k"}}, "evaluation_criteria": null}
]"#,
        2,
        &[
            "`tasks.json:7` at `$[1].evaluation_criteria.actions[1].name`: missing field `name`",
            "`tasks.json:11` at `$[2].evaluation_criteria.actions[0].arguments`: arguments must be a JSON object, found string",
            "`tasks.json:12` at `$[3].user_scenario.instructions`: no instructions: `reason_for_call`, `known_info`, `unknown_info` and `task_instructions` are all missing",
            "`tasks.json:14` at `$[4].evaluation_criteria.actions[0].compare_args`: expected an array, found a string",
            "`tasks.json:15` at `$[5]`: expected an object, found a string",
        ],
    );
}

#[test]
fn a_file_that_is_not_json_is_one_skip() {
    check(
        ImportFormat::Tau2Bench,
        "tasks.json",
        "[\n{\"id\": \"a\",\n oops}\n]",
        0,
        &["`tasks.json:3`: not valid JSON: key must be a string at column 2"],
    );
}

#[test]
fn a_missing_path_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = import(ImportFormat::TauBench, &dir.path().join("nope.jsonl")).unwrap_err();
    assert!(matches!(err, ImportError::Read { .. }), "{err:?}");
    assert!(err.to_string().contains("nope.jsonl"), "{err}");
}

#[test]
fn a_directory_without_matching_files_is_an_error() {
    let (dir, _) = write_temp("split_tasks.json", "{}");
    let err = import(ImportFormat::Tau2Bench, dir.path()).unwrap_err();
    assert!(matches!(err, ImportError::NoInputFiles { .. }), "{err:?}");
    assert!(
        err.to_string().contains("looked for `tasks*.json`"),
        "{err}"
    );
}
