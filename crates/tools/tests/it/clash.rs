//! Tool names stay unique across servers; allow and deny lists filter tools.

use serde_json::json;

use flowmem_tools::CallStatus;

use crate::support::{args, connect, everything_entry, memory};

#[tokio::test]
async fn clashing_names_are_qualified_by_server() {
    let memory_dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}{}[[tools.mcp]]\nname = \"memory\"\ncommand = \"{}\"\nenv = {{ MEMORY_FILE_PATH = \"{}\" }}\n",
        everything_entry("a", ""),
        everything_entry("b", "allow = [\"echo\", \"no-such-tool\"]"),
        memory().display(),
        memory_dir.path().join("memory.jsonl").display(),
    );
    let registry = connect(&text).await;
    let names: Vec<&str> = registry.tools().iter().map(|tool| tool.name.as_str()).collect();
    // `echo` is on both everything servers; `get-sum` only on `a` (b allows only echo).
    assert!(names.contains(&"a.echo") && names.contains(&"b.echo"), "{names:?}");
    assert!(!names.contains(&"echo"));
    assert!(names.contains(&"get-sum") && !names.contains(&"a.get-sum"));
    assert!(names.contains(&"create_entities"), "{names:?}");
    assert_eq!(names.iter().filter(|name| name.starts_with("b.")).count(), 1);
    assert_eq!(registry.tool("b.echo").unwrap().remote_name, "echo");
    assert!(registry.warnings().iter().any(|warning| warning.contains("`no-such-tool`")), "{:?}", registry.warnings());

    for name in ["a.echo", "b.echo"] {
        let invocation = registry.invoke(name, args(json!({"message": name}))).await;
        assert_eq!(invocation.status, CallStatus::Ok);
        assert_eq!(invocation.call.tool, name);
        assert_eq!(invocation.call.result, Some(json!(format!("Echo: {name}"))));
    }
    assert_eq!(registry.invoke("echo", args(json!({"message": "x"}))).await.status, CallStatus::UnknownTool);
    let created = registry
        .invoke(
            "create_entities",
            args(json!({"entities": [{"name": "flowmem", "entityType": "project", "observations": []}]})),
        )
        .await;
    assert_eq!(created.status, CallStatus::Ok, "{:?}", created.call.error);
    registry.shutdown().await;
}

#[tokio::test]
async fn a_deny_list_hides_tools() {
    let registry = connect(&everything_entry("everything", "deny = [\"echo\"]")).await;
    assert!(registry.tool("echo").is_none());
    assert!(registry.tool("get-sum").is_some());
    registry.shutdown().await;
}
