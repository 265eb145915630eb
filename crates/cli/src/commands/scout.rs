//! `flowmem scout`: FlowScout end to end — split the records, mine `G⁰`, search, test the
//! best workflow against the ReAct baseline, and write the run directory.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use flowmem_eval::{Alpha, JUDGE_ES_PROMPT, ScoreConfig, TcConfig};
use flowmem_exec::{TaskOracle, visible_tools};
use flowmem_llm::Purpose;
use flowmem_optimize::{
    Checkpoint, LlmProposer, PROPOSE_EDITS, PROPOSE_NEXT_EDIT, PlanDecoding, ScoutError, ScoutParts, ScoutSettings,
    SearchError, SplitProgress, Strategy, prepare_run, scout,
};

use crate::args::{PlanDecodingArg, ScoutArgs, SearchRunArgs};
use crate::commands::ExitStatus;
use crate::commands::common::{
    block_on, calls_lacking_results, interrupts, progress_bar, refuse_outputs_that_are_inputs, replay_for_results,
};
use crate::printer::Printer;
use crate::session::{CacheUse, PromptSettings, Session, SessionSettings, ToolsUse};
use crate::settings::{Config, ModelRoles};

/// The runs bar's look once a run has finished; until then it only says that the first
/// is under way (it has no split or count to show yet).
const RUNS_TEMPLATE: &str = "{bar:30} {pos}/{len} runs of {msg}, {elapsed}";

/// Moves the runs bar to `done` of `total`; the first run of a split (or of the final
/// test) restarts it, labelled `what`.
fn show_run(bar: Option<&indicatif::ProgressBar>, done: usize, total: usize, what: impl FnOnce() -> String) {
    let Some(bar) = bar else { return };
    if done == 1 {
        if let Ok(style) = indicatif::ProgressStyle::with_template(RUNS_TEMPLATE) {
            bar.set_style(style);
        }
        bar.reset();
        bar.set_length(total as u64);
        bar.set_message(what());
    }
    bar.set_position(done as u64);
}

/// The optimizer's plan decoding, as `--plan-decoding` names it.
pub(super) fn plan_decoding(arg: PlanDecodingArg) -> PlanDecoding {
    match arg {
        PlanDecodingArg::PerEdit => PlanDecoding::PerEdit,
        PlanDecodingArg::Whole => PlanDecoding::Whole,
    }
}

/// The session of a search run (`flowmem scout`, `flowmem study`): the executor, optimizer
/// and judge from `search`, the tools required, the optimizer's and judge's prompts, an
/// LLM cache in `dir` (a resume and every child candidate replay the unchanged calls), and
/// per-run tool state keyed under `state_key`.
pub(super) fn search_session(search: &SearchRunArgs, config: Config, dir: &Path, state_key: &str) -> SessionSettings {
    SessionSettings {
        config,
        models: ModelRoles::new(&search.model).with_optimizer(&search.optimizer).with_judge(&search.judge),
        tools: ToolsUse::Required,
        prompts: Some(PromptSettings {
            dir: search.prompts.prompts.clone(),
            extra: vec![JUDGE_ES_PROMPT, PROPOSE_EDITS, PROPOSE_NEXT_EDIT],
        }),
        cache: CacheUse::At(dir.join("llm-cache.sqlite")),
        state: Some((search.state.clone(), state_key.to_owned())),
    }
}

/// `part` of `whole` as a percentage, or `–` when `whole` is 0.
fn share(part: u64, whole: u64) -> String {
    if whole == 0 { "–".to_owned() } else { format!("{:.0}%", 100.0 * part as f64 / whole as f64) }
}

/// Runs `flowmem scout`.
pub fn run(args: &ScoutArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    block_on(run_async(args, printer))
}

fn settings_from_args(args: &ScoutArgs) -> anyhow::Result<ScoutSettings> {
    let Some(records) = &args.records else {
        bail!("--records is required for a new run (or pass --resume DIR)");
    };
    let mut settings = ScoutSettings::paper_defaults(records.clone());
    let search = &args.search;
    settings.seed = search.seed;
    settings.search.iterations = search.iterations;
    settings.search.patience = search.patience;
    settings.strategy = match (args.no_mcts, args.beam) {
        (true, _) => Strategy::NoSearch,
        (false, Some(width)) => Strategy::Beam { width },
        (false, None) => Strategy::Mcts,
    };
    settings.miner = !args.no_miner;
    settings.alpha = search.alpha;
    settings.concurrency = search.concurrency.max(1);
    settings.repeat = args.repeat.max(1);
    settings.final_test = !args.no_test;
    settings.agent_max_steps = search.max_steps;
    settings.plan_decoding = plan_decoding(search.plan_decoding);
    settings.max_edits = search.max_edits;
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
    let outputs = ["run.json", "state.json", "best.workflow.json", "report.html"].map(|name| dir.join(name));
    let outputs: Vec<&std::path::Path> = outputs.iter().map(std::path::PathBuf::as_path).collect();
    refuse_outputs_that_are_inputs(&outputs, &[&settings.records])?;
    // Records are read before a new run directory is created, so a typo leaves nothing.
    let records = flowmem_model::read_records(&settings.records)
        .with_context(|| format!("reading the records `{}`", settings.records.display()))?;
    let settings = if args.resume.is_some() { settings } else { prepare_run(&dir, Some(settings))? };

    let session_settings = search_session(&args.search, Config::load(&args.search.config)?, &dir, "flowmem-scout");
    let session = Session::open(session_settings).await?;
    let executor = session.cached_model(Purpose::Executor).await?;
    let optimizer = session.cached_model(Purpose::Optimizer).await?;
    let judge = session.cached_model(Purpose::Judge).await?;
    let prompts = session.prompts().clone();
    let accounting = session.accounting();
    let tool_names = visible_tools(session.registry().as_ref(), session.isolation());
    let proposer = LlmProposer::new(optimizer, prompts.clone(), tool_names, settings.max_edits, settings.plan_decoding);

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
    // Each candidate runs on every opt and val record before the search moves on: with a
    // local model that is hours, so the runs have their own bar, and each finished split
    // a line (which also reaches logs, where bars are not drawn).
    let runs_bar = progress_bar(printer, 0, "{spinner} the first run is under way, {elapsed}");
    if let Some(bar) = &runs_bar {
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
    }
    let on_split = |event: SplitProgress<'_>| match event {
        SplitProgress::Run { candidate, split, done, total, .. } => {
            show_run(runs_bar.as_ref(), done, total, || format!("candidate {candidate:04} on {split}"));
        }
        SplitProgress::Finished { candidate, split, evaluation, runs, elapsed } => {
            let es = evaluation.es.map_or_else(|| "–".to_owned(), |es| format!("{es:.3}"));
            let runs = if runs == 1 { "1 run".to_owned() } else { format!("{runs} runs") };
            printer.info(&format!(
                "candidate {candidate:04} on {split}: reward {:.3} (TC {:.3}, ES {es}) over {runs} in {:.1} s",
                evaluation.reward,
                evaluation.tc,
                elapsed.as_secs_f64()
            ));
        }
    };
    let on_test = |progress: flowmem_eval::Progress<'_>| {
        show_run(runs_bar.as_ref(), progress.done, progress.total, || "the final test".to_owned());
    };
    // Calls logged without results (τ-bench, τ²-bench) are replayed in isolated tool
    // state (again on a resume, so G⁰ comes out the same), so G⁰'s arguments can also
    // be bound to earlier results. Without isolation the tools' state is the user's
    // own, and nothing is replayed.
    let lacking = calls_lacking_results(&records);
    let records = match session.isolation() {
        _ if lacking == 0 => records,
        Some(isolation) => {
            let isolation = Some(isolation.clone());
            replay_for_results(session.registry(), &records, isolation, settings.concurrency, printer).await.1
        }
        None => {
            printer.warn(&format!("{lacking} logged calls have no result: G⁰ binds no argument to an earlier one"));
            printer
                .warn("hint: with --state-key-arg (and --reset-tool) they are replayed first, in isolated tool state");
            records
        }
    };
    let checker = session.task_checker()?;
    // The first Ctrl-C stops the search at its next checkpoint, where everything done
    // so far is on disk; a second one drops the work in flight (the run directory's LLM
    // cache still holds every answered call). Either way `--resume` continues.
    let stop = AtomicBool::new(false);
    let checkpoint = |_: Checkpoint| !stop.load(Ordering::SeqCst);
    let parts = ScoutParts {
        runtime: session.runtime(executor),
        isolation: session.isolation().cloned(),
        scoring: ScoreConfig {
            tc: TcConfig::exact(),
            judge: Some((judge.as_ref(), prompts.as_ref())),
            checker: checker.as_ref().map(|c| c as &dyn TaskOracle),
        },
        proposer: &proposer,
        checkpoint: &checkpoint,
        on_iteration: &on_iteration,
        on_split: &on_split,
        on_test: &on_test,
    };
    let outcome = tokio::select! {
        outcome = scout(&dir, &settings, records, &parts) => Some(outcome),
        () = interrupts(&stop, printer, "stopping at the next checkpoint") => None,
    };
    for bar in [&bar, &runs_bar].into_iter().flatten() {
        bar.finish_and_clear();
    }
    let interrupted = match &outcome {
        None => true,
        Some(Err(ScoutError::Search(SearchError::Interrupted))) => true,
        Some(_) => false,
    };
    if interrupted {
        session.close().await;
        printer.warn(&format!("interrupted; resume with `flowmem scout --resume {}`", dir.display()));
        return Ok(ExitStatus::Failure);
    }
    let Some(outcome) = outcome else { unreachable!("an interrupted run has returned") };
    let outcome = outcome?;

    let totals = accounting.snapshot().total;
    let stats = session.cache().map(|cache| cache.stats()).unwrap_or_default();
    session.close().await;
    let summary = serde_json::json!({
        "run_dir": dir,
        "split": {"opt": outcome.split_sizes.0, "val": outcome.split_sizes.1, "test": outcome.split_sizes.2},
        "iterations": outcome.state.iteration,
        "stopped": outcome.state.stopped,
        "best_candidate": outcome.state.best,
        "best_val_score": outcome.state.best_val_score,
        "failed_expansions": outcome.state.failed_expansions,
        "expansions": outcome.expansions,
        "llm_calls": totals.calls,
        "llm_calls_saved_by_cache": stats.hits,
        "prompt_tokens": totals.prompt_tokens,
        "prompt_tokens_from_prefix_cache": totals.prefix_cached_tokens,
        "wall_time_secs": started.elapsed().as_secs_f64(),
        "best_workflow": dir.join("best.workflow.json"),
        "report": dir.join("report.html"),
    });
    if printer.json {
        printer.json_result(&summary)?;
    } else {
        let rate = outcome.expansions.success_rate.map_or_else(|| "–".to_owned(), |r| format!("{:.0}%", r * 100.0));
        let state = &outcome.state;
        let expansions = &outcome.expansions;
        let mut lines = vec![
            format!(
                "{} iterations, best candidate {} (validation {:.3}), {} failed expansions",
                state.iteration, state.best, state.best_val_score, state.failed_expansions
            ),
            format!(
                "expansion success rate {rate} ({} of {} expansions), {} optimizer calls",
                expansions.candidates, expansions.expansions, expansions.optimizer_calls
            ),
            format!(
                "LLM calls: {} ({} answered by the cache) · wall time {:.1}s",
                totals.calls,
                stats.hits,
                started.elapsed().as_secs_f64()
            ),
            format!(
                "prompt tokens: {}, of which {} ({}) came from the model's prefix cache instead of being prefilled",
                totals.prompt_tokens,
                totals.prefix_cached_tokens,
                share(totals.prefix_cached_tokens, totals.prompt_tokens)
            ),
        ];
        // The final test, one line per system (the whole table is in the report).
        if let Some(report) = &outcome.test {
            let n = report.systems.first().map_or(0, |system| system.n_runs);
            lines.push(format!("test split (runs per system: {n}):"));
            for row in flowmem_optimize::test_rows(report) {
                lines.push(format!(
                    "  {:<10} TC {}, ES {}, task success {}, {} errors, {} LLM calls per query",
                    row.system, row.tc, row.es, row.task_success, row.n_errors, row.llm_calls
                ));
            }
        }
        lines.push(format!("best workflow: {}", dir.join("best.workflow.json").display()));
        lines.push(format!("report: {}", dir.join("report.html").display()));
        printer.result(&lines.join("\n"))?;
    }
    Ok(ExitStatus::Success)
}
