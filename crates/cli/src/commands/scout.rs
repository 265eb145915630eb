//! `flowmem scout`: FlowScout end to end — split the records, mine `G⁰`, search, test the
//! best workflow against the ReAct baseline, and write the run directory.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use flowmem_eval::{Alpha, JUDGE_ES_PROMPT, TcConfig, visible_tools};
use flowmem_exec::Runtime;
use flowmem_llm::{Accounting, CacheMode, Purpose, ResponseCache};
use flowmem_optimize::{
    Checkpoint, LlmProposer, PROPOSE_EDITS, Scoring, ScoutParts, ScoutSettings, Strategy, alpha_of, prepare_run, scout,
};
use flowmem_tools::Registry;

use crate::args::ScoutArgs;
use crate::commands::ExitStatus;
use crate::commands::common::{block_on, progress_bar, state_isolation, task_checker};
use crate::printer::Printer;
use crate::settings;

/// Runs `flowmem scout`.
pub fn run(args: &ScoutArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    block_on(run_async(args, printer))
}

fn settings_from_args(args: &ScoutArgs) -> anyhow::Result<ScoutSettings> {
    let Some(records) = &args.records else {
        bail!("--records is required for a new run (or pass --resume DIR)");
    };
    let mut settings = ScoutSettings::paper_defaults(records.clone());
    settings.seed = args.seed;
    settings.search.iterations = args.iterations;
    settings.search.patience = args.patience;
    settings.strategy = match (args.no_mcts, args.beam) {
        (true, _) => Strategy::NoSearch,
        (false, Some(width)) => Strategy::Beam { width },
        (false, None) => Strategy::Mcts,
    };
    settings.miner = !args.no_miner;
    settings.alpha = args.alpha;
    settings.concurrency = args.concurrency.max(1);
    settings.repeat = args.repeat.max(1);
    settings.agent_max_steps = args.max_steps;
    Alpha::new(settings.alpha).context("--alpha")?;
    Ok(settings)
}

async fn run_async(args: &ScoutArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let started = Instant::now();
    let (dir, settings) = match &args.resume {
        Some(dir) => (dir.clone(), prepare_run(dir, None)?),
        None => {
            let Some(dir) = &args.out else { bail!("--out DIR is required for a new run") };
            (dir.clone(), settings_from_args(args)?)
        }
    };
    // Records are read before a new run directory is created, so a typo leaves nothing.
    let records = flowmem_model::read_records(&settings.records)
        .with_context(|| format!("reading the records `{}`", settings.records.display()))?;
    let settings = if args.resume.is_some() { settings } else { prepare_run(&dir, Some(settings))? };

    let llm_settings = settings::llm_settings(args.config.as_deref())?;
    let accounting = Accounting::new();
    // The cache lives in the run directory, so a resume and every child candidate replay
    // the unchanged calls.
    let cache = Arc::new(ResponseCache::open(&dir.join("llm-cache.sqlite")).context("opening the run's LLM cache")?);
    let cached = || Some((cache.clone(), CacheMode::ReadWrite));
    let executor =
        settings::open_model(&llm_settings, Purpose::Executor, args.model.as_deref(), cached(), &accounting).await?;
    let optimizer_name = args.optimizer_model.as_deref().or(args.model.as_deref());
    let optimizer =
        settings::open_model(&llm_settings, Purpose::Optimizer, optimizer_name, cached(), &accounting).await?;
    let judge_name = args.judge_model.as_deref().or(args.model.as_deref());
    let judge = settings::open_model(&llm_settings, Purpose::Judge, judge_name, cached(), &accounting).await?;

    let tools_config = settings::tools_config(args.config.as_deref(), true)?;
    let registry = Arc::new(Registry::connect(&tools_config).await.context("starting the tool servers")?);
    let mut prompts = settings::executor_prompts(args.prompts.as_deref(), &llm_settings, args.model.as_deref()).await?;
    prompts.register(JUDGE_ES_PROMPT).context("registering the judge template")?;
    prompts.register(PROPOSE_EDITS).context("registering the optimizer template")?;
    let prompts = Arc::new(prompts);
    let isolation = state_isolation(&args.state, "flowmem-scout");
    let tool_names = visible_tools(registry.clone(), isolation.as_ref());
    let proposer = LlmProposer { model: optimizer, prompts: prompts.clone(), tools: tool_names, max_edits: 6 };

    let bar = progress_bar(printer, u64::from(settings.search.iterations), "{bar:30} iteration {pos}/{len} {msg}");
    let on_iteration = |iteration: u32, best: Option<f64>| {
        if let Some(bar) = &bar {
            bar.set_position(u64::from(iteration));
            bar.set_message(format!(
                "best val {} · {} LLM calls",
                best.map_or_else(|| "–".to_owned(), |b| format!("{b:.3}")),
                accounting.snapshot().total.calls
            ));
        }
    };
    let checker = task_checker(&args.state, &tools_config, &registry, isolation.as_ref())?;
    let checkpoint = |_: Checkpoint| true;
    let parts = ScoutParts {
        runtime: Runtime { executor, models: Default::default(), tools: registry.clone(), prompts: prompts.clone() },
        isolation,
        scoring: Scoring { alpha: alpha_of(&settings)?, tc: TcConfig::exact(), judge: Some((judge, prompts.clone())) },
        proposer: &proposer,
        checker: checker.as_ref().map(|c| c as &dyn flowmem_eval::TaskOracle),
        checkpoint: &checkpoint,
        on_iteration: &on_iteration,
        on_test: &|_| {},
    };
    let outcome = scout(&dir, &settings, records, &parts).await;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    registry.shutdown().await;
    let outcome = outcome?;

    let totals = accounting.snapshot().total;
    let stats = cache.stats();
    let summary = serde_json::json!({
        "run_dir": dir,
        "split": {"opt": outcome.split_sizes.0, "val": outcome.split_sizes.1, "test": outcome.split_sizes.2},
        "iterations": outcome.state.iteration,
        "stopped": outcome.state.stopped,
        "best_candidate": outcome.state.best,
        "best_val_score": outcome.state.best_val_score,
        "failed_expansions": outcome.state.failed_expansions,
        "llm_calls": totals.calls,
        "llm_calls_saved_by_cache": stats.hits,
        "wall_time_secs": started.elapsed().as_secs_f64(),
        "best_workflow": dir.join("best.workflow.json"),
        "report": dir.join("report.html"),
    });
    if printer.json {
        printer.json_result(&summary)?;
    } else {
        printer.result(&format!(
            "{} iterations, best candidate {} (validation {:.3}), {} failed expansions\n\
             LLM calls: {} ({} answered by the cache) · wall time {:.1}s\n\
             best workflow: {}\nreport: {}",
            outcome.state.iteration,
            outcome.state.best,
            outcome.state.best_val_score,
            outcome.state.failed_expansions,
            totals.calls,
            stats.hits,
            started.elapsed().as_secs_f64(),
            dir.join("best.workflow.json").display(),
            dir.join("report.html").display(),
        ))?;
    }
    Ok(ExitStatus::Success)
}
