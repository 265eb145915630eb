//! `flowmem learn --online`: online AWM over a task stream, with the learning curve
//! against the same agent without memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::Context;
use flowmem_eval::TaskOracle;
use flowmem_exec::{AgentConfig, NoObserver, Runtime};
use flowmem_llm::{Accounting, Purpose};
use flowmem_memory::induce::{LmConfig, RuleConfig, Variant};
use flowmem_memory::{
    Arm, LearningCurve, MemoryAgentConfig, MemoryMode, MemoryStore, OnlineConfig, OnlineProgress, ProgressLine,
    StoreConfig, learn_online, render,
};
use flowmem_model::Scope;
use flowmem_tools::Registry;

use crate::args::{InduceMode, LearnArgs, MemoryUse};
use crate::commands::ExitStatus;
use crate::commands::common::{block_on, state_isolation, task_checker};
use crate::printer::Printer;
use crate::settings;

/// The state key every run of the online agents uses; runs go one at a time.
const RUN_STATE_KEY: &str = "flowmem-online/run";

/// Runs `flowmem learn`.
pub fn run(args: &LearnArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    block_on(run_async(args, printer))
}

async fn run_async(args: &LearnArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let started = Instant::now();
    let records = flowmem_model::read_records(&args.online)
        .with_context(|| format!("reading the task stream `{}`", args.online.display()))?;
    if records.is_empty() {
        printer.warn(&format!("`{}` holds no records; nothing to learn from", args.online.display()));
        return Ok(ExitStatus::Failure);
    }
    let mut store = MemoryStore::open(&args.memory, StoreConfig::standard())
        .with_context(|| format!("cannot open the memory `{}`", args.memory.display()))?;

    let llm_settings = settings::llm_settings(args.config.as_deref())?;
    let accounting = Accounting::new();
    let agent_model =
        settings::open_model(&llm_settings, Purpose::Agent, args.model.as_deref(), None, &accounting).await?;
    let judge_name = args.judge_model.as_deref().or(args.model.as_deref());
    let judge = settings::open_model(&llm_settings, Purpose::Judge, judge_name, None, &accounting).await?;
    let tools_config = settings::tools_config(args.config.as_deref(), true)?;
    let registry = Arc::new(Registry::connect(&tools_config).await.context("starting the tool servers")?);
    let exec = settings::executor_prompts(None, &llm_settings, args.model.as_deref()).await?;
    let runtime = Runtime {
        executor: agent_model.clone(),
        models: Default::default(),
        tools: registry.clone(),
        prompts: Arc::new(exec),
    };
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
        InduceMode::Rule => Variant::Rule(&rule),
        InduceMode::Lm => Variant::Lm(&lm),
    };
    let isolation = state_isolation(&args.state, RUN_STATE_KEY);
    let checker = task_checker(&args.state, &tools_config, &registry, isolation.as_ref())?;
    let mode = match args.use_memory {
        MemoryUse::Prompt => MemoryMode::Prompt,
        MemoryUse::Actions => MemoryMode::Actions,
    };
    let agent = MemoryAgentConfig {
        agent: AgentConfig { max_steps: args.max_steps, instruction: None },
        mode,
        top_k: args.top_k,
        budget_tokens: args.budget_tokens,
        scope: Scope { site: args.scope.scope_site.clone(), domain: args.scope.scope_domain.clone() },
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
    registry.shutdown().await;
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
        let bar = printer.progress.then(|| {
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {elapsed} ({msg})")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
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
