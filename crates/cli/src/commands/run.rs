//! `flowmem run` (a workflow graph) and `flowmem agent` (the ReAct baseline): run
//! queries against the configured models and MCP tools, print the final answers, and
//! write traces.

use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use flowmem_exec::{
    AgentConfig, CallGuard, ExecEvent, ExecObserver, GuardPolicy, JsonlTraceWriter, Observers, OtelExporter, Plan,
    RunInput, Runtime, ToolCatalog, check, compile, load_graph, run, run_agent,
};
use flowmem_llm::Purpose;
use flowmem_memory::{MemoryAgentConfig, MemoryMode, MemoryStore, StoreConfig, run_with_memory};
use flowmem_model::{Deviation, Record, Trace};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::args::{AgentArgs, ExecArgs, MemoryUse, RunArgs};
use crate::commands::ExitStatus;
use crate::commands::common::{block_on, progress_bar, refuse_outputs_that_are_inputs};
use crate::printer::Printer;
use crate::session::{CacheUse, PromptSettings, Session, SessionSettings, ToolsUse, chosen_retriever};
use crate::settings::{Config, DEFAULT_RETRIEVAL, ModelRoles, asked_retrieval, scope_filter};

/// Runs `flowmem run`.
pub fn run_workflow(args: &RunArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    block_on(run_workflow_async(args, printer))
}

/// Runs `flowmem agent`.
pub fn run_baseline(args: &AgentArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    block_on(run_agent_async(args, printer))
}

/// What a run of one or many queries needs besides the plan or agent: the session, a
/// runtime on the model for the runner's purpose, and where events go.
struct Outputs {
    session: Session,
    runtime: Runtime,
    observers: Observers,
    trace_writer: Option<Arc<JsonlTraceWriter<std::io::BufWriter<flowmem_model::AtomicFile>>>>,
    otel: Option<Arc<OtelExporter>>,
}

/// The session settings of `flowmem run` and `flowmem agent`.
fn session_settings(args: &ExecArgs) -> anyhow::Result<SessionSettings> {
    Ok(SessionSettings {
        config: Config::load(&args.config)?,
        models: ModelRoles::new(&args.model),
        tools: ToolsUse::Optional,
        prompts: Some(PromptSettings { dir: args.prompts.prompts.clone(), extra: Vec::new() }),
        cache: CacheUse::Off,
        state: None,
    })
}

async fn open_session(args: &ExecArgs, purpose: Purpose, runner: &str) -> anyhow::Result<Outputs> {
    let mut session = Session::open(session_settings(args)?).await?;
    session.set_grounding(args.grounding.grounding());
    let executor = session.model(purpose).await?;
    let runtime = session.runtime(executor);
    let mut observers = Observers::default();
    let trace_writer = match &args.trace {
        Some(path) => {
            let file = flowmem_model::AtomicFile::create(path)
                .with_context(|| format!("cannot create the trace file `{}`", path.display()))?;
            let writer = Arc::new(JsonlTraceWriter::new(std::io::BufWriter::new(file)));
            observers.0.push(writer.clone());
            Some(writer)
        }
        None => None,
    };
    let otel = match &args.otlp {
        Some(endpoint) => {
            let exporter = Arc::new(OtelExporter::new(endpoint, &format!("flowmem {runner}"))?);
            observers.0.push(exporter.clone());
            Some(exporter)
        }
        None => None,
    };
    Ok(Outputs { session, runtime, observers, trace_writer, otel })
}

impl Outputs {
    async fn close(self) -> anyhow::Result<()> {
        self.session.close().await;
        drop(self.observers);
        if let Some(writer) = self.trace_writer {
            let writer = Arc::try_unwrap(writer).map_err(|_| anyhow::anyhow!("the trace writer is still in use"))?;
            let file = writer.finish().context("writing the trace file")?;
            let file = file.into_inner().map_err(|err| err.into_error()).context("writing the trace file")?;
            file.commit().context("writing the trace file")?;
        }
        if let Some(otel) = self.otel {
            tokio::task::spawn_blocking(move || otel.shutdown()).await.context("exporting spans")??;
        }
        Ok(())
    }
}

async fn run_workflow_async(args: &RunArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let mut inputs: Vec<&Path> = vec![&args.workflow];
    inputs.extend(args.records.as_deref());
    refuse_outputs_that_are_inputs(&args.exec.trace.as_deref().into_iter().collect::<Vec<_>>(), &inputs)?;
    let graph = load_graph(&args.workflow)?;
    let session = open_session(&args.exec, Purpose::Executor, graph.name.as_deref().unwrap_or("workflow")).await?;
    let names: Vec<String> = session.runtime.tools.definitions().into_iter().map(|tool| tool.name).collect();
    let validated = check(graph, ToolCatalog::Known(&names))
        .with_context(|| format!("`{}` cannot run", args.workflow.display()))?;
    let plan = compile(&validated, session.runtime.clone())?;
    let inputs = match (&args.query, &args.records) {
        (Some(query), _) => vec![RunInput { id: "query".to_owned(), query: query.clone() }],
        (None, Some(path)) => read_inputs(path, printer)?,
        (None, None) => anyhow::bail!("give --query or --records"),
    };
    let traces = run_all(Runner::Workflow(plan), inputs, args.concurrency, &session, printer).await;
    session.close().await?;
    report(&traces, printer)
}

async fn run_agent_async(args: &AgentArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let inputs: Vec<&Path> = args.memory.as_deref().into_iter().collect();
    refuse_outputs_that_are_inputs(&args.exec.trace.as_deref().into_iter().collect::<Vec<_>>(), &inputs)?;
    let session = open_session(&args.exec, Purpose::Agent, "react").await?;
    let guard = match &args.guard {
        Some(path) => {
            let names: Vec<String> = session.runtime.tools.definitions().into_iter().map(|tool| tool.name).collect();
            let policy = if args.guard_block { GuardPolicy::Block } else { GuardPolicy::Flag };
            Some(CallGuard::load(path, &names, policy).with_context(|| format!("`--guard {}`", path.display()))?)
        }
        None => None,
    };
    let cfg = AgentConfig { max_steps: args.max_steps, instruction: None, guard };
    if let Some(db) = &args.memory {
        let outcome = run_memory_agent(args, db, cfg, &session, printer).await;
        session.close().await?;
        return report(&[outcome?], printer);
    }
    let inputs = vec![RunInput { id: "query".to_owned(), query: args.query.clone() }];
    let traces = run_all(Runner::Agent(cfg), inputs, 1, &session, printer).await;
    session.close().await?;
    report(&traces, printer)
}

#[derive(Clone)]
enum Runner {
    Workflow(Plan),
    Agent(AgentConfig),
}

/// Runs every input, at most `concurrency` at a time, with a progress bar.
async fn run_all(
    runner: Runner,
    inputs: Vec<RunInput>,
    concurrency: usize,
    session: &Outputs,
    printer: &Printer,
) -> Vec<Trace> {
    let n_inputs = inputs.len();
    let bar = if n_inputs > 1 {
        progress_bar(printer, n_inputs as u64, "{bar:30} {pos}/{len} queries, {elapsed} ({msg})")
    } else {
        None
    };
    let mut observers = session.observers.clone();
    if let Some(bar) = &bar {
        observers.0.push(Arc::new(Progress { bar: bar.clone(), failed: Default::default() }));
    }
    let observers = Arc::new(observers);
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut tasks = JoinSet::new();
    for (input_idx, input) in inputs.into_iter().enumerate() {
        // Back-pressure before spawning; the semaphore is never closed.
        let Ok(permit) = permits.clone().acquire_owned().await else { break };
        let (runner, runtime, observers) = (runner.clone(), session.runtime.clone(), observers.clone());
        tasks.spawn(async move {
            let _permit = permit;
            let trace = match &runner {
                Runner::Workflow(plan) => run(plan, &input, observers.as_ref()).await,
                Runner::Agent(cfg) => run_agent(&runtime, cfg, &input, observers.as_ref()).await,
            };
            (input_idx, trace)
        });
    }
    let mut traces: Vec<(usize, Trace)> = Vec::with_capacity(n_inputs);
    while let Some(joined) = tasks.join_next().await {
        // A panicking run is reported by the join error; the others still count.
        if let Ok(done) = joined {
            traces.push(done);
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    traces.sort_by_key(|(input_idx, _)| *input_idx);
    traces.into_iter().map(|(_, trace)| trace).collect()
}

/// Counts finished runs on the progress bar.
struct Progress {
    bar: indicatif::ProgressBar,
    failed: std::sync::atomic::AtomicUsize,
}

impl ExecObserver for Progress {
    fn on_event(&self, event: &ExecEvent) {
        if let ExecEvent::RunFinished { trace, .. } = event {
            if trace.error.is_some() {
                self.failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let failed = self.failed.load(std::sync::atomic::Ordering::Relaxed);
            self.bar.set_message(format!("{failed} failed"));
            self.bar.inc(1);
        }
    }
}

/// Prints each final answer on stdout and a summary on stderr.
fn report(traces: &[Trace], printer: &Printer) -> anyhow::Result<ExitStatus> {
    let single = traces.len() == 1;
    for trace in traces {
        if printer.json {
            printer.result(&serde_json::to_string(&serde_json::json!({
                "id": trace.query_id,
                "result": trace.result,
                "error": trace.error,
                "tool_calls": trace.tool_calls.len(),
                "deviations": trace.deviations,
            }))?)?;
            continue;
        }
        match (&trace.result, single) {
            (Some(result), true) => printer.result(result)?,
            (Some(result), false) => printer.result(&format!("{}\t{}", trace.query_id, result.replace('\n', " ")))?,
            (None, _) => {}
        }
        if let Some(error) = &trace.error {
            printer.warn(&format!("query `{}`: {error}", trace.query_id));
        }
        for deviation in &trace.deviations {
            printer.warn(&format!("query `{}`: {}", trace.query_id, deviation_text(deviation)));
        }
    }
    let n_failed = traces.iter().filter(|trace| trace.error.is_some()).count();
    let n_calls: usize = traces.iter().map(|trace| trace.tool_calls.len()).sum();
    let n_failed_calls: usize = traces.iter().flat_map(|trace| &trace.tool_calls).filter(|call| call.failed()).count();
    printer.info(&format!(
        "{} queries: {} answered, {n_failed} failed; {n_calls} tool calls ({n_failed_calls} failed)",
        traces.len(),
        traces.len() - n_failed,
    ));
    Ok(if n_failed == 0 { ExitStatus::Success } else { ExitStatus::Failure })
}

/// One guard deviation in words: which call, whether it was blocked, what was expected.
fn deviation_text(deviation: &Deviation) -> String {
    let expected = if deviation.expected.is_empty() { "the end".to_owned() } else { deviation.expected.join(" | ") };
    match &deviation.tool {
        Some(tool) => {
            let what = if deviation.blocked { "blocked" } else { "deviates" };
            format!("call {} to `{tool}` {what} from the guard's skeleton (expected {expected})", deviation.index + 1)
        }
        None => format!("answered after {} calls where the guard's skeleton expected {expected}", deviation.index),
    }
}

/// Reads records (one JSON object a line); lines that are not records are reported and
/// skipped.
fn read_inputs(path: &Path, printer: &Printer) -> anyhow::Result<Vec<RunInput>> {
    let file = crate::commands::common::open_input(path)?;
    let mut inputs = Vec::new();
    let mut n_skipped = 0;
    for (line_idx, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read `{}`", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(&line) {
            Ok(record) => inputs.push(RunInput { id: record.id, query: record.query }),
            Err(err) => {
                n_skipped += 1;
                printer.warn(&format!("skipped `{}:{}`: not a record: {err}", path.display(), line_idx + 1));
            }
        }
    }
    if n_skipped > 0 {
        printer.warn(&format!("{n_skipped} lines of `{}` skipped", path.display()));
    }
    Ok(inputs)
}

/// Runs the agent once with workflows retrieved from the memory at `db`.
async fn run_memory_agent(
    args: &AgentArgs,
    db: &Path,
    agent: AgentConfig,
    session: &Outputs,
    printer: &Printer,
) -> anyhow::Result<Trace> {
    let mut store = MemoryStore::open(db, StoreConfig::standard())
        .with_context(|| format!("cannot open the memory `{}`", db.display()))?;
    let mode = match args.use_memory {
        MemoryUse::Prompt => MemoryMode::Prompt,
        MemoryUse::Actions => MemoryMode::Actions,
    };
    let config = Config::load(&args.exec.config)?;
    let retriever =
        chosen_retriever(&config, asked_retrieval(args.retrieval, config.memory()?.retrieval), DEFAULT_RETRIEVAL)?;
    let retrieval = retriever.mode();
    let cfg = MemoryAgentConfig {
        agent,
        mode,
        top_k: args.top_k,
        budget_tokens: args.budget_tokens,
        scope: scope_filter(&args.scope),
        retriever,
    };
    let input = RunInput { id: "query".to_owned(), query: args.query.clone() };
    let memory_run = run_with_memory(&session.runtime, &cfg, &mut store, &input, &session.observers)
        .await
        .with_context(|| format!("running with the memory `{}`", db.display()))?;
    // No evaluator judges this run, so a use counts by whether the run answered and the
    // workflow's steps all ran.
    for (id, outcome) in memory_run.unjudged_outcomes(mode) {
        store.record_use(&id, outcome).with_context(|| format!("recording the use of `{id}` in `{}`", db.display()))?;
    }
    printer.info(&format!(
        "workflows retrieved by {retrieval}: [{}]; used: [{}]",
        memory_run.retrieved.join(", "),
        memory_run.used_workflows(mode).join(", ")
    ));
    Ok(memory_run.trace)
}
