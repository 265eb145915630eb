//! `flowmem induce`: induce AWM workflows from trajectories into a memory.

use std::io::BufRead;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use flowmem_llm::{AccountingSnapshot, Purpose};
use flowmem_memory::induce::{Inducer, LmConfig, RuleConfig, SkipReason};
use flowmem_memory::{AddOutcome, MemoryStore, OfflineConfig, OfflineReport, StoreConfig, induce_offline};
use flowmem_model::Trajectory;

use crate::args::{InduceArgs, InduceMode};
use crate::commands::ExitStatus;
use crate::printer::Printer;
use crate::session::{CacheUse, Session, SessionSettings, ToolsUse, optional_embedding_model};
use crate::settings::{Config, ModelRoles, stored_scope};

/// Characters of each tool result shown to the inducer model.
const MAX_RESULT_CHARS: usize = 500;

/// The `--json` output of `flowmem induce` (version 1).
///
/// `workflows` has one entry per workflow the inducer proposed or produced, in order:
/// `status` is `stored` (with `id` and any `evicted` ids), `merged` (with the `id` it
/// merged into and the description `similarity`) or `rejected` (with `reason`, tagged by
/// `kind`, and its text in `message`). Trajectory-level skips (unsuccessful runs, short
/// rule groups, unparseable replies) are in `report.skipped` only.
#[derive(Serialize)]
struct InduceOutput<'a> {
    version: u32,
    mode: &'static str,
    input: &'a Path,
    memory: &'a Path,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    bad_lines: &'a [String],
    workflows: Vec<WorkflowLine<'a>>,
    report: &'a OfflineReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    accounting: Option<AccountingSnapshot>,
}

/// What happened to one workflow.
#[derive(Serialize)]
struct WorkflowLine<'a> {
    description: &'a str,
    trajectory_ids: &'a [String],
    #[serde(flatten)]
    status: Status<'a>,
}

#[derive(Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum Status<'a> {
    Stored {
        id: &'a str,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        evicted: &'a [String],
    },
    Merged {
        id: &'a str,
        similarity: f64,
    },
    Rejected {
        reason: &'a SkipReason,
        message: String,
    },
}

/// Reads the trajectories, induces, stores, and reports what was stored and skipped.
pub fn run(args: &InduceArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let (trajectories, bad_lines) = read_trajectories(&args.input)?;
    for bad in &bad_lines {
        printer.warn(bad);
    }
    let scope = stored_scope(&args.scope);
    let store_cfg = StoreConfig { max_per_scope: args.max_per_scope, ..StoreConfig::standard() };
    let mut store = MemoryStore::open(&args.memory, store_cfg)?;
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the async runtime")?;
    let config = Config::load(&args.config)?;
    // Each new workflow's vector goes into the memory with it, when an embedding model
    // is usable; otherwise vector retrieval embeds the workflows later.
    let embedder = optional_embedding_model(&config)?;
    let embedder = embedder.as_deref();
    let (report, model, accounting) = match args.mode {
        InduceMode::Rule => {
            let rule_cfg = RuleConfig { min_steps: args.min_steps, scope: None };
            let cfg = OfflineConfig {
                inducer: Inducer::Rule(&rule_cfg),
                scope: scope.as_ref(),
                batch_size: args.batch_size,
                embedder,
            };
            (runtime.block_on(induce_offline(&mut store, &trajectories, &cfg))?, None, None)
        }
        InduceMode::Lm => {
            let settings = SessionSettings {
                config: config.clone(),
                models: ModelRoles::new(&args.model),
                tools: ToolsUse::None,
                prompts: None,
                cache: CacheUse::Configured(None),
                state: None,
            };
            let session = runtime.block_on(Session::open(settings))?;
            let model = runtime.block_on(session.cached_model(Purpose::Inducer))?;
            let prompts = flowmem_memory::render::prompts().context("loading the induction prompt")?;
            let lm_cfg = LmConfig {
                model: model.as_ref(),
                prompts: &prompts,
                min_steps: args.min_steps,
                scope: None,
                structured: !args.text,
                max_tokens: args.max_tokens,
                max_result_chars: MAX_RESULT_CHARS,
            };
            let cfg = OfflineConfig {
                inducer: Inducer::Lm(&lm_cfg),
                scope: scope.as_ref(),
                batch_size: args.batch_size,
                embedder,
            };
            let report = runtime
                .block_on(induce_offline(&mut store, &trajectories, &cfg))
                .with_context(|| format!("inducing with model `{}`", model.name()))?;
            let accounting = session.accounting().snapshot();
            runtime.block_on(session.close());
            (report, Some(model.name().to_owned()), Some(accounting))
        }
    };

    let workflows = workflow_lines(&report);
    if printer.json {
        printer.json_result(&InduceOutput {
            version: 1,
            mode: match args.mode {
                InduceMode::Rule => "rule",
                InduceMode::Lm => "lm",
            },
            input: &args.input,
            memory: &args.memory,
            model,
            bad_lines: &bad_lines,
            workflows,
            report: &report,
            accounting,
        })?;
    } else {
        for skipped in report.skipped.iter().filter(|skipped| skipped.description.is_none()) {
            printer.info(&format!("skipped trajectories [{}]: {}", skipped.trajectory_ids.join(", "), skipped.reason));
        }
        for line in &workflows {
            match &line.status {
                Status::Rejected { message, .. } => {
                    printer.info(&format!("rejected `{}`: {message}", line.description))
                }
                Status::Stored { id, evicted: [] } => {
                    printer.result(&format!("stored {id}: {}", line.description))?;
                }
                Status::Stored { id, evicted } => {
                    printer.result(&format!("stored {id}: {} (evicted {})", line.description, evicted.join(", ")))?;
                }
                Status::Merged { id, similarity } => {
                    printer.result(&format!("merged into {id} (similarity {similarity:.2}): {}", line.description))?;
                }
            }
        }
        let n_inserted = report.added.iter().filter(|a| matches!(a.outcome, AddOutcome::Inserted { .. })).count();
        let n_rejected = workflows.iter().filter(|line| matches!(line.status, Status::Rejected { .. })).count();
        printer.info(&format!(
            "{} trajectories read ({} used, {} bad lines): {n_inserted} workflows stored, {} merged into existing ones, {n_rejected} rejected, {} other skips",
            report.n_trajectories,
            report.n_used,
            bad_lines.len(),
            report.added.len() - n_inserted,
            report.skipped.len() - n_rejected,
        ));
    }
    // Nothing new is a negative outcome, unless the memory already held it all (a rerun).
    let already_learned = report.skipped.iter().any(|skipped| skipped.reason == SkipReason::AlreadyLearned);
    Ok(if report.added.is_empty() && !already_learned { ExitStatus::Failure } else { ExitStatus::Success })
}

/// One line per workflow: those added (stored or merged), then those rejected.
fn workflow_lines(report: &OfflineReport) -> Vec<WorkflowLine<'_>> {
    let added = report.added.iter().map(|added| WorkflowLine {
        description: &added.description,
        trajectory_ids: &added.trajectory_ids,
        status: match &added.outcome {
            AddOutcome::Inserted { id, evicted } => Status::Stored { id, evicted },
            AddOutcome::Merged { id, similarity } => Status::Merged { id, similarity: *similarity },
        },
    });
    let rejected = report.skipped.iter().filter_map(|skipped| {
        let description = skipped.description.as_deref()?;
        Some(WorkflowLine {
            description,
            trajectory_ids: &skipped.trajectory_ids,
            status: Status::Rejected { reason: &skipped.reason, message: skipped.reason.to_string() },
        })
    });
    added.chain(rejected).collect()
}

/// Reads trajectory JSONL. Lines that do not decode are returned as messages naming the
/// file and line; blank lines are skipped.
pub fn read_trajectories(path: &Path) -> anyhow::Result<(Vec<Trajectory>, Vec<String>)> {
    let file = crate::commands::common::open_input(path)?;
    let mut trajectories = Vec::new();
    let mut bad = Vec::new();
    for (idx, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read `{}`", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Trajectory>(&line) {
            Ok(trajectory) => trajectories.push(trajectory),
            Err(err) => bad.push(format!("skipped `{}:{}`: not a trajectory: {err}", path.display(), idx + 1)),
        }
    }
    Ok((trajectories, bad))
}
