//! Importers: outside agent logs and benchmark tasks into [`Record`]s and [`Trajectory`]s.
//!
//! One façade, [`import`], takes an [`ImportFormat`] and a path; each format lives in its
//! own module. Every importer keeps the source's id verbatim as a string, reads every item
//! it can, and reports each item it could not read as a [`Skipped`] with its file, line
//! and JSON path, so one bad line never stops a batch.
//!
//! [`Record`]: crate::Record
//! [`Trajectory`]: crate::Trajectory

mod input;
mod json;
mod openai;
mod otlp;
mod stabletoolbench;
mod tau2_bench;
mod tau_bench;
mod toolbench;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Item, ItemKind};

pub use self::otlp::{
    MAX_SPAN_BYTES, OtlpAttribute, OtlpBatch, OtlpEncoding, OtlpEvent, OtlpLogEvent, OtlpSignal, OtlpSpan,
    assemble_otlp, decode_otlp, encode_export_response, encode_rpc_status, otlp_file_encoding,
};

/// The outside formats flowmem reads.
///
/// XES event logs are read by `flowmem-mining`, which returns the same [`Imported`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImportFormat {
    /// Agent runs as OpenAI chat messages (a JSON array or JSONL), giving trajectories.
    ///
    /// Each item is a bare message list or an object holding it under `messages`, `traj`,
    /// `trajectory` or `conversation`, with an optional outcome in `reward`, `success` or
    /// `score`, an id in `id`, `task_id` or `query_id`, and a trial number in `trial` or
    /// `attempt`. Assistant `tool_calls` are matched with `tool` results by
    /// `tool_call_id`; the legacy `function_call` / `function` pair is read as well.
    #[serde(rename = "openai")]
    OpenAi,
    /// τ-bench task files (`tasks_*.jsonl`), giving records.
    TauBench,
    /// τ²-bench task files (`tasks*.json`), giving records.
    Tau2Bench,
    /// ToolBench DFSDT answer files, giving trajectories: the last training conversation
    /// of `answer_generation`, or else the winning path of the search tree.
    #[serde(rename = "toolbench")]
    ToolBench,
    /// StableToolBench evaluation-set files, giving trajectories. Their messages are
    /// truncated to 100 characters at the source; the import's notes say how many
    /// tool calls lost their arguments.
    #[serde(rename = "stabletoolbench")]
    StableToolBench,
    /// OpenTelemetry traces of agents (OTLP protobuf, JSON, or the Collector's JSON
    /// lines), giving trajectories: spans of the GenAI semantic conventions or of
    /// OpenInference, grouped by conversation (else by trace). Every file of a directory
    /// is read before spans are assembled, so log events may sit in their own file.
    /// What a span held that could not be reconstructed is in [`Imported::gaps`].
    Otlp,
}

/// What an import produced: the items, and what it skipped and why.
///
/// Fields are public so that importers in other crates (XES in `flowmem-mining`) can
/// build one.
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct Imported {
    /// The imported items, in input order.
    pub items: Vec<Item>,
    /// Where each item came from, parallel to `items` (file and line); empty when the
    /// importer does not know.
    pub locations: Vec<Location>,
    /// Items that were read but could not be imported, with the reason.
    pub skipped: Vec<Skipped>,
    /// The files that were read.
    pub files: Vec<PathBuf>,
    /// Remarks about the import as a whole, such as data truncated at the source.
    pub notes: Vec<String>,
    /// Parts of imported items that could not be reconstructed: the item was imported
    /// without them (an OTLP span whose content was not captured, or whose parent is
    /// missing). Each names where the part was read, and what the item lacks for it.
    pub gaps: Vec<Skipped>,
}

/// An item that could not be imported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// Where the problem is.
    pub location: Location,
    /// What is wrong, without a trailing period.
    pub reason: String,
}

/// A place in an input file: the file, the 1-based line, and the JSON path of the field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// The file.
    pub file: PathBuf,
    /// The 1-based line, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// The JSON path of the offending field, such as `$.actions[2].kwargs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_path: Option<String>,
}

/// An import that could not run at all. Problems with single items are not errors: they
/// are reported in [`Imported::skipped`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// A file or directory could not be read.
    #[error("cannot read `{}`", path.display())]
    Read {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A directory holds no file that looks like the format.
    #[error("no {format} files under `{}` (looked for {pattern})", path.display())]
    NoInputFiles {
        /// The directory.
        path: PathBuf,
        /// The format asked for.
        format: ImportFormat,
        /// The file names looked for.
        pattern: &'static str,
    },
}

/// Imports `path`, a file or a directory, in `format`.
///
/// A directory is searched recursively, in name order, for the files that the format
/// names (see [`ImportFormat::file_pattern`]). Items that cannot be read are skipped and
/// reported in [`Imported::skipped`]; so is a whole file that is not valid JSON, and a
/// file under a directory that cannot be read. A UTF-8 byte order mark is accepted;
/// bytes that are not UTF-8 cost their JSONL line, or their file when the file is one
/// JSON document.
///
/// # Errors
///
/// - [`ImportError::Read`] when `path` (a file, or a directory) cannot be read;
/// - [`ImportError::NoInputFiles`] when `path` is a directory without matching files.
///
/// # Example
///
/// ```no_run
/// use flowmem_model::{ImportFormat, import};
///
/// let imported = import(ImportFormat::TauBench, "../shared/data/tau-bench/retail".as_ref())?;
/// for skipped in &imported.skipped {
///     eprintln!("skipped {skipped}");
/// }
/// println!("{} records", imported.items.len());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn import(format: ImportFormat, path: &Path) -> Result<Imported, ImportError> {
    let files = input::input_files(format, path)?;
    if format == ImportFormat::Otlp {
        // Binary files, and spans assembled across every file.
        return otlp::import_files(files);
    }
    let in_directory = files.len() != 1 || files[0] != path;
    let mut imported = Imported::default();
    let mut truncation = stabletoolbench::Truncation::default();
    for file in files {
        let bytes = match std::fs::read(&file) {
            Ok(bytes) => bytes,
            // One unreadable file found in a directory costs that file, not the others.
            Err(source) if in_directory => {
                let location = Location { file: file.clone(), line: None, json_path: None };
                imported.skipped.push(Skipped { location, reason: format!("cannot read the file: {source}") });
                continue;
            }
            Err(source) => return Err(ImportError::Read { path: file.clone(), source }),
        };
        let (text, bad_utf8) = input::decode(&bytes);
        import_one(format, &file, &text, &bad_utf8, &mut imported, &mut truncation);
        imported.files.push(file);
    }
    if format == ImportFormat::StableToolBench {
        imported.notes.push(truncation.note());
    }
    Ok(imported)
}

/// Imports several paths, as [`import`] each: for OTLP, the files of every path are read
/// before spans are assembled, so spans and their log events may be given as two paths.
///
/// # Errors
///
/// As [`import`], for the first path that fails.
pub fn import_paths(format: ImportFormat, paths: &[PathBuf]) -> Result<Imported, ImportError> {
    if format == ImportFormat::Otlp {
        let mut files = Vec::new();
        for path in paths {
            files.extend(input::input_files(format, path)?);
        }
        return otlp::import_files(files);
    }
    let mut imported = Imported::default();
    for path in paths {
        imported.append(import(format, path)?);
    }
    Ok(imported)
}

/// Imports `text`, the content of one input in `format`, as if it had been read from a
/// file at `name` (which only labels locations and `Meta::source`; nothing is read).
///
/// This is [`import`] for data that arrives over the wire, such as a run an agent hands
/// to `flowmem serve`. A `name` ending in `.jsonl` reads one item a line. OTLP text is
/// JSON (one request, or one a line); protobuf goes through [`decode_otlp`].
///
/// # Example
///
/// ```
/// use flowmem_model::{ImportFormat, Item, import_text};
///
/// let messages = r#"[{"role": "user", "content": "Where is order 7?"},
///   {"role": "assistant", "content": "It has shipped."}]"#;
/// let imported = import_text(ImportFormat::OpenAi, "report.json".as_ref(), messages);
/// let Item::Trajectory(trajectory) = &imported.items[0] else { panic!("a trajectory") };
/// assert_eq!(trajectory.query, "Where is order 7?");
/// ```
pub fn import_text(format: ImportFormat, name: &Path, text: &str) -> Imported {
    let mut imported = Imported::default();
    let mut truncation = stabletoolbench::Truncation::default();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    import_one(format, name, text, &[], &mut imported, &mut truncation);
    if format == ImportFormat::StableToolBench {
        imported.notes.push(truncation.note());
    }
    imported
}

/// Imports `bytes`, the content of one input in `format`, as if read from a file at
/// `name`: [`import_text`] for bytes, decoded as [`import`] decodes files (a byte order
/// mark dropped; bytes that are not UTF-8 skipped with their line).
///
/// # Example
///
/// ```
/// use flowmem_model::{ImportFormat, import_bytes};
///
/// let bytes = b"{\"id\": 1, \"instruction\": \"q\xff\", \"actions\": []}\n{\"id\": 2, \"instruction\": \"q\", \"actions\": []}\n";
/// let imported = import_bytes(ImportFormat::TauBench, "tasks.jsonl".as_ref(), bytes);
/// assert_eq!((imported.items.len(), imported.skipped.len()), (1, 1));
/// ```
pub fn import_bytes(format: ImportFormat, name: &Path, bytes: &[u8]) -> Imported {
    let mut imported = Imported::default();
    let mut truncation = stabletoolbench::Truncation::default();
    let (text, bad_utf8) = input::decode(bytes);
    import_one(format, name, &text, &bad_utf8, &mut imported, &mut truncation);
    if format == ImportFormat::StableToolBench {
        imported.notes.push(truncation.note());
    }
    imported
}

fn import_one(
    format: ImportFormat,
    file: &Path,
    text: &str,
    bad_utf8: &[(usize, usize)],
    imported: &mut Imported,
    truncation: &mut stabletoolbench::Truncation,
) {
    let input = input::Input::new(format, file, text, bad_utf8);
    match format {
        ImportFormat::OpenAi => openai::run(&input, imported),
        ImportFormat::TauBench => tau_bench::run(&input, imported),
        ImportFormat::Tau2Bench => tau2_bench::run(&input, imported),
        ImportFormat::ToolBench => toolbench::run(&input, imported),
        ImportFormat::StableToolBench => stabletoolbench::run(&input, imported, truncation),
        ImportFormat::Otlp => {
            let bytes = text.as_bytes();
            let batch = decode_otlp(file, bytes, otlp_file_encoding(file, bytes));
            imported.skipped.extend(batch.skipped);
            imported.append(assemble_otlp(batch.spans, batch.events, &input.source));
        }
    }
}

impl ImportFormat {
    /// Every format, in the order `--help` lists them.
    pub const ALL: [ImportFormat; 6] = [
        ImportFormat::OpenAi,
        ImportFormat::TauBench,
        ImportFormat::Tau2Bench,
        ImportFormat::ToolBench,
        ImportFormat::StableToolBench,
        ImportFormat::Otlp,
    ];

    /// The format's name on the command line, such as `tau2-bench`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ImportFormat::OpenAi => "openai",
            ImportFormat::TauBench => "tau-bench",
            ImportFormat::Tau2Bench => "tau2-bench",
            ImportFormat::ToolBench => "toolbench",
            ImportFormat::StableToolBench => "stabletoolbench",
            ImportFormat::Otlp => "otlp",
        }
    }

    /// The kind of item the format produces.
    #[must_use]
    pub fn item_kind(self) -> ItemKind {
        match self {
            ImportFormat::TauBench | ImportFormat::Tau2Bench => ItemKind::Record,
            ImportFormat::OpenAi | ImportFormat::ToolBench | ImportFormat::StableToolBench | ImportFormat::Otlp => {
                ItemKind::Trajectory
            }
        }
    }

    /// The files a directory search picks up for this format, in words.
    #[must_use]
    pub fn file_pattern(self) -> &'static str {
        match self {
            ImportFormat::OpenAi => "`*.json` and `*.jsonl`",
            ImportFormat::TauBench => "`tasks*.jsonl`",
            ImportFormat::Tau2Bench => "`tasks*.json`",
            ImportFormat::ToolBench => "`*.json` except `*_query.json`",
            ImportFormat::StableToolBench => "`*.json` outside `solvable_queries/`",
            ImportFormat::Otlp => "`*.json`, `*.jsonl`, `*.ndjson`, `*.pb`, `*.binpb` and `*.protobuf`",
        }
    }
}

impl fmt::Display for ImportFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Imported {
    /// How many items were read: imported plus skipped.
    #[must_use]
    pub fn n_read(&self) -> usize {
        self.items.len() + self.skipped.len()
    }

    /// Appends everything `other` holds to `self`.
    pub fn append(&mut self, mut other: Imported) {
        if self.locations.len() != self.items.len() || other.locations.len() != other.items.len() {
            // Locations stay parallel to the items or are dropped, never misaligned.
            self.locations.clear();
            other.locations.clear();
        }
        self.items.append(&mut other.items);
        self.locations.append(&mut other.locations);
        self.skipped.append(&mut other.skipped);
        self.files.append(&mut other.files);
        self.notes.append(&mut other.notes);
        self.gaps.append(&mut other.gaps);
    }
}

/// What an import does with items that share an id (and attempt): `flowmem import
/// --duplicate-ids`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DuplicateIds {
    /// Keep every item with the id it had: ids stay verbatim (the default).
    #[default]
    Keep,
    /// Give the second and later items with an id the suffix `~2`, `~3`, … (the first
    /// keeps it), so every id is unique.
    Rename,
}

/// An id (with its attempt) that more than one item of an import carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Duplicate {
    /// The kind of the items.
    pub kind: ItemKind,
    /// The shared id, as the source has it.
    pub id: String,
    /// The shared attempt, if the items have one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// How many items carry it.
    pub count: usize,
    /// Where each item with the id came from, first first; empty when unknown.
    pub locations: Vec<Location>,
    /// With [`DuplicateIds::Rename`], the ids the second and later items got.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub renamed: Vec<String>,
}

impl Imported {
    /// Finds items that share an id and attempt, reports each such id once, and keeps or
    /// renames them as `policy` says.
    ///
    /// Records and trajectories never clash with each other, and trajectories of the
    /// same task with different attempts are not duplicates.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_model::{DuplicateIds, ImportFormat, import_text};
    ///
    /// let text = "{\"id\": 7, \"instruction\": \"a\", \"actions\": []}\n{\"id\": 7, \"instruction\": \"b\", \"actions\": []}\n";
    /// let mut imported = import_text(ImportFormat::TauBench, "tasks.jsonl".as_ref(), text);
    /// let duplicates = imported.resolve_duplicate_ids(DuplicateIds::Rename);
    /// assert_eq!(duplicates[0].id, "7");
    /// assert_eq!(duplicates[0].renamed, ["7~2"]);
    /// assert_eq!(imported.items[1].id(), "7~2");
    /// ```
    pub fn resolve_duplicate_ids(&mut self, policy: DuplicateIds) -> Vec<Duplicate> {
        let mut seen: std::collections::HashMap<(ItemKind, String, Option<u32>), usize> =
            std::collections::HashMap::new();
        let mut res: Vec<Duplicate> = Vec::new();
        let mut taken: std::collections::HashSet<(ItemKind, String)> =
            self.items.iter().map(|item| (item.kind(), item.id().to_owned())).collect();
        let mut group_of: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
        for idx in 0..self.items.len() {
            let item = &self.items[idx];
            let key = (item.kind(), item.id().to_owned(), attempt_of(item));
            let Some(&first) = seen.get(&key) else {
                seen.insert(key, idx);
                continue;
            };
            let group = *group_of.entry(first).or_insert_with(|| {
                res.push(Duplicate {
                    kind: key.0,
                    id: key.1.clone(),
                    attempt: key.2,
                    count: 1,
                    locations: self.locations.get(first).cloned().into_iter().collect(),
                    renamed: Vec::new(),
                });
                res.len() - 1
            });
            let duplicate = &mut res[group];
            duplicate.count += 1;
            duplicate.locations.extend(self.locations.get(idx).cloned());
            if policy == DuplicateIds::Rename {
                let mut n = duplicate.renamed.len() + 2;
                let mut renamed = format!("{}~{n}", duplicate.id);
                while !taken.insert((duplicate.kind, renamed.clone())) {
                    n += 1;
                    renamed = format!("{}~{n}", duplicate.id);
                }
                set_id(&mut self.items[idx], renamed.clone());
                duplicate.renamed.push(renamed);
            }
        }
        res
    }
}

fn attempt_of(item: &Item) -> Option<u32> {
    match item {
        Item::Record(_) => None,
        Item::Trajectory(trajectory) => trajectory.attempt,
    }
}

fn set_id(item: &mut Item, id: String) {
    match item {
        Item::Record(record) => record.id = id,
        Item::Trajectory(trajectory) => trajectory.id = id,
    }
}

impl fmt::Display for Duplicate {
    /// Renders ``duplicate id `7`: `b.jsonl:3` repeats `a.jsonl:1``.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "duplicate id `{}`", self.id)?;
        if let Some(attempt) = self.attempt {
            write!(f, " (attempt {attempt})")?;
        }
        match self.locations.split_first() {
            Some((first, rest)) if !rest.is_empty() => {
                let rest: Vec<String> = rest.iter().map(ToString::to_string).collect();
                write!(f, ": {} repeat{} {first}", rest.join(", "), if rest.len() == 1 { "s" } else { "" })?;
            }
            _ => write!(f, ": {} items", self.count)?,
        }
        if !self.renamed.is_empty() {
            write!(
                f,
                "; renamed to {}",
                self.renamed.iter().map(|id| format!("`{id}`")).collect::<Vec<_>>().join(", ")
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for Location {
    /// Renders ``file:line` at `$.path``, leaving out what is unknown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        f.write_str("`")?;
        if let Some(json_path) = &self.json_path {
            write!(f, " at `{json_path}`")?;
        }
        Ok(())
    }
}

impl fmt::Display for Skipped {
    /// Renders ``file:line` at `$.path`: reason`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.reason)
    }
}
