//! `flowmem conform`: how well a model fits a log (fitness by token replay and by
//! alignments, ETConformance precision) and which traces deviate, with their moves.
//!
//! `--json` prints one document (version 1):
//! `{"version": 1, "log": {"path", "format", "cases", "events", "variants", "activities",
//! "skipped"}, "model": {"kind": "tree"|"pnml"|"graph", "path": str|null, "tree": str|null,
//! "places", "transitions", "silent"}, "token_replay": {"cases", "fitting_cases",
//! "log_fitness", "average_trace_fitness", "missing", "consumed", "remaining", "produced"},
//! "alignments": {"best_worst_cost", "average_fitness", "percentage_fitting",
//! "log_fitness"}, "precision": f64, "deviating": {"variants", "cases"}, "variants":
//! [{"activities": [..], "count", "token_replay": {"fit", "fitness", "missing", "consumed",
//! "remaining", "produced"}, "alignment": {"cost", "deviations", "fitness", "moves":
//! [{"kind": "sync"|"log"|"model"|"silent", "activity"|"transition"}]}, "guard": {"flagged",
//! "deviations": [{"index", "activity", "expected": [..]}], "can_finish"} (with `--guard`
//! only)}]}`, every variant, most frequent first.

use std::path::Path;

use anyhow::{Context, bail};
use flowmem_mining::{
    AlignConfig, EventLog, Guard, Move, PetriNet, PrecisionVariant, ProcessTree, VariantAlignment, VariantReplay,
};
use serde::Serialize;

use crate::args::ConformArgs;
use crate::commands::ExitStatus;
use crate::commands::mine::{LogSummary, load};
use crate::printer::Printer;

/// Reads the model and the log, checks conformance and prints the figures.
pub fn run(args: &ConformArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let loaded = load(&args.log, args.classifier, printer)?;
    let log = &loaded.log;
    if log.n_cases() == 0 {
        printer.warn(&format!("`{}` has no cases to check", args.log.display()));
        return Ok(ExitStatus::Failure);
    }
    let (net, model) = read_model(args, log)?;
    let replay = flowmem_mining::token_replay(log, &net);
    let aligned = flowmem_mining::align_log(log, &net, AlignConfig { max_states: args.max_states, keep_moves: true })
        .with_context(|| format!("cannot align `{}` with the model", args.log.display()))?;
    let precision = flowmem_mining::precision(log, &net, PrecisionVariant::EtcToken);
    let variants: Vec<VariantReport<'_>> = log
        .variants()
        .iter()
        .zip(replay.variants.iter().zip(&aligned.variants))
        .map(|(variant, (token_replay, alignment))| {
            let activities: Vec<&str> = variant.activities.iter().map(|&a| log.activity(a)).collect();
            let guard = args.guard.then(|| guard_replay(&net, &activities));
            VariantReport { activities, count: variant.count, token_replay, alignment, guard }
        })
        .collect();
    let deviating: Vec<&VariantReport<'_>> = variants.iter().filter(|v| v.alignment.deviations > 0).collect();
    let deviating_summary =
        Deviating { variants: deviating.len(), cases: deviating.iter().map(|v| v.count).sum::<u64>() };
    let below = args.fail_under.is_some_and(|bound| aligned.log_fitness < bound);
    if printer.json {
        let doc = ConformReport {
            version: 1,
            log: LogSummary::of(&args.log, &loaded),
            model,
            token_replay: TokenTotals {
                cases: replay.cases,
                fitting_cases: replay.fitting_cases,
                log_fitness: replay.log_fitness,
                average_trace_fitness: replay.average_trace_fitness,
                missing: replay.missing,
                consumed: replay.consumed,
                remaining: replay.remaining,
                produced: replay.produced,
            },
            alignments: AlignmentTotals {
                best_worst_cost: aligned.best_worst_cost,
                average_fitness: aligned.average_fitness,
                percentage_fitting: aligned.percentage_fitting,
                log_fitness: aligned.log_fitness,
            },
            precision,
            deviating: deviating_summary,
            variants: &variants,
        };
        printer.json_result(&doc)?;
        return Ok(if below { ExitStatus::Failure } else { ExitStatus::Success });
    }
    printer.info(&format!(
        "{} ({}): {} cases, {} variants, {} activities; model: {} places, {} transitions ({} silent)",
        args.log.display(),
        loaded.format,
        log.n_cases(),
        log.variants().len(),
        log.activities().len(),
        model.places,
        model.transitions,
        model.silent,
    ));
    let mut out = String::new();
    out.push_str(&format!(
        "fitness (token replay)  {:.4}  {} of {} cases fit; tokens missing {}, remaining {}, consumed {}, produced {}\n",
        replay.log_fitness,
        replay.fitting_cases,
        replay.cases,
        replay.missing,
        replay.remaining,
        replay.consumed,
        replay.produced
    ));
    out.push_str(&format!(
        "fitness (alignments)    {:.4}  average trace fitness {:.4}; {:.1}% of cases fit\n",
        aligned.log_fitness, aligned.average_fitness, aligned.percentage_fitting
    ));
    out.push_str(&format!("precision (ETC, tokens) {precision:.4}\n"));
    out.push_str(&format!(
        "deviating: {} of {} variants, {} of {} cases\n",
        deviating_summary.variants,
        variants.len(),
        deviating_summary.cases,
        log.n_cases()
    ));
    for variant in deviating.iter().take(args.top) {
        out.push_str(&format!(
            "\n{} case{}, alignment fitness {:.4}, {} deviation{}:\n  {}\n",
            variant.count,
            if variant.count == 1 { "" } else { "s" },
            variant.alignment.fitness,
            variant.alignment.deviations,
            if variant.alignment.deviations == 1 { "" } else { "s" },
            render_moves(&variant.alignment.moves)
        ));
        if let Some(guard) = &variant.guard {
            for flag in &guard.deviations {
                out.push_str(&format!(
                    "  guard: call {} `{}` flagged; expected {}\n",
                    flag.index + 1,
                    flag.activity,
                    if flag.expected.is_empty() { "the end".to_owned() } else { flag.expected.join(", ") }
                ));
            }
            if !guard.can_finish {
                out.push_str("  guard: the run stopped before the model could end\n");
            }
        }
    }
    if deviating.len() > args.top {
        out.push_str(&format!("\n… {} more deviating variants (`--top N` or `--json`)\n", deviating.len() - args.top));
    }
    printer.result(out.trim_end())?;
    if below {
        printer.warn(&format!(
            "alignment fitness {:.4} is below `--fail-under {}`",
            aligned.log_fitness,
            args.fail_under.unwrap_or_default()
        ));
        return Ok(ExitStatus::Failure);
    }
    Ok(ExitStatus::Success)
}

/// Replays `activities` through the run-time guard, one call at a time.
fn guard_replay(net: &PetriNet, activities: &[&str]) -> GuardReport {
    let mut guard = Guard::new(net.clone());
    let mut deviations = Vec::new();
    for (index, activity) in activities.iter().enumerate() {
        let step = guard.step(activity);
        if !step.conforms {
            deviations.push(GuardFlag { index, activity: (*activity).to_owned(), expected: step.expected });
        }
    }
    let can_finish = guard.can_finish();
    GuardReport { flagged: !deviations.is_empty() || !can_finish, deviations, can_finish }
}

/// The moves on one line: synchronous moves as the activity, deviations in brackets,
/// silent moves left out.
fn render_moves(moves: &[Move]) -> String {
    moves
        .iter()
        .filter_map(|m| match m {
            Move::Sync { activity } => Some(activity.clone()),
            Move::Log { activity } => Some(format!("[log only: {activity}]")),
            Move::Model { activity } => Some(format!("[model only: {activity}]")),
            Move::Silent { .. } => None,
        })
        .collect::<Vec<_>>()
        .join(" → ")
}

/// Builds the Petri net from `--tree` or `--model`.
fn read_model(args: &ConformArgs, log: &EventLog) -> anyhow::Result<(PetriNet, ModelSummary)> {
    let (net, kind, tree) = match (&args.tree, &args.model) {
        (Some(text), _) => {
            let tree =
                ProcessTree::parse(text.trim()).with_context(|| format!("`--tree {text}` is not a process tree"))?;
            (flowmem_mining::tree_to_petri_net(&tree), "tree", Some(tree))
        }
        (None, Some(path)) => read_model_file(path, log)?,
        (None, None) => bail!("give the model with `--tree TREE` or `--model FILE`"),
    };
    let summary = ModelSummary {
        kind,
        path: args.model.as_ref().map(|p| p.display().to_string()),
        tree: tree.map(|t| t.to_string()),
        places: net.places.len(),
        transitions: net.transitions.len(),
        silent: net.transitions.iter().filter(|t| t.label.is_none()).count(),
    };
    Ok((net, summary))
}

fn read_model_file(path: &Path, log: &EventLog) -> anyhow::Result<(PetriNet, &'static str, Option<ProcessTree>)> {
    let name = path.to_string_lossy().to_lowercase();
    if name.ends_with(".pnml") {
        return Ok((flowmem_mining::read_pnml(path)?, "pnml", None));
    }
    if name.ends_with(".json") || name.ends_with(".yaml") || name.ends_with(".yml") {
        let graph = flowmem_exec::load_graph(path)?;
        let tree = flowmem_mining::skeleton_to_tree(&graph, log.activities())
            .with_context(|| format!("cannot read the workflow graph `{}` as a process", path.display()))?;
        return Ok((flowmem_mining::tree_to_petri_net(&tree), "graph", Some(tree)));
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    let tree = ProcessTree::parse(text.trim())
        .with_context(|| format!("`{}` is neither PNML, a workflow graph nor a process tree", path.display()))?;
    Ok((flowmem_mining::tree_to_petri_net(&tree), "tree", Some(tree)))
}

#[derive(Serialize)]
struct ConformReport<'a> {
    version: u32,
    log: LogSummary,
    model: ModelSummary,
    token_replay: TokenTotals,
    alignments: AlignmentTotals,
    precision: f64,
    deviating: Deviating,
    variants: &'a [VariantReport<'a>],
}

#[derive(Serialize)]
struct ModelSummary {
    kind: &'static str,
    path: Option<String>,
    tree: Option<String>,
    places: usize,
    transitions: usize,
    silent: usize,
}

#[derive(Serialize)]
struct TokenTotals {
    cases: u64,
    fitting_cases: u64,
    log_fitness: f64,
    average_trace_fitness: f64,
    missing: u64,
    consumed: u64,
    remaining: u64,
    produced: u64,
}

#[derive(Serialize)]
struct AlignmentTotals {
    best_worst_cost: u64,
    average_fitness: f64,
    percentage_fitting: f64,
    log_fitness: f64,
}

#[derive(Serialize, Clone, Copy)]
struct Deviating {
    variants: usize,
    cases: u64,
}

#[derive(Serialize)]
struct VariantReport<'a> {
    activities: Vec<&'a str>,
    count: u64,
    token_replay: &'a VariantReplay,
    alignment: &'a VariantAlignment,
    #[serde(skip_serializing_if = "Option::is_none")]
    guard: Option<GuardReport>,
}

/// What the run-time guard said about one trace (with `--guard`).
#[derive(Serialize)]
struct GuardReport {
    /// Some call was flagged or the trace ended where the model cannot.
    flagged: bool,
    deviations: Vec<GuardFlag>,
    can_finish: bool,
}

#[derive(Serialize)]
struct GuardFlag {
    /// The call's position in the trace, from 0.
    index: usize,
    activity: String,
    /// The tools the model allowed instead.
    expected: Vec<String>,
}
