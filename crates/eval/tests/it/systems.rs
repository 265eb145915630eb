//! State isolation of the systems' tools against the real τ²-bench retail MCP server.

use std::sync::Arc;

use flowmem_eval::{IsolatedTools, StateIsolation, StateServer};
use flowmem_exec::ToolBox;
use flowmem_model::Record;

use crate::evaluate::tau2_records;
use crate::task_check::tau2_registry;

fn db_of(server: &StateServer, key: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(server.state_path(key)).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["db"].clone()
}

#[tokio::test]
async fn isolated_tools_hide_the_state_plumbing_and_reset_between_runs() {
    let state_dir = tempfile::tempdir().unwrap();
    let registry = tau2_registry("retail", state_dir.path()).await;
    let isolation = StateIsolation::tau2();
    let key = isolation.key.clone();
    let tools = IsolatedTools::new(Arc::new(registry.clone()), isolation);

    let definitions = tools.definitions();
    assert!(definitions.iter().any(|d| d.name == "cancel_pending_order"));
    assert!(!definitions.iter().any(|d| d.name == "reset_state" || d.name == "get_call_log"));
    for def in &definitions {
        assert!(def.parameters["properties"].get("state_key").is_none(), "{} still offers state_key", def.name);
    }

    // A record whose golden log cancels an order: the write lands in the isolation key.
    let records: Vec<Record> = tau2_records("retail");
    let record = records.iter().find(|r| r.orchestration.iter().any(|c| c.tool == "cancel_pending_order")).unwrap();
    tools.reset().await.unwrap();
    let server = StateServer::tau2(state_dir.path());
    let fresh = db_of(&server, &key);
    for call in &record.orchestration {
        let made = tools.call(&call.tool, call.args.clone()).await;
        assert!(made.args.get("state_key").is_none(), "the trace must not show the state key");
        assert!(made.same_call(call), "{} changed its arguments", call.tool);
    }
    let after = db_of(&server, &key);
    assert_ne!(fresh, after, "the cancellation did not reach the isolated state");
    tools.reset().await.unwrap();
    assert_eq!(db_of(&server, &key), fresh);
    registry.shutdown().await;
}
