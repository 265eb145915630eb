//! Finding input files, decoding them, and splitting them into items, with located
//! skips.
//!
//! Formats differ in how a file holds items: one per JSONL line, one per element of a
//! top-level array or object, or one per file. The drivers here parse, call a format's
//! conversion per item, and turn each [`Problem`] into a [`Skipped`] naming the file, the
//! line and the JSON path.
//!
//! Files are decoded here too ([`decode`]): a leading UTF-8 byte order mark is dropped,
//! and bytes that are not UTF-8 cost only what holds them: their JSONL line, or the file
//! when the file is one JSON document.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::Item;
use crate::import::json::{LineCounter, Node, Problem, Segment, locate, offset_in, render_path, top_level_children};
use crate::import::{ImportError, ImportFormat, Imported, Location, Skipped};

/// One input file, read into memory.
pub(crate) struct Input<'a> {
    /// The file, as given or found.
    pub(crate) file: &'a Path,
    /// Its text, with bytes that are not UTF-8 replaced by U+FFFD.
    pub(crate) text: &'a str,
    /// Where the text held bytes that are not UTF-8: per line (1-based), the 1-based
    /// column of the first bad byte; in line order.
    pub(crate) bad_utf8: &'a [(usize, usize)],
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
    /// An input for `file` holding `text`, with bytes that were not UTF-8 at `bad_utf8`
    /// (see [`decode`]).
    pub(crate) fn new(
        format: ImportFormat,
        file: &'a Path,
        text: &'a str,
        bad_utf8: &'a [(usize, usize)],
    ) -> Input<'a> {
        let name = file.file_name().map(|name| name.to_string_lossy()).unwrap_or_default();
        let parent = file
            .parent()
            .and_then(Path::file_name)
            .map(|parent| format!("{}/", parent.to_string_lossy()))
            .unwrap_or_default();
        Input { file, text, bad_utf8, source: format!("{format}:{parent}{name}") }
    }

    /// Converts each non-blank line as one item; a line holding bytes that are not
    /// UTF-8 is skipped.
    pub(crate) fn each_line(&self, out: &mut Imported, mut convert: impl FnMut(Node<'_, '_>) -> Result<Item, Problem>) {
        let mut bad = self.bad_utf8.iter().peekable();
        for (idx, line) in self.text.lines().enumerate() {
            let line_no = idx + 1;
            while bad.next_if(|(bad_line, _)| *bad_line < line_no).is_some() {}
            if let Some((_, column)) = bad.next_if(|(bad_line, _)| *bad_line == line_no) {
                self.skip(out, Some(line_no), None, format!("not valid UTF-8 at column {column}"));
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            let value: Value = match serde_json::from_str(line) {
                Ok(value) => value,
                Err(err) => {
                    self.skip(out, Some(line_no), None, syntax_reason(&err));
                    continue;
                }
            };
            match convert(Node::root(&value)) {
                Ok(item) => self.push(out, item, line_no),
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
        if self.skip_if_not_utf8(out) {
            return;
        }
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
                Ok(item) => {
                    let line = lines.line_at(item_offset);
                    self.push(out, item, line);
                }
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
        if self.skip_if_not_utf8(out) {
            return;
        }
        let value: Value = match serde_json::from_str(self.text) {
            Ok(value) => value,
            Err(err) => {
                self.skip_file(out, &err);
                return;
            }
        };
        match convert(Node::root(&value)) {
            Ok(item) => {
                // The line the document starts on.
                let line = LineCounter::new(self.text).line_at(self.text.len() - self.text.trim_start().len());
                self.push(out, item, line);
            }
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

    /// Records that a file read as one document is not UTF-8, naming the first bad byte;
    /// whether it was.
    fn skip_if_not_utf8(&self, out: &mut Imported) -> bool {
        let Some(&(line, column)) = self.bad_utf8.first() else { return false };
        let reason =
            format!("not valid UTF-8 at column {column}; the file is one JSON document, so all of it is skipped");
        self.skip(out, Some(line), None, reason);
        true
    }

    /// Records that the whole file is not valid JSON.
    pub(crate) fn skip_file(&self, out: &mut Imported, err: &serde_json::Error) {
        self.skip(out, Some(err.line()), None, syntax_reason(err));
    }

    /// Records an imported item with the line it starts on.
    fn push(&self, out: &mut Imported, item: Item, line: usize) {
        out.items.push(item);
        out.locations.push(Location { file: self.file.to_owned(), line: Some(line), json_path: None });
    }

    fn skip(&self, out: &mut Imported, line: Option<usize>, json_path: Option<String>, reason: String) {
        let location = Location { file: self.file.to_owned(), line, json_path };
        out.skipped.push(Skipped { location, reason });
    }
}

/// A file's bytes as text: a leading byte order mark dropped, and each run of bytes that
/// are not UTF-8 replaced by U+FFFD. Also gives, per line holding such bytes, the line and
/// the column (both 1-based, in bytes) of its first bad byte.
pub(crate) fn decode(bytes: &[u8]) -> (std::borrow::Cow<'_, str>, Vec<(usize, usize)>) {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if let Ok(text) = std::str::from_utf8(bytes) {
        return (std::borrow::Cow::Borrowed(text), Vec::new());
    }
    let mut text = String::with_capacity(bytes.len());
    let mut bad: Vec<(usize, usize)> = Vec::new();
    let (mut line, mut line_start) = (1, 0);
    let mut offset = 0;
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid();
        for (idx, _) in valid.match_indices('\n') {
            line += 1;
            line_start = offset + idx + 1;
        }
        text.push_str(valid);
        offset += valid.len();
        if !chunk.invalid().is_empty() {
            if bad.last().is_none_or(|(bad_line, _)| *bad_line != line) {
                bad.push((line, offset - line_start + 1));
            }
            text.push(char::REPLACEMENT_CHARACTER);
            offset += chunk.invalid().len();
        }
    }
    (std::borrow::Cow::Owned(text), bad)
}

/// "not valid JSON: … at column N" with serde_json's message. The line is reported in
/// the location, so serde_json's own "at line L" (1 within a JSONL line) is dropped.
fn syntax_reason(err: &serde_json::Error) -> String {
    let text = err.to_string();
    let message = text.rsplit_once(" at line ").map_or(text.as_str(), |(message, _)| message);
    format!("not valid JSON: {message} at column {}", err.column())
}
