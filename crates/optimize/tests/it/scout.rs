//! FlowScout end to end over the scripted LLM server and the real `server-everything`
//! MCP server: a scripted optimizer proposes known edits, candidates really execute.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use flowmem_eval::{JUDGE_ES_PROMPT, ScoreConfig, TcConfig};
use flowmem_exec::{ToolBox, ToolCatalog, check, exec_prompts};
use flowmem_llm::{ChatModel, HttpModel, HttpModelConfig, Prompts, RetryPolicy};
use flowmem_model::{Record, ToolCall, WorkflowGraph};
use flowmem_optimize::{
    Checkpoint, LlmProposer, PROPOSE_EDITS, PROPOSE_NEXT_EDIT, ScoutParts, ScoutSettings, SplitProgress, StopReason,
    Strategy, prepare_run, scout,
};
use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer, require_path};
use flowmem_tools::{Registry, ToolsConfig};

pub(crate) fn everything_server() -> PathBuf {
    require_path(
        &flowmem_testsupport::repo_root().join(".deps/node/node_modules/.bin/mcp-server-everything"),
        "scripts/setup/20-mcp-servers.sh",
    )
}

async fn everything() -> Arc<Registry> {
    let text = format!(
        "[tools]\ntimeout_secs = 30\n[[tools.mcp]]\nname = \"everything\"\ncommand = {:?}\nargs = [\"stdio\"]\n",
        everything_server().display().to_string(),
    );
    let cfg = ToolsConfig::from_toml_str(&text, &flowmem_testsupport::repo_root().join("flowmem.toml"))
        .expect("tools config");
    Arc::new(Registry::connect(&cfg).await.expect("server-everything starts"))
}

pub(crate) fn http_model(server: &ScriptedLlmServer) -> Arc<dyn ChatModel> {
    let mut cfg = HttpModelConfig::new("scripted", server.base_url(), "scripted-model");
    cfg.max_concurrency = 64;
    cfg.retry = RetryPolicy { max_retries: 0, ..RetryPolicy::standard() };
    Arc::new(HttpModel::new(cfg).expect("model config"))
}

/// Ten "add A and B" records whose reference call is `get-sum {a: 1, b: 2}`.
pub(crate) fn records() -> Vec<Record> {
    (0..10)
        .map(|i| Record {
            id: format!("sum-{i}"),
            query: format!("add 1 and 2 (case {i})"),
            reference_result: "The sum is 3.".to_owned(),
            required_outputs: Vec::new(),
            orchestration: vec![ToolCall::new("get-sum", json!({"a": 1, "b": 2})).expect("args are an object")],
            meta: Default::default(),
        })
        .collect()
}

/// The first turn's reply: the rationale and one edit.
fn first_edit(edit: Value) -> Reply {
    Reply::json(json!({"rationale": "scripted", "edit": edit}))
}

/// The script: the optimizer proposes, edit by edit, (1) a prompt rewrite of
/// `synthesize` that makes the answer right, (2) an added verify node, each followed by
/// `done`, then (3) an edit naming a node that does not exist, again each time it is told
/// so, until the expansion is given up. The judge gives 1 to the right answer and 0
/// otherwise.
fn script() -> Script {
    script_after(Script::new())
}

/// [`script`]'s rules after those `start` already has (the first rule that matches
/// answers).
pub(crate) fn script_after(start: Script) -> Script {
    let rewrite =
        first_edit(json!({"op": "rewrite_prompt", "id": "synthesize", "instruction": "ANSWER-V2: state the sum."}));
    let add = first_edit(json!({"op": "add_node", "after": "plan",
        "node": {"id": "e1_check", "kind": "llm", "role": "verify", "instruction": "Check the plan."}}));
    let invalid = || first_edit(json!({"op": "remove_node", "id": "no-such-node"}));
    let judge = |score: f64| {
        Reply::json(
            json!({"rationale": "scripted", "correctness": score, "completeness": score, "relevance": score, "clarity": score}),
        )
    };
    start
        .when(Match::last_user_contains("Applied."), Reply::json(json!({"edit": {"op": "done"}})))
        .when(Match::last_user_contains("Your reply was not an edit"), invalid())
        .when_seq(Match::last_user_contains("You improve a tool-using agent workflow"), [rewrite, add, invalid()])
        .when(
            Match::custom(|request| {
                let text = request.to_string();
                text.contains("You are evaluating the result") && text.matches("The sum is 3.").count() >= 2
            }),
            judge(1.0),
        )
        .when(Match::last_user_contains("You are evaluating the result"), judge(0.0))
        .when(Match::after_tool_result(), Reply::text("The sum is 3."))
        .when(Match::offers_tool("get-sum"), Reply::tool_call("get-sum", json!({"a": 1, "b": 2})))
        .when(Match::any_message_contains("ANSWER-V2"), Reply::text("The sum is 3."))
        .otherwise(Reply::text("I am not sure."))
}

struct Setup {
    server: ScriptedLlmServer,
    tools: Arc<Registry>,
    model: Arc<dyn ChatModel>,
    prompts: Arc<Prompts>,
}

async fn setup() -> Setup {
    let server = ScriptedLlmServer::start(script()).await;
    let tools = everything().await;
    let model = http_model(&server);
    let mut prompts = exec_prompts(None).expect("exec templates");
    prompts.register(JUDGE_ES_PROMPT).expect("judge template");
    prompts.register_all(&[PROPOSE_EDITS, PROPOSE_NEXT_EDIT]).expect("optimizer templates");
    Setup { server, tools, model, prompts: Arc::new(prompts) }
}

async fn run_scout(
    setup: &Setup,
    dir: &Path,
    settings: &ScoutSettings,
    stop_at: Option<Checkpoint>,
    progress: Option<&Mutex<Vec<String>>>,
) -> Result<flowmem_optimize::ScoutOutcome, flowmem_optimize::ScoutError> {
    let tool_names: Vec<String> = setup.tools.definitions().into_iter().map(|def| def.name).collect();
    let proposer = LlmProposer::new(
        Arc::clone(&setup.model),
        Arc::clone(&setup.prompts),
        tool_names,
        settings.max_edits,
        settings.plan_decoding,
    );
    let iterations = AtomicU32::new(0);
    let checkpoint = move |point: Checkpoint| Some(point) != stop_at;
    let on_iteration = |_: u32, _: Option<f64>| {
        iterations.fetch_add(1, Ordering::Relaxed);
    };
    let parts = ScoutParts {
        runtime: flowmem_exec::Runtime {
            executor: Arc::clone(&setup.model),
            models: Default::default(),
            tools: setup.tools.clone(),
            prompts: Arc::clone(&setup.prompts),
            grounding: flowmem_exec::Grounding::default(),
        },
        isolation: None,
        scoring: ScoreConfig {
            tc: TcConfig::exact(),
            judge: Some((setup.model.as_ref(), setup.prompts.as_ref())),
            checker: None,
        },
        proposer: &proposer,
        checkpoint: &checkpoint,
        on_iteration: &on_iteration,
        on_split: &|event| {
            let line = match event {
                SplitProgress::Run { candidate, split, done, total, .. } => {
                    format!("{candidate} {split} {done}/{total}")
                }
                SplitProgress::Finished { candidate, split, evaluation, runs, .. } => {
                    format!("{candidate} {split} finished: {runs} runs, reward {:.1}", evaluation.reward)
                }
            };
            progress.inspect(|lines| lines.lock().unwrap().push(line));
        },
        on_test: &|_| {},
    };
    scout(dir, settings, records(), &parts).await
}

fn settings() -> ScoutSettings {
    let mut settings = ScoutSettings::paper_defaults(PathBuf::from("records.jsonl"));
    settings.search.iterations = 3;
    settings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_search_executes_candidates_and_writes_the_run_directory() {
    let setup = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = prepare_run(dir.path(), Some(settings())).unwrap();
    let progress = Mutex::new(Vec::new());
    let outcome = run_scout(&setup, dir.path(), &settings, None, Some(&progress)).await.unwrap();

    assert_eq!(outcome.split_sizes, (5, 2, 3));
    let state = &outcome.state;
    assert_eq!(state.stopped, Some(StopReason::Budget));
    assert_eq!(state.iteration, 3);
    // G⁰ answers wrongly (ES 0, TC 1): R = 0.5. The rewrite makes the answer right.
    let val = |id: usize| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(format!("candidates/{id:04}.val.json"))).unwrap())
            .unwrap()
    };
    assert!((val(0)["reward"].as_f64().unwrap() - 0.5).abs() < 1e-9, "{}", val(0));
    assert!((val(1)["reward"].as_f64().unwrap() - 1.0).abs() < 1e-9, "{}", val(1));
    assert_eq!(state.best, 1);
    assert_eq!(state.failed_expansions, 1, "the third plan never validates");
    // Each candidate's tool traces are checked against the process of the split's
    // reference calls: G⁰ calls `get-sum` as the records do.
    assert_eq!(val(0)["conformance"]["fitness"], 1.0, "{}", val(0));
    let precision = val(1)["conformance"]["precision"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&precision), "{}", val(1));
    // The feedback names the matched call and the wrong result.
    let opt0: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("candidates/0000.opt.json")).unwrap()).unwrap();
    let first = &opt0["feedback"]["records"][0];
    assert_eq!(first["matched_calls"], json!(["get-sum"]));
    assert_eq!(first["result"], "I am not sure.");
    assert_eq!(opt0["feedback"]["records"].as_array().unwrap().len(), 5);
    // The failed expansion was re-asked twice, with the problem shown.
    let plan3: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("candidates/0003.plan.json")).unwrap()).unwrap();
    assert_eq!(plan3["plan"], Value::Null);
    assert_eq!(plan3["rejected"].as_array().unwrap().len(), 3);
    // Two of three expansions yielded a candidate, each with one edit and `done`.
    let expansions = &outcome.expansions;
    assert_eq!((expansions.expansions, expansions.candidates), (3, 2));
    assert_eq!(expansions.success_rate, Some(2.0 / 3.0));
    assert_eq!(expansions.optimizer_calls, 2 + 2 + 3);
    assert_eq!(expansions.edits["rewrite_prompt"].applied, 1);
    assert_eq!(expansions.edits["add_node"].applied, 1);
    // Progress told of every run of every evaluated candidate, counting up per split,
    // then of the split's end with its reward.
    let progress = progress.into_inner().unwrap();
    let finished: Vec<&str> = progress.iter().map(String::as_str).filter(|line| line.contains("finished")).collect();
    let expected = [
        "0 opt finished: 5 runs, reward 0.5",
        "0 val finished: 2 runs, reward 0.5",
        "1 opt finished: 5 runs, reward 1.0",
        "1 val finished: 2 runs, reward 1.0",
    ];
    assert_eq!(finished[..4], expected);
    assert_eq!(finished.len(), 6, "candidates 0, 1 and 2 on opt and val: {progress:#?}");
    let runs: Vec<&str> = progress.iter().take(8).map(String::as_str).collect();
    assert_eq!(
        runs,
        [
            "0 opt 1/5",
            "0 opt 2/5",
            "0 opt 3/5",
            "0 opt 4/5",
            "0 opt 5/5",
            "0 opt finished: 5 runs, reward 0.5",
            "0 val 1/2",
            "0 val 2/2"
        ]
    );
    // Traces: one JSONL file per evaluated candidate and split, one final line per record.
    for (id, split, n) in [(0, "opt", 5), (0, "val", 2), (1, "opt", 5), (2, "val", 2)] {
        let text = std::fs::read_to_string(dir.path().join(format!("traces/{id:04}.{split}.jsonl"))).unwrap();
        let finals = text.lines().filter(|line| line.contains("\"final\"")).count();
        assert_eq!(finals, n, "{id} {split}");
    }
    // The best workflow loads and validates against the real tools.
    let best: WorkflowGraph =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("best.workflow.json")).unwrap()).unwrap();
    let names: Vec<String> = setup.tools.definitions().into_iter().map(|def| def.name).collect();
    check(best.clone(), ToolCatalog::Known(&names)).expect("best workflow is valid");
    assert_eq!(
        best.node("synthesize").map(|node| node.kind.clone()),
        Some(flowmem_model::NodeKind::Llm {
            role: flowmem_model::LlmRole::Synthesize,
            instruction: Some("ANSWER-V2: state the sum.".to_owned()),
            model: None
        })
    );
    // The final test compared the best workflow, ReAct and G⁰ on the 3 test records.
    let test = outcome.test.as_ref().unwrap();
    let systems: Vec<&str> = test.systems.iter().map(|s| s.system.as_str()).collect();
    assert!(systems.contains(&"flowscout") && systems.contains(&"react") && systems.contains(&"g0"), "{systems:?}");
    let flowscout = test.systems.iter().find(|s| s.system == "flowscout").unwrap();
    assert_eq!(flowscout.n_runs, 3);
    assert_eq!(flowscout.mean_es, Some(1.0));
    assert!(dir.path().join("test/report.json").exists());
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("validation-curve") && html.contains("<table>") && html.contains("flowscout"));
    assert!(html.contains("expansion success rate 67%"), "the report gives the expansion success rate");
    assert!(html.contains("<th>fitness</th><th>precision</th>"), "the test table gives conformance");
    let fitness = flowscout.conformance.unwrap().fitness;
    assert!(html.contains(&format!("fitness {:.3}, precision", val(1)["conformance"]["fitness"].as_f64().unwrap())));
    assert!(html.contains(&format!("<td>{fitness:.3}</td>")), "the best's test fitness is in the table");
    assert!(dir.path().join("run.json").exists() && dir.path().join("state.json").exists());
    setup.tools.shutdown().await;
    drop(setup.server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_scout_resumes_with_its_saved_settings() {
    let setup = setup().await;
    let dir = tempfile::tempdir().unwrap();
    prepare_run(dir.path(), Some(settings())).unwrap();
    assert!(prepare_run(dir.path(), Some(settings())).is_err(), "a second new run in the same directory is refused");
    let settings = prepare_run(dir.path(), None).unwrap();
    let err = run_scout(&setup, dir.path(), &settings, Some(Checkpoint::Simulated(1)), None).await.unwrap_err();
    assert!(err.to_string().contains("interrupted"), "{err}");
    assert!(dir.path().join("candidates/0001.opt.json").exists());
    assert!(!dir.path().join("candidates/0001.val.json").exists());
    let resumed = prepare_run(dir.path(), None).unwrap();
    assert_eq!(resumed, settings);
    let outcome = run_scout(&setup, dir.path(), &resumed, None, None).await.unwrap();
    assert_eq!(outcome.state.iteration, 3);
    assert_eq!(outcome.state.best, 1);
    assert_eq!(outcome.state.history.len(), 3);
    setup.tools.shutdown().await;
}

#[test]
fn the_edit_budget_is_saved_with_the_run_and_older_runs_resume_with_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let mut small = settings();
    small.max_edits = 2;
    prepare_run(dir.path(), Some(small)).unwrap();
    assert_eq!(prepare_run(dir.path(), None).unwrap().max_edits, 2);
    // A run directory written before the setting existed.
    let older = tempfile::tempdir().unwrap();
    let mut saved = serde_json::to_value(settings()).unwrap();
    saved.as_object_mut().unwrap().remove("max_edits").expect("the setting is saved");
    std::fs::write(older.path().join("run.json"), saved.to_string()).unwrap();
    assert_eq!(prepare_run(older.path(), None).unwrap().max_edits, flowmem_optimize::DEFAULT_MAX_EDITS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_mcts_keeps_the_mined_workflow_and_no_miner_starts_from_the_chain() {
    let setup = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings();
    s.strategy = Strategy::NoSearch;
    s.miner = false;
    let s = prepare_run(dir.path(), Some(s)).unwrap();
    let outcome = run_scout(&setup, dir.path(), &s, None, None).await.unwrap();
    assert_eq!(outcome.state.stopped, Some(StopReason::NoSearch));
    assert_eq!(outcome.state.tree.len(), 1);
    let ids: Vec<&str> = outcome.best.nodes.iter().map(|node| node.id.as_str()).collect();
    assert_eq!(ids, ["plan", "act", "answer"]);
    setup.tools.shutdown().await;
}

#[test]
fn the_initial_workflow_binds_the_arguments_the_records_always_filled_the_same_way() {
    let g0 = flowmem_optimize::initial_workflow(&records(), true, 0.2);
    let bindings = g0
        .nodes
        .iter()
        .find_map(|node| match &node.kind {
            flowmem_model::NodeKind::Tool { hints, bindings, .. } if hints.iter().any(|hint| hint == "get-sum") => {
                Some(bindings.clone())
            }
            _ => None,
        })
        .expect("a get-sum node");
    for arg in ["a", "b"] {
        let binding = bindings.get(arg).unwrap_or_else(|| panic!("`{arg}` is bound: {bindings:?}"));
        assert!(!binding.sources.is_empty(), "{arg}: {binding:?}");
    }
    // Without the miner there is nothing to bind from.
    assert_eq!(flowmem_optimize::initial_workflow(&records(), false, 0.2), flowmem_optimize::chain_workflow());
}
