//! Reading and writing flowmem's JSONL files: one [`Record`] or [`Trajectory`] a line.
//!
//! Readers stop at the first bad line and say where it is: the file, the line and the
//! JSON path of the bad field. [`write_jsonl_atomic`] writes through
//! [`AtomicFile`](crate::AtomicFile), so a reader never sees half a file.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::fs::{AtomicFile, WriteError};
use crate::{Item, ItemKind, Record, Trajectory};

/// A JSONL file that could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonlError {
    /// The file could not be opened or read.
    #[error("cannot read `{}`", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A line is not valid JSON.
    #[error("`{}:{line}:{column}` is not valid JSON: {reason}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// The 1-based column within the line.
        column: usize,
        /// The parser's message.
        reason: String,
    },
    /// A line is JSON but not the expected type.
    #[error("invalid {expected} in `{}:{line}` at `{json_path}`: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// The JSON path of the bad field, such as `$.orchestration[0].args`.
        json_path: String,
        /// What the line should hold, such as `record`.
        expected: &'static str,
        /// What is wrong with the field.
        reason: String,
    },
    /// A line is neither a record nor a trajectory.
    #[error(
        "`{}:{line}` holds neither a record nor a trajectory\nhint: a record has `orchestration`, a trajectory has `steps`",
        path.display()
    )]
    UnknownKind {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
    },
    /// A line holds another kind of item than the lines before it.
    #[error("`{}:{line}` holds a {found}, but the file's first item is a {expected}", path.display())]
    MixedKinds {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// The kind of the file's first item.
        expected: ItemKind,
        /// The kind found on this line.
        found: ItemKind,
    },
    /// The file could not be written.
    #[error("cannot write `{}`", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An item could not be serialised.
    #[error("cannot serialise item {index} for `{}`", path.display())]
    Serialize {
        /// The file being written.
        path: PathBuf,
        /// The 0-based index of the item.
        index: usize,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// Reads a JSONL file of [`Record`]s. Blank lines are ignored.
///
/// # Errors
///
/// - [`JsonlError::Read`] when the file cannot be read;
/// - [`JsonlError::Syntax`] at the first line that is not JSON;
/// - [`JsonlError::Invalid`] at the first line that is not a record, naming the field.
///
/// # Example
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("records.jsonl");
/// use flowmem_model::{Record, read_records, write_jsonl_atomic};
///
/// let record: Record = serde_json::from_str(r#"{"id": "7", "query": "q", "orchestration": []}"#)?;
/// write_jsonl_atomic(&path, [&record])?;
/// assert_eq!(read_records(&path)?, vec![record]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_records(path: &Path) -> Result<Vec<Record>, JsonlError> {
    read_jsonl(path, "record")
}

/// Reads a JSONL file of [`Trajectory`]s. Blank lines are ignored.
///
/// # Errors
///
/// As [`read_records`], for trajectories.
pub fn read_trajectories(path: &Path) -> Result<Vec<Trajectory>, JsonlError> {
    read_jsonl(path, "trajectory")
}

/// Reads a JSONL file of records or of trajectories, telling which from its lines.
///
/// A line with `orchestration` or `reference_result` is a record; one with `steps` or
/// `final_answer` is a trajectory. Every line must be of the same kind as the first.
/// Blank lines are ignored.
///
/// # Errors
///
/// - [`JsonlError::Read`], [`JsonlError::Syntax`] and [`JsonlError::Invalid`] as for
///   [`read_records`];
/// - [`JsonlError::UnknownKind`] at a line that is neither kind;
/// - [`JsonlError::MixedKinds`] at the first line whose kind differs from the first's.
pub fn read_items(path: &Path) -> Result<Vec<Item>, JsonlError> {
    let mut items = Vec::new();
    let mut file_kind = None;
    for_each_line(path, |line_no, line| {
        let value: Value = serde_json::from_str(line).map_err(|err| syntax(path, line_no, &err))?;
        let Some(kind) = kind_of(&value) else {
            return Err(JsonlError::UnknownKind { path: path.to_owned(), line: line_no });
        };
        let expected = *file_kind.get_or_insert(kind);
        if kind != expected {
            return Err(JsonlError::MixedKinds { path: path.to_owned(), line: line_no, expected, found: kind });
        }
        let item = match kind {
            ItemKind::Record => Item::Record(from_value(path, line_no, value, "record")?),
            ItemKind::Trajectory => Item::Trajectory(from_value(path, line_no, value, "trajectory")?),
        };
        items.push(item);
        Ok(())
    })?;
    Ok(items)
}

/// Reads a JSONL file of any deserialisable type, one value a line; `expected` names the
/// type in errors (`workflow`, `trace event`). Blank lines are ignored.
///
/// # Errors
///
/// As [`read_records`].
pub fn read_jsonl<T: DeserializeOwned>(path: &Path, expected: &'static str) -> Result<Vec<T>, JsonlError> {
    let mut items = Vec::new();
    for_each_line(path, |line_no, line| {
        let mut deserializer = serde_json::Deserializer::from_str(line);
        let item =
            serde_path_to_error::deserialize(&mut deserializer).map_err(|err| located(path, line_no, err, expected))?;
        items.push(item);
        Ok(())
    })?;
    Ok(items)
}

/// Writes `items` as JSONL to `path`, atomically.
///
/// The lines go to a temporary file in `path`'s directory, which is flushed, synced and
/// then renamed over `path`. On any error the temporary file is removed and `path` is
/// left as it was.
///
/// # Errors
///
/// - [`JsonlError::Write`] when the temporary file cannot be created, written or renamed;
/// - [`JsonlError::Serialize`] when an item cannot be serialised.
///
/// # Example
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("out.jsonl");
/// flowmem_model::write_jsonl_atomic(&path, &[serde_json::json!({"a": 1})])?;
/// assert_eq!(std::fs::read_to_string(&path)?, "{\"a\":1}\n");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_jsonl_atomic<'a, T: Serialize + 'a>(
    path: &Path,
    items: impl IntoIterator<Item = &'a T>,
) -> Result<(), JsonlError> {
    let write_error = |source| JsonlError::Write { path: path.to_owned(), source };
    let from_atomic = |err: WriteError| JsonlError::Write { path: err.path, source: err.source };
    // Dropping the file on an early return deletes the temporary file.
    let mut writer = BufWriter::new(AtomicFile::create(path).map_err(from_atomic)?);
    for (index, item) in items.into_iter().enumerate() {
        serde_json::to_writer(&mut writer, item).map_err(|source| {
            if source.is_io() {
                JsonlError::Write { path: path.to_owned(), source: source.into() }
            } else {
                JsonlError::Serialize { path: path.to_owned(), index, source }
            }
        })?;
        writer.write_all(b"\n").map_err(write_error)?;
    }
    let file = writer.into_inner().map_err(|err| write_error(err.into_error()))?;
    file.commit().map_err(from_atomic)
}

fn for_each_line(path: &Path, mut each: impl FnMut(usize, &str) -> Result<(), JsonlError>) -> Result<(), JsonlError> {
    let read_error = |source| JsonlError::Read { path: path.to_owned(), source };
    let file = File::open(path).map_err(read_error)?;
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    let mut line_no = 0;
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(read_error)? == 0 {
            return Ok(());
        }
        line_no += 1;
        if line.trim().is_empty() {
            continue;
        }
        each(line_no, line.trim_end_matches(['\n', '\r']))?;
    }
}

fn kind_of(value: &Value) -> Option<ItemKind> {
    let map = value.as_object()?;
    if map.contains_key("orchestration") || map.contains_key("reference_result") {
        Some(ItemKind::Record)
    } else if map.contains_key("steps") || map.contains_key("final_answer") {
        Some(ItemKind::Trajectory)
    } else {
        None
    }
}

fn from_value<T: DeserializeOwned>(
    path: &Path,
    line_no: usize,
    value: Value,
    expected: &'static str,
) -> Result<T, JsonlError> {
    serde_path_to_error::deserialize(value).map_err(|err| located(path, line_no, err, expected))
}

fn located(
    path: &Path,
    line: usize,
    err: serde_path_to_error::Error<serde_json::Error>,
    expected: &'static str,
) -> JsonlError {
    let json_path = json_path(err.path());
    let source = err.into_inner();
    if source.is_syntax() || source.is_eof() {
        return syntax(path, line, &source);
    }
    JsonlError::Invalid { path: path.to_owned(), line, json_path, expected, reason: message_only(&source) }
}

fn syntax(path: &Path, line: usize, err: &serde_json::Error) -> JsonlError {
    JsonlError::Syntax { path: path.to_owned(), line, column: err.column(), reason: message_only(err) }
}

/// serde_json's message without its " at line L column C" suffix, which counts within
/// one JSONL line and so would contradict the file line we report.
fn message_only(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rsplit_once(" at line ") {
        Some((message, _)) if err.line() > 0 => message.to_owned(),
        _ => text,
    }
}

/// serde_path_to_error renders `a.b[0].c`, or `.` for the root; we write `$.a.b[0].c`.
fn json_path(path: &serde_path_to_error::Path) -> String {
    let text = path.to_string();
    if text == "." {
        return "$".to_owned();
    }
    if text.starts_with('[') { format!("${text}") } else { format!("$.{text}") }
}
