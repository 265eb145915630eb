//! `flowmem study`: FlowScout's evaluation protocol (RQ1–RQ4) in one resumable command,
//! on `flowmem_optimize::study`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, bail};
use flowmem_eval::{Alpha, ScoreConfig, TcConfig};
use flowmem_exec::{TaskOracle, visible_tools};
use flowmem_llm::{Purpose, Totals};
use flowmem_optimize::{
    LlmProposer, ScoutError, SearchError, StudyCheckpoint, StudyParts, StudySettings, ToolSwap, estimate_study,
    prepare_study, study,
};

use crate::args::StudyArgs;
use crate::commands::ExitStatus;
use crate::commands::common::{block_on, calls_lacking_results, interrupts, progress_bar, replay_for_results};
use crate::commands::scout::{plan_decoding, search_session};
use crate::printer::Printer;
use crate::session::{CacheUse, Session, SessionSettings, ToolsUse, model_label};
use crate::settings::{Config, ModelRoles};

/// Runs `flowmem study`.
pub fn run(args: &StudyArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    block_on(run_async(args, printer))
}

fn settings_from_args(args: &StudyArgs, executor: String) -> anyhow::Result<StudySettings> {
    let Some(records) = &args.records else {
        bail!("--records is required for a new study (or pass --resume DIR)");
    };
    let search = &args.search;
    Alpha::new(search.alpha).context("--alpha")?;
    let mut settings = StudySettings::paper_defaults(records.clone(), executor);
    settings.seed = search.seed;
    settings.iterations = search.iterations;
    settings.patience = search.patience;
    settings.beam_width = args.beam_width;
    settings.repeats = args.repeats;
    settings.stability_queries = args.stability_queries;
    settings.alpha = search.alpha;
    settings.concurrency = search.concurrency;
    settings.agent_max_steps = search.max_steps;
    settings.plan_decoding = plan_decoding(search.plan_decoding);
    settings.max_edits = search.max_edits;
    settings.tool_swap = args.swap_tools.as_ref().map(|path| path.display().to_string());
    settings.model_swap.clone_from(&args.swap_model);
    Ok(settings)
}

async fn run_async(args: &StudyArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let config = Config::load(&args.search.config)?;
    let (dir, saved) = match &args.resume {
        Some(dir) => (dir.clone(), Some(prepare_study(dir, None)?)),
        None => {
            let Some(dir) = &args.out else { bail!("--out DIR is required for a new study") };
            (dir.clone(), None)
        }
    };
    let records_path = saved.as_ref().map(|s| s.records.clone()).or_else(|| args.records.clone());
    let Some(records_path) = records_path else { bail!("--records is required for a new study") };
    // Records are read before the study directory is created, so a typo leaves nothing.
    let records = flowmem_model::read_records(&records_path)
        .with_context(|| format!("reading the records `{}`", records_path.display()))?;
    let swap_tools: Option<PathBuf> = match &saved {
        Some(settings) => settings.tool_swap.as_ref().map(PathBuf::from),
        None => args.swap_tools.clone(),
    };
    let swap_config = swap_tools.as_deref().map(|path| config.appended(path)).transpose()?;
    let settings = match saved {
        Some(settings) => settings,
        None => {
            // Resolving a name starts nothing; the session below does.
            let requested = ModelRoles::new(&args.search.model);
            let choice =
                config.llm().resolve(Purpose::Executor, requested.requested(Purpose::Executor), &flowmem_llm::std_env);
            settings_from_args(args, model_label(&choice.await?))?
        }
    };
    let estimate = estimate_study(&dir, &settings, &records)?;
    print_estimate(&estimate, args.dry_run, printer)?;
    if args.dry_run {
        return Ok(ExitStatus::Success);
    }
    if args.resume.is_none() {
        prepare_study(&dir, Some(settings.clone()))?;
    }

    // The searches' and the judge's calls are greedy: one cache for the whole study
    // replays them on a resume. Test runs are never cached (their repeats must be real).
    let session_settings = search_session(&args.search, config, &dir, "flowmem-study");
    let session = Session::open(session_settings).await?;
    let swap_session = match swap_config {
        Some(config) => {
            let swap = SessionSettings {
                config,
                models: ModelRoles::new(&args.search.model),
                tools: ToolsUse::Required,
                prompts: None,
                cache: CacheUse::Off,
                state: Some((args.search.state.clone(), "flowmem-study".to_owned())),
            };
            Some(Session::open(swap).await.context("starting the equivalent tool set of --swap-tools")?)
        }
        None => None,
    };
    let search_executor = session.cached_model(Purpose::Executor).await?;
    let test_executor = session.model(Purpose::Executor).await?;
    let optimizer = session.cached_model(Purpose::Optimizer).await?;
    let judge = session.cached_model(Purpose::Judge).await?;
    let prompts = session.prompts().clone();
    let tools = visible_tools(session.registry().as_ref(), session.isolation());
    let proposer = LlmProposer::new(optimizer, prompts.clone(), tools, settings.max_edits, settings.plan_decoding);
    let model_swap = match &settings.model_swap {
        Some(name) => Some(session.runtime(session.model_named(Purpose::Executor, name).await?)),
        None => None,
    };
    // Calls logged without results (τ-bench, τ²) are replayed in isolated tool state
    // first, as `flowmem scout` does, so G⁰'s arguments can be bound to earlier results.
    let records = match session.isolation() {
        Some(isolation) if calls_lacking_results(&records) > 0 => {
            let isolation = Some(isolation.clone());
            replay_for_results(session.registry(), &records, isolation, settings.concurrency, printer).await.1
        }
        _ => records,
    };
    let checker = session.task_checker()?;
    let swap_checker = match &swap_session {
        Some(swap) => swap.task_checker()?,
        None => None,
    };
    let scoring = |checker| scoring(judge.as_ref(), prompts.as_ref(), checker);
    let tool_swap = match &swap_session {
        Some(swap) => {
            let renames: BTreeMap<String, String> =
                swap_tools.as_deref().map(|path| aliases(path, &session)).transpose()?.unwrap_or_default();
            let mut runtime = session.runtime(test_executor.clone());
            runtime.tools = swap.registry().clone();
            Some(ToolSwap { runtime, scoring: scoring(swap_checker.as_ref()), renames })
        }
        None => None,
    };
    let accounting = session.accounting().clone();
    let tally = move || -> Totals { accounting.snapshot().total };
    let stop = AtomicBool::new(false);
    let checkpoint = |_: StudyCheckpoint| !stop.load(Ordering::SeqCst);
    let bar = progress_bar(printer, estimate.cells.len() as u64, "{bar:30} cell {pos}/{len} {msg} ({elapsed})");
    let current = std::sync::Mutex::new(String::new());
    let on_cell = |name: &str, idx: usize, _total: usize| {
        name.clone_into(&mut current.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        if let Some(bar) = &bar {
            bar.set_position(idx as u64 - 1);
            bar.set_message(name.to_owned());
        }
        tracing::info!(cell = name, "starting a cell");
    };
    let on_progress = |done: usize, total: usize| {
        let cell = current.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some(bar) = &bar {
            bar.set_message(format!("{cell}: {done}/{total}"));
        }
        tracing::debug!(cell, done, total, "cell progress");
    };
    let parts = StudyParts {
        search_runtime: session.runtime(search_executor),
        test_runtime: session.runtime(test_executor),
        isolation: session.isolation().cloned(),
        scoring: scoring(checker.as_ref()),
        proposer: &proposer,
        tool_swap,
        model_swap,
        tally: &tally,
        checkpoint: &checkpoint,
        on_cell: &on_cell,
        on_progress: &on_progress,
    };
    let outcome = tokio::select! {
        outcome = study(&dir, &settings, records, &parts) => Some(outcome),
        () = interrupts(&stop, printer, "stopping at the next checkpoint") => None,
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    drop(parts);
    if let Some(swap) = swap_session {
        swap.close().await;
    }
    session.close().await;
    let results = match outcome {
        None | Some(Err(ScoutError::Search(SearchError::Interrupted))) => {
            printer.warn(&format!("interrupted; resume with `flowmem study --resume {}`", dir.display()));
            return Ok(ExitStatus::Failure);
        }
        Some(Err(err)) => {
            return Err(anyhow::Error::new(err)
                .context(format!("the study in `{}` stopped (resume with --resume)", dir.display())));
        }
        Some(Ok(results)) => results,
    };
    if printer.json {
        printer.json_result(&results)?;
    } else {
        printer.result(flowmem_optimize::render_study_markdown(&results).trim_end())?;
    }
    printer.info(&format!(
        "wrote {}, {} and {}",
        dir.join("study.md").display(),
        dir.join("study.json").display(),
        dir.join("study.html").display()
    ));
    Ok(ExitStatus::Success)
}

/// TC matched exactly, ES by `judge`, and the task check when there is one.
fn scoring<'a>(
    judge: &'a dyn flowmem_llm::ChatModel,
    prompts: &'a flowmem_llm::Prompts,
    checker: Option<&'a flowmem_eval::TaskChecker>,
) -> ScoreConfig<'a> {
    ScoreConfig { tc: TcConfig::exact(), judge: Some((judge, prompts)), checker: checker.map(|c| c as &dyn TaskOracle) }
}

/// The renames of the alias set `path`: each aliased tool's old name and its new one.
fn aliases(path: &std::path::Path, session: &Session) -> anyhow::Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    let config = flowmem_tools::ToolsConfig::from_toml_str(&text, path)
        .with_context(|| format!("`{}` is not a valid alias set", path.display()))?;
    let known = visible_tools(session.registry().as_ref(), session.isolation());
    let mut renames = BTreeMap::new();
    for alias in config.aliases {
        if known.contains(&alias.tool) {
            renames.insert(alias.tool, alias.name);
        }
    }
    Ok(renames)
}

/// The estimate on stderr; with `--dry-run` it is the result (stdout, JSON with `--json`).
fn print_estimate(estimate: &flowmem_optimize::StudyEstimate, dry_run: bool, printer: &Printer) -> anyhow::Result<()> {
    if dry_run && printer.json {
        return printer.json_result(estimate);
    }
    let (opt, val, test) = estimate.split;
    let mut lines = vec![format!("split: {opt} opt, {val} val, {test} test records; LLM calls per cell (estimate):")];
    for (cell, done, calls) in &estimate.cells {
        lines.push(if *done { format!("  {cell}: done") } else { format!("  {cell}: ~{calls}") });
    }
    lines.push(format!("about {} LLM calls still to make", estimate.remaining_calls));
    if dry_run {
        printer.result(&lines.join("\n"))?;
    } else {
        printer.info(&lines.join("\n"));
    }
    Ok(())
}
