//! `flowmem induce` and `flowmem memory` as subprocesses.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn flowmem() -> Command {
    Command::new(env!("CARGO_BIN_EXE_flowmem"))
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "status {}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Writes three trajectories: two share a tool sequence, one is too short.
fn trajectories(dir: &Path) -> PathBuf {
    let path = dir.join("runs.jsonl");
    let lines = [
        r##"{"id":"a","query":"Cancel order #W1","success":true,"meta":{"domain":"retail"},"steps":[{"action":{"kind":"tool_call","tool":"get_order_details","args":{"order_id":"#W1"}}},{"action":{"kind":"tool_call","tool":"cancel_pending_order","args":{"order_id":"#W1","reason":"no longer needed"}}}]}"##,
        r##"{"id":"b","query":"Cancel order #W2","success":true,"meta":{"domain":"retail"},"steps":[{"action":{"kind":"tool_call","tool":"get_order_details","args":{"order_id":"#W2"}}},{"action":{"kind":"tool_call","tool":"cancel_pending_order","args":{"order_id":"#W2","reason":"no longer needed"}}}]}"##,
        r##"{"id":"c","query":"Where is my order?","meta":{"domain":"retail"},"steps":[{"action":{"kind":"tool_call","tool":"get_order_details","args":{"order_id":"#W3"}}}]}"##,
        r##"{"id":"d","query":"lost run","success":false,"steps":[]}"##,
        "{not json",
    ];
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

#[test]
fn induce_then_list_show_search_export_import_prune() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    let runs = trajectories(dir.path());

    let out = flowmem().args(["induce", "--mode", "rule"]).arg(&runs).arg("--memory").arg(&db).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(stderr.contains("runs.jsonl:5"), "the bad line is named: {stderr}");
    assert!(stderr.contains("fewer than the 2"), "the short run is reported: {stderr}");
    assert!(stderr.contains("unsuccessful"), "the lost run is reported: {stderr}");
    assert!(ok(out).contains("stored wf-"));

    let listed: serde_json::Value =
        serde_json::from_str(&ok(flowmem().args(["--json", "memory", "list", "--memory"]).arg(&db).output().unwrap()))
            .unwrap();
    let listed = listed.as_array().expect("list --json prints an array");
    assert_eq!(listed.len(), 1);
    let workflow = &listed[0];
    assert_eq!(workflow["scope"]["domain"], "retail");
    assert_eq!(workflow["steps"][1]["action"]["args"]["order_id"], "{order_id}");
    assert_eq!(workflow["steps"][1]["action"]["args"]["reason"], "no longer needed");
    let id = workflow["id"].as_str().unwrap();

    let shown = ok(flowmem().args(["memory", "show", id, "--graph", "--memory"]).arg(&db).output().unwrap());
    assert!(shown.contains("from rule induction") && shown.contains("[a, b]"), "{shown}");
    assert!(shown.contains("\"hints\""), "the graph is printed: {shown}");

    let hits: serde_json::Value = serde_json::from_str(&ok(flowmem()
        .args(["--json", "memory", "search", "cancel an order", "--scope-domain", "retail", "--memory"])
        .arg(&db)
        .output()
        .unwrap()))
    .unwrap();
    assert_eq!(hits[0]["workflow"]["id"], id);
    let miss = flowmem()
        .args(["memory", "search", "cancel", "--scope-domain", "airline", "--memory"])
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(miss.status.code(), Some(1), "no hit is a negative outcome");

    // Export as AWM text and import into a fresh memory under another domain.
    let text_path = dir.path().join("workflows.txt");
    ok(flowmem()
        .args(["memory", "export", "--format", "text", "-o"])
        .arg(&text_path)
        .arg("--memory")
        .arg(&db)
        .output()
        .unwrap());
    let text = std::fs::read_to_string(&text_path).unwrap();
    assert!(text.starts_with("Workflow: Cancel order #W1\n"), "{text}");
    let other_db = dir.path().join("other.db");
    ok(flowmem()
        .args(["memory", "import", "--format", "text", "--scope-domain", "shop"])
        .arg(&text_path)
        .arg("--memory")
        .arg(&other_db)
        .output()
        .unwrap());
    let imported: serde_json::Value = serde_json::from_str(&ok(flowmem()
        .args(["--json", "memory", "list", "--memory"])
        .arg(&other_db)
        .output()
        .unwrap()))
    .unwrap();
    assert_eq!(imported[0]["scope"]["domain"], "shop");
    // AWM's text form carries the steps but not where their variables came from.
    let mut steps = workflow["steps"].clone();
    let mut had_sources = false;
    for step in steps.as_array_mut().unwrap() {
        had_sources |= step["action"].as_object_mut().unwrap().remove("sources").is_some();
    }
    assert!(had_sources, "rule induction recorded where the order id came from: {}", workflow["steps"]);
    assert_eq!(imported[0]["steps"], steps);

    // JSONL export and re-import into the same memory merges rather than duplicates.
    let jsonl = ok(flowmem().args(["memory", "export", "--memory"]).arg(&db).output().unwrap());
    let jsonl_path = dir.path().join("workflows.jsonl");
    std::fs::write(&jsonl_path, jsonl).unwrap();
    let again: serde_json::Value = serde_json::from_str(&ok(flowmem()
        .args(["--json", "memory", "import"])
        .arg(&jsonl_path)
        .arg("--memory")
        .arg(&db)
        .output()
        .unwrap()))
    .unwrap();
    assert_eq!(again["added"][0]["outcome"], "merged");

    let pruned: serde_json::Value = serde_json::from_str(&ok(flowmem()
        .args(["--json", "memory", "prune", "--max-per-scope", "0", "--memory"])
        .arg(&db)
        .output()
        .unwrap()))
    .unwrap();
    assert_eq!(pruned["removed"][0], id);
}

#[test]
fn a_missing_memory_or_id_is_an_error_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let out = flowmem().args(["memory", "list", "--memory"]).arg(dir.path().join("nope.db")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("hint:"));
    let db = dir.path().join("memory.db");
    ok(flowmem().args(["induce"]).arg(trajectories(dir.path())).arg("--memory").arg(&db).output().unwrap());
    let out = flowmem().args(["memory", "show", "wf-0000", "--memory"]).arg(&db).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no workflow `wf-0000`"));
}

fn json(out: Output) -> serde_json::Value {
    serde_json::from_str(&ok(out)).unwrap()
}

/// Issue 21: `memory retire`, `restore`, `describe` and `delete`; `list --all`; a JSONL
/// export carries the retirement into another memory.
#[test]
fn retire_restore_describe_and_delete_a_workflow() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    let runs = trajectories(dir.path());
    ok(flowmem().args(["induce", "--mode", "rule"]).arg(&runs).arg("--memory").arg(&db).output().unwrap());
    let memory =
        |args: &[&str]| flowmem().arg("--json").arg("memory").args(args).arg("--memory").arg(&db).output().unwrap();
    let id = json(memory(&["list"]))[0]["id"].as_str().unwrap().to_owned();

    let done = json(memory(&["retire", &id, "--reason", "cancels without asking"]));
    assert_eq!((done["id"].as_str(), done["action"].as_str()), (Some(id.as_str()), Some("retired")));
    assert_eq!(json(memory(&["list"])).as_array().unwrap().len(), 0);
    let all = json(memory(&["list", "--all"]));
    assert_eq!(all[0]["retired"]["reason"], "cancels without asking");
    let search = memory(&["search", "cancel an order"]);
    assert_eq!(search.status.code(), Some(1), "a retired workflow is not found");
    let text = flowmem().args(["memory", "list", "--all", "--memory"]).arg(&db).output().unwrap();
    assert!(ok(text).contains("[retired "), "the plain listing marks it");

    // The JSONL export keeps the retirement; an import into a fresh memory keeps it too.
    let exported = dir.path().join("all.jsonl");
    ok(flowmem().args(["memory", "export", "-o"]).arg(&exported).arg("--memory").arg(&db).output().unwrap());
    let other = dir.path().join("other.db");
    ok(flowmem().args(["memory", "import"]).arg(&exported).arg("--memory").arg(&other).output().unwrap());
    let copied = json(flowmem().args(["--json", "memory", "list", "--all", "--memory"]).arg(&other).output().unwrap());
    assert_eq!(copied[0]["retired"], all[0]["retired"]);
    let active = json(flowmem().args(["--json", "memory", "list", "--memory"]).arg(&other).output().unwrap());
    assert_eq!(active.as_array().unwrap().len(), 0);

    json(memory(&["restore", &id]));
    json(memory(&["describe", &id, "Call off an order that has not shipped"]));
    let hits = json(memory(&["search", "shipped", "--retrieval", "bm25"]));
    assert_eq!(hits[0]["workflow"]["id"], id.as_str());
    assert_eq!(hits[0]["workflow"]["description"], "Call off an order that has not shipped");
    assert!(hits[0]["workflow"].get("retired").is_none());

    json(memory(&["delete", &id]));
    assert_eq!(json(memory(&["list", "--all"])).as_array().unwrap().len(), 0);
    let gone = memory(&["restore", &id]);
    assert_eq!(gone.status.code(), Some(2));
    let error: serde_json::Value = serde_json::from_slice(&gone.stdout).unwrap();
    assert!(error["error"]["message"].as_str().unwrap().contains(&id), "{error}");
}

/// Issue 22: the memory induced from the shared τ-bench retail runs (the train tasks'
/// ground-truth tool calls, as successful runs), curated, moves into PostgreSQL and
/// back; the three exports are identical, and a copy into a memory that holds
/// workflows, or onto itself, is refused.
#[test]
fn migrate_round_trips_a_memory_through_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = crate::support::data("tau-bench/retail/tasks_train.jsonl");
    let mut runs = String::new();
    for (idx, line) in std::fs::read_to_string(&tasks).unwrap().lines().enumerate() {
        let task: serde_json::Value = serde_json::from_str(line).unwrap();
        let steps: Vec<serde_json::Value> = task["actions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|action| {
                serde_json::json!({"action": {"kind": "tool_call", "tool": action["name"], "args": action["kwargs"]}})
            })
            .collect();
        let run = serde_json::json!({
            "id": format!("retail-train-{idx}"),
            "query": task["instruction"],
            "success": true,
            "meta": {"domain": "retail"},
            "steps": steps,
        });
        runs.push_str(&format!("{run}\n"));
    }
    let runs_path = dir.path().join("runs.jsonl");
    std::fs::write(&runs_path, runs).unwrap();
    let sqlite = dir.path().join("memory.db");
    ok(flowmem().args(["induce", "--mode", "rule"]).arg(&runs_path).arg("--memory").arg(&sqlite).output().unwrap());
    let listed = json(flowmem().args(["--json", "memory", "list", "--memory"]).arg(&sqlite).output().unwrap());
    let ids: Vec<&str> = listed.as_array().unwrap().iter().map(|w| w["id"].as_str().unwrap()).collect();
    assert!(ids.len() >= 20, "the retail runs give many workflows: {}", ids.len());
    ok(flowmem()
        .args(["memory", "retire", ids[0], "--reason", "too broad", "--memory"])
        .arg(&sqlite)
        .output()
        .unwrap());
    ok(flowmem()
        .args(["memory", "describe", ids[1], "Return items of a delivered order", "--memory"])
        .arg(&sqlite)
        .output()
        .unwrap());

    let postgres = flowmem_testsupport::PgCluster::shared().fresh_database();
    let copied = json(
        flowmem()
            .args(["--json", "memory", "migrate", "--from"])
            .arg(&sqlite)
            .args(["--to", &postgres])
            .output()
            .unwrap(),
    );
    assert_eq!(copied["copied"].as_u64(), Some(ids.len() as u64), "{copied}: the retired one too");
    let back = dir.path().join("back.db");
    ok(flowmem().args(["memory", "migrate", "--from", &postgres, "--to"]).arg(&back).output().unwrap());
    let export = |memory: &std::ffi::OsStr| {
        ok(flowmem().args(["memory", "export", "--format", "jsonl", "--memory"]).arg(memory).output().unwrap())
    };
    let original = export(sqlite.as_os_str());
    assert_eq!(original.lines().count(), ids.len());
    assert!(original.contains("too broad") && original.contains("Return items of a delivered order"));
    assert_eq!(export(postgres.as_ref()), original, "SQLite → PostgreSQL");
    assert_eq!(export(back.as_os_str()), original, "PostgreSQL → SQLite");
    let searched = json(
        flowmem()
            .args(["--json", "memory", "search", "return delivered items", "--memory", &postgres])
            .output()
            .unwrap(),
    );
    assert!(!searched.as_array().unwrap().is_empty(), "the PostgreSQL copy is searchable");

    let refused =
        flowmem().args(["memory", "migrate", "--from"]).arg(&sqlite).args(["--to", &postgres]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "an error");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("already holds") && stderr.contains("copy into an empty memory"), "{stderr}");
    let same = flowmem().args(["memory", "migrate", "--from"]).arg(&sqlite).arg("--to").arg(&sqlite).output().unwrap();
    assert!(String::from_utf8_lossy(&same.stderr).contains("name the same memory"));
}
