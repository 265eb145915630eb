//! Calls to server-everything over stdio: listing, valid and invalid arguments, tool
//! errors, unknown tools, timeouts and concurrency.

use serde_json::json;

use flowmem_tools::CallStatus;

use crate::support::{args, connect, everything_entry};

#[tokio::test]
async fn lists_tools_with_their_schemas() {
    let registry = connect(&everything_entry("everything", "")).await;
    let sum = registry.tool("get-sum").expect("server-everything lists get-sum");
    assert_eq!(sum.server, "everything");
    assert_eq!(sum.remote_name, "get-sum");
    assert_eq!(sum.input_schema["required"], json!(["a", "b"]));
    assert_eq!(sum.input_schema["properties"]["a"]["type"], "number");
    assert!(!sum.description.is_empty());
    assert!(registry.tools().iter().any(|tool| tool.name == "echo"));
    let function = sum.openai_function();
    assert_eq!(function["function"]["name"], "get-sum");
    assert_eq!(function["function"]["parameters"], sum.input_schema);
    assert!(registry.warnings().is_empty(), "{:?}", registry.warnings());
    registry.shutdown().await;
}

#[tokio::test]
async fn valid_calls_return_results_with_latency() {
    let registry = connect(&everything_entry("everything", "")).await;
    let echo = registry.invoke("echo", args(json!({"message": "hi"}))).await;
    assert_eq!(echo.status, CallStatus::Ok);
    assert_eq!(echo.call.result, Some(json!("Echo: hi")));
    assert_eq!(echo.call.error, None);
    assert_eq!(echo.call.args, args(json!({"message": "hi"})));
    assert!(echo.call.latency_ms.is_some_and(|ms| ms > 0.0));
    assert_eq!(echo.server.as_deref(), Some("everything"));
    let sum = registry.call("get-sum", args(json!({"a": 2, "b": 40}))).await;
    assert!(sum.result.unwrap().as_str().unwrap().contains("42"));
    registry.shutdown().await;
}

#[tokio::test]
async fn invalid_arguments_are_observations_naming_the_path() {
    let registry = connect(&everything_entry("everything", "")).await;
    let wrong_type = registry.invoke("get-sum", args(json!({"a": 2, "b": "three"}))).await;
    assert_eq!(wrong_type.status, CallStatus::InvalidArguments);
    let error = wrong_type.call.error.unwrap();
    assert!(error.contains("`get-sum`") && error.contains("`/b`"), "{error}");
    assert_eq!(wrong_type.call.result, None);

    let missing = registry.invoke("echo", args(json!({}))).await;
    assert_eq!(missing.status, CallStatus::InvalidArguments);
    assert!(missing.call.error.unwrap().contains("message"));

    // The session is unharmed: nothing was sent.
    let ok = registry.invoke("echo", args(json!({"message": "still here"}))).await;
    assert_eq!(ok.status, CallStatus::Ok);
    registry.shutdown().await;
}

#[tokio::test]
async fn a_tool_error_result_fills_result_and_error() {
    let registry = connect(&everything_entry("everything", "")).await;
    // `resourceId: 0` satisfies the schema (a number) but the tool rejects it.
    let invocation = registry.invoke("get-resource-reference", args(json!({"resourceId": 0}))).await;
    assert_eq!(invocation.status, CallStatus::ToolError);
    assert!(invocation.status.executed());
    let error = invocation.call.error.unwrap();
    assert!(error.contains("Invalid resourceId"), "{error}");
    assert!(invocation.call.result.is_some());
    registry.shutdown().await;
}

#[tokio::test]
async fn unknown_tools_are_observations() {
    let registry = connect(&everything_entry("everything", "")).await;
    let invocation = registry.invoke("no-such-tool", args(json!({}))).await;
    assert_eq!(invocation.status, CallStatus::UnknownTool);
    let error = invocation.call.error.unwrap();
    assert!(error.contains("unknown tool `no-such-tool`") && error.contains("`echo`"), "{error}");
    registry.shutdown().await;
}

#[tokio::test]
async fn a_slow_call_times_out_and_the_session_survives() {
    let registry = connect(&everything_entry("everything", "timeout_secs = 0.5")).await;
    let slow = registry.invoke("trigger-long-running-operation", args(json!({"duration": 5, "steps": 5}))).await;
    assert_eq!(slow.status, CallStatus::Timeout);
    assert!(slow.status.is_transport_error());
    assert!(slow.call.error.unwrap().contains("timed out after 500ms"));
    let echo = registry.invoke("echo", args(json!({"message": "after"}))).await;
    assert_eq!(echo.status, CallStatus::Ok);
    assert!(echo.restart.is_none());
    registry.shutdown().await;
}

#[tokio::test]
async fn independent_calls_run_concurrently_and_keep_their_order() {
    let registry = connect(&everything_entry("everything", "")).await;
    let calls = (0..16).map(|idx| ("get-sum".to_owned(), args(json!({"a": idx, "b": 1000})))).collect();
    let results = registry.invoke_all(calls).await;
    for (idx, invocation) in results.iter().enumerate() {
        assert_eq!(invocation.status, CallStatus::Ok);
        let text = invocation.call.result.as_ref().unwrap().as_str().unwrap();
        assert!(text.contains(&(idx + 1000).to_string()), "call {idx}: {text}");
    }
    // Clones share the sessions and may be moved to other tasks.
    let clone = registry.clone();
    let handle = tokio::spawn(async move { clone.call("echo", args(json!({"message": "task"}))).await });
    assert_eq!(handle.await.unwrap().result, Some(json!("Echo: task")));
    registry.shutdown().await;
}

#[tokio::test]
async fn a_missing_command_is_a_spawn_error_naming_the_server() {
    let config = crate::support::config("[[tools.mcp]]\nname = \"ghost\"\ncommand = \"/nonexistent/mcp-server\"\n");
    let err = flowmem_tools::Registry::connect(&config).await.unwrap_err();
    assert_eq!(err.server(), "ghost");
    assert!(err.to_string().contains("`/nonexistent/mcp-server`"), "{err}");
}
