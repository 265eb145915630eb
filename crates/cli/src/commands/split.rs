//! `flowmem split`: a seeded, reproducible opt/val/test split of a record set.

use anyhow::{Context, bail};
use serde::Serialize;

use flowmem_eval::{SplitRatios, split};

use crate::args::SplitArgs;
use crate::commands::ExitStatus;
use crate::commands::common::refuse_outputs_that_are_inputs;
use crate::printer::Printer;

#[derive(Serialize)]
struct SplitOutput {
    seed: u64,
    ratios: [u32; 3],
    opt: usize,
    val: usize,
    test: usize,
    out: std::path::PathBuf,
}

/// Splits the records and writes the three parts.
pub fn run(args: &SplitArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let ratios = parse_ratios(&args.ratios)?;
    let outputs: Vec<std::path::PathBuf> =
        ["opt", "val", "test"].iter().map(|name| args.out.join(format!("{name}.jsonl"))).collect();
    let outputs: Vec<&std::path::Path> = outputs.iter().map(std::path::PathBuf::as_path).collect();
    refuse_outputs_that_are_inputs(&outputs, &[&args.records])?;
    let records = flowmem_model::read_records(&args.records)?;
    let n_records = records.len();
    let parts = split(records, |r| r.id.as_str(), args.seed, ratios)?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create `{}`", args.out.display()))?;
    for (name, part) in [("opt", &parts.opt), ("val", &parts.val), ("test", &parts.test)] {
        flowmem_model::write_jsonl_atomic(&args.out.join(format!("{name}.jsonl")), part.iter())?;
    }
    let output = SplitOutput {
        seed: args.seed,
        ratios: [ratios.opt, ratios.val, ratios.test],
        opt: parts.opt.len(),
        val: parts.val.len(),
        test: parts.test.len(),
        out: args.out.clone(),
    };
    if printer.json {
        printer.json_result(&output)?;
    } else {
        printer.result(&format!(
            "split {n_records} records with seed {}: opt {}, val {}, test {} -> {}",
            args.seed,
            output.opt,
            output.val,
            output.test,
            args.out.display()
        ))?;
    }
    if n_records == 0 {
        printer.warn(&format!("`{}` holds no records", args.records.display()));
        return Ok(ExitStatus::Failure);
    }
    Ok(ExitStatus::Success)
}

fn parse_ratios(text: &str) -> anyhow::Result<SplitRatios> {
    let parts: Vec<&str> = text.split(':').collect();
    let [opt, val, test] = parts.as_slice() else {
        bail!("invalid `--ratios {text}`: expected three whole numbers as OPT:VAL:TEST, such as 5:2:3");
    };
    let number = |part: &str| {
        part.trim().parse::<u32>().with_context(|| format!("invalid `--ratios {text}`: `{part}` is not a whole number"))
    };
    Ok(SplitRatios { opt: number(opt)?, val: number(val)?, test: number(test)? })
}
