//! Hand-made broken inputs: every skip names the file, the line and the JSON path, and
//! the good items around a bad one still import.

use flowmem_model::{ImportError, ImportFormat, Item, Outcome, Trajectory, import};

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
    assert!(err.to_string().contains("looked for `tasks*.json`"), "{err}");
}

const RUNS: &str = r#"{"id": "r1", "trial": 2, "reward": 1.0, "domain": "retail", "messages": [{"role": "system", "content": "be nice"}, {"role": "user", "content": "find order 7"}, {"role": "assistant", "content": "looking", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": "{\"id\": 7}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "{\"status\": \"shipped\"}"}, {"role": "assistant", "content": "It shipped."}]}
[{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": ""}}, {"role": "function", "name": "f", "content": "ok"}, {"role": "assistant", "content": "done"}]
{"task_id": 5, "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "g", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "b", "content": "x"}]}
{"query_id": "q9", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "g", "arguments": "{\"x\": "}}]}]}
{"id": "r5", "conversation": [{"role": "assistant", "content": "hello"}]}
{"id": "r6", "success": "yes", "traj": [{"role": "user", "content": "q"}]}
{"id": "r7", "log": []}
"#;

#[test]
fn openai_runs_import_and_bad_ones_are_located() {
    let (dir, path) = crate::support::write_temp("runs.jsonl", RUNS);
    let imported = import(ImportFormat::OpenAi, &path).unwrap();
    assert_eq!(
        skip_messages(&imported, dir.path()),
        [
            "`runs.jsonl:3` at `$.messages[2].tool_call_id`: no earlier assistant tool call has the id `b`",
            "`runs.jsonl:4` at `$.messages[1].tool_calls[0].function.arguments`: arguments are a string that is not valid JSON: EOF while parsing a value at line 1 column 6",
            "`runs.jsonl:5` at `$.conversation`: no user message: the query is the first user message",
            "`runs.jsonl:6` at `$.success`: expected a boolean or a number, found a string",
            "`runs.jsonl:7` at `$`: no message list: expected one of `messages`, `traj`, `trajectory` or `conversation`",
        ]
    );
    let runs: Vec<&Trajectory> = imported
        .items
        .iter()
        .map(|item| match item {
            Item::Trajectory(t) => t,
            Item::Record(_) => panic!("expected trajectories"),
        })
        .collect();
    assert_eq!(runs.len(), 2);
    let run = runs[0];
    assert_eq!((run.id.as_str(), run.attempt, run.success), ("r1", Some(2), Some(Outcome::Score(1.0))));
    assert_eq!(run.query, "find order 7");
    assert_eq!(run.meta.domain.as_deref(), Some("retail"));
    assert_eq!(run.final_answer.as_deref(), Some("It shipped."));
    let call = run.tool_calls().next().unwrap();
    assert_eq!(
        (call.tool.as_str(), call.args["id"].as_i64(), call.call_id.as_deref()),
        ("get_order", Some(7), Some("c1"))
    );
    assert_eq!(call.result, Some(serde_json::json!("{\"status\": \"shipped\"}")));
    assert_eq!(run.steps[0].reasoning.as_deref(), Some("looking"));
    // A bare message list gets its position as id; legacy function calls are read.
    let bare = runs[1];
    assert_eq!((bare.id.as_str(), bare.query.as_str()), ("1", "hi"));
    let call = bare.tool_calls().next().unwrap();
    assert_eq!((call.tool.as_str(), call.args.len()), ("f", 0));
    assert_eq!(call.result, Some(serde_json::json!("ok")));
    assert_eq!(bare.final_answer.as_deref(), Some("done"));
}

#[test]
fn openai_json_arrays_locate_problems_by_line() {
    check(
        ImportFormat::OpenAi,
        "runs.json",
        r#"[
  {"id": 1, "messages": [{"role": "user", "content": "a"}]},
  {"id": 2, "messages": [
    {"role": "user", "content": "b"},
    {"role": "robot", "content": "c"}
  ]}
]"#,
        1,
        &[
            "`runs.json:5` at `$[1].messages[1].role`: unknown role `robot`: expected system, developer, user, assistant, tool or function",
        ],
    );
}

#[test]
fn openai_single_bare_conversation_file() {
    check(ImportFormat::OpenAi, "run.json", r#"[{"role": "user", "content": "only"}]"#, 1, &[]);
}

#[test]
fn toolbench_file_without_answer_generation_is_skipped() {
    check(
        ImportFormat::ToolBench,
        "1_ChatGPT_DFS_woFilter_w2.json",
        "{\n  \"win\": true,\n  \"tree\": {}\n}",
        0,
        &["`1_ChatGPT_DFS_woFilter_w2.json:1` at `$.answer_generation`: missing field `answer_generation`"],
    );
}

#[test]
fn stabletoolbench_bad_tool_message_is_located() {
    check(
        ImportFormat::StableToolBench,
        "G1_tool.json",
        r#"{
"7": {"query": "q", "answer": {"final_answer": "", "answer_details": [{"role": "system", "message": "", "next": [
  {"role": "user", "message": "q", "next": [
    {"role": "tool", "message": "{'name': 'ok', 'arguments': '{}', 'response': 'r'}", "next": [
      {"role": "tool", "message": "{'nam", "next": []}]}]}]}]}},
"8": {"query": "q2", "answer": {"final_answer": "{\"return_type\": \"give_answer\", \"final_answer\": \"yes\"}", "answer_details": []}}
}"#,
        1,
        &[
            "`G1_tool.json:5` at `$[\"7\"].answer.answer_details[0].next[0].next[0].next[0]`: the tool name is missing or cut off in `message`: expected a Python dict repr starting `{'name': '...'`, found `{'nam`",
        ],
    );
}

#[test]
fn stabletoolbench_solvable_queries_file_is_refused() {
    check(
        ImportFormat::StableToolBench,
        "G1_tool.json",
        "[{\"query\": \"q\", \"query_id\": 1}]",
        0,
        &[
            "`G1_tool.json:1` at `$[0]`: expected an evaluation set (an object keyed by query id), found an array; `solvable_queries` files hold queries without runs",
        ],
    );
}

/// Like [`check`], for bytes that need not be UTF-8.
fn check_bytes(format: ImportFormat, name: &str, bytes: &[u8], n_items: usize, expect: &[&str]) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).expect("writing the fixture");
    let imported = import(format, &path).expect("the import runs");
    assert_eq!(skip_messages(&imported, dir.path()), expect);
    assert_eq!(imported.items.len(), n_items, "imported items");
}

/// Issue 27 (2): a byte that is not UTF-8 costs its JSONL line, and the line is named.
#[test]
fn a_jsonl_line_that_is_not_utf8_is_skipped_by_line() {
    check_bytes(
        ImportFormat::TauBench,
        "tasks.jsonl",
        b"{\"id\": 0, \"instruction\": \"q0\", \"actions\": []}\n\
          {\"id\": 1, \"instruction\": \"q\xff\xfe1\", \"actions\": []}\n\
          {\"id\": 2, \"instruction\": \"\xc3\", \"actions\": []}\n\
          {\"id\": 3, \"instruction\": \"caf\xc3\xa9\", \"actions\": []}\n",
        2,
        &["`tasks.jsonl:2`: not valid UTF-8 at column 28", "`tasks.jsonl:3`: not valid UTF-8 at column 27"],
    );
}

/// Issue 27 (2): a file read as one JSON document is skipped whole, naming the place of
/// its first bad byte.
#[test]
fn a_json_document_that_is_not_utf8_is_skipped_naming_the_first_bad_byte() {
    check_bytes(
        ImportFormat::Tau2Bench,
        "tasks.json",
        b"[\n{\"id\": \"a\"},\n{\"id\": \"\x80\"}\n]",
        0,
        &["`tasks.json:3`: not valid UTF-8 at column 9; the file is one JSON document, so all of it is skipped"],
    );
}

/// Issue 27 (2): a UTF-8 byte order mark is not part of the first item.
#[test]
fn a_byte_order_mark_is_accepted() {
    check(
        ImportFormat::TauBench,
        "tasks.jsonl",
        "\u{feff}{\"id\": 0, \"instruction\": \"q\", \"actions\": []}\n",
        1,
        &[],
    );
    check(ImportFormat::Tau2Bench, "tasks.json", "\u{feff}[]", 0, &[]);
    check(ImportFormat::OpenAi, "run.json", "\u{feff}[{\"role\": \"user\", \"content\": \"only\"}]", 1, &[]);
    let imported = flowmem_model::import_text(
        ImportFormat::OpenAi,
        "r.json".as_ref(),
        "\u{feff}[{\"role\": \"user\", \"content\": \"x\"}]",
    );
    assert_eq!((imported.items.len(), imported.skipped.len()), (1, 0));
}

/// Issue 27 (2): a file in a directory that is not text costs that file only.
#[test]
fn a_binary_file_in_a_directory_is_skipped_and_the_others_import() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["13_ChatGPT_DFS_woFilter_w2.json", "15_ChatGPT_DFS_woFilter_w2.json"] {
        let source = crate::support::data(&format!("toolbench-data_example/answer/G3_answer/{name}"));
        std::fs::copy(source, dir.path().join(name)).unwrap();
    }
    std::fs::write(dir.path().join("14_junk.json"), [0x89, b'P', b'N', b'G', b'\n', 0xff, 0]).unwrap();
    let imported = import(ImportFormat::ToolBench, dir.path()).expect("the import runs");
    assert_eq!(imported.items.len(), 2);
    assert_eq!(
        skip_messages(&imported, dir.path()),
        ["`14_junk.json:1`: not valid UTF-8 at column 1; the file is one JSON document, so all of it is skipped"]
    );
    assert_eq!(imported.files.len(), 3);
}
