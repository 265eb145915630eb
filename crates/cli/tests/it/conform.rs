//! `flowmem conform` as a subprocess.

use crate::support::{TestDir, data};

const RECORDS: &str = r#"{"id":"1","query":"q","orchestration":[{"tool":"find_user"},{"tool":"cancel"}]}
{"id":"2","query":"q","orchestration":[{"tool":"find_user"},{"tool":"refund"}]}
{"id":"3","query":"q","orchestration":[{"tool":"find_user"},{"tool":"refund"}]}
{"id":"4","query":"q","orchestration":[{"tool":"find_user"},{"tool":"delete_account"},{"tool":"cancel"}]}
"#;

const TREE: &str = "->( 'find_user', X( 'cancel', 'refund' ) )";

fn json(run: &crate::support::Run) -> serde_json::Value {
    assert_eq!(run.code, 0, "{}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", run.stdout))
}

#[test]
fn prints_fitness_precision_and_the_deviating_trace_with_its_moves() {
    let dir = TestDir::new();
    dir.write("runs.jsonl", RECORDS);
    let run = dir.run(&["conform", "runs.jsonl", "--tree", TREE]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("fitness (token replay)"), "{}", run.stdout);
    assert!(run.stdout.contains("deviating: 1 of 3 variants, 1 of 4 cases"), "{}", run.stdout);
    assert!(run.stdout.contains("find_user → [log only: delete_account] → cancel"), "{}", run.stdout);
    assert!(run.stderr.contains("4 cases, 3 variants"), "{}", run.stderr);
}

#[test]
fn json_gives_log_figures_and_every_variant() {
    let dir = TestDir::new();
    dir.write("runs.jsonl", RECORDS);
    let doc = json(&dir.run(&["--json", "conform", "runs.jsonl", "--tree", TREE]));
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["model"]["kind"], "tree");
    assert_eq!(doc["log"]["cases"], 4);
    // Three cases fit; the fourth needs one log move. Each case may cost its length plus
    // the model's shortest run (2 moves): 1 − 10000 / (3 · 40000 + 50000).
    assert_eq!(doc["alignments"]["log_fitness"], 1.0 - 10_000.0 / 170_000.0);
    assert_eq!(doc["alignments"]["percentage_fitting"], 75.0);
    // Token replay skips activities the model lacks, so every case fits it.
    assert_eq!(doc["token_replay"]["fitting_cases"], 4);
    // Allowed after the empty prefix: find_user (4 cases); after find_user: cancel, refund
    // (4 cases); after find_user, delete_account (replayed without the unknown activity):
    // cancel, refund, of which refund escapes (1 case). 1 escaping edge of 14.
    assert_eq!(doc["precision"], 1.0 - 1.0 / 14.0);
    let variants = doc["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 3);
    let deviating = variants.iter().find(|v| v["alignment"]["deviations"] == 1).unwrap();
    assert_eq!(deviating["activities"], serde_json::json!(["find_user", "delete_account", "cancel"]));
    assert_eq!(deviating["alignment"]["moves"][1], serde_json::json!({"kind": "log", "activity": "delete_account"}));
    assert_eq!(deviating["token_replay"]["fit"], true, "token replay skips activities the model lacks");
}

#[test]
fn a_pnml_net_and_a_workflow_graph_give_the_figures_of_their_tree() {
    let dir = TestDir::new();
    dir.write("runs.jsonl", RECORDS);
    let pnml = dir.run(&["mine", "runs.jsonl", "--output", "pnml"]);
    assert_eq!(pnml.code, 0, "{}", pnml.stderr);
    dir.write("net.pnml", &pnml.stdout);
    let skeleton = dir.run(&["mine", "runs.jsonl", "--output", "skeleton"]);
    assert_eq!(skeleton.code, 0, "{}", skeleton.stderr);
    dir.write("graph.json", &skeleton.stdout);
    let tree = dir.run(&["mine", "runs.jsonl"]);
    let by_tree = json(&dir.run(&["--json", "conform", "runs.jsonl", "--tree", tree.stdout.trim()]));
    let by_pnml = json(&dir.run(&["--json", "conform", "runs.jsonl", "--model", "net.pnml"]));
    let by_graph = json(&dir.run(&["--json", "conform", "runs.jsonl", "--model", "graph.json"]));
    assert_eq!(by_pnml["model"]["kind"], "pnml");
    assert_eq!(by_graph["model"]["kind"], "graph");
    for doc in [&by_pnml, &by_graph] {
        for key in ["token_replay", "alignments", "precision"] {
            assert_eq!(doc[key], by_tree[key], "{key}");
        }
    }
    // IM fits its own log: no deviation (log fitness counts silent moves, so it is just
    // below 1, as in PM4Py).
    assert_eq!(by_tree["deviating"]["variants"], 0);
    assert_eq!(by_tree["alignments"]["average_fitness"], 1.0);
}

#[test]
fn the_pm4py_tree_fits_the_running_example() {
    let dir = TestDir::new();
    let tree = "->( 'register request', *( ->( +( 'check ticket', X( 'examine thoroughly', 'examine casually' ) ), 'decide' ), 'reinitiate request' ), X( 'reject request', 'pay compensation' ) )";
    let doc = json(&dir.run(&["--json", "conform", &data("xes/running-example.xes"), "--tree", tree]));
    assert_eq!(doc["token_replay"]["log_fitness"], 1.0);
    assert_eq!(doc["token_replay"]["consumed"], 72, "PM4Py's count");
    assert_eq!(doc["deviating"]["variants"], 0);
    assert_eq!(doc["precision"], 0.7530864197530864, "PM4Py's figure");
}

#[test]
fn fail_under_exits_one_and_a_bad_tree_exits_two() {
    let dir = TestDir::new();
    dir.write("runs.jsonl", RECORDS);
    let below = dir.run(&["conform", "runs.jsonl", "--tree", TREE, "--fail-under", "0.99"]);
    assert_eq!(below.code, 1, "{}", below.stderr);
    assert!(below.stderr.contains("below `--fail-under 0.99`"), "{}", below.stderr);
    let bad = dir.run(&["conform", "runs.jsonl", "--tree", "->( 'a'"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("is not a process tree"), "{}", bad.stderr);
    let none = dir.run(&["conform", "runs.jsonl"]);
    assert_eq!(none.code, 2, "{}", none.stderr);
}

/// The guard test of issue 23: a τ²-bench retail skeleton mined from the opt split of the
/// seeded split, and the golden logs of the test split replayed through the run-time guard,
/// flag exactly the traces whose optimal alignment has a deviation.
#[test]
fn the_guard_flags_the_test_traces_that_alignments_find_deviating() {
    let dir = TestDir::new();
    let tasks = data("tau2-bench/retail/tasks.json");
    let import = dir.run(&["import", "--format", "tau2-bench", &tasks, "-o", "retail.jsonl"]);
    assert_eq!(import.code, 0, "{}", import.stderr);
    let split = dir.run(&["split", "retail.jsonl", "--seed", "7", "--out", "splits"]);
    assert_eq!(split.code, 0, "{}", split.stderr);
    let skeleton = dir.run(&["mine", "splits/opt.jsonl", "--miner", "imf", "--output", "skeleton"]);
    assert_eq!(skeleton.code, 0, "{}", skeleton.stderr);
    dir.write("skeleton.json", &skeleton.stdout);
    let doc = json(&dir.run(&["--json", "conform", "splits/test.jsonl", "--model", "skeleton.json", "--guard"]));
    let variants = doc["variants"].as_array().unwrap();
    let mut deviating = 0;
    for variant in variants {
        let by_alignment = variant["alignment"]["deviations"].as_u64().unwrap() > 0;
        let guard = &variant["guard"];
        assert_eq!(guard["flagged"].as_bool(), Some(by_alignment), "{}", variant["activities"]);
        for flag in guard["deviations"].as_array().unwrap() {
            let activity = flag["activity"].as_str().unwrap();
            assert!(!flag["expected"].as_array().unwrap().iter().any(|e| e == activity), "{flag}");
        }
        deviating += u64::from(by_alignment);
    }
    assert_eq!(doc["deviating"]["variants"].as_u64(), Some(deviating));
    assert!(deviating > 0 && deviating < variants.len() as u64, "{deviating} of {} deviate", variants.len());
}
