//! `flowmem learn --online`: online AWM over a task stream, with the learning curve
//! against the same agent without memory.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::Context;
use flowmem_exec::{AgentConfig, NoObserver, TaskOracle};
use flowmem_llm::Purpose;
use flowmem_memory::induce::{Inducer, LmConfig, RuleConfig};
use flowmem_memory::{
    Arm, CURVE_HTML_FILE, CURVE_JSON_FILE, LearningCurve, MemoryAgentConfig, MemoryMode, MemoryStore, OnlineConfig,
    OnlineProgress, PROGRESS_FILE, ProgressLine, STREAM_FILE, StoreConfig, learn_online, render,
};

use crate::args::{InduceMode, LearnArgs, MemoryUse};
use crate::commands::ExitStatus;
use crate::commands::common::{block_on, progress_bar, refuse_outputs_that_are_inputs};
use crate::printer::Printer;
use crate::session::{CacheUse, PromptSettings, Session, SessionSettings, ToolsUse, chosen_retriever};
use crate::settings::{Config, DEFAULT_RETRIEVAL, ModelRoles, asked_retrieval, scope_filter};

/// The state key every run of the online agents uses; runs go one at a time.
const RUN_STATE_KEY: &str = "flowmem-online/run";

/// Runs `flowmem learn`.
pub fn run(args: &LearnArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    block_on(run_async(args, printer))
}

async fn run_async(args: &LearnArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let started = Instant::now();
    let outputs = [PROGRESS_FILE, STREAM_FILE, CURVE_JSON_FILE, CURVE_HTML_FILE].map(|name| args.out.join(name));
    let outputs: Vec<&std::path::Path> = outputs.iter().map(std::path::PathBuf::as_path).collect();
    refuse_outputs_that_are_inputs(&outputs, &[&args.online, &args.memory])?;
    let records = flowmem_model::read_records(&args.online)
        .with_context(|| format!("reading the task stream `{}`", args.online.display()))?;
    if records.is_empty() {
        printer.warn(&format!("`{}` holds no records; nothing to learn from", args.online.display()));
        return Ok(ExitStatus::Failure);
    }
    let mut store = MemoryStore::open(&args.memory, StoreConfig::standard()).with_context(|| {
        format!("cannot open the memory `{}`", flowmem_db::DbLocation::parse(args.memory.as_os_str()).display())
    })?;

    let config = Config::load(&args.config)?;
    let asked = asked_retrieval(args.retrieval, config.memory()?.retrieval);
    let retriever = chosen_retriever(&config, asked, DEFAULT_RETRIEVAL)?;
    let settings = SessionSettings {
        config,
        models: ModelRoles::new(&args.model).with_judge(&args.judge),
        tools: ToolsUse::Required,
        prompts: Some(PromptSettings { dir: None, extra: Vec::new() }),
        cache: CacheUse::Off,
        state: Some((args.state.clone(), RUN_STATE_KEY.to_owned())),
    };
    let session = Session::open(settings).await?;
    let agent_model = session.model(Purpose::Agent).await?;
    let judge = session.model(Purpose::Judge).await?;
    let runtime = session.runtime(agent_model.clone());
    let prompts = render::prompts().context("loading the memory prompt templates")?;

    let rule = RuleConfig::standard();
    let lm = LmConfig {
        model: agent_model.as_ref(),
        prompts: &prompts,
        min_steps: rule.min_steps,
        scope: None,
        structured: true,
        max_tokens: Some(1024),
        max_result_chars: 300,
    };
    let inducer = match args.induce {
        InduceMode::Rule => Inducer::Rule(&rule),
        InduceMode::Lm => Inducer::Lm(&lm),
    };
    let isolation = session.isolation().cloned();
    let checker = session.task_checker()?;
    let mode = match args.use_memory {
        MemoryUse::Prompt => MemoryMode::Prompt,
        MemoryUse::Actions => MemoryMode::Actions,
    };
    let agent = MemoryAgentConfig {
        agent: AgentConfig { max_steps: args.max_steps, instruction: None, guard: None },
        mode,
        top_k: args.top_k,
        budget_tokens: args.budget_tokens,
        scope: scope_filter(&args.scope),
        retriever,
    };
    let bar = ProgressBar::new(printer);
    let on_progress = |progress: &OnlineProgress<'_>| bar.update(progress);
    let cfg = OnlineConfig {
        runtime: &runtime,
        evaluator: judge.as_ref(),
        prompts: &prompts,
        agent,
        inducer,
        batch_size: args.batch_size.max(1),
        limit: args.limit,
        baseline: !args.no_baseline,
        oracle: checker.as_ref().map(|checker| checker as &dyn TaskOracle),
        observer: &NoObserver,
        isolation,
        on_progress: &on_progress,
    };
    // Ctrl-C drops the run in flight: every finished run is already in the progress file
    // and every stored workflow in its own transaction, so the same command resumes.
    let outcome = tokio::select! {
        outcome = learn_online(&mut store, &records, &args.out, &cfg) => Some(outcome),
        _ = tokio::signal::ctrl_c() => None,
    };
    bar.finish();
    let accounting = session.accounting().clone();
    session.close().await;
    let Some(outcome) = outcome else {
        printer.warn(&format!("interrupted; run the same command again to resume from `{}`", args.out.display()));
        return Ok(ExitStatus::Failure);
    };
    let report = outcome.with_context(|| format!("online learning in `{}`", args.out.display()))?;

    let totals = accounting.snapshot().total;
    if printer.json {
        printer.json_result(&serde_json::json!({
            "out": args.out,
            "memory": args.memory,
            "n_resumed_runs": report.n_resumed_runs,
            "n_new_runs": report.n_new_runs,
            "curve": report.curve,
            "files": report.files,
            "llm_calls": totals.calls,
            "prompt_tokens": totals.prompt_tokens,
            "completion_tokens": totals.completion_tokens,
            "wall_time_secs": started.elapsed().as_secs_f64(),
        }))?;
    } else {
        for line in summary(&report.curve) {
            printer.result(&line)?;
        }
        for file in &report.files {
            printer.result(&format!("wrote {}", file.display()))?;
        }
        printer.info(&format!(
            "{} runs resumed, {} run now · {} LLM calls · wall time {:.1}s",
            report.n_resumed_runs,
            report.n_new_runs,
            totals.calls,
            started.elapsed().as_secs_f64()
        ));
    }
    Ok(ExitStatus::Success)
}

/// The human-readable summary of a learning curve.
fn summary(curve: &LearningCurve) -> Vec<String> {
    let figure = |value: Option<f64>| value.map_or_else(|| "–".to_owned(), |value| format!("{value:.3}"));
    let arm_line = |label: &str, arm: &flowmem_memory::ArmCurve| {
        format!(
            "{label}: {}/{} solved (success rate {}), {} steps per solved task",
            arm.n_solved,
            arm.n_tasks,
            figure(arm.cumulative_success_rate.last().copied()),
            figure(arm.steps_per_solved)
        )
    };
    let mut lines = vec![arm_line("with memory", &curve.memory)];
    if let Some(baseline) = &curve.baseline {
        lines.push(arm_line("without memory", baseline));
    }
    if let Some(agreement) = &curve.agreement {
        lines.push(format!(
            "evaluator against ground truth over {} runs: accuracy {}, false-positive rate {}",
            agreement.n,
            figure(agreement.accuracy),
            figure(agreement.false_positive_rate)
        ));
    }
    lines.push(format!("{} inductions added {} workflows", curve.n_inductions, curve.n_workflows_added));
    if curve.n_unjudged > 0 {
        lines.push(format!(
            "{} runs had no valid judgement from the evaluator and taught nothing (each run's `judge_error` in the progress file says why)",
            curve.n_unjudged
        ));
    }
    lines
}

/// The stderr progress bar: runs done, and tasks solved per agent so far.
struct ProgressBar {
    bar: Option<indicatif::ProgressBar>,
    solved_memory: AtomicUsize,
    solved_baseline: AtomicUsize,
    n_workflows: AtomicUsize,
}

impl ProgressBar {
    fn new(printer: &Printer) -> ProgressBar {
        let bar = progress_bar(printer, 0, "{bar:30} {pos}/{len} runs, {elapsed} ({msg})");
        ProgressBar {
            bar,
            solved_memory: AtomicUsize::new(0),
            solved_baseline: AtomicUsize::new(0),
            n_workflows: AtomicUsize::new(0),
        }
    }

    fn update(&self, progress: &OnlineProgress<'_>) {
        let Some(bar) = &self.bar else { return };
        match progress.line {
            ProgressLine::Run(run) if run.success => {
                let counter = if run.arm == Arm::Memory { &self.solved_memory } else { &self.solved_baseline };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            ProgressLine::Induced { added, .. } => {
                self.n_workflows.fetch_add(added.len(), Ordering::Relaxed);
            }
            ProgressLine::Run(_) => {}
        }
        bar.set_length(progress.n_runs_total as u64);
        bar.set_position(progress.n_runs_done as u64);
        bar.set_message(format!(
            "solved this session: {} with memory, {} without · {} workflows added",
            self.solved_memory.load(Ordering::Relaxed),
            self.solved_baseline.load(Ordering::Relaxed),
            self.n_workflows.load(Ordering::Relaxed)
        ));
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
