//! `flowmem eval`: run a workflow, the ReAct baseline or both on records with repeats,
//! score every run with `flowmem-eval`, and write and print the comparison report.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use flowmem_eval::{
    Alpha, EvalConfig, EvalJournal, EvalReport, JUDGE_ES_PROMPT, Progress, ReactSystem, ScoreConfig, System, TcConfig,
    WorkflowSystem, evaluate_resumed, render_markdown, write_report,
};
use flowmem_exec::{
    AgentConfig, ExecObserver, JsonlTraceWriter, TaskOracle, ToolCatalog, check, load_graph, visible_tools,
};
use flowmem_llm::{Accounting, CacheMode, Purpose};

use crate::args::EvalArgs;
use crate::commands::ExitStatus;
use crate::commands::common::{block_on, progress_bar, refuse_outputs_that_are_inputs};
use crate::commands::score::parse_ignore_args;
use crate::printer::Printer;
use crate::session::{CacheUse, PromptSettings, Session, SessionSettings, ToolsUse};
use crate::settings::{Config, ModelRoles};

/// Runs `flowmem eval`.
pub fn run(args: &EvalArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    block_on(run_async(args, printer))
}

async fn run_async(args: &EvalArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    // Everything that can be checked without starting a server or a model comes first.
    let alpha = Alpha::new(args.alpha).context("--alpha")?;
    let tc = TcConfig { ignore_args: parse_ignore_args(&args.ignore_args)? };
    let mut inputs: Vec<&Path> = vec![&args.records];
    inputs.extend(args.workflow.as_deref());
    refuse_outputs_that_are_inputs(&flowmem_eval::ReportFiles::in_dir(&args.out).all(), &inputs)?;
    let mut records = flowmem_model::read_records(&args.records)
        .with_context(|| format!("reading the records `{}`", args.records.display()))?;
    if let Some(limit) = args.limit {
        records.truncate(limit);
    }
    if records.is_empty() {
        printer.warn(&format!("no records to evaluate in `{}`", args.records.display()));
        return Ok(ExitStatus::Failure);
    }
    let graph = match &args.workflow {
        Some(path) => {
            let graph = load_graph(path)?;
            Some((workflow_name(path, &graph), graph))
        }
        None => None,
    };
    // Whatever an interrupted run of the same evaluation finished is not run again.
    let (journal, finished) = EvalJournal::open(&args.out, &journal_settings(args, &records, graph.as_ref())?)?;
    let n_resumed = finished.len();
    let settings = SessionSettings {
        config: Config::load(&args.config)?,
        models: ModelRoles::new(&args.model).with_judge(&args.judge),
        tools: ToolsUse::Required,
        prompts: Some(PromptSettings { dir: args.prompts.prompts.clone(), extra: vec![JUDGE_ES_PROMPT] }),
        // Judge calls are greedy, so the cache replays them: re-scoring is free.
        cache: if args.no_judge { CacheUse::Off } else { CacheUse::Configured(Some(CacheMode::ReadWrite)) },
        state: Some((args.state.clone(), "flowmem-eval/run".to_owned())),
    };
    let mut session = Session::open(settings).await?;
    session.set_grounding(args.grounding.grounding());
    let isolation = session.isolation().cloned();

    let mut trace_files = TraceFiles::default();
    let mut workflow_system = None;
    if let Some((name, graph)) = graph {
        let visible = visible_tools(session.registry().as_ref(), isolation.as_ref());
        let workflow = args.workflow.as_deref().unwrap_or(Path::new("workflow"));
        let validated = check(graph, ToolCatalog::Known(&visible))
            .with_context(|| format!("`{}` cannot run on the configured tools", workflow.display()))?;
        // Executor calls are not cached: a repeat must be a real run, or its CV is 0.
        let executor = session.model(Purpose::Executor).await?;
        let system = WorkflowSystem::new(&name, session.runtime(executor), validated, isolation.clone());
        workflow_system = Some(match trace_files.open(args, &name)? {
            Some(writer) => system.with_observer(writer),
            None => system,
        });
    }
    let mut baseline_system = None;
    if args.baseline {
        let agent = session.model(Purpose::Agent).await?;
        let cfg = AgentConfig { max_steps: args.max_steps, instruction: None, guard: None };
        let system = ReactSystem::new("react", session.runtime(agent), cfg, isolation.clone());
        baseline_system = Some(match trace_files.open(args, "react")? {
            Some(writer) => system.with_observer(writer),
            None => system,
        });
    }
    let judge = if args.no_judge { None } else { Some(session.cached_model(Purpose::Judge).await?) };
    let checker = session.task_checker()?;

    let mut systems: Vec<&dyn System> = Vec::new();
    if let Some(system) = &workflow_system {
        systems.push(system);
    }
    if let Some(system) = &baseline_system {
        systems.push(system);
    }
    let cfg = EvalConfig {
        repeat: args.repeat.max(1),
        scoring: ScoreConfig {
            tc,
            judge: judge.as_deref().map(|model| (model, session.prompts().as_ref())),
            checker: checker.as_ref().map(|checker| checker as &dyn TaskOracle),
        },
    };
    let total = systems.len() * records.len() * cfg.repeat as usize;
    if n_resumed > 0 {
        printer.info(&format!(
            "resuming from `{}`: {n_resumed} of {total} runs finished before",
            journal.path().display()
        ));
    }
    let bar = progress_bar(printer, total as u64, "{bar:30} {pos}/{len} runs, {elapsed} ({msg})");
    let journal_failed = std::sync::atomic::AtomicBool::new(false);
    let on_run = |done: Progress<'_>| {
        let run = done.measurement;
        if let Err(err) = journal.record(run) {
            // The evaluation goes on; only a resume after a kill would repeat this run.
            if !journal_failed.swap(true, std::sync::atomic::Ordering::Relaxed) {
                printer.warn(&format!("{:#}", anyhow::Error::new(err)));
            }
        }
        if let Some(bar) = &bar {
            bar.set_message(format!("{} on `{}`: TC {:.2}", run.system, run.record_id, run.tc));
            bar.set_position(done.done as u64);
        }
    };
    // Ctrl-C drops the runs in flight: every finished run is already in the journal.
    let report = tokio::select! {
        report = evaluate_resumed(&systems, &records, &cfg, args.concurrency, finished, &on_run) => Some(report),
        _ = tokio::signal::ctrl_c() => None,
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    drop(systems);
    drop((workflow_system, baseline_system));
    trace_files.finish(printer);
    let Some(report) = report else {
        session.close().await;
        printer.warn(&format!("interrupted; run the same command again to resume from `{}`", journal.path().display()));
        return Ok(ExitStatus::Failure);
    };
    let report = report.with_reward(alpha);

    let names: Vec<&str> = report.systems.iter().map(|s| s.system.as_str()).collect();
    let title = format!(
        "flowmem eval: {} on {} records of {} × {} repeats",
        names.join(" vs "),
        records.len(),
        file_name(&args.records),
        cfg.repeat
    );
    let files = write_report(&report, &title, &args.out)?;
    journal.finish()?;
    if printer.json {
        printer.json_result(&report)?;
    } else {
        printer.result(render_markdown(&report).trim_end())?;
    }
    summarize_on_stderr(&report, session.accounting(), printer);
    session.close().await;
    printer.info(&format!(
        "wrote {}, {}, {} and {}",
        files.json.display(),
        files.markdown.display(),
        files.html.display(),
        files.runs.display()
    ));
    Ok(ExitStatus::Success)
}

/// The trace files of `--traces`, one per system, appended to as runs finish.
#[derive(Default)]
struct TraceFiles {
    open: Vec<(std::path::PathBuf, Arc<TraceWriter>)>,
}

type TraceWriter = JsonlTraceWriter<std::fs::File>;

impl TraceFiles {
    /// The writer of `system`'s trace file, when `--traces` asks for one.
    fn open(&mut self, args: &EvalArgs, system: &str) -> anyhow::Result<Option<Arc<dyn ExecObserver>>> {
        if !args.traces {
            return Ok(None);
        }
        let safe: String =
            system.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
        let path = args.out.join("traces").join(format!("{safe}.jsonl"));
        std::fs::create_dir_all(args.out.join("traces"))
            .with_context(|| format!("cannot create `{}`", args.out.join("traces").display()))?;
        let file = flowmem_model::open_append(&path)?;
        let writer = Arc::new(JsonlTraceWriter::new(file));
        self.open.push((path, writer.clone()));
        Ok(Some(writer))
    }

    /// Flushes every file; a failed write is a warning (the report is still written).
    fn finish(self, printer: &Printer) {
        for (path, writer) in self.open {
            let res = match Arc::try_unwrap(writer) {
                Ok(writer) => writer.finish().map(drop),
                Err(_) => Ok(()),
            };
            if let Err(err) = res {
                printer.warn(&format!("writing the traces `{}`: {err}", path.display()));
            }
        }
    }
}

/// What makes two evaluations the same one, for resuming: the inputs by fingerprint and
/// every argument that changes what runs or how it is scored. The concurrency and the
/// reward weight are left out: they change neither.
fn journal_settings(
    args: &EvalArgs,
    records: &[flowmem_model::Record],
    graph: Option<&(String, flowmem_model::WorkflowGraph)>,
) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let records = EvalJournal::fingerprint(&records).context("fingerprinting the records")?;
    let workflow = graph
        .map(|(name, graph)| EvalJournal::fingerprint(&(name, graph)))
        .transpose()
        .context("fingerprinting the workflow")?;
    let grounding = clap::ValueEnum::to_possible_value(&args.grounding).map(|value| value.get_name().to_owned());
    let state = &args.state;
    let settings = serde_json::json!({
        "records": records,
        "workflow": workflow,
        "baseline": args.baseline,
        "repeat": args.repeat,
        "max_steps": args.max_steps,
        "grounding": grounding,
        "no_judge": args.no_judge,
        "ignore_args": args.ignore_args,
        "model": args.model.model,
        "judge_model": args.judge.judge_model,
        "prompts": args.prompts.prompts,
        "config": args.config.config,
        "state_key_arg": state.state_key_arg,
        "reset_tool": state.reset_tool,
        "hide_tool": state.hide_tool,
        "task_check": state.task_check,
        "state_dir": state.state_dir,
    });
    Ok(settings.as_object().cloned().unwrap_or_default())
}

/// The workflow's name in reports: its `name` field, else its file name without the
/// extension.
fn workflow_name(path: &Path, graph: &flowmem_model::WorkflowGraph) -> String {
    graph
        .name
        .clone()
        .filter(|name| !name.trim().is_empty())
        .or_else(|| path.file_stem().map(|stem| stem.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "workflow".to_owned())
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |name| name.to_string_lossy().into_owned())
}

/// Errors and LLM totals on stderr, so a run's failures are not hidden in the files.
fn summarize_on_stderr(report: &EvalReport, accounting: &Accounting, printer: &Printer) {
    let n_errors = report.runs.iter().filter(|run| run.error.is_some()).count();
    if n_errors > 0 {
        printer
            .warn(&format!("{n_errors} of {} runs ended with an error (see `error` in runs.jsonl)", report.runs.len()));
        if let Some(first) = report.runs.iter().find_map(|run| run.error.as_ref().map(|err| (run, err))) {
            printer.warn(&format!("first: {} on `{}`: {}", first.0.system, first.0.record_id, first.1));
        }
    }
    let totals = accounting.snapshot().total;
    printer.info(&format!("LLM calls in total, judge included: {}", totals.calls));
}
