//! `flowmem score`: TC and outcome of logged runs against their records, no LLM.

use std::collections::BTreeMap;
use std::fmt::Write;

use anyhow::bail;

use flowmem_eval::{ScoreReport, TcConfig, score_runs};

use crate::args::ScoreArgs;
use crate::commands::ExitStatus;
use crate::printer::Printer;

/// Scores the runs and prints the report.
pub fn run(args: &ScoreArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let cfg = TcConfig { ignore_args: parse_ignore_args(&args.ignore_args)? };
    let records = flowmem_model::read_records(&args.records)?;
    let runs = flowmem_model::read_trajectories(&args.runs)?;
    let report = score_runs(&records, &runs, &cfg);
    if printer.json {
        printer.json_result(&report)?;
    } else {
        printer.result(&human(&report))?;
    }
    for id in &report.duplicate_records {
        printer.warn(&format!(
            "record id `{id}` occurs more than once in `{}`; the first is used",
            args.records.display()
        ));
    }
    if !report.unmatched.is_empty() {
        printer.warn(&format!(
            "{} runs have no record with their id in `{}`",
            report.unmatched.len(),
            args.records.display()
        ));
    }
    let Some(mean_tc) = report.mean_tc else {
        printer.warn("no run matched a record; nothing was scored");
        return Ok(ExitStatus::Failure);
    };
    if args.fail_under.is_some_and(|bound| mean_tc < bound) {
        return Ok(ExitStatus::Failure);
    }
    Ok(ExitStatus::Success)
}

/// Parses `--ignore-args TOOL=ARG[,ARG...]` items into a tool → arguments map.
pub(crate) fn parse_ignore_args(items: &[String]) -> anyhow::Result<BTreeMap<String, Vec<String>>> {
    let mut res: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for item in items {
        let Some((tool, names)) = item.split_once('=') else {
            bail!(
                "invalid `--ignore-args {item}`: expected TOOL=ARG[,ARG...], such as transfer_to_human_agents=summary"
            );
        };
        let names: Vec<String> =
            names.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_string).collect();
        if tool.trim().is_empty() || names.is_empty() {
            bail!("invalid `--ignore-args {item}`: both the tool and at least one argument name are needed");
        }
        res.entry(tool.trim().to_string()).or_default().extend(names);
    }
    Ok(res)
}

fn human(report: &ScoreReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<24} {:>7} {:>7} {:>7} {:>7} {:>7}  outcome",
        "id", "attempt", "TC", "matched", "missing", "extra"
    );
    for run in &report.per_run {
        let outcome = match (run.success, run.outputs_found) {
            (Some(ok), Some(found)) => format!("success={ok} outputs={found}"),
            (Some(ok), None) => format!("success={ok}"),
            (None, Some(found)) => format!("outputs={found}"),
            (None, None) => "-".to_string(),
        };
        let attempt = run.attempt.map_or_else(|| "-".to_string(), |a| a.to_string());
        let _ = writeln!(
            out,
            "{:<24} {:>7} {:>7.4} {:>7} {:>7} {:>7}  {outcome}",
            run.id,
            attempt,
            run.tc,
            run.matched.len(),
            run.missing.len(),
            run.extra.len()
        );
        for missing in &run.missing {
            let _ = writeln!(
                out,
                "    missing #{} {} {}",
                missing.index,
                missing.tool,
                serde_json::Value::Object(missing.args.clone())
            );
        }
        for extra in &run.extra {
            let _ = writeln!(
                out,
                "    extra   #{} {} {}",
                extra.index,
                extra.tool,
                serde_json::Value::Object(extra.args.clone())
            );
        }
    }
    let mean = report.mean_tc.map_or_else(|| "-".to_string(), |tc| format!("{tc:.4}"));
    let _ = write!(out, "mean TC {mean} over {} runs", report.runs);
    if let Some(rate) = report.success_rate {
        let _ = write!(out, "; success rate {rate:.4}");
    }
    if let Some(rate) = report.outputs_rate {
        let _ = write!(out, "; required outputs found {rate:.4}");
    }
    if !report.unmatched.is_empty() {
        let _ = write!(out, "\nunmatched runs: {}", report.unmatched.join(", "));
    }
    out
}
