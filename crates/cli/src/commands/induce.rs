//! `flowmem induce`: induce AWM workflows from trajectories into a memory.

use std::io::BufRead;
use std::path::Path;

use anyhow::Context;

use flowmem_memory::induce::{RuleConfig, Variant};
use flowmem_memory::{MemoryStore, OfflineConfig, StoreConfig, induce_offline};
use flowmem_model::{Scope, Trajectory};

use crate::args::{InduceArgs, InduceMode};
use crate::commands::ExitStatus;
use crate::printer::Printer;

/// Reads the trajectories, induces, stores, and reports what was stored and skipped.
pub fn run(args: &InduceArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let (trajectories, bad_lines) = read_trajectories(&args.input)?;
    for bad in &bad_lines {
        printer.warn(bad);
    }
    let scope = (args.scope_domain.is_some() || args.scope_site.is_some())
        .then(|| Scope { site: args.scope_site.clone(), domain: args.scope_domain.clone() });
    let store_cfg = StoreConfig { max_per_scope: args.max_per_scope, ..StoreConfig::standard() };
    let mut store = MemoryStore::open(&args.memory, store_cfg)?;
    let rule_cfg = RuleConfig { min_steps: args.min_steps, scope: None };
    let variant = match args.mode {
        InduceMode::Rule => Variant::Rule(&rule_cfg),
        InduceMode::Lm => anyhow::bail!("`--mode lm` needs the OpenAI-compatible client, which this build lacks\nhint: use `--mode rule`"),
    };
    let cfg = OfflineConfig { variant, scope: scope.as_ref(), batch_size: args.batch_size };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let report = runtime.block_on(induce_offline(&mut store, &trajectories, &cfg))?;

    let n_inserted = report.added.iter().filter(|a| matches!(a, flowmem_memory::AddOutcome::Inserted { .. })).count();
    let n_merged = report.added.len() - n_inserted;
    if printer.json {
        printer.json_result(&serde_json::json!({
            "input": args.input,
            "memory": args.memory,
            "bad_lines": bad_lines,
            "report": report,
        }))?;
    } else {
        for skipped in &report.skipped {
            let what = match &skipped.description {
                Some(description) => format!("workflow `{description}`"),
                None => format!("trajectories [{}]", skipped.trajectory_ids.join(", ")),
            };
            printer.info(&format!("skipped {what}: {}", skipped.reason));
        }
        for outcome in &report.added {
            printer.result(&outcome_line(outcome))?;
        }
        printer.info(&format!(
            "{} trajectories read ({} used, {} bad lines): {n_inserted} workflows stored, {n_merged} merged into existing ones, {} skipped",
            report.n_trajectories,
            report.n_used,
            bad_lines.len(),
            report.skipped.len()
        ));
    }
    Ok(if report.added.is_empty() { ExitStatus::Failure } else { ExitStatus::Success })
}

fn outcome_line(outcome: &flowmem_memory::AddOutcome) -> String {
    match outcome {
        flowmem_memory::AddOutcome::Inserted { id, evicted } if evicted.is_empty() => format!("stored {id}"),
        flowmem_memory::AddOutcome::Inserted { id, evicted } => format!("stored {id} (evicted {})", evicted.join(", ")),
        flowmem_memory::AddOutcome::Merged { id, similarity } => format!("merged into {id} (similarity {similarity:.2})"),
    }
}

/// Reads trajectory JSONL. Lines that do not decode are returned as messages naming the
/// file and line; blank lines are skipped.
pub fn read_trajectories(path: &Path) -> anyhow::Result<(Vec<Trajectory>, Vec<String>)> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open `{}`", path.display()))?;
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
