//! Finding input files and splitting them into items, with located skips.
//!
//! Formats differ in how a file holds items: one per JSONL line, one per element of a
//! top-level array or object, or one per file. The drivers here parse, call a format's
//! conversion per item, and turn each [`Problem`] into a [`Skipped`] naming the file, the
//! line and the JSON path.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::Item;
use crate::import::json::{LineCounter, Node, Problem, Segment, locate, offset_in, render_path, top_level_children};
use crate::import::{ImportError, ImportFormat, Imported, Location, Skipped};

/// One input file, read into memory.
pub(crate) struct Input<'a> {
    /// The file, as given or found.
    pub(crate) file: &'a Path,
    /// Its text.
    pub(crate) text: &'a str,
    /// The label for [`Meta::source`](crate::Meta::source), like `tau-bench:retail/tasks_test.jsonl`.
    pub(crate) source: String,
}

/// The files to read for `path`: the file itself, or the matching files under a
/// directory, in path order.
pub(crate) fn input_files(format: ImportFormat, path: &Path) -> Result<Vec<PathBuf>, ImportError> {
    let metadata = std::fs::metadata(path).map_err(|source| ImportError::Read { path: path.to_owned(), source })?;
    if !metadata.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files = Vec::new();
    collect_files(format, path, &mut files)?;
    files.sort();
    if files.is_empty() {
        return Err(ImportError::NoInputFiles { path: path.to_owned(), format, pattern: format.file_pattern() });
    }
    Ok(files)
}

fn collect_files(format: ImportFormat, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ImportError> {
    let read_error = |source| ImportError::Read { path: dir.to_owned(), source };
    for entry in std::fs::read_dir(dir).map_err(read_error)? {
        let entry = entry.map_err(read_error)?;
        let path = entry.path();
        let file_type = entry.file_type().map_err(read_error)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if file_type.is_dir() {
            if format == ImportFormat::StableToolBench && name == "solvable_queries" {
                // Solvable queries carry no runs; only the evaluation sets do.
                continue;
            }
            collect_files(format, &path, out)?;
        } else if matches_format(format, &name) {
            out.push(path);
        }
    }
    Ok(())
}

fn matches_format(format: ImportFormat, name: &str) -> bool {
    match format {
        ImportFormat::OpenAi => name.ends_with(".json") || name.ends_with(".jsonl"),
        ImportFormat::TauBench => name.starts_with("tasks") && name.ends_with(".jsonl"),
        ImportFormat::Tau2Bench => name.starts_with("tasks") && name.ends_with(".json"),
        ImportFormat::ToolBench => name.ends_with(".json") && !name.ends_with("_query.json"),
        ImportFormat::StableToolBench => name.ends_with(".json"),
        ImportFormat::Otlp => crate::import::otlp::is_otlp_file(name),
    }
}

impl<'a> Input<'a> {
    /// An input for `file` holding `text`.
    pub(crate) fn new(format: ImportFormat, file: &'a Path, text: &'a str) -> Input<'a> {
        let name = file.file_name().map(|name| name.to_string_lossy()).unwrap_or_default();
        let parent = file
            .parent()
            .and_then(Path::file_name)
            .map(|parent| format!("{}/", parent.to_string_lossy()))
            .unwrap_or_default();
        Input { file, text, source: format!("{format}:{parent}{name}") }
    }

    /// Converts each non-blank line as one item.
    pub(crate) fn each_line(&self, out: &mut Imported, mut convert: impl FnMut(Node<'_, '_>) -> Result<Item, Problem>) {
        for (idx, line) in self.text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let line_no = idx + 1;
            let value: Value = match serde_json::from_str(line) {
                Ok(value) => value,
                Err(err) => {
                    self.skip(out, Some(line_no), None, syntax_reason(&err));
                    continue;
                }
            };
            match convert(Node::root(&value)) {
                Ok(item) => out.items.push(item),
                Err(problem) => {
                    let json_path = render_path(&[], &problem.segments);
                    self.skip(out, Some(line_no), Some(json_path), problem.message);
                }
            }
        }
    }

    /// Converts each element of a top-level array, or each member of a top-level object
    /// (passing its key), as one item.
    pub(crate) fn each_element(
        &self,
        out: &mut Imported,
        mut convert: impl FnMut(Option<&str>, Node<'_, '_>) -> Result<Item, Problem>,
    ) {
        let children = match top_level_children(self.text) {
            Ok(children) => children,
            Err(err) => {
                self.skip_file(out, &err);
                return;
            }
        };
        let mut lines = LineCounter::new(self.text);
        for (idx, (key, raw)) in children.iter().enumerate() {
            let prefix = match key {
                Some(key) => Segment::Key(key.clone()),
                None => Segment::Index(idx),
            };
            let item_offset = offset_in(self.text, raw);
            let value: Value = match serde_json::from_str(raw) {
                Ok(value) => value,
                Err(err) => {
                    // The raw text already parsed once, so this is not expected; report it
                    // rather than lose the item silently.
                    let line = lines.line_at(item_offset);
                    let json_path = render_path(&[prefix], &[]);
                    self.skip(out, Some(line), Some(json_path), syntax_reason(&err));
                    continue;
                }
            };
            match convert(key.as_deref(), Node::root(&value)) {
                Ok(item) => out.items.push(item),
                Err(problem) => {
                    let line = lines.line_at(item_offset + locate(raw, &problem.segments));
                    let json_path = render_path(&[prefix], &problem.segments);
                    self.skip(out, Some(line), Some(json_path), problem.message);
                }
            }
        }
    }

    /// Converts the whole file as one item.
    #[allow(dead_code, reason = "used by the ToolBench and OpenAI importers, which come next")]
    pub(crate) fn document(&self, out: &mut Imported, convert: impl FnOnce(Node<'_, '_>) -> Result<Item, Problem>) {
        let value: Value = match serde_json::from_str(self.text) {
            Ok(value) => value,
            Err(err) => {
                self.skip_file(out, &err);
                return;
            }
        };
        match convert(Node::root(&value)) {
            Ok(item) => out.items.push(item),
            Err(problem) => self.skip_problem(out, &problem),
        }
    }

    /// Records a problem located by JSON path from the start of the file.
    #[allow(dead_code, reason = "used by the ToolBench and OpenAI importers, which come next")]
    pub(crate) fn skip_problem(&self, out: &mut Imported, problem: &Problem) {
        let offset = locate(self.text, &problem.segments);
        let line = LineCounter::new(self.text).line_at(offset);
        let json_path = render_path(&[], &problem.segments);
        self.skip(out, Some(line), Some(json_path), problem.message.clone());
    }

    /// Records that the whole file is not valid JSON.
    pub(crate) fn skip_file(&self, out: &mut Imported, err: &serde_json::Error) {
        self.skip(out, Some(err.line()), None, syntax_reason(err));
    }

    fn skip(&self, out: &mut Imported, line: Option<usize>, json_path: Option<String>, reason: String) {
        let location = Location { file: self.file.to_owned(), line, json_path };
        out.skipped.push(Skipped { location, reason });
    }
}

/// "not valid JSON: … at column N" with serde_json's message. The line is reported in
/// the location, so serde_json's own "at line L" (1 within a JSONL line) is dropped.
fn syntax_reason(err: &serde_json::Error) -> String {
    let text = err.to_string();
    let message = text.rsplit_once(" at line ").map_or(text.as_str(), |(message, _)| message);
    format!("not valid JSON: {message} at column {}", err.column())
}
