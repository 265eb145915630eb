//! The study protocol's bookkeeping over the scripted LLM server and the real
//! `server-everything` MCP server: same queries for every system, same budget for every
//! searching variant, CV per query over repeats, retention after both swaps, and a
//! resume after interruptions at two points that ends with the same results.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use flowmem_eval::{JUDGE_ES_PROMPT, ScoreConfig, SplitRatios, TcConfig};
use flowmem_exec::{Runtime, ToolBox, exec_prompts};
use flowmem_llm::{AccountedModel, Accounting, ChatModel, Prompts};
use flowmem_optimize::{
    Checkpoint, LlmProposer, PROPOSE_EDITS, PROPOSE_NEXT_EDIT, PlanDecoding, ScoutError, SearchError, StudyCheckpoint,
    StudyParts, StudyResults, StudySettings, StudyVariant, ToolSwap, prepare_study, study,
};
use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};
use flowmem_tools::{Registry, ToolsConfig};

use crate::scout::{everything_server, http_model, records, script_after};

const ALIAS: &str = "sum-of-two";
const OTHER_MODEL: &str = "scripted-other";

/// The everything server, as is or with `get-sum` renamed to [`ALIAS`].
async fn everything(aliased: bool) -> Arc<Registry> {
    let mut text = format!(
        "[tools]\ntimeout_secs = 30\n[[tools.mcp]]\nname = \"everything\"\ncommand = {:?}\nargs = [\"stdio\"]\n",
        everything_server().display().to_string(),
    );
    if aliased {
        text.push_str(&format!(
            "[[tools.alias]]\ntool = \"get-sum\"\nname = \"{ALIAS}\"\ndescription = \"Adds two numbers a and b.\"\n"
        ));
    }
    let cfg = ToolsConfig::from_toml_str(&text, &flowmem_testsupport::repo_root().join("flowmem.toml"))
        .expect("tools config");
    Arc::new(Registry::connect(&cfg).await.expect("server-everything starts"))
}

fn offers_tools(request: &Value) -> bool {
    request["tools"].as_array().is_some_and(|tools| !tools.is_empty())
}

fn after_tool(request: &Value) -> bool {
    request["messages"].as_array().and_then(|m| m.last()).is_some_and(|m| m["role"] == "tool")
}

/// The scout test's script, with three rules first:
/// - the second time ReAct answers the first test query, it answers wrongly (so that
///   query's ES varies over the stability repeats, and only that one);
/// - the aliased tool is called by its new name when offered;
/// - the other executor calls tools like the first but answers wrongly.
fn study_script(first_test_query: String) -> Script {
    let seen = Arc::new(AtomicUsize::new(0));
    let react_answer_on_first = Match::custom(move |request| {
        offers_tools(request)
            && after_tool(request)
            && request.to_string().contains(&first_test_query)
            && seen.fetch_add(1, Ordering::SeqCst) == 1
    });
    let other_answers =
        Match::custom(|request| request["model"] == OTHER_MODEL && !offers_tools(request) && !is_judge(request));
    let start = Script::new()
        .when(react_answer_on_first, Reply::text("I could not add them."))
        .when(other_answers, Reply::text("No idea."))
        .when(Match::offers_tool(ALIAS), Reply::tool_call(ALIAS, json!({"a": 1, "b": 2})));
    script_after(start)
}

fn is_judge(request: &Value) -> bool {
    request.to_string().contains("You are evaluating the result")
}

fn settings() -> StudySettings {
    let mut settings = StudySettings::paper_defaults("records.jsonl".into(), "scripted-model".to_owned());
    settings.iterations = 2;
    settings.patience = 5;
    settings.repeats = 2;
    settings.stability_queries = 2;
    // One run at a time: the script's ReAct rule counts answers in order.
    settings.concurrency = 1;
    settings.tool_swap = Some("aliased everything".to_owned());
    settings.model_swap = Some(OTHER_MODEL.to_owned());
    settings
}

/// The first test query of the study's split, as the study makes it.
fn first_test_query() -> String {
    let parts = flowmem_eval::split(records(), |r| r.id.as_str(), 0, SplitRatios::FLOWSCOUT).unwrap();
    parts.test[0].query.clone()
}

struct Rig {
    _server: ScriptedLlmServer,
    tools: Arc<Registry>,
    aliased: Arc<Registry>,
    model: Arc<dyn ChatModel>,
    other: Arc<dyn ChatModel>,
    prompts: Arc<Prompts>,
    accounting: Accounting,
}

async fn rig() -> Rig {
    let server = ScriptedLlmServer::start(study_script(first_test_query())).await;
    let accounting = Accounting::new();
    let model: Arc<dyn ChatModel> = Arc::new(AccountedModel::new(http_model(&server), accounting.clone()));
    let mut other_cfg = flowmem_llm::HttpModelConfig::new("other", server.base_url(), OTHER_MODEL);
    other_cfg.retry = flowmem_llm::RetryPolicy { max_retries: 0, ..flowmem_llm::RetryPolicy::standard() };
    let other: Arc<dyn ChatModel> = Arc::new(flowmem_llm::HttpModel::new(other_cfg).unwrap());
    let mut prompts = exec_prompts(None).expect("exec templates");
    prompts.register(JUDGE_ES_PROMPT).expect("judge template");
    prompts.register_all(&[PROPOSE_EDITS, PROPOSE_NEXT_EDIT]).expect("optimizer templates");
    Rig {
        _server: server,
        tools: everything(false).await,
        aliased: everything(true).await,
        model,
        other,
        prompts: Arc::new(prompts),
        accounting,
    }
}

fn runtime(rig: &Rig, executor: &Arc<dyn ChatModel>, tools: &Arc<Registry>) -> Runtime {
    Runtime {
        executor: Arc::clone(executor),
        models: Default::default(),
        tools: tools.clone(),
        prompts: Arc::clone(&rig.prompts),
        grounding: flowmem_exec::Grounding::default(),
    }
}

async fn run_study(
    rig: &Rig,
    dir: &Path,
    stop: &(dyn Fn(&StudyCheckpoint) -> bool + Send + Sync),
) -> Result<StudyResults, ScoutError> {
    let settings = prepare_study(dir, None).unwrap();
    let names: Vec<String> = rig.tools.definitions().into_iter().map(|def| def.name).collect();
    let proposer = LlmProposer::new(Arc::clone(&rig.model), Arc::clone(&rig.prompts), names, 6, PlanDecoding::PerEdit);
    let scoring = || ScoreConfig {
        tc: TcConfig::exact(),
        judge: Some((rig.model.as_ref(), rig.prompts.as_ref())),
        checker: None,
    };
    let tally = || rig.accounting.snapshot().total;
    let checkpoint = |point: StudyCheckpoint| !stop(&point);
    let parts = StudyParts {
        search_runtime: runtime(rig, &rig.model, &rig.tools),
        test_runtime: runtime(rig, &rig.model, &rig.tools),
        isolation: None,
        scoring: scoring(),
        proposer: &proposer,
        tool_swap: Some(ToolSwap {
            runtime: runtime(rig, &rig.model, &rig.aliased),
            scoring: scoring(),
            renames: BTreeMap::from([("get-sum".to_owned(), ALIAS.to_owned())]),
        }),
        model_swap: Some(runtime(rig, &rig.other, &rig.tools)),
        tally: &tally,
        checkpoint: &checkpoint,
        on_cell: &|_, _, _| {},
        on_progress: &|_, _| {},
    };
    study(dir, &settings, records(), &parts).await
}

fn read_runs(dir: &Path, cell: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join(cell).join("runs.jsonl")).unwrap();
    text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

fn record_ids(runs: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = runs.iter().map(|run| run["record_id"].as_str().unwrap().to_owned()).collect();
    ids.sort();
    ids.dedup();
    ids
}

/// `study.json` without what depends on the clock or on what a resume re-asked: wall
/// times, latencies and LLM tallies.
fn without_timing(mut value: Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.retain(|key, _| !matches!(key.as_str(), "wall_secs" | "latency_ms_per_query" | "llm"));
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut value);
    value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_study_runs_every_system_on_the_same_queries_and_reports_the_papers_figures() {
    let rig = rig().await;
    let dir = tempfile::tempdir().unwrap();
    prepare_study(dir.path(), Some(settings())).unwrap();
    assert!(prepare_study(dir.path(), Some(settings())).is_err(), "a second study in the same directory is refused");
    let results = run_study(&rig, dir.path(), &|_| false).await.unwrap();
    let dir = dir.path();

    // Same test queries for every system and swap; the stability queries are the first two.
    assert_eq!(results.split, (5, 2, 3));
    let mut test_ids = results.test_queries.clone();
    test_ids.sort();
    for cell in ["test/react", "test/mined", "test/flowscout", "test/nominer", "test/beam", "swap/tools", "swap/model"]
    {
        assert_eq!(record_ids(&read_runs(dir, cell)), test_ids, "{cell}");
    }
    let mut stability_ids = results.test_queries[..2].to_vec();
    stability_ids.sort();
    for system in ["react", "mined", "flowscout"] {
        let runs = read_runs(dir, &format!("stability/{system}"));
        assert_eq!(record_ids(&runs), stability_ids, "{system}");
        assert_eq!(runs.len(), 4, "{system}: 2 queries × 2 repeats");
    }

    // The same candidate budget for every searching variant; NoMCTS searches nothing.
    for search in &results.searches {
        let state: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("scout/{}/state.json", search.variant.name()))).unwrap(),
        )
        .unwrap();
        let expected = if search.variant == StudyVariant::NoMcts { 0 } else { 2 };
        assert_eq!(search.budget, expected, "{:?}", search.variant);
        if search.variant != StudyVariant::NoMcts {
            assert_eq!(state["config"]["iterations"], 2, "{:?}", search.variant);
            // A search may end early (a beam with nothing left to expand), never late.
            assert!(search.iterations <= 2, "{search:?}");
        }
        assert!(search.candidates <= 2, "{search:?}");
        assert!(search.llm.calls > 0, "{search:?}");
        assert!(!dir.join(format!("scout/{}/test", search.variant.name())).exists(), "no scout final test");
    }
    // The validation curve starts at G⁰ and has one point per iteration.
    assert_eq!(results.curve.len(), 3);
    assert_eq!(results.curve[0].iteration, 0);

    // CV of ES per query over the repeats: ReAct's answer to the first query was wrong
    // once of twice (CV 1), its other query and every workflow run were steady (CV 0).
    let react = &results.stability[0].summary;
    assert_eq!(react.system, "react");
    let cv: BTreeMap<&str, f64> = react.cv_es.iter().map(|c| (c.record_id.as_str(), c.cv)).collect();
    let runs = read_runs(dir, "stability/react");
    for (id, cv) in &cv {
        let es: Vec<f64> = runs.iter().filter(|r| r["record_id"] == *id).map(|r| r["es"].as_f64().unwrap()).collect();
        assert_eq!(es.len(), 2, "{id}");
        let mean = es.iter().sum::<f64>() / 2.0;
        let sd = (es.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
        let expected = if mean == 0.0 { 0.0 } else { sd / mean };
        assert!((cv - expected).abs() < 1e-9, "{id}: {cv} vs {expected} from {es:?}");
    }
    assert_eq!(cv.get(results.test_queries[0].as_str()), Some(&1.0), "{cv:?}");
    assert_eq!(cv.get(results.test_queries[1].as_str()), Some(&0.0), "{cv:?}");
    let flowscout_stability = &results.stability[2].summary;
    assert_eq!(flowscout_stability.mean_cv_es, Some(0.0));
    let vs_react = results.stability_differences.iter().find(|d| d.baseline == "react").unwrap();
    assert_eq!(vs_react.cv_reduction_pct, Some(100.0));

    // Retention: the renamed tool is found and scored against renamed references; the
    // other executor calls the tool right and answers wrongly.
    let tools = results.tool_swap.as_ref().unwrap();
    assert!(read_runs(dir, "swap/tools").iter().all(|run| run["tools"] == json!([ALIAS])), "called by its new name");
    assert_eq!(tools.swapped.summary.mean_tc, 1.0);
    assert_eq!(tools.retained_tc, Some(tools.swapped.summary.mean_tc / tools.original.summary.mean_tc));
    let model = results.model_swap.as_ref().unwrap();
    assert_eq!(model.swapped.summary.mean_tc, tools.original.summary.mean_tc);
    assert_eq!(model.swapped.summary.mean_es, Some(0.0));
    assert_eq!(model.retained_tc, Some(1.0));
    assert_eq!(model.retained_es, Some(0.0));

    // The reports: JSON that reads back, Markdown tables, HTML whose numbers link to runs.
    let json: StudyResults = serde_json::from_str(&std::fs::read_to_string(dir.join("study.json")).unwrap()).unwrap();
    assert_eq!(json, results);
    let md = std::fs::read_to_string(dir.join("study.md")).unwrap();
    for heading in ["## RQ1: effectiveness", "## RQ1: stability", "## RQ2", "## RQ3", "## RQ4"] {
        assert!(md.contains(heading), "{heading}");
    }
    // The page escapes `/` in attributes as `&#x2f;`, which a browser reads as `/`.
    let html = std::fs::read_to_string(dir.join("study.html")).unwrap().replace("&#x2f;", "/");
    assert!(html.contains(r#"<a href="test/react/runs.jsonl">"#), "numbers link to their runs");
    assert!(html.contains(r#"<a href="swap/model/runs.jsonl">"#));
    assert!(html.contains("cv-boxplot") && html.contains("validation-curve"));
    rig.tools.shutdown().await;
    rig.aliased.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_study_interrupted_at_two_points_resumes_to_the_same_results() {
    let straight = {
        let rig = rig().await;
        let dir = tempfile::tempdir().unwrap();
        prepare_study(dir.path(), Some(settings())).unwrap();
        let results = run_study(&rig, dir.path(), &|_| false).await.unwrap();
        rig.tools.shutdown().await;
        rig.aliased.shutdown().await;
        results
    };

    let rig = rig().await;
    let dir = tempfile::tempdir().unwrap();
    prepare_study(dir.path(), Some(settings())).unwrap();
    let interrupted = |err: ScoutError| matches!(err, ScoutError::Search(SearchError::Interrupted));
    // 1. In the middle of the FlowScout search, after its first iteration.
    let first =
        |point: &StudyCheckpoint| *point == StudyCheckpoint::Scout(StudyVariant::FlowScout, Checkpoint::Committed(1));
    assert!(interrupted(run_study(&rig, dir.path(), &first).await.unwrap_err()));
    assert!(!dir.path().join("scout/flowscout/cell.json").exists());
    // 2. Between two evaluation cells.
    let second = |point: &StudyCheckpoint| *point == StudyCheckpoint::CellDone("test/flowscout".to_owned());
    assert!(interrupted(run_study(&rig, dir.path(), &second).await.unwrap_err()));
    assert!(dir.path().join("test/flowscout/cell.json").exists());
    assert!(!dir.path().join("test/nominer/cell.json").exists());
    let resumed = run_study(&rig, dir.path(), &|_| false).await.unwrap();
    rig.tools.shutdown().await;
    rig.aliased.shutdown().await;

    let a = without_timing(serde_json::to_value(&straight).unwrap());
    let b = without_timing(serde_json::to_value(&resumed).unwrap());
    assert_eq!(a, b);
}
