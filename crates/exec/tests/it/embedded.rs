//! The embedded model end to end: a hand-written plan → tool → synthesize workflow over
//! the real τ² retail MCP server. The 135M model is weak, so this checks the machinery
//! (every node observed, a real tool call with its arguments and outcome, a final
//! answer, a complete JSONL trace), not the quality of the answer.

use std::sync::Arc;

use flowmem_exec::{JsonlTraceWriter, Observers, RunInput, Runtime, exec_prompts, run};
use flowmem_llm::TextLimitModel;
use flowmem_llm_local::{LocalConfig, LocalModel};
use flowmem_testsupport::require_path;
use serde_json::{Value, json};

use crate::support;

/// A plan → tool → synthesize workflow that looks a customer up.
fn find_user() -> Value {
    json!({
        "name": "find-user",
        "nodes": [
            {"id": "plan", "kind": "llm", "role": "plan"},
            {"id": "lookup", "kind": "tool", "hints": ["find_user_id_by_name_zip"],
             "instruction": "Look up the customer named in the request: {{ query }}"},
            {"id": "answer", "kind": "llm", "role": "synthesize"}
        ],
        "edges": [{"from": "plan", "to": "lookup"}, {"from": "lookup", "to": "answer"}],
        "entry": "plan",
        "exit": "answer"
    })
}

fn find_user_input() -> RunInput {
    RunInput { id: "retail-1".to_owned(), query: "What is the user id of Yusuf Rossi, zip code 19122?".to_owned() }
}

#[allow(clippy::print_stderr, reason = "the figures of this run are the test's report")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_tool_synthesize_over_tau2_retail_with_the_embedded_model() {
    let model_file = require_path(&flowmem_llm_local::default_model_path(), "scripts/setup/30-model.sh");
    // The server rewrites its whole database after every call: keep that in a
    // directory of this test's own.
    let state_dir = tempfile::tempdir().unwrap();
    let tools = support::retail(state_dir.path()).await;

    let mut config = LocalConfig::standard();
    config.path = model_file;
    // Free-text replies (plan, synthesize) default to 40 tokens so the run stays cheap on
    // CI; tool calls are constrained and never limited.
    let model = TextLimitModel::new(Arc::new(LocalModel::new(config)), 40);
    let runtime = Runtime {
        executor: Arc::new(model),
        models: Default::default(),
        tools: tools.clone(),
        prompts: Arc::new(exec_prompts(None).expect("templates register")),
        grounding: flowmem_exec::Grounding::default(),
    };
    let plan = support::plan(find_user(), runtime);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.jsonl");
    let writer = Arc::new(JsonlTraceWriter::new(std::fs::File::create(&path).unwrap()));
    let observers = Observers(vec![writer.clone()]);
    let input = find_user_input();
    let started = std::time::Instant::now();
    let trace = run(&plan, &input, &observers).await;
    let wall = started.elapsed();
    drop(observers);
    Arc::into_inner(writer).expect("the only writer").finish().unwrap();
    tools.shutdown().await;

    assert_eq!(trace.error, None, "{trace:#?}");
    for node_id in ["plan", "lookup", "answer"] {
        let observed: Vec<_> = trace.observations.iter().filter(|o| o.node_id == node_id).collect();
        assert_eq!(observed.len(), 1, "node `{node_id}`: {trace:#?}");
        let observation = observed[0];
        assert!(observation.prompt.as_deref().is_some_and(|p| !p.is_empty()), "node `{node_id}` has no prompt");
        assert!(observation.output.is_some(), "node `{node_id}` has no output");
        assert!(observation.latency_ms > 0.0, "node `{node_id}` has no latency");
        assert!(observation.prompt_tokens > 0, "node `{node_id}` counted no prompt tokens");
    }
    let lookup = trace.observations.iter().find(|o| o.node_id == "lookup").unwrap();
    let call = lookup.tool_call.as_ref().expect("the tool node records its call");
    assert_eq!(call.tool, "find_user_id_by_name_zip");
    assert!(!call.args.is_empty(), "the model wrote no arguments: {call:?}");
    assert!(call.result.is_some() || call.error.is_some(), "{call:?}");
    assert_eq!(trace.tool_calls.len(), 1, "{:?}", trace.tool_calls);
    let answer = trace.result.as_deref().unwrap_or("");
    assert!(!answer.trim().is_empty(), "no final answer: {trace:#?}");

    // The JSONL trace has the tool call as its own line, with tool, args and outcome.
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let calls: Vec<&Value> = lines.iter().filter(|line| line["kind"] == "tool_call").collect();
    assert_eq!(calls.len(), 1, "{text}");
    assert_eq!(calls[0]["tool"], "find_user_id_by_name_zip", "{text}");
    assert!(calls[0]["args"].is_object(), "{text}");
    assert!(calls[0].get("result").is_some() || calls[0].get("error").is_some(), "{text}");
    assert!(lines.iter().any(|line| line["kind"] == "final"), "{text}");
    eprintln!("embedded plan → tool → synthesize: {:.1} s wall, answer {answer:?}", wall.as_secs_f64());
}

/// Counts the requests that reach the model it wraps.
struct Counting {
    inner: Arc<dyn flowmem_llm::ChatModel>,
    requests: std::sync::Mutex<Vec<flowmem_llm::ChatRequest>>,
}

#[async_trait::async_trait]
impl flowmem_llm::ChatModel for Counting {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn chat(
        &self,
        request: &flowmem_llm::ChatRequest,
    ) -> Result<flowmem_llm::ChatResponse, flowmem_llm::LlmError> {
        self.requests.lock().unwrap().push(request.clone());
        self.inner.chat(request).await
    }
}

/// Grounding with the embedded model: the order id is the query's only id, so the lookup
/// needs no model; the product is one of the order's five, and the model chooses it
/// under the grammar the offered `enum` compiles to, right the first time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_model_chooses_a_bound_argument_under_its_grammar() {
    let model_file = require_path(&flowmem_llm_local::default_model_path(), "scripts/setup/30-model.sh");
    let state_dir = tempfile::tempdir().unwrap();
    let tools = support::retail(state_dir.path()).await;
    let mut config = LocalConfig::standard();
    config.path = model_file;
    let model = Arc::new(Counting { inner: Arc::new(LocalModel::new(config)), requests: Default::default() });
    let runtime = Runtime {
        executor: model.clone(),
        models: Default::default(),
        tools: tools.clone(),
        prompts: Arc::new(exec_prompts(None).expect("templates register")),
        grounding: flowmem_exec::Grounding::Bindings,
    };
    let bound = |source: Value| json!({"observed": 2, "sources": [source]});
    let plan = support::plan(
        json!({
            "name": "order-then-product",
            "nodes": [
                {"id": "order", "kind": "tool", "hints": ["get_order_details"],
                 "bindings": {"order_id": bound(json!({"from": "query", "shape": "id", "support": 2}))}},
                {"id": "product", "kind": "tool", "hints": ["get_product_details"],
                 "instruction": "Look up the keyboard's product.",
                 "bindings": {"product_id": bound(json!({"from": "result", "node": "order",
                     "path": "$.parsed_content.items[*].product_id", "support": 2}))}}
            ],
            "edges": [{"from": "order", "to": "product"}],
            "entry": "order",
            "exit": "product"
        }),
        runtime,
    );
    let input = RunInput { id: "grammar".to_owned(), query: "Exchange the keyboard of order #W2378156.".to_owned() };
    let trace = run(&plan, &input, &flowmem_exec::NoObserver).await;
    tools.shutdown().await;
    assert_eq!(trace.error, None, "{trace:#?}");
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "the order needed no model, the product one request");
    let offered = requests[0].tools[0].parameters["properties"]["product_id"]["enum"].clone();
    let ids = json!(["6992792935", "1762337868", "1656367028", "4896585277", "6945232052"]);
    assert_eq!(offered, ids);
    let product = &trace.tool_calls[1];
    assert!(ids.as_array().unwrap().contains(&product.args["product_id"]), "{product:?}");
    assert!(product.error.is_none(), "a real product: {product:?}");
    let observed = &trace.observations.iter().find(|o| o.node_id == "product").unwrap().grounding;
    assert_eq!((observed[0].candidates, observed[0].grounded), (5, true), "{observed:?}");
}

/// What a run did, for comparing two runs: every model output and tool call, the
/// answer and the error.
fn behaviour(trace: &flowmem_model::Trace) -> Value {
    json!({
        "outputs": trace.observations.iter().map(|o| json!([o.node_id, o.output])).collect::<Vec<_>>(),
        "calls": trace.tool_calls.iter().map(|c| json!([c.tool, c.args, c.result, c.error])).collect::<Vec<_>>(),
        "result": trace.result,
        "error": trace.error,
    })
}

/// The prefix cache never changes what the model says: a ReAct run and a workflow run
/// over the real τ² retail server behave identically on a model with the cache and on
/// one without, and the cached model reports reused prompt tokens.
#[allow(clippy::print_stderr, reason = "the figures of this run are the test's report")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn react_and_workflow_runs_are_the_same_with_and_without_the_prefix_cache() {
    let model_file = require_path(&flowmem_llm_local::default_model_path(), "scripts/setup/30-model.sh");
    let mut runs = Vec::new();
    for prefix_cache_mb in [256, 0] {
        let state_dir = tempfile::tempdir().unwrap();
        let tools = support::retail(state_dir.path()).await;
        let mut config = LocalConfig::standard();
        config.path.clone_from(&model_file);
        config.prefix_cache_mb = prefix_cache_mb;
        let model = Arc::new(flowmem_llm::AccountedModel::new(
            Arc::new(TextLimitModel::new(Arc::new(LocalModel::new(config)), 40)),
            flowmem_llm::Accounting::new(),
        ));
        let runtime = Runtime {
            executor: model.clone(),
            models: Default::default(),
            tools: tools.clone(),
            prompts: Arc::new(exec_prompts(None).expect("templates register")),
            grounding: flowmem_exec::Grounding::default(),
        };
        let agent = flowmem_exec::AgentConfig { max_steps: 3, instruction: None, guard: None };
        let react = flowmem_exec::run_agent(&runtime, &agent, &find_user_input(), &flowmem_exec::NoObserver).await;
        let plan = support::plan(find_user(), runtime);
        let workflow = run(&plan, &find_user_input(), &flowmem_exec::NoObserver).await;
        tools.shutdown().await;
        let totals = model.accounting().snapshot().total;
        eprintln!("prefix cache {prefix_cache_mb} MiB: {totals:?}");
        assert!(react.observations.len() >= 2, "{react:#?}");
        runs.push((behaviour(&react), behaviour(&workflow), totals));
    }
    let (with, without) = (&runs[0], &runs[1]);
    assert_eq!(with.0, without.0, "ReAct changed with the prefix cache");
    assert_eq!(with.1, without.1, "the workflow run changed with the prefix cache");
    assert_eq!(without.2.prefix_cached_tokens, 0);
    assert!(with.2.prefix_cached_tokens > 0, "{:?}", with.2);
    assert_eq!(with.2.prompt_tokens, without.2.prompt_tokens);
}
