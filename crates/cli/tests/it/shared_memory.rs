//! Issue 22: several `flowmem serve` instances on one PostgreSQL memory, driven by the
//! official `mcp` Python SDK (`tests/py/two_servers.py`).

use std::path::Path;
use std::process::Command;

use flowmem_testsupport::{Latencies, PgCluster};
use serde_json::{Value, json};

use crate::serve::{Served, python};
use crate::support::TestDir;

/// A workflow reported through one server is found through the other by its very next
/// `find_workflows` (each search catches up on the log by sequence number), and the
/// other server's sessions hear `tools/list_changed` although it polls only every 60 s:
/// PostgreSQL's LISTEN/NOTIFY woke it. One token, created once, works on both.
#[test]
#[allow(clippy::print_stderr)]
fn a_run_reported_through_one_server_is_found_through_the_other() {
    let dir = TestDir::new();
    let memory = PgCluster::shared().fresh_database();
    let created = dir.run(&["--json", "serve", "token", "create", "--memory", &memory, "--scope", "write"]);
    assert_eq!(created.code, 0, "{}", created.stderr);
    let token = serde_json::from_str::<Value>(&created.stdout).unwrap()["token"].as_str().unwrap().to_owned();
    let args = ["--memory", memory.as_str(), "--poll-interval", "60", "--retrieval", "bm25"];
    let a = Served::start(&dir, &args, &[]);
    let b = Served::start(&dir, &args, &[]);

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/two_servers.py");
    let program = json!({"a": a.url, "b": b.url, "token": token, "rounds": 20});
    let output = Command::new(python()).arg(script).arg(program.to_string()).output().expect("running python");
    let document: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "no JSON ({err}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let rounds = document["rounds"].as_array().unwrap_or_else(|| panic!("{document}"));
    assert_eq!(rounds.len(), 20, "{document}");
    for round in rounds {
        assert_eq!(round["found_first"], true, "B's next search finds what A stored: {round}");
        assert!(round["list_changed_ms"].is_number(), "B's session heard of the change: {round}");
    }
    let millis = |key: &str| Latencies::new(rounds.iter().map(|round| round[key].as_f64().unwrap()).collect());
    let (find, changed) = (millis("find_ms"), millis("list_changed_ms"));
    eprintln!(
        "two servers, one PostgreSQL memory, 20 rounds: found through B after p50 {:.1} ms, p99 {:.1} ms; B's list_changed after p50 {:.1} ms, p99 {:.1} ms (B polls every 60 s)",
        find.quantile(0.5),
        find.quantile(0.99),
        changed.quantile(0.5),
        changed.quantile(0.99)
    );
    let ids: std::collections::BTreeSet<&str> = rounds.iter().map(|round| round["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 20, "one workflow per round");
    let listed = dir.run(&["--json", "memory", "list", "--memory", &memory]);
    assert_eq!(serde_json::from_str::<Value>(&listed.stdout).unwrap().as_array().unwrap().len(), 20);
    for served in [a, b] {
        let (code, stderr) = served.stop();
        assert_eq!(code, Some(0), "{stderr}");
        assert!(!stderr.contains(&token), "the token is never logged");
    }
}
