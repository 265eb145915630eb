//! server-everything over streamable HTTP on a loopback port.

use serde_json::json;

use flowmem_tools::CallStatus;

use crate::support::{HttpServer, args, connect};

#[tokio::test]
async fn lists_and_calls_tools_over_streamable_http() {
    let server = HttpServer::start().await;
    let registry = connect(&format!("[[tools.mcp]]\nname = \"remote\"\nurl = \"{}\"\n", server.url)).await;
    assert_eq!(registry.server_pid("remote"), None);
    let sum = registry.tool("get-sum").expect("server-everything lists get-sum");
    assert_eq!(sum.server, "remote");

    let echo = registry.invoke("echo", args(json!({"message": "over http"}))).await;
    assert_eq!(echo.status, CallStatus::Ok, "{:?}", echo.call.error);
    assert_eq!(echo.call.result, Some(json!("Echo: over http")));

    let invalid = registry.invoke("get-sum", args(json!({"a": 1}))).await;
    assert_eq!(invalid.status, CallStatus::InvalidArguments);
    assert!(invalid.call.error.unwrap().contains("\"b\""));

    let tool_error = registry.invoke("get-resource-reference", args(json!({"resourceId": -3}))).await;
    assert_eq!(tool_error.status, CallStatus::ToolError);
    registry.shutdown().await;
}

#[tokio::test]
async fn a_slow_http_call_times_out() {
    let server = HttpServer::start().await;
    let registry =
        connect(&format!("[[tools.mcp]]\nname = \"remote\"\nurl = \"{}\"\ntimeout_secs = 0.5\n", server.url)).await;
    let slow = registry.invoke("trigger-long-running-operation", args(json!({"duration": 5, "steps": 5}))).await;
    assert_eq!(slow.status, CallStatus::Timeout);
    let echo = registry.invoke("echo", args(json!({"message": "after"}))).await;
    assert_eq!(echo.status, CallStatus::Ok);
    registry.shutdown().await;
}
