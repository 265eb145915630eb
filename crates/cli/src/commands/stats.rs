//! `flowmem stats`: summary counts of a JSONL file of records or trajectories.

use std::path::Path;

use anyhow::Context;
use flowmem_model::{self as model, Stats};
use serde::Serialize;

use crate::args::StatsArgs;
use crate::commands::ExitStatus;
use crate::printer::Printer;

/// The `--json` document of `flowmem stats`.
///
/// Version 1: `{version, file, stats}` where `stats` is [`flowmem_model::Stats`]
/// serialised field by field.
#[derive(Debug, Serialize)]
struct Document<'a> {
    version: u32,
    file: &'a Path,
    stats: &'a Stats,
}

/// Reads the file and prints its counts.
pub fn run(args: &StatsArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let items =
        model::read_items(&args.path).with_context(|| format!("cannot compute stats of `{}`", args.path.display()))?;
    let stats = model::stats(&items, args.top);
    if printer.json {
        printer.json_result(&Document { version: 1, file: &args.path, stats: &stats })?;
        return Ok(ExitStatus::Success);
    }
    printer.result(&render(&args.path, &stats))?;
    Ok(ExitStatus::Success)
}

fn render(path: &Path, stats: &Stats) -> String {
    let noun = match (stats.n_records, stats.n_trajectories) {
        (0, 0) => "items",
        (_, 0) => "records",
        (0, _) => "trajectories",
        _ => "items",
    };
    let mean = if stats.n_items == 0 { 0.0 } else { stats.n_tool_calls as f64 / stats.n_items as f64 };
    let mut lines = vec![
        format!("file            {}", path.display()),
        format!("{noun:<16}{}", stats.n_items),
        format!(
            "tool calls      {} ({mean:.2} per item, at most {}; {} item(s) without calls; {} failed)",
            stats.n_tool_calls, stats.max_tool_calls, stats.n_items_without_tool_calls, stats.n_failed_tool_calls
        ),
        format!("distinct tools  {}", stats.n_distinct_tools),
        format!("transitions     {} distinct", stats.n_distinct_transitions),
    ];
    if stats.n_labelled > 0 {
        lines.push(format!("succeeded       {} of {} labelled", stats.n_succeeded, stats.n_labelled));
    }
    if !stats.top_tools.is_empty() {
        lines.push(String::new());
        lines.push("top tools".to_owned());
        lines.extend(stats.top_tools.iter().map(|tool| format!("{:>7}  {}", tool.count, tool.tool)));
    }
    if !stats.top_transitions.is_empty() {
        lines.push(String::new());
        lines.push("top transitions".to_owned());
        lines.extend(
            stats
                .top_transitions
                .iter()
                .map(|transition| format!("{:>7}  {} -> {}", transition.count, transition.from, transition.to)),
        );
    }
    lines.join("\n")
}
