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
    assert!(
        imported.skipped.is_empty(),
        "{rel}: unexpected skips {:#?}",
        imported.skipped
    );
    assert_eq!(imported.items.len(), expect.items, "{rel}: items");
    assert_eq!(n_calls(&imported), expect.calls, "{rel}: tool calls");
    let without = imported
        .items
        .iter()
        .filter(|item| item.tool_calls().next().is_none())
        .count();
    assert_eq!(
        without, expect.items_without_calls,
        "{rel}: items without calls"
    );
}

#[test]
fn tau_bench_airline_test() {
    check(
        ImportFormat::TauBench,
        "tau-bench/airline/tasks_test.jsonl",
        Expect {
            items: 50,
            calls: 158,
            items_without_calls: 7,
        },
    );
}

#[test]
fn tau_bench_retail_test() {
    check(
        ImportFormat::TauBench,
        "tau-bench/retail/tasks_test.jsonl",
        Expect {
            items: 115,
            calls: 582,
            items_without_calls: 2,
        },
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
    let with_outputs = records(&airline)
        .iter()
        .filter(|record| !record.required_outputs.is_empty())
        .count();
    assert_eq!(with_outputs, 4);
    let retail = import_data(ImportFormat::TauBench, "tau-bench/retail/tasks_test.jsonl");
    let retail = records(&retail);
    assert_eq!(
        retail
            .iter()
            .filter(|record| !record.required_outputs.is_empty())
            .count(),
        37
    );
    // Task 2 of retail test must say "10" (seen in the source file).
    let task = retail
        .iter()
        .find(|record| record.id == "2")
        .expect("task 2");
    assert_eq!(task.required_outputs, vec!["10".to_owned()]);
    assert_eq!(task.reference_result, "10");
    assert_eq!(task.meta.domain.as_deref(), Some("retail"));
    assert_eq!(
        task.meta.source.as_deref(),
        Some("tau-bench:retail/tasks_test.jsonl")
    );
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
        Expect {
            items: 50,
            calls: 142,
            items_without_calls: 7,
        },
    );
}

#[test]
fn tau2_bench_retail() {
    check(
        ImportFormat::Tau2Bench,
        "tau2-bench/retail/tasks.json",
        Expect {
            items: 114,
            calls: 550,
            items_without_calls: 2,
        },
    );
}

#[test]
fn tau2_bench_telecom() {
    let base = import_data(
        ImportFormat::Tau2Bench,
        "tau2-bench/telecom/tasks_base_2025-06-10.json",
    );
    assert_eq!((base.items.len(), n_calls(&base)), (114, 516));
    let small = import_data(
        ImportFormat::Tau2Bench,
        "tau2-bench/telecom/tasks_small.json",
    );
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
    assert!(
        first
            .query
            .contains("Reason for call: You received your order #W2378156")
    );
    assert!(
        first
            .query
            .contains("Known info: You are Yusuf Rossi in zip code 19122.")
    );
    assert!(
        first
            .query
            .contains("Unknown info: You do not remember your email address.")
    );
    // Task 10 ends in a transfer whose arguments tau2 does not compare (`compare_args: []`).
    let task = records
        .iter()
        .find(|record| record.id == "10")
        .expect("task 10");
    let transfer = task
        .orchestration
        .iter()
        .find(|call| call.tool == "transfer_to_human_agents")
        .expect("transfer");
    assert_eq!(transfer.compare_args, Some(Vec::new()));
}

#[test]
fn tau2_bench_telecom_ids_are_verbatim() {
    let imported = import_data(
        ImportFormat::Tau2Bench,
        "tau2-bench/telecom/tasks_small.json",
    );
    assert_eq!(
        imported.items[0].id(),
        "[mobile_data_issue]user_abroad_roaming_enabled_off[PERSONA:None]"
    );
}

#[test]
fn tau2_bench_communicate_info_is_required_output() {
    let imported = import_data(ImportFormat::Tau2Bench, "tau2-bench/airline/tasks.json");
    let records = records(&imported);
    // Airline task 3 must communicate "4" (seen in the source file), and has assertions.
    let task = records
        .iter()
        .find(|record| record.id == "3")
        .expect("task 3");
    assert_eq!(task.required_outputs, vec!["4".to_owned()]);
    assert!(
        task.reference_result
            .starts_with("4\nAgent detects that user is actually a Silver member.")
    );
}
