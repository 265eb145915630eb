//! `flowmem mine`: discovers a process tree from an XES or JSONL log.
//!
//! `--json` prints one document (version 1):
//! `{"version": 1, "log": {"path", "format", "cases", "events", "variants", "activities",
//! "skipped"}, "miner": "im"|"imf", "noise": f64|null, "tree": "<PM4Py notation>",
//! "top_paths": [{"count", "share", "activities": [..]}], "output": <the --output value:
//! a string, or JSON for `json` and `skeleton`>, "timings_ms": {"read", "variants", "discover"}|null}`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use flowmem_mining::{Classifier, EventLog, ProcessTree, Variant};
use flowmem_model::{Record, Trajectory};
use serde::Serialize;

use crate::args::{ActivityClassifier, MineArgs, MineOutput, MinerKind};
use crate::commands::ExitStatus;
use crate::printer::Printer;

/// Reads the log, mines it and prints the requested output.
pub fn run(args: &MineArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    if !(0.0..=1.0).contains(&args.noise) {
        bail!("`--noise` must be between 0 and 1, got {}", args.noise);
    }
    let loaded = load(&args.log, args.classifier, printer)?;
    let log = &loaded.log;
    if log.n_cases() == 0 {
        printer.warn(&format!("`{}` has no cases to mine", args.log.display()));
        return Ok(ExitStatus::Failure);
    }
    let variant = match args.miner {
        MinerKind::Im => Variant::Im,
        MinerKind::Imf => Variant::ImF { noise: args.noise },
    };
    let started = Instant::now();
    let tree = flowmem_mining::discover(log, variant);
    let discover_ms = elapsed_ms(started);
    let top_paths = top_paths(log, args.top);
    let output = render(&tree, args.output, &args.log)?;
    let timings =
        args.timings.then_some(Timings { read: loaded.read_ms, variants: loaded.variants_ms, discover: discover_ms });
    if printer.json {
        let doc = MineReport {
            version: 1,
            log: LogSummary {
                path: args.log.display().to_string(),
                format: loaded.format,
                cases: log.n_cases(),
                events: log.n_events(),
                variants: log.variants().len(),
                activities: log.activities().len(),
                skipped: loaded.skipped,
            },
            miner: match args.miner {
                MinerKind::Im => "im",
                MinerKind::Imf => "imf",
            },
            noise: (args.miner == MinerKind::Imf).then_some(args.noise),
            tree: tree.to_string(),
            top_paths,
            output,
            timings_ms: timings,
        };
        printer.json_result(&doc)?;
        return Ok(ExitStatus::Success);
    }
    print_summary(printer, args, &loaded, &top_paths, timings.as_ref());
    match output {
        serde_json::Value::String(text) => printer.result(text.trim_end())?,
        value => printer.json_result(&value)?,
    }
    Ok(ExitStatus::Success)
}

struct Loaded {
    log: EventLog,
    format: &'static str,
    skipped: u64,
    // Parsing the file, then grouping cases into variants.
    read_ms: f64,
    variants_ms: f64,
}

#[derive(Serialize)]
struct MineReport {
    version: u32,
    log: LogSummary,
    miner: &'static str,
    noise: Option<f64>,
    tree: String,
    top_paths: Vec<TopPath>,
    output: serde_json::Value,
    timings_ms: Option<Timings>,
}

#[derive(Serialize)]
struct LogSummary {
    path: String,
    format: &'static str,
    cases: u64,
    events: u64,
    variants: usize,
    activities: usize,
    skipped: u64,
}

#[derive(Serialize)]
struct TopPath {
    count: u64,
    share: f64,
    activities: Vec<String>,
}

#[derive(Serialize)]
struct Timings {
    read: f64,
    variants: f64,
    discover: f64,
}

fn load(path: &Path, classifier: ActivityClassifier, printer: &Printer) -> anyhow::Result<Loaded> {
    let started = Instant::now();
    if is_xes(path)? {
        let xes = flowmem_mining::read_xes(path)?;
        let read_ms = elapsed_ms(started);
        let started = Instant::now();
        let log = xes.to_event_log();
        let variants_ms = elapsed_ms(started);
        if xes.skipped_events > 0 {
            printer.warn(&format!(
                "skipped {} events without `concept:name` in `{}`",
                xes.skipped_events,
                path.display()
            ));
        }
        return Ok(Loaded { log, format: "xes", skipped: xes.skipped_events, read_ms, variants_ms });
    }
    let classifier = match classifier {
        ActivityClassifier::Tool => Classifier::ToolName,
        ActivityClassifier::ToolArgs => Classifier::ToolNameAndArgKeys,
    };
    let file = std::fs::File::open(path).with_context(|| format!("cannot open `{}`", path.display()))?;
    let (mut records, mut trajectories, mut skipped) = (Vec::new(), Vec::new(), 0u64);
    for (idx, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read `{}`", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{}:{}", path.display(), idx + 1);
        let value: serde_json::Value = match serde_json::from_str(&line) {
            Ok(value) => value,
            Err(err) => {
                printer.warn(&format!("skipped `{at}`: not JSON ({err})"));
                skipped += 1;
                continue;
            }
        };
        let parsed = if value.get("orchestration").is_some() {
            serde_json::from_value::<Record>(value).map(|record| records.push(record)).map_err(|e| ("Record", e))
        } else if value.get("steps").is_some() {
            serde_json::from_value::<Trajectory>(value).map(|t| trajectories.push(t)).map_err(|e| ("Trajectory", e))
        } else {
            printer.warn(&format!("skipped `{at}`: neither a Record (`$.orchestration`) nor a Trajectory (`$.steps`)"));
            skipped += 1;
            continue;
        };
        if let Err((kind, err)) = parsed {
            printer.warn(&format!("skipped `{at}`: invalid {kind}: {err}"));
            skipped += 1;
        }
    }
    let read_ms = elapsed_ms(started);
    let started = Instant::now();
    let mut builder = flowmem_mining::EventLogBuilder::new();
    for record in &records {
        builder.push_trace(record.orchestration.iter().map(|call| classifier.activity(call)));
    }
    for trajectory in &trajectories {
        builder.push_trace(trajectory.tool_calls().map(|call| classifier.activity(call)));
    }
    let log = builder.build();
    Ok(Loaded { log, format: "jsonl", skipped, read_ms, variants_ms: elapsed_ms(started) })
}

fn elapsed_ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1e3
}

fn is_xes(path: &Path) -> anyhow::Result<bool> {
    let name = path.to_string_lossy();
    if name.ends_with(".xes") || name.ends_with(".xes.gz") {
        return Ok(true);
    }
    if name.ends_with(".jsonl") || name.ends_with(".json") {
        return Ok(false);
    }
    let mut head = [0u8; 2];
    let mut file = std::fs::File::open(path).with_context(|| format!("cannot open `{}`", path.display()))?;
    let n = std::io::Read::read(&mut file, &mut head).with_context(|| format!("cannot read `{}`", path.display()))?;
    Ok(n > 0 && (head[0] == b'<' || head[..n].starts_with(&[0x1f, 0x8b])))
}

fn top_paths(log: &EventLog, top: usize) -> Vec<TopPath> {
    log.variants()
        .iter()
        .take(top)
        .map(|variant| TopPath {
            count: variant.count,
            share: variant.count as f64 / log.n_cases() as f64,
            activities: variant.activities.iter().map(|&a| log.activity(a).to_owned()).collect(),
        })
        .collect()
}

fn render(tree: &ProcessTree, output: MineOutput, path: &Path) -> anyhow::Result<serde_json::Value> {
    Ok(match output {
        MineOutput::Tree => serde_json::Value::String(tree.to_string()),
        MineOutput::Json => serde_json::to_value(tree)?,
        MineOutput::Dot => serde_json::Value::String(flowmem_mining::tree_to_dot(tree)),
        MineOutput::Mermaid => serde_json::Value::String(flowmem_mining::tree_to_mermaid(tree)),
        MineOutput::Pnml => {
            let name = path.file_name().map_or_else(|| "net".into(), |n| n.to_string_lossy().into_owned());
            serde_json::Value::String(flowmem_mining::tree_to_petri_net(tree).to_pnml(&name))
        }
        MineOutput::Skeleton => serde_json::to_value(flowmem_mining::tree_to_skeleton(tree))?,
    })
}

fn print_summary(printer: &Printer, args: &MineArgs, loaded: &Loaded, top: &[TopPath], timings: Option<&Timings>) {
    let log = &loaded.log;
    printer.info(&format!(
        "{} ({}): {} cases, {} events, {} variants, {} activities{}",
        args.log.display(),
        loaded.format,
        log.n_cases(),
        log.n_events(),
        log.variants().len(),
        log.activities().len(),
        if loaded.skipped > 0 { format!(", {} lines skipped", loaded.skipped) } else { String::new() }
    ));
    if !top.is_empty() {
        printer.info("most frequent paths:");
    }
    for path in top {
        let mut steps = path.activities.join(" → ");
        if steps.chars().count() > 100 {
            steps = steps.chars().take(99).collect::<String>() + "…";
        }
        if steps.is_empty() {
            steps = "(empty)".into();
        }
        printer.info(&format!("  {:>7} {:>5.1}%  {steps}", path.count, path.share * 100.0));
    }
    if let Some(timings) = timings {
        printer.info(&format!(
            "timings: read {:.1} ms, variants {:.1} ms, discover {:.1} ms",
            timings.read, timings.variants, timings.discover
        ));
    }
}
