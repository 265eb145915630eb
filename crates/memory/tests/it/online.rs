//! Agents with memory, the LM evaluator and online AWM, over a scripted LLM server and
//! the real `server-everything` MCP server.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use flowmem_exec::{AgentConfig, NoObserver, RunInput, Runtime, exec_prompts};
use flowmem_memory::induce::RuleConfig;
use flowmem_memory::{
    Arm, MemoryAgentConfig, MemoryMode, MemoryStore, OnlineConfig, OnlineError, ProgressLine, StoreConfig,
    approx_tokens, composition_tree, induce, learn_online, prompt_memory, read_progress, read_stream, render,
    run_with_memory, workflow_tool_name,
};
use flowmem_model::{Record, Scope, Workflow};
use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer, require_path};
use flowmem_tools::{Registry, ToolsConfig};

use crate::{repo_root, scripted_model, workflow};

async fn everything() -> Arc<Registry> {
    let command = require_path(
        &repo_root().join(".deps/node/node_modules/.bin/mcp-server-everything"),
        "scripts/setup/20-mcp-servers.sh",
    );
    let text = format!(
        "[tools]\ntimeout_secs = 30\n[[tools.mcp]]\nname = \"everything\"\ncommand = {:?}\nargs = [\"stdio\"]\n",
        command.display().to_string()
    );
    let cfg = ToolsConfig::from_toml_str(&text, &repo_root().join("flowmem.toml")).expect("tools config");
    Arc::new(Registry::connect(&cfg).await.expect("the everything server starts"))
}

fn model(server: &ScriptedLlmServer) -> Arc<flowmem_llm::HttpModel> {
    Arc::new(scripted_model(server))
}

fn runtime(server: &ScriptedLlmServer, tools: Arc<Registry>) -> Runtime {
    Runtime {
        executor: model(server),
        models: Default::default(),
        tools,
        prompts: Arc::new(exec_prompts(None).expect("templates")),
        grounding: flowmem_exec::Grounding::default(),
    }
}

fn agent_cfg(mode: MemoryMode, budget_tokens: usize) -> MemoryAgentConfig {
    MemoryAgentConfig {
        agent: AgentConfig { max_steps: 4, instruction: None, guard: None },
        mode,
        top_k: 5,
        budget_tokens,
        scope: Scope { site: None, domain: Some("demo".to_owned()) },
        retriever: flowmem_memory::Retriever::bm25(),
    }
}

fn open(dir: &Path) -> MemoryStore {
    MemoryStore::open(&dir.join("memory.db"), StoreConfig::standard()).expect("memory opens")
}

/// A stored workflow echoing `{text}` and then adding `{a}` and `{b}`.
fn echo_then_sum(description: &str) -> Workflow {
    let mut workflow: Workflow = serde_json::from_value(json!({
        "description": description,
        "steps": [
            {"state": "start", "reasoning": "say it", "action": {"tool": "echo", "args": {"message": "{text}"}}},
            {"state": "said", "reasoning": "add", "action": {"tool": "get-sum", "args": {"a": "{a}", "b": "{b}"}}}
        ]
    }))
    .unwrap();
    workflow.scope = Scope { site: None, domain: Some("demo".to_owned()) };
    workflow.provenance.inducer = "rule".to_owned();
    workflow
}

fn record(id: &str, query: &str) -> Record {
    serde_json::from_value(json!({
        "id": id, "query": query, "reference_result": "", "required_outputs": [], "orchestration": [],
        "meta": {"domain": "demo"}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_memory_stays_within_the_token_budget() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    let first = echo_then_sum("Echo a greeting and add two numbers");
    let second =
        workflow("Echo a long farewell message then add numbers again", &["echo", "get-sum", "echo"], Some("demo"));
    store.add_all(&[first.clone(), second.clone()]).unwrap();
    let hits = store.search("echo greeting add numbers", &Scope::default(), 5).unwrap();
    let ranked: Vec<Workflow> = hits.into_iter().map(|hit| hit.workflow).collect();
    assert_eq!(ranked.len(), 2);

    let prompts = render::prompts().unwrap();
    let one = approx_tokens(&render::prompt_text(&prompts, &ranked[..1]).unwrap().text);
    let both = approx_tokens(&render::prompt_text(&prompts, &ranked).unwrap().text);
    assert!(one < both);
    let budget = (one + both) / 2;
    let memory = prompt_memory(&prompts, &ranked, budget).unwrap();
    assert_eq!(memory.included, [ranked[0].id.clone()]);
    assert_eq!(memory.dropped, [ranked[1].id.clone()]);
    assert!(memory.tokens <= budget && memory.tokens == one, "{} tokens for a budget of {budget}", memory.tokens);
    assert!(prompt_memory(&prompts, &ranked, both).unwrap().dropped.is_empty());
    assert!(prompt_memory(&prompts, &ranked, 3).unwrap().text.is_empty(), "nothing fits 3 tokens");

    // The agent's system prompt carries exactly the workflows that fit.
    let llm = ScriptedLlmServer::start(Script::new().otherwise(Reply::text("ok"))).await;
    let tools = everything().await;
    let runtime = runtime(&llm, tools.clone());
    let input = RunInput { id: "q".to_owned(), query: "echo greeting add numbers".to_owned() };
    let run = run_with_memory(&runtime, &agent_cfg(MemoryMode::Prompt, budget), &mut store, &input, &NoObserver)
        .await
        .unwrap();
    tools.shutdown().await;
    assert_eq!(run.offered, [ranked[0].id.clone()]);
    assert_eq!(run.retrieved.len(), 2);
    let system = llm.chat_requests()[0].messages()[0]["content"].as_str().unwrap().to_owned();
    assert!(system.contains(&ranked[0].description), "{system}");
    assert!(!system.contains(&ranked[1].description), "{system}");
    assert_eq!(store.get(&ranked[1].id).unwrap().stats.retrieved, 1, "retrieval is counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_action_expands_to_its_steps_and_reports_the_failed_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    let id = store.add(&echo_then_sum("Echo a greeting and add two numbers")).unwrap().id().to_owned();
    let tool = workflow_tool_name(&store.get(&id).unwrap());
    let script = Script::in_order([
        Reply::tool_call(&tool, json!({"text": "hi", "a": 2, "b": 3})),
        Reply::tool_call(&tool, json!({"text": "again", "a": 2, "b": "x"})),
        Reply::tool_call(&tool, json!({"text": "partial"})),
        Reply::text("done"),
    ]);
    let llm = ScriptedLlmServer::start(script).await;
    let tools = everything().await;
    let runtime = runtime(&llm, tools.clone());
    let input = RunInput { id: "q".to_owned(), query: "echo a greeting and add numbers".to_owned() };
    let run = run_with_memory(&runtime, &agent_cfg(MemoryMode::Actions, 1000), &mut store, &input, &NoObserver)
        .await
        .unwrap();
    tools.shutdown().await;

    // The workflow is offered as a tool whose parameters are its variables.
    let offered = llm.chat_requests()[0].body["tools"].clone();
    let definition = offered
        .as_array()
        .unwrap()
        .iter()
        .find(|definition| definition["function"]["name"] == tool.as_str())
        .expect("offered");
    assert_eq!(definition["function"]["parameters"]["required"], json!(["text", "a", "b"]));

    assert_eq!(run.trace.result.as_deref(), Some("done"));
    assert_eq!(run.trace.tool_calls.len(), 3, "the agent made three workflow calls");
    assert_eq!(run.uses.len(), 3);
    // 1: both steps ran.
    assert_eq!(run.uses[0].failed_step, None);
    assert_eq!(run.uses[0].steps[0].result, Some(json!("Echo: hi")));
    assert!(run.uses[0].steps[1].result.as_ref().unwrap().to_string().contains('5'));
    // 2: the second step's assumption failed in the environment (AWM Fig. 7).
    assert_eq!(run.uses[1].failed_step, Some(1));
    assert_eq!(run.uses[1].steps.len(), 2);
    assert!(run.uses[1].error.as_deref().unwrap().starts_with("step 1 (`get-sum`) failed"), "{:?}", run.uses[1].error);
    assert!(run.trace.tool_calls[1].failed());
    // 3: a missing variable stops before the step that needs it.
    assert_eq!(run.uses[2].failed_step, Some(1));
    assert_eq!(run.uses[2].steps.len(), 1);
    assert!(run.uses[2].error.as_deref().unwrap().contains("`a`"));
    // The real calls, expanded: 2 + 2 + 1.
    let real: Vec<&str> = run.calls.iter().map(|call| call.tool.as_str()).collect();
    assert_eq!(real, ["echo", "get-sum", "echo", "get-sum", "echo"]);
    assert_eq!(run.used_workflows(MemoryMode::Actions), std::slice::from_ref(&id));
}

/// The agent calls `echo` and `get-sum`, then answers; the evaluator says `judged`.
fn stream_script(judged: bool) -> Script {
    Script::new()
        .when(Match::wants_json(), Reply::json(json!({"success": judged, "reason": "scripted verdict"})))
        .when(Match::after_tool_result(), Reply::text("finished"))
        .otherwise(Reply::tool_calls([("echo", json!({"message": "hello"})), ("get-sum", json!({"a": 1, "b": 2}))]))
}

async fn learn(
    llm: &ScriptedLlmServer,
    store: &mut MemoryStore,
    records: &[Record],
    out: &Path,
    limit: Option<usize>,
) -> Result<flowmem_memory::OnlineReport, OnlineError> {
    let tools = everything().await;
    let runtime = runtime(llm, tools.clone());
    let evaluator = model(llm);
    let prompts = render::prompts().unwrap();
    let rule = RuleConfig::standard();
    let cfg = OnlineConfig {
        runtime: &runtime,
        evaluator: evaluator.as_ref(),
        prompts: &prompts,
        agent: agent_cfg(MemoryMode::Prompt, 2000),
        inducer: induce::Inducer::Rule(&rule),
        batch_size: 1,
        limit,
        baseline: true,
        oracle: None,
        observer: &NoObserver,
        isolation: None,
        on_progress: &|_| {},
    };
    let report = learn_online(store, records, out, &cfg).await;
    tools.shutdown().await;
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_judged_a_failure_teaches_nothing() {
    let records = [record("r1", "say hello and add one and two"), record("r2", "say hello again and add")];
    for (judged, expect_learned) in [(false, false), (true, true)] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        let llm = ScriptedLlmServer::start(stream_script(judged)).await;
        let report = learn(&llm, &mut store, &records, &dir.path().join("out"), None).await.unwrap();
        assert_eq!(report.n_new_runs, 4, "two tasks, two arms");
        assert_eq!(store.count(&Scope::default()).unwrap() > 0, expect_learned, "judged {judged}");
        assert_eq!(report.curve.memory.n_solved, if judged { 2 } else { 0 });
        assert_eq!(report.curve.n_inductions > 0, expect_learned);
        assert_eq!(report.curve.memory.cumulative_success_rate.len(), 2);
        assert!(report.curve.baseline.is_some());
        if judged {
            assert_eq!(report.curve.memory.steps_per_solved, Some(2.0));
            let learned = store.list(&Scope::default()).unwrap();
            let tools: Vec<&str> = learned[0].steps.iter().map(|step| step.action.tool.as_str()).collect();
            assert_eq!(tools, ["echo", "get-sum"]);
            assert_eq!(learned[0].scope.domain.as_deref(), Some("demo"));
            // The second task saw the first task's workflow in its prompt and used it.
            assert_eq!(learned[0].stats.used_success, 1);
        }
        let html = std::fs::read_to_string(dir.path().join("out/learning_curve.html")).unwrap();
        assert_eq!(html.matches("class=\"curve\"").count(), 2, "memory and baseline lines");
    }
}

/// The evaluator's first reply, and its reply to the re-ask, are not judgements; every
/// later one approves. The stream goes on: the first run is kept, unlearned, with the
/// reason, and the next run teaches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_that_is_not_a_judgement_skips_that_run_and_not_the_stream() {
    let records = [record("r1", "say hello and add one and two"), record("r2", "say hello again and add")];
    let script = Script::new()
        .when_seq(Match::wants_json(), [Reply::text("looks fine to me"), Reply::text("yes, it worked")])
        .when(Match::wants_json(), Reply::json(json!({"success": true, "reason": "scripted verdict"})))
        .when(Match::after_tool_result(), Reply::text("finished"))
        .otherwise(Reply::tool_calls([("echo", json!({"message": "hello"})), ("get-sum", json!({"a": 1, "b": 2}))]));
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    let llm = ScriptedLlmServer::start(script).await;
    let out = dir.path().join("out");
    let report = learn(&llm, &mut store, &records, &out, None).await.expect("the stream finishes");
    assert_eq!(report.n_new_runs, 4, "two tasks, two arms");
    assert_eq!(report.curve.n_unjudged, 1);
    assert_eq!(report.curve.memory.n_solved, 1, "the unjudged run counts as a failure");

    let lines = read_progress(&out.join("progress.jsonl")).unwrap();
    let runs: Vec<&flowmem_memory::TaskRun> = lines
        .iter()
        .filter_map(|line| match line {
            ProgressLine::Run(run) => Some(run.as_ref()),
            ProgressLine::Induced { .. } => None,
        })
        .collect();
    let first = runs.iter().find(|run| run.record_id == "r1" && run.arm == Arm::Memory).unwrap();
    let error = first.judge_error.as_deref().expect("the reason is kept");
    assert!(error.contains("looks fine") || error.contains("yes, it worked"), "{error}");
    assert!(!first.judgement.success && first.trajectory.is_none());
    assert!(
        runs.iter().filter(|run| run.record_id != "r1" || run.arm != Arm::Memory).all(|run| run.judge_error.is_none())
    );
    // Only the approved memory run was induced from.
    let induced: Vec<&Vec<String>> = lines
        .iter()
        .filter_map(|line| match line {
            ProgressLine::Induced { trajectory_ids, .. } => Some(trajectory_ids),
            ProgressLine::Run(_) => None,
        })
        .collect();
    assert_eq!(induced, [&vec!["r2".to_owned()]]);
    assert_eq!(store.count(&Scope::default()).unwrap(), 1);
    let html = std::fs::read_to_string(out.join("learning_curve.html")).unwrap();
    assert!(html.contains("1 run had no valid judgement from the evaluator"), "{html}");

    // An evaluator that cannot be reached still stops the stream, naming it, and the same
    // call resumes where it stopped.
    let gone = ScriptedLlmServer::start(
        Script::new()
            .when(Match::wants_json(), Reply::status(401, "bad key"))
            .when(Match::after_tool_result(), Reply::text("finished"))
            .otherwise(Reply::tool_calls([("echo", json!({"message": "hello"}))])),
    )
    .await;
    let more = [records[0].clone(), records[1].clone(), record("r3", "a third task")];
    let other = dir.path().join("other");
    let err = learn(&gone, &mut store, &more, &other, None).await.unwrap_err();
    assert!(matches!(err, OnlineError::Llm(_)), "{err}");
    assert!(read_progress(&other.join("progress.jsonl")).unwrap().is_empty(), "no run is saved unjudged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_online_run_resumes_without_repeating_tasks() {
    let records = [
        record("r1", "first task: say hello"),
        record("r2", "second task: say hello"),
        record("r3", "third task: say hello"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut store = open(dir.path());
    let first = ScriptedLlmServer::start(stream_script(true)).await;
    let report = learn(&first, &mut store, &records, &out, Some(1)).await.unwrap();
    assert_eq!((report.n_resumed_runs, report.n_new_runs), (0, 2));
    // Simulate a kill after task 1's runs were saved but before its induction was.
    let progress = out.join("progress.jsonl");
    let lines = read_progress(&progress).unwrap();
    assert!(matches!(lines.last(), Some(ProgressLine::Induced { .. })));
    let kept: Vec<String> = std::fs::read_to_string(&progress)
        .unwrap()
        .lines()
        .filter(|line| !line.contains("\"induced\""))
        .map(str::to_owned)
        .collect();
    std::fs::write(&progress, kept.join("\n") + "\n").unwrap();
    drop(store);
    let mut store = open(dir.path());

    // The stream was saved on the first run: the same tasks in another order are refused
    // before anything runs.
    assert_eq!(read_stream(&out).unwrap().unwrap().len(), 3, "the whole stream is saved, not just the tasks run");
    let reordered = [records[0].clone(), records[2].clone(), records[1].clone()];
    let second = ScriptedLlmServer::start(stream_script(true)).await;
    let err = learn(&second, &mut store, &reordered, &out, None).await.unwrap_err();
    assert!(matches!(err, OnlineError::Stream { line: 2, .. }), "{err}");
    assert!(second.chat_requests().is_empty());

    let report = learn(&second, &mut store, &records, &out, None).await.unwrap();
    assert_eq!((report.n_resumed_runs, report.n_new_runs), (2, 4));
    let asked: Vec<String> = second
        .chat_requests()
        .iter()
        .filter_map(|request| {
            request
                .messages()
                .iter()
                .find(|message| message["role"] == "user")
                .and_then(|message| message["content"].as_str())
                .map(str::to_owned)
        })
        .collect();
    assert!(asked.iter().all(|text| !text.starts_with("first task")), "task 1 was not run again");
    assert_eq!(report.curve.memory.cumulative_success_rate.len(), 3);
    // The restored pending run was induced again; the store merged it, not duplicated it.
    assert_eq!(store.count(&Scope::default()).unwrap(), 1);
    let runs = read_progress(&progress)
        .unwrap()
        .into_iter()
        .filter(|line| matches!(line, ProgressLine::Run(run) if run.arm == Arm::Memory))
        .count();
    assert_eq!(runs, 3);

    // Another stream is refused, naming the line: by the saved stream, and without it
    // (a directory from before streams were saved) by the progress file.
    let other = [record("x1", "unrelated")];
    let err = learn(&second, &mut store, &other, &out, None).await.unwrap_err();
    assert!(matches!(err, OnlineError::Stream { line: 1, .. }), "{err}");
    std::fs::remove_file(out.join("stream.jsonl")).unwrap();
    let err = learn(&second, &mut store, &other, &out, None).await.unwrap_err();
    assert!(matches!(err, OnlineError::Progress { line: 1, .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_workflow_containing_a_stored_one_is_composed_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    let part =
        store.add(&workflow("Echo something and add", &["echo", "get-sum"], Some("demo"))).unwrap().id().to_owned();
    let script = Script::new()
        .when(Match::wants_json(), Reply::json(json!({"success": true, "reason": "ok"})))
        .when(Match::after_tool_result(), Reply::text("finished"))
        .otherwise(Reply::tool_calls([
            ("echo", json!({"message": "hello"})),
            ("get-sum", json!({"a": 1, "b": 2})),
            ("echo", json!({"message": "3"})),
        ]));
    let llm = ScriptedLlmServer::start(script).await;
    let records = [record("r1", "say hello, add, and say the sum")];
    let report = learn(&llm, &mut store, &records, &dir.path().join("out"), None).await.unwrap();
    assert_eq!(report.curve.n_workflows_added, 1);

    let all = store.list(&Scope::default()).unwrap();
    assert_eq!(all.len(), 2);
    let whole = all.iter().find(|workflow| workflow.id != part).unwrap();
    assert_eq!(whole.steps.len(), 3);
    assert_eq!(whole.composed_of, std::slice::from_ref(&part), "a reference, not a copy");
    let tree: Vec<(usize, &str)> =
        composition_tree(&all, None).iter().map(|line| (line.depth, line.workflow.id.as_str())).collect();
    assert_eq!(tree, [(0, whole.id.as_str()), (1, part.as_str())]);
}

/// A workflow whose second step takes the first step's result (as rule induction records
/// it in the step's `sources`) asks its caller only for what the task gives; it fills
/// the rest from the result, and the store keeps the sources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_action_fills_a_result_sourced_argument_itself() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    let mut workflow: Workflow = serde_json::from_value(json!({
        "description": "Add two numbers and say the sum",
        "steps": [
            {"action": {"tool": "get-sum", "args": {"a": "{a}", "b": "{b}"},
                        "sources": {"a": {"from": "query", "shape": "number"}, "b": {"from": "query", "shape": "number"}}}},
            {"action": {"tool": "echo", "args": {"message": "{sum}"},
                        "sources": {"message": {"from": "result", "step": 0, "path": "$"}}}}
        ]
    }))
    .unwrap();
    workflow.scope = Scope { site: None, domain: Some("demo".to_owned()) };
    workflow.provenance.inducer = "rule".to_owned();
    let id = store.add(&workflow).unwrap().id().to_owned();
    let stored = store.get(&id).unwrap();
    assert_eq!(stored.steps[1].action.sources, workflow.steps[1].action.sources, "the store keeps the sources");
    let tool = workflow_tool_name(&stored);
    let script = Script::in_order([Reply::tool_call(&tool, json!({"a": 2, "b": 3})), Reply::text("done")]);
    let llm = ScriptedLlmServer::start(script).await;
    let tools = everything().await;
    let runtime = runtime(&llm, tools.clone());
    let input = RunInput { id: "q".to_owned(), query: "add 2 and 3 and say it".to_owned() };
    let run = run_with_memory(&runtime, &agent_cfg(MemoryMode::Actions, 1000), &mut store, &input, &NoObserver)
        .await
        .unwrap();
    tools.shutdown().await;

    let offered = llm.chat_requests()[0].body["tools"].clone();
    let definition =
        offered.as_array().unwrap().iter().find(|definition| definition["function"]["name"] == tool.as_str()).unwrap();
    assert_eq!(definition["function"]["parameters"]["required"], json!(["a", "b"]), "`sum` is not asked for");
    assert_eq!(run.uses.len(), 1);
    assert_eq!(run.uses[0].failed_step, None, "{:?}", run.uses[0].error);
    let sum = run.uses[0].steps[0].result.clone().unwrap();
    assert!(sum.to_string().contains('5'), "{sum}");
    let echoed = &run.uses[0].steps[1];
    assert_eq!(echoed.args["message"], sum, "the echo got the sum's result");
}
