//! FlowScout end to end with the embedded SmolLM2 model as executor and the real
//! `server-everything` MCP server; the optimizer is scripted (a [`Proposer`] that returns
//! known edit plans), so the search path is fixed while every candidate really executes.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;

use serde_json::{Value, json};

use flowmem_eval::{Alpha, TcConfig};
use flowmem_exec::{ToolBox, ToolCatalog, check, exec_prompts};
use flowmem_llm::ChatModel;
use flowmem_model::{Record, ToolCall, WorkflowGraph};
use flowmem_optimize::{
    Checkpoint, EditPlan, Proposer, ScoutParts, ScoutSettings, Scoring, SearchError, StopReason, prepare_run, scout,
};
use flowmem_testsupport::require_path;
use flowmem_tools::{Registry, ToolsConfig};

/// Returns the queued plans in order, and records the feedback and problems it was shown.
struct ScriptedOptimizer {
    plans: Mutex<Vec<EditPlan>>,
    seen: Mutex<Vec<(Value, Vec<String>)>>,
}

#[async_trait::async_trait]
impl Proposer for ScriptedOptimizer {
    async fn propose(&self, _graph: &WorkflowGraph, feedback: &Value, problems: &[String]) -> Result<EditPlan, SearchError> {
        self.seen.lock().unwrap().push((feedback.clone(), problems.to_vec()));
        let mut plans = self.plans.lock().unwrap();
        if plans.is_empty() {
            return Err(SearchError::Proposer("the script is exhausted".to_owned()));
        }
        Ok(plans.remove(0))
    }
}

fn plan(edits: Value) -> EditPlan {
    serde_json::from_value(json!({"rationale": "scripted", "edits": edits})).expect("edit plan")
}

async fn everything() -> Arc<Registry> {
    let server = require_path(
        &flowmem_testsupport::repo_root().join(".deps/node/node_modules/.bin/mcp-server-everything"),
        "scripts/setup/20-mcp-servers.sh",
    );
    let text = format!(
        "[tools]\ntimeout_secs = 30\n[[tools.mcp]]\nname = \"everything\"\ncommand = {:?}\nargs = [\"stdio\"]\nallow = [\"echo\", \"get-sum\"]\n",
        server.display().to_string(),
    );
    let cfg = ToolsConfig::from_toml_str(&text, &flowmem_testsupport::repo_root().join("flowmem.toml")).expect("tools config");
    Arc::new(Registry::connect(&cfg).await.expect("server-everything starts"))
}

fn records() -> Vec<Record> {
    (0..10)
        .map(|i| Record {
            id: format!("sum-{i}"),
            query: format!("Use get-sum to add {i} and 2."),
            reference_result: format!("The sum is {}.", i + 2),
            required_outputs: Vec::new(),
            orchestration: vec![ToolCall::new("get-sum", json!({"a": i, "b": 2})).expect("args are an object")],
            meta: Default::default(),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scout_with_the_embedded_model_and_a_scripted_optimizer() {
    let model_path = require_path(&flowmem_llm_local::default_model_path(), "scripts/setup/30-model.sh");
    let mut local = flowmem_llm_local::LocalConfig::standard();
    local.path = model_path;
    let model: Arc<dyn ChatModel> = Arc::new(flowmem_llm_local::LocalModel::new(local));
    let tools = everything().await;
    let prompts = Arc::new(exec_prompts(None).expect("exec templates"));
    let optimizer = ScriptedOptimizer {
        plans: Mutex::new(vec![
            plan(json!([{"op": "rewrite_prompt", "id": "synthesize", "instruction": "State the sum as a number."}])),
            plan(json!([{"op": "add_node", "after": "plan",
                "node": {"id": "check", "kind": "llm", "role": "verify", "instruction": "Check the plan."}}])),
            plan(json!([{"op": "remove_node", "id": "no-such-node"}])),
            plan(json!([{"op": "add_edge", "from": "synthesize", "to": "no-such-node"}])),
            plan(json!([{"op": "remove_node", "id": "also-missing"}])),
        ]),
        seen: Mutex::new(Vec::new()),
    };
    let dir = tempfile::tempdir().unwrap();
    let mut settings = ScoutSettings::paper_defaults(PathBuf::from("records.jsonl"));
    settings.search.iterations = 3;
    settings.concurrency = 2;
    let settings = prepare_run(dir.path(), Some(settings)).unwrap();
    let checkpoint = |_: Checkpoint| true;
    let iterations = Mutex::new(Vec::new());
    let on_iteration = |i: u32, best: Option<f64>| iterations.lock().unwrap().push((i, best));
    let parts = ScoutParts {
        runtime: flowmem_exec::Runtime { executor: model, models: Default::default(), tools: tools.clone(), prompts },
        isolation: None,
        scoring: Scoring { alpha: Alpha::HALF, tc: TcConfig::exact(), judge: None },
        proposer: &optimizer,
        checker: None,
        checkpoint: &checkpoint,
        on_iteration: &on_iteration,
        on_test: &|_| {},
    };
    let outcome = scout(dir.path(), &settings, records(), &parts).await.unwrap();
    tools.shutdown().await;

    let read = |name: &str| -> Value { serde_json::from_str(&std::fs::read_to_string(dir.path().join(name)).unwrap()).unwrap() };
    assert_eq!(outcome.split_sizes, (5, 2, 3));
    let state = &outcome.state;
    assert_eq!(state.stopped, Some(StopReason::Budget));
    assert_eq!(state.iteration, 3);
    assert_eq!(state.failed_expansions, 1, "the third expansion's plans never validate");
    assert_eq!(iterations.lock().unwrap().iter().map(|(i, _)| *i).collect::<Vec<_>>(), [1, 2, 3]);
    // The optimizer saw G⁰'s opt feedback (5 records, TC alignment per record) and, on the
    // failed expansion, the problems of each rejected attempt.
    let seen = optimizer.seen.lock().unwrap();
    assert_eq!(seen.len(), 5);
    assert_eq!(seen[0].0["split"], "opt");
    assert_eq!(seen[0].0["records"].as_array().unwrap().len(), 5);
    assert!(seen[0].0["records"][0].get("missing_calls").is_some());
    assert!(seen[2].1.is_empty() && !seen[3].1.is_empty() && !seen[4].1.is_empty(), "{:?}", seen[3..].iter().map(|s| &s.1).collect::<Vec<_>>());
    let plan3 = read("candidates/0003.plan.json");
    assert_eq!(plan3["plan"], Value::Null);
    assert_eq!(plan3["rejected"].as_array().unwrap().len(), 3);
    // Every evaluated candidate's opt and val results and traces are on disk; a score is
    // the mean over records of TC (no judge: R = TC), so it lies in [0, 1].
    for id in [0, 1, 2] {
        for (split, n) in [("opt", 5), ("val", 2)] {
            let eval = read(&format!("candidates/{id:04}.{split}.json"));
            let reward = eval["reward"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&reward), "{eval}");
            assert_eq!(eval["reward"], eval["tc"]);
            let text = std::fs::read_to_string(dir.path().join(format!("traces/{id:04}.{split}.jsonl"))).unwrap();
            assert_eq!(text.lines().filter(|line| line.contains("\"kind\":\"final\"")).count(), n, "{id} {split}: {text}");
        }
    }
    // Candidate 1 is G⁰ with the rewritten synthesize prompt; candidate 2 has the verify node.
    let c1: WorkflowGraph = serde_json::from_value(read("candidates/0001.workflow.json")).unwrap();
    assert!(serde_json::to_string(&c1).unwrap().contains("State the sum as a number."));
    let c2: WorkflowGraph = serde_json::from_value(read("candidates/0002.workflow.json")).unwrap();
    assert!(c2.node("check").is_some());
    // The best workflow loads and validates against the real tools.
    let best: WorkflowGraph = serde_json::from_value(read("best.workflow.json")).unwrap();
    assert_eq!(best, outcome.best);
    let names: Vec<String> = tools.definitions().into_iter().map(|def| def.name).collect();
    check(best, ToolCatalog::Known(&names)).expect("best workflow is valid");
    // The final test ran the best workflow and ReAct on the 3 test records.
    let test = outcome.test.as_ref().unwrap();
    for system in ["flowscout", "react"] {
        let summary = test.systems.iter().find(|s| s.system == system).unwrap_or_else(|| panic!("{system} missing"));
        assert_eq!(summary.n_runs, 3, "{system}");
    }
    assert!(dir.path().join("test/report.json").exists());
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("validation-curve") && html.contains("search-tree") && html.contains("flowscout"), "{html}");
}
