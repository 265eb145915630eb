//! `flowmem import`: reads outside logs and benchmark tasks, writes flowmem JSONL.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::ValueEnum;
use flowmem_model::{self as model, Duplicate, DuplicateIds, ImportFormat, Imported, ItemKind, Skipped};
use serde::Serialize;

use crate::args::{DuplicateIdsArg, ImportArgs, ImportFormatArg};
use crate::commands::ExitStatus;
use crate::commands::common::refuse_outputs_that_are_inputs;
use crate::printer::Printer;

/// Skips listed on stderr before the rest are only counted (all are in `--json`).
const MAX_SKIPS_SHOWN: usize = 20;

/// The `--json` summary of `flowmem import`.
///
/// Version 1: `{version, format, output, kind, files, read, written, skipped: [{location:
/// {file, line?, json_path?}, reason}], gaps: [same as skipped], duplicates: [{kind, id,
/// attempt?, count, locations, renamed?}], notes}`. `output` and `kind` are null when
/// nothing was written. `gaps` are parts of written items that could not be
/// reconstructed (OTLP only so far).
#[derive(Debug, Serialize)]
struct Summary<'a> {
    version: u32,
    format: &'a str,
    output: Option<&'a Path>,
    kind: Option<ItemKind>,
    files: &'a [PathBuf],
    read: usize,
    written: usize,
    skipped: &'a [Skipped],
    gaps: &'a [Skipped],
    duplicates: &'a [Duplicate],
    notes: &'a [String],
}

/// Imports every path, writes the items atomically, and reports what happened.
pub fn run(args: &ImportArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let format_name = &format_name(args.format);
    let inputs: Vec<&Path> = args.paths.iter().map(PathBuf::as_path).collect();
    refuse_outputs_that_are_inputs(&[&args.output], &inputs)?;
    let mut imported = Imported::default();
    // OTLP spans and their log events may come in different paths: they are read together.
    let groups: Vec<&[PathBuf]> =
        if args.format == ImportFormatArg::Otlp { vec![args.paths.as_slice()] } else { args.paths.chunks(1).collect() };
    for paths in groups {
        let one = import_paths(args.format, paths).with_context(|| {
            let names: Vec<String> = paths.iter().map(|path| format!("`{}`", path.display())).collect();
            format!("cannot import {} as {format_name}", names.join(", "))
        })?;
        if args.strict
            && let Some(first) = one.skipped.first()
        {
            anyhow::bail!(
                "invalid {format_name} item in {first}\nhint: rerun without --strict to skip bad items and import the rest"
            );
        }
        imported.append(one);
    }
    let policy = match args.duplicate_ids {
        DuplicateIdsArg::Keep => DuplicateIds::Keep,
        DuplicateIdsArg::Rename => DuplicateIds::Rename,
    };
    let duplicates = imported.resolve_duplicate_ids(policy);
    let kind = imported.items.first().map(model::Item::kind);
    let written = imported.items.len();
    let read: Vec<&Path> = imported.files.iter().map(PathBuf::as_path).collect();
    refuse_outputs_that_are_inputs(&[&args.output], &read)?;
    if written > 0 {
        model::write_jsonl_atomic(&args.output, &imported.items)
            .with_context(|| format!("cannot write the imported items to `{}`", args.output.display()))?;
    }
    report(printer, format_name, &imported, kind, &args.output);
    for duplicate in duplicates.iter().take(MAX_SKIPS_SHOWN) {
        printer.warn(&duplicate.to_string());
    }
    if duplicates.len() > MAX_SKIPS_SHOWN {
        printer.info(&format!(
            "  … and {} more duplicate ids (--json lists them all)",
            duplicates.len() - MAX_SKIPS_SHOWN
        ));
    }
    if printer.json {
        printer.json_result(&Summary {
            version: 1,
            format: format_name,
            output: (written > 0).then_some(args.output.as_path()),
            kind,
            files: &imported.files,
            read: imported.n_read(),
            written,
            skipped: &imported.skipped,
            gaps: &imported.gaps,
            duplicates: &duplicates,
            notes: &imported.notes,
        })?;
    }
    if written == 0 {
        printer.error(&format!(
            "nothing imported from {} {format_name} item(s); `{}` was not written",
            imported.n_read(),
            args.output.display()
        ));
        return Ok(ExitStatus::Failure);
    }
    Ok(ExitStatus::Success)
}

/// Imports paths in one format (OTLP reads them together). A format read by another crate
/// is one more arm here, returning the same [`Imported`].
fn import_paths(format: ImportFormatArg, paths: &[PathBuf]) -> anyhow::Result<Imported> {
    if format == ImportFormatArg::Otlp {
        return Ok(model::import_paths(ImportFormat::Otlp, paths)?);
    }
    let mut imported = Imported::default();
    for path in paths {
        imported.append(import_path(format, path)?);
    }
    Ok(imported)
}

/// Imports one path in one format.
fn import_path(format: ImportFormatArg, path: &Path) -> anyhow::Result<Imported> {
    let imported = match format {
        ImportFormatArg::OpenAi => model::import(ImportFormat::OpenAi, path)?,
        ImportFormatArg::TauBench => model::import(ImportFormat::TauBench, path)?,
        ImportFormatArg::Tau2Bench => model::import(ImportFormat::Tau2Bench, path)?,
        ImportFormatArg::ToolBench => model::import(ImportFormat::ToolBench, path)?,
        ImportFormatArg::StableToolBench => model::import(ImportFormat::StableToolBench, path)?,
        ImportFormatArg::Otlp => model::import(ImportFormat::Otlp, path)?,
        ImportFormatArg::Xes => import_xes(path)?,
    };
    Ok(imported)
}

/// Reads an XES log with the miner's reader: one trajectory per case, one tool call per
/// event with the activity name as the tool.
fn import_xes(path: &Path) -> anyhow::Result<Imported> {
    let log = flowmem_mining::read_xes(path)?;
    let source = format!("xes:{}", path.display());
    let mut notes = Vec::new();
    if log.skipped_events > 0 {
        notes.push(format!("{} event(s) without a `concept:name` were left out", log.skipped_events));
    }
    notes.extend(crate::commands::common::xes_remark_lines(path, &log));
    Ok(Imported {
        items: log.to_trajectories(&source).into_iter().map(model::Item::Trajectory).collect(),
        files: vec![path.to_path_buf()],
        notes,
        ..Imported::default()
    })
}

/// The format's name as typed on the command line.
fn format_name(format: ImportFormatArg) -> String {
    // Every variant has a name: none is `#[value(skip)]`.
    format.to_possible_value().map_or_else(|| format!("{format:?}"), |value| value.get_name().to_owned())
}

fn report(printer: &Printer, format_name: &str, imported: &Imported, kind: Option<ItemKind>, output: &Path) {
    let n_files = imported.files.len();
    printer.info(&format!(
        "read {} {format_name} item(s) from {n_files} file{}",
        imported.n_read(),
        if n_files == 1 { "" } else { "s" }
    ));
    if let Some(kind) = kind {
        printer.info(&format!("wrote {} {} to `{}`", imported.items.len(), kind.plural(), output.display()));
    }
    if !imported.skipped.is_empty() {
        printer.warn(&format!("skipped {} item(s):", imported.skipped.len()));
        for skipped in imported.skipped.iter().take(MAX_SKIPS_SHOWN) {
            printer.info(&format!("  {skipped}"));
        }
        if imported.skipped.len() > MAX_SKIPS_SHOWN {
            printer.info(&format!("  … and {} more (--json lists them all)", imported.skipped.len() - MAX_SKIPS_SHOWN));
        }
    }
    if !imported.gaps.is_empty() {
        printer.warn(&format!("{} part(s) of imported items could not be reconstructed:", imported.gaps.len()));
        for gap in imported.gaps.iter().take(MAX_SKIPS_SHOWN) {
            printer.info(&format!("  {gap}"));
        }
        if imported.gaps.len() > MAX_SKIPS_SHOWN {
            printer.info(&format!("  … and {} more (--json lists them all)", imported.gaps.len() - MAX_SKIPS_SHOWN));
        }
    }
    for note in &imported.notes {
        printer.info(&format!("note: {note}"));
    }
}
