//! The deterministic task check against the real τ²-bench airline MCP server.

use std::path::{Path, PathBuf};

use flowmem_eval::{StateServer, TaskChecker, TcConfig, tool_correctness};
use flowmem_model::{Record, ToolCall};
use flowmem_tools::{Registry, ToolsConfig};

use crate::evaluate::tau2_records;
use crate::util::{repo_root, shared_data};

/// The τ² server binary, or a failure naming the setup script that installs it.
pub fn tau2_server(domain: &str) -> PathBuf {
    let path = repo_root().join(format!(".deps/venv/bin/tau2-{domain}-mcp"));
    assert!(
        path.exists(),
        "`{}` is missing; run `scripts/setup/20-mcp-servers.sh` (or `scripts/test.sh`)",
        path.display()
    );
    path
}

/// Starts the τ² server for `domain` with its state in `state_dir`.
pub async fn tau2_registry(domain: &str, state_dir: &Path) -> Registry {
    let text = format!(
        "[tools]\ntimeout_secs = 120\n[[tools.mcp]]\nname = \"{domain}\"\ncommand = \"{}\"\nenv = {{ TAU2_{}_MCP_STATE_DIR = \"{}\" }}\n",
        tau2_server(domain).display(),
        domain.to_uppercase(),
        state_dir.display(),
    );
    let cfg = ToolsConfig::from_toml_str(&text, &state_dir.join("flowmem.toml")).unwrap();
    Registry::connect(&cfg).await.unwrap()
}

/// The run side of a golden log: the same calls without reference-side hints.
fn as_run(calls: &[ToolCall]) -> Vec<ToolCall> {
    calls
        .iter()
        .cloned()
        .map(|mut call| {
            call.compare_args = None;
            call
        })
        .collect()
}

/// Tools that write, from τ²'s own schema file (`mutates_state`).
fn write_tools(domain: &str) -> Vec<String> {
    let text = std::fs::read_to_string(shared_data(&format!("tau2-bench/{domain}/tools.json"))).unwrap();
    let tools: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    tools
        .iter()
        .filter(|tool| tool["mutates_state"] == true)
        .map(|tool| tool["function"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// Checks every record in `records` with one server; returns, per record, the golden
/// check and (for records with a write) the check of the log without its last write.
async fn check_half(records: Vec<Record>, writes: Vec<String>) -> Vec<(String, bool, f64, Option<(bool, f64)>)> {
    let state_dir = tempfile::tempdir().unwrap();
    let registry = tau2_registry("airline", state_dir.path()).await;
    let checker = TaskChecker::new(registry.clone(), StateServer::tau2(state_dir.path()));
    let mut res = Vec::new();
    for record in &records {
        let answer = record.required_outputs.join("\n");
        let golden = as_run(&record.orchestration);
        let check = checker.check(record, &golden, &answer).await.unwrap();
        let tc = tool_correctness(&record.orchestration, &golden, &TcConfig::exact()).tc;
        let dropped = match golden.iter().rposition(|call| writes.contains(&call.tool)) {
            None => None,
            Some(last_write) => {
                let mut shorter = golden.clone();
                shorter.remove(last_write);
                let check = checker.check(record, &shorter, &answer).await.unwrap();
                let tc = tool_correctness(&record.orchestration, &shorter, &TcConfig::exact()).tc;
                Some((check.task_success, tc))
            }
        };
        res.push((record.id.clone(), check.task_success, tc, dropped));
    }
    registry.shutdown().await;
    res
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_logs_pass_and_dropping_the_last_write_fails_on_all_tau2_airline_records() {
    let records = tau2_records("airline");
    assert_eq!(records.len(), 50);
    let writes = write_tools("airline");
    assert!(writes.contains(&"book_reservation".to_string()));
    // Two servers, one per half, since each server answers one call at a time.
    let (first, second) = records.split_at(25);
    let (a, b) = tokio::join!(check_half(first.to_vec(), writes.clone()), check_half(second.to_vec(), writes));
    let results: Vec<_> = a.into_iter().chain(b).collect();
    assert_eq!(results.len(), 50);
    let mut n_dropped = 0;
    for (id, golden_success, golden_tc, dropped) in &results {
        assert_eq!(*golden_tc, 1.0, "record {id}");
        assert!(*golden_success, "record {id}: the golden log failed its own task check");
        if let Some((success, tc)) = dropped {
            n_dropped += 1;
            assert!(*tc < 1.0, "record {id}: TC {tc} with a call dropped");
            // Every airline golden write succeeds on replay, so each changes the state.
            assert!(!success, "record {id}: the task check passed without the last write");
        }
    }
    // 26 of the 50 airline tasks write (book, cancel, update, send a certificate), as
    // counted from tasks.json and tools.json by hand.
    assert_eq!(n_dropped, 26);
}
