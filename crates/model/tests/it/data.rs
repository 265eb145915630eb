//! Importing every shared data set; the expected counts are the ones its SOURCE.md states.

use flowmem_model::ImportFormat;

use crate::support::{import_data, n_calls, records};

/// One data set: its counts as SOURCE.md states them.
struct Expect {
    items: usize,
    calls: usize,
    items_without_calls: usize,
}

fn check(format: ImportFormat, rel: &str, expect: Expect) {
    let imported = import_data(format, rel);
    assert!(imported.skipped.is_empty(), "{rel}: unexpected skips {:#?}", imported.skipped);
    assert_eq!(imported.items.len(), expect.items, "{rel}: items");
    assert_eq!(n_calls(&imported), expect.calls, "{rel}: tool calls");
    let without = imported.items.iter().filter(|item| item.tool_calls().next().is_none()).count();
    assert_eq!(without, expect.items_without_calls, "{rel}: items without calls");
}

#[test]
fn tau_bench_airline_test() {
    check(
        ImportFormat::TauBench,
        "tau-bench/airline/tasks_test.jsonl",
        Expect { items: 50, calls: 158, items_without_calls: 7 },
    );
}

#[test]
fn tau_bench_retail_test() {
    check(
        ImportFormat::TauBench,
        "tau-bench/retail/tasks_test.jsonl",
        Expect { items: 115, calls: 582, items_without_calls: 2 },
    );
}

#[test]
fn tau_bench_retail_train_and_dev() {
    let train = import_data(ImportFormat::TauBench, "tau-bench/retail/tasks_train.jsonl");
    assert_eq!((train.items.len(), n_calls(&train)), (500, 768));
    let dev = import_data(ImportFormat::TauBench, "tau-bench/retail/tasks_dev.jsonl");
    assert_eq!((dev.items.len(), n_calls(&dev)), (20, 25));
}

#[test]
fn tau_bench_directory_reads_every_split() {
    let imported = import_data(ImportFormat::TauBench, "tau-bench");
    assert_eq!(imported.files.len(), 4);
    assert_eq!(imported.items.len(), 50 + 115 + 500 + 20);
    assert_eq!(n_calls(&imported), 158 + 582 + 768 + 25);
}

#[test]
fn tau_bench_outputs_become_required_outputs() {
    let airline = import_data(ImportFormat::TauBench, "tau-bench/airline/tasks_test.jsonl");
    let with_outputs = records(&airline).iter().filter(|record| !record.required_outputs.is_empty()).count();
    assert_eq!(with_outputs, 4);
    let retail = import_data(ImportFormat::TauBench, "tau-bench/retail/tasks_test.jsonl");
    let retail = records(&retail);
    assert_eq!(retail.iter().filter(|record| !record.required_outputs.is_empty()).count(), 37);
    // Task 2 of retail test must say "10" (seen in the source file).
    let task = retail.iter().find(|record| record.id == "2").expect("task 2");
    assert_eq!(task.required_outputs, vec!["10".to_owned()]);
    assert_eq!(task.reference_result, "10");
    assert_eq!(task.meta.domain.as_deref(), Some("retail"));
    assert_eq!(task.meta.source.as_deref(), Some("tau-bench:retail/tasks_test.jsonl"));
}

#[test]
fn tau_bench_ids_are_split_indices_verbatim() {
    let imported = import_data(ImportFormat::TauBench, "tau-bench/retail/tasks_test.jsonl");
    let ids: Vec<&str> = imported.items.iter().map(|item| item.id()).collect();
    assert_eq!(ids.first(), Some(&"0"));
    assert_eq!(ids.last(), Some(&"114"));
    let first = records(&imported)[0].clone();
    assert!(first.query.starts_with("You are Yusuf Rossi in 19122."));
    assert_eq!(first.orchestration[0].tool, "find_user_id_by_name_zip");
    assert_eq!(first.orchestration[0].args["zip"], "19122");
}

#[test]
fn tau2_bench_airline() {
    check(
        ImportFormat::Tau2Bench,
        "tau2-bench/airline/tasks.json",
        Expect { items: 50, calls: 142, items_without_calls: 7 },
    );
}

#[test]
fn tau2_bench_retail() {
    check(
        ImportFormat::Tau2Bench,
        "tau2-bench/retail/tasks.json",
        Expect { items: 114, calls: 550, items_without_calls: 2 },
    );
}

#[test]
fn tau2_bench_telecom() {
    let base = import_data(ImportFormat::Tau2Bench, "tau2-bench/telecom/tasks_base_2025-06-10.json");
    assert_eq!((base.items.len(), n_calls(&base)), (114, 516));
    let small = import_data(ImportFormat::Tau2Bench, "tau2-bench/telecom/tasks_small.json");
    assert_eq!((small.items.len(), n_calls(&small)), (20, 27));
}

#[test]
fn tau2_bench_directory_skips_splits_and_databases() {
    let imported = import_data(ImportFormat::Tau2Bench, "tau2-bench");
    // tasks.json twice, tasks_small.json and tasks_base_*.json; never split_tasks.json.
    assert_eq!(imported.files.len(), 4);
    assert_eq!(imported.items.len(), 50 + 114 + 114 + 20);
}

#[test]
fn tau2_bench_keeps_ids_action_ids_and_compare_args() {
    let imported = import_data(ImportFormat::Tau2Bench, "tau2-bench/retail/tasks.json");
    let records = records(&imported);
    let first = records[0];
    assert_eq!(first.id, "0");
    assert_eq!(first.meta.domain.as_deref(), Some("retail"));
    assert_eq!(first.orchestration[0].call_id.as_deref(), Some("0_0"));
    assert_eq!(first.orchestration[0].compare_args, None);
    // The query is built from the user scenario's instructions.
    assert!(first.query.contains("Reason for call: You received your order #W2378156"));
    assert!(first.query.contains("Known info: You are Yusuf Rossi in zip code 19122."));
    assert!(first.query.contains("Unknown info: You do not remember your email address."));
    // Task 10 ends in a transfer whose arguments tau2 does not compare (`compare_args: []`).
    let task = records.iter().find(|record| record.id == "10").expect("task 10");
    let transfer = task.orchestration.iter().find(|call| call.tool == "transfer_to_human_agents").expect("transfer");
    assert_eq!(transfer.compare_args, Some(Vec::new()));
}

#[test]
fn tau2_bench_telecom_ids_are_verbatim() {
    let imported = import_data(ImportFormat::Tau2Bench, "tau2-bench/telecom/tasks_small.json");
    assert_eq!(imported.items[0].id(), "[mobile_data_issue]user_abroad_roaming_enabled_off[PERSONA:None]");
}

#[test]
fn tau2_bench_communicate_info_is_required_output() {
    let imported = import_data(ImportFormat::Tau2Bench, "tau2-bench/airline/tasks.json");
    let records = records(&imported);
    // Airline task 3 must communicate "4" (seen in the source file), and has assertions.
    let task = records.iter().find(|record| record.id == "3").expect("task 3");
    assert_eq!(task.required_outputs, vec!["4".to_owned()]);
    assert!(task.reference_result.starts_with("4\nAgent detects that user is actually a Silver member."));
}

#[test]
fn toolbench_data_example() {
    use flowmem_model::{Item, Outcome};
    let imported = import_data(ImportFormat::ToolBench, "toolbench-data_example");
    // 15 answer files; the instruction files (`*_query.json`) are not answers.
    assert_eq!(imported.files.len(), 15);
    assert_eq!(imported.n_read(), 15);
    // The two answers without `train_messages` (SOURCE.md) have no finished path in
    // their trees either (`valid_data` false), so there is no run to import.
    let skipped: Vec<String> = imported
        .skipped
        .iter()
        .map(|skipped| {
            let file = skipped.location.file.file_name().unwrap().to_string_lossy().into_owned();
            format!("{file} {}", skipped.location.json_path.as_deref().unwrap_or(""))
        })
        .collect();
    assert_eq!(
        skipped,
        vec![
            "69_ChatGPT_DFS_woFilter_w2.json $.answer_generation",
            "8_ChatGPT_DFS_woFilter_w2.json $.answer_generation"
        ]
    );
    let trajectories: Vec<_> = imported
        .items
        .iter()
        .map(|item| match item {
            Item::Trajectory(trajectory) => trajectory,
            Item::Record(_) => panic!("expected trajectories"),
        })
        .collect();
    // SOURCE.md: 9 runs have `win` = true; both skipped ones have `win` = false.
    let wins = trajectories.iter().filter(|t| t.success == Some(Outcome::Bool(true))).count();
    assert_eq!(wins, 9);
    // SOURCE.md: 11 runs end in give_answer, 4 in give_up; the skipped two are give_answer
    // runs with an empty answer.
    assert_eq!(trajectories.iter().filter(|t| t.final_answer.is_some()).count(), 9);
    assert_eq!(trajectories.iter().filter(|t| t.final_answer.is_none()).count(), 4);
    assert!(trajectories.iter().all(|t| t.meta.domain.as_deref().is_some_and(|d| d.starts_with('G'))));
    let first = trajectories.iter().find(|t| t.id == "10" && t.meta.domain.as_deref() == Some("G1")).unwrap();
    assert!(first.query.starts_with("Can you retrieve the contact details of the 'Gondrand' customs agency"));
    let tools: Vec<&str> = first.tool_calls().map(|call| call.tool.as_str()).collect();
    assert_eq!(tools, ["transitaires_for_transitaires", "transitaire_for_transitaires", "Finish"]);
    assert!(first.final_answer.as_deref().unwrap().contains("Postal Code: 98800"));
}

/// SOURCE.md's "130 calls" counts the `function_call`s of every `train_messages`
/// conversation, and each conversation is a prefix of the run (1, 2, 3 calls for a
/// 3-call run). Check that reading against the raw files, then that every imported run
/// holds exactly the calls of its last, complete conversation.
#[test]
fn toolbench_calls_are_the_last_training_conversation() {
    use serde_json::Value;
    let dir = crate::support::data("toolbench-data_example/answer");
    let mut total = 0;
    let mut last_calls: Vec<(String, Vec<String>)> = Vec::new();
    for group in ["G1", "G2", "G3"] {
        for entry in std::fs::read_dir(dir.join(format!("{group}_answer"))).unwrap() {
            let path = entry.unwrap().path();
            let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let Some(conversations) = file["answer_generation"]["train_messages"].as_array() else {
                continue;
            };
            let names = |conversation: &Value| -> Vec<String> {
                conversation
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|message| message["function_call"]["name"].as_str().map(str::to_owned))
                    .collect()
            };
            total += conversations.iter().map(|c| names(c).len()).sum::<usize>();
            let id = format!("{group}/{}", path.file_name().unwrap().to_string_lossy().split('_').next().unwrap());
            last_calls.push((id, names(conversations.last().unwrap())));
        }
    }
    assert_eq!(total, 130);
    let imported = import_data(ImportFormat::ToolBench, "toolbench-data_example");
    for (id, expected) in last_calls {
        let item = imported
            .items
            .iter()
            .find(|item| match item {
                flowmem_model::Item::Trajectory(t) => format!("{}/{}", t.meta.domain.as_deref().unwrap(), t.id) == id,
                flowmem_model::Item::Record(_) => false,
            })
            .unwrap_or_else(|| panic!("{id} imported"));
        let tools: Vec<String> = item.tool_calls().map(|call| call.tool.clone()).collect();
        assert_eq!(tools, expected, "{id}");
    }
}

#[test]
fn toolbench_tree_path_matches_the_training_conversation() {
    // Take a real answer whose tree explored dead branches, drop `train_messages`, and
    // import it through the tree: the winning path must give the same calls.
    for rel in ["G1_answer/57_ChatGPT_DFS_woFilter_w2.json", "G3_answer/15_ChatGPT_DFS_woFilter_w2.json"] {
        let path = crate::support::data(&format!("toolbench-data_example/answer/{rel}"));
        let mut file: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        file["answer_generation"].as_object_mut().unwrap().remove("train_messages");
        let (_dir, tree_only) = crate::support::write_temp("57_tree.json", &file.to_string());
        let from_tree = flowmem_model::import(ImportFormat::ToolBench, &tree_only).unwrap();
        let from_messages = flowmem_model::import(ImportFormat::ToolBench, &path).unwrap();
        let calls = |imported: &flowmem_model::Imported| -> Vec<(String, String)> {
            imported.items[0]
                .tool_calls()
                .map(|call| {
                    (call.tool.clone(), flowmem_model::canonical_json(&serde_json::Value::Object(call.args.clone())))
                })
                .collect()
        };
        assert_eq!(from_tree.skipped, vec![], "{rel}");
        assert_eq!(calls(&from_tree), calls(&from_messages), "{rel}");
        assert!(calls(&from_tree).len() >= 3, "{rel}");
    }
}

#[test]
fn stabletoolbench_evalsets() {
    // SOURCE.md: 100 runs per group; tool nodes and runs ending in give_answer per group.
    let groups = [
        ("G1_category", 395, 69),
        ("G1_instruction", 429, 64),
        ("G1_tool", 410, 68),
        ("G2_category", 485, 26),
        ("G2_instruction", 479, 31),
        ("G3_instruction", 510, 38),
    ];
    for (group, tool_nodes, give_answer) in groups {
        let rel = format!("stabletoolbench/default_evalset_gpt-3.5-turbo_CoT/{group}.json");
        let imported = import_data(ImportFormat::StableToolBench, &rel);
        assert_eq!(imported.skipped, vec![], "{group}");
        assert_eq!(imported.items.len(), 100, "{group}");
        assert_eq!(n_calls(&imported), tool_nodes, "{group}");
        let answered = imported
            .items
            .iter()
            .filter(|item| matches!(item, flowmem_model::Item::Trajectory(t) if t.final_answer.is_some()))
            .count();
        assert_eq!(answered, give_answer, "{group}");
        assert!(imported.notes[0].contains("truncates every logged message to 100 characters"), "{group}");
    }
}

#[test]
fn stabletoolbench_directory_skips_solvable_queries() {
    let imported = import_data(ImportFormat::StableToolBench, "stabletoolbench");
    assert_eq!(imported.files.len(), 6);
    assert_eq!(imported.items.len(), 600);
    assert_eq!(n_calls(&imported), 395 + 429 + 410 + 485 + 479 + 510);
    assert_eq!(imported.notes.len(), 1, "one note for the whole import");
    // The first run of G1_tool, as seen in the source file.
    let run = imported.items.iter().find(|item| item.id() == "1103").unwrap();
    assert!(run.query().starts_with("Retrieve all the quizzes available on MoodRing"));
    let tools: Vec<&str> = run.tool_calls().take(2).map(|call| call.tool.as_str()).collect();
    assert_eq!(tools, ["quizzes_for_moodring", "responses_for_moodring"]);
}
