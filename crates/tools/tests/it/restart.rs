//! A stdio server killed mid-run is restarted on the next call, and the restart reported.

use std::sync::{Arc, Mutex};

use serde_json::json;

use flowmem_model::TraceEvent;
use flowmem_tools::{CallStatus, EventSink, Registry};

use crate::support::{args, config, everything_entry};

#[tokio::test]
async fn a_killed_server_fails_its_call_and_restarts_on_the_next() {
    let events: Arc<Mutex<Vec<TraceEvent>>> = Arc::default();
    let sink_events = events.clone();
    let sink: EventSink = Arc::new(move |event: &TraceEvent| sink_events.lock().unwrap().push(event.clone()));
    let registry =
        Registry::connect_with_events(&config(&everything_entry("everything", "timeout_secs = 60")), Some(sink))
            .await
            .unwrap();
    let first = registry.invoke("echo", args(json!({"message": "one"}))).await;
    assert_eq!(first.status, CallStatus::Ok);
    let pid = registry.server_pid("everything").expect("a stdio server has a pid");

    // The long call is polled first, so it is in flight when the server is killed.
    let (long, killed) = tokio::join!(
        registry.invoke("trigger-long-running-operation", args(json!({"duration": 30, "steps": 3}))),
        async {
            tokio::task::yield_now().await;
            std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap()
        }
    );
    assert!(killed.success());
    assert_eq!(long.status, CallStatus::TransportError, "{:?}", long.call.error);
    assert!(long.restart.is_none());

    let next = registry.invoke("echo", args(json!({"message": "two"}))).await;
    assert_eq!(next.status, CallStatus::Ok, "{:?}", next.call.error);
    assert_eq!(next.call.result, Some(json!("Echo: two")));
    let restart = next.restart.expect("the next call restarts the server");
    assert_eq!(restart.server, "everything");
    assert!(restart.reason.contains(&format!("process {pid} had exited")), "{}", restart.reason);
    let new_pid = registry.server_pid("everything").unwrap();
    assert_ne!(new_pid, pid);
    assert_eq!(*events.lock().unwrap(), vec![restart.to_trace_event()]);

    // A healthy server is not restarted again.
    let third = registry.invoke("echo", args(json!({"message": "three"}))).await;
    assert!(third.restart.is_none());
    assert_eq!(registry.server_pid("everything"), Some(new_pid));
    registry.shutdown().await;
}
