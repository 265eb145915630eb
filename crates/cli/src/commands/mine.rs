//! `flowmem mine`: discovers a process tree from an XES or JSONL log.
//!
//! `--json` prints one document (version 1):
//! `{"version": 1, "log": {"path", "format", "cases", "events", "variants", "activities",
//! "skipped"}, "miner": "im"|"imf", "noise": f64|null, "tree": "<PM4Py notation>",
//! "top_paths": [{"count", "share", "activities": [..]}], "output": <the --output value:
//! a string, or JSON for `json`, `skeleton` and `dataflow`>, "timings_ms": {"read", "variants", "discover"}|null,
//! "replay": {"records", "records_ok", "calls", "executed"} (only when records were replayed),
//! "conformance": {"token_replay_fitness", "precision"} (the model on its own log)}`.
//! The `dataflow` output is flowmem-mining's `Dataflow` document (its own `version`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use flowmem_mining::{BindingConfig, Classifier, Dataflow, EventLog, ProcessTree, Source, Variant};
use flowmem_model::{Record, Trajectory};
use serde::Serialize;

use crate::args::{ActivityClassifier, MineArgs, MineOutput, MineReplayArgs, MinerKind};
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
    // How well the discovered model fits its own log, by PM4Py's default measures.
    let net = flowmem_mining::tree_to_petri_net(&tree);
    let conformance = Conformance {
        token_replay_fitness: flowmem_mining::token_replay(log, &net).log_fitness,
        precision: flowmem_mining::precision(log, &net, flowmem_mining::PrecisionVariant::EtcToken),
    };
    let (dataflow, replay) = match args.output {
        MineOutput::Dataflow | MineOutput::Skeleton if loaded.format == "jsonl" => {
            let (records, replay) = with_results(&loaded.records, &args.replay, printer)?;
            (Some(flowmem_mining::mine_dataflow(&records)), replay)
        }
        MineOutput::Dataflow => bail!("`--output dataflow` needs JSONL records, not an XES log"),
        _ => (None, None),
    };
    let output = render(&tree, log, args.output, &args.log, dataflow.as_ref())?;
    let timings =
        args.timings.then_some(Timings { read: loaded.read_ms, variants: loaded.variants_ms, discover: discover_ms });
    if printer.json {
        let doc = MineReport {
            version: 1,
            log: LogSummary::of(&args.log, &loaded),
            miner: match args.miner {
                MinerKind::Im => "im",
                MinerKind::Imf => "imf",
            },
            noise: (args.miner == MinerKind::Imf).then_some(args.noise),
            tree: tree.to_string(),
            top_paths,
            output,
            timings_ms: timings,
            conformance,
            replay,
        };
        printer.json_result(&doc)?;
        return Ok(ExitStatus::Success);
    }
    print_summary(printer, args, &loaded, &top_paths, timings.as_ref());
    printer.info(&format!(
        "the model on its log: fitness {:.4} (token replay), precision {:.4} (see `flowmem conform` for alignments and deviations)",
        conformance.token_replay_fitness, conformance.precision
    ));
    if let (MineOutput::Dataflow, Some(dataflow)) = (args.output, &dataflow) {
        print_dataflow(printer, dataflow)?;
        return Ok(ExitStatus::Success);
    }
    match output {
        serde_json::Value::String(text) => printer.result(text.trim_end())?,
        value => printer.json_result(&value)?,
    }
    Ok(ExitStatus::Success)
}

/// A log read by [`load`].
pub(crate) struct Loaded {
    pub(crate) log: EventLog,
    // The JSONL records, trajectories as records (their tool calls in order); empty for XES.
    records: Vec<Record>,
    pub(crate) format: &'static str,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    replay: Option<ReplaySummary>,
    conformance: Conformance,
}

/// How well the discovered model fits the log it was mined from.
#[derive(Serialize)]
struct Conformance {
    /// Token-based replay fitness (PM4Py's default fitness).
    token_replay_fitness: f64,
    /// ETConformance precision, token-based (PM4Py's default precision).
    precision: f64,
}

/// What replaying the records for their results did.
#[derive(Serialize)]
struct ReplaySummary {
    records: usize,
    records_ok: usize,
    calls: usize,
    executed: usize,
}

/// The `log` object of `mine` and `conform`'s JSON documents.
#[derive(Serialize)]
pub(crate) struct LogSummary {
    path: String,
    format: &'static str,
    cases: u64,
    events: u64,
    variants: usize,
    activities: usize,
    skipped: u64,
}

impl LogSummary {
    pub(crate) fn of(path: &Path, loaded: &Loaded) -> LogSummary {
        let log = &loaded.log;
        LogSummary {
            path: path.display().to_string(),
            format: loaded.format,
            cases: log.n_cases(),
            events: log.n_events(),
            variants: log.variants().len(),
            activities: log.activities().len(),
            skipped: loaded.skipped,
        }
    }
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

/// Reads an XES log or JSONL records and trajectories as an event log; `mine` and
/// `conform` share it.
pub(crate) fn load(path: &Path, classifier: ActivityClassifier, printer: &Printer) -> anyhow::Result<Loaded> {
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
        for line in crate::commands::common::xes_remark_lines(path, &xes) {
            printer.warn(&line);
        }
        return Ok(Loaded {
            log,
            records: Vec::new(),
            format: "xes",
            skipped: xes.skipped_events,
            read_ms,
            variants_ms,
        });
    }
    let classifier = match classifier {
        ActivityClassifier::Tool => Classifier::ToolName,
        ActivityClassifier::ToolArgs => Classifier::ToolNameAndArgKeys,
    };
    let file = crate::commands::common::open_input(path)?;
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
    let variants_ms = elapsed_ms(started);
    records.extend(trajectories.into_iter().map(|trajectory| Record {
        orchestration: trajectory.tool_calls().cloned().collect(),
        id: trajectory.id,
        query: trajectory.query,
        reference_result: String::new(),
        required_outputs: Vec::new(),
        meta: trajectory.meta,
    }));
    Ok(Loaded { log, records, format: "jsonl", skipped, read_ms, variants_ms })
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
    let mut file = crate::commands::common::open_input(path)?;
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

fn render(
    tree: &ProcessTree,
    log: &EventLog,
    output: MineOutput,
    path: &Path,
    dataflow: Option<&Dataflow>,
) -> anyhow::Result<serde_json::Value> {
    Ok(match output {
        MineOutput::Tree => serde_json::Value::String(tree.to_string()),
        MineOutput::Json => serde_json::to_value(tree)?,
        MineOutput::Dot => serde_json::Value::String(flowmem_mining::tree_to_dot(tree)),
        MineOutput::Mermaid => serde_json::Value::String(flowmem_mining::tree_to_mermaid(tree)),
        MineOutput::Pnml => {
            let name = path.file_name().map_or_else(|| "net".into(), |n| n.to_string_lossy().into_owned());
            serde_json::Value::String(flowmem_mining::tree_to_petri_net(tree).to_pnml(&name))
        }
        MineOutput::Skeleton => {
            // The routes the log takes most often are offered first.
            let tree = &flowmem_mining::order_routes(tree, log);
            match dataflow {
                Some(dataflow) => serde_json::to_value(flowmem_mining::tree_to_bound_skeleton(
                    tree,
                    log,
                    dataflow,
                    &BindingConfig::skeleton(),
                ))?,
                None => serde_json::to_value(flowmem_mining::tree_to_skeleton(tree))?,
            }
        }
        MineOutput::Dataflow => serde_json::to_value(dataflow)?,
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

/// The records with results: as they are when every call has an outcome or no replay was
/// asked for (with a warning), else replayed through the configured tools.
fn with_results(
    records: &[Record],
    replay: &MineReplayArgs,
    printer: &Printer,
) -> anyhow::Result<(Vec<Record>, Option<ReplaySummary>)> {
    let calls = records.iter().map(|record| record.orchestration.len()).sum::<usize>();
    let lacking = crate::commands::common::calls_lacking_results(records);
    if lacking == 0 {
        return Ok((records.to_vec(), None));
    }
    if replay.config.config.is_none() && replay.state_key_arg.is_none() {
        printer.warn(&format!(
            "{lacking} of {calls} calls have no result, so they offer no result sources\n\
             hint: pass --config (and --state-key-arg/--reset-tool for stateful servers) to replay them first"
        ));
        return Ok((records.to_vec(), None));
    }
    let config = crate::settings::Config::load(&replay.config)?.tools(true)?;
    if config.servers.is_empty() {
        bail!(
            "no tool servers are configured to replay the records\nhint: add `[[tools.mcp]]` entries to flowmem.toml"
        );
    }
    let isolation = replay.state_key_arg.as_ref().map(|key_arg| flowmem_tools::StateIsolation {
        key_arg: key_arg.clone(),
        reset_tool: replay.reset_tool.clone(),
        hidden_tools: Vec::new(),
        key: replay.state_key_prefix.clone(),
    });
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let (report, replayed) = runtime.block_on(async {
        let registry = flowmem_tools::Registry::connect(&config).await?;
        for warning in registry.warnings() {
            printer.warn(warning);
        }
        let replayed =
            crate::commands::common::replay_for_results(&registry, records, isolation, replay.concurrency, printer)
                .await;
        registry.shutdown().await;
        anyhow::Ok(replayed)
    })?;
    let summary = ReplaySummary {
        records: report.records,
        records_ok: report.records_ok,
        calls: report.calls,
        executed: report.executed,
    };
    Ok((replayed, Some(summary)))
}

/// The data-flow table: one line per tool argument with its sources, then coverage.
fn print_dataflow(printer: &Printer, dataflow: &Dataflow) -> anyhow::Result<()> {
    let tool_width = dataflow.arguments.iter().map(|flow| flow.tool.chars().count()).max().unwrap_or(4).max(4);
    let arg_width = dataflow.arguments.iter().map(|flow| flow.arg.chars().count()).max().unwrap_or(8).max(8);
    printer.result(&format!(
        "{:<tool_width$}  {:<arg_width$}  {:>6}  {:>9}  sources",
        "tool", "argument", "values", "explained"
    ))?;
    for flow in &dataflow.arguments {
        let mut sources: Vec<String> = flow
            .sources
            .iter()
            .take(3)
            .map(|support| match (support.each, &support.source) {
                // "each": how many records took every value of the collection, of how many.
                (Some(each), _) => {
                    format!("{} ({}, all {}/{})", support.source, support.support, each.all, each.records)
                }
                // The strongest anchor: the words the query values followed.
                (None, Source::Query) if !flow.query_anchors.is_empty() || flow.query_lengths.is_some() => {
                    let mut notes = vec![support.support.to_string()];
                    // The one length every value had, or the range.
                    match flow.query_lengths {
                        Some([shortest, longest]) if shortest == longest => notes.push(format!("{shortest} chars")),
                        Some([shortest, longest]) => notes.push(format!("{shortest}–{longest} chars")),
                        None => {}
                    }
                    if let Some(anchor) = flow.query_anchors.first() {
                        notes.push(format!("after “{}” {}", anchor.words.join(" "), anchor.support));
                    }
                    format!("query ({})", notes.join(", "))
                }
                (None, _) => format!("{} ({})", support.source, support.support),
            })
            .collect();
        if flow.sources.len() > 3 {
            sources.push(format!("+{} more", flow.sources.len() - 3));
        }
        if sources.is_empty() {
            sources.push("unexplained".into());
        }
        if let Some(other) = &flow.same_length_as {
            sources.push(format!("as many as `{other}`"));
        }
        if let Some(pairing) = &flow.paired_with {
            sources.push(format!(
                "each beside `{}`'s in one {} result at {} ({})",
                pairing.arg, pairing.tool, pairing.path, pairing.support
            ));
        }
        // What every value was: `only if get_order_details $.parsed_content.status = "delivered" (11)`.
        for required in &flow.requires {
            sources.push(format!(
                "only if {} {} = {} ({})",
                required.tool, required.field, required.value, required.support
            ));
        }
        printer.result(&format!(
            "{:<tool_width$}  {:<arg_width$}  {:>6}  {:>8.1}%  {}",
            flow.tool,
            flow.arg,
            flow.observed,
            percent(flow.explained, flow.observed),
            sources.join("; ")
        ))?;
    }
    let kinds = &dataflow.by_kind;
    printer.result(&format!(
        "coverage: {} of {} argument values explained ({:.1}%): query {}, result {}, argument {}, constant {}, unexplained {}; {} of {} calls had results",
        dataflow.explained,
        dataflow.values,
        percent(dataflow.explained, dataflow.values),
        kinds.query,
        kinds.result,
        kinds.argument,
        kinds.constant,
        kinds.unexplained,
        dataflow.calls_with_results,
        dataflow.calls,
    ))?;
    // The tools the queries had to ask for by name: `cues: exchange_delivered_order_items needs “exchange”`.
    if !dataflow.cues.is_empty() {
        let cues: Vec<String> = dataflow
            .cues
            .iter()
            .map(|(tool, words)| {
                let words: Vec<String> = words.iter().map(|word| format!("“{word}”")).collect();
                format!("{tool} needs {}", words.join(" or "))
            })
            .collect();
        printer.result(&format!("cues: {}", cues.join("; ")))?;
    }
    Ok(())
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 * 100.0 / whole as f64 }
}
