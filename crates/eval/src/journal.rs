//! A resumable evaluation: every finished run is appended to `DIR/progress.jsonl`, so a
//! killed `flowmem eval` continues where it stopped instead of starting over.
//!
//! The file's first line holds the evaluation's settings (`{"settings": {...}}`), each
//! further line one finished run (`{"run": RunMeasurement}`). A journal opened with other
//! settings than the ones it was written with is refused, naming the setting that
//! differs, so the runs of two different evaluations are never mixed in one report.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::error::EvalError;
use crate::report::RunMeasurement;

/// The journal's file name inside an evaluation's output directory.
pub const PROGRESS_FILE: &str = "progress.jsonl";

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Settings(Map<String, Value>),
    Run(Box<RunMeasurement>),
}

/// The progress file of one evaluation: open it before the runs, [`record`] each
/// finished run, and [`finish`] it once the report is written.
///
/// [`record`]: EvalJournal::record
/// [`finish`]: EvalJournal::finish
///
/// # Example
///
/// ```
/// use flowmem_eval::EvalJournal;
/// use serde_json::json;
///
/// # let dir = tempfile::tempdir()?;
/// let settings = json!({"grounding": "off", "repeat": 1});
/// let settings = settings.as_object().unwrap();
/// let (journal, finished) = EvalJournal::open(dir.path(), settings)?;
/// assert!(finished.is_empty()); // a new evaluation
/// journal.finish()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct EvalJournal {
    path: PathBuf,
    file: Mutex<File>,
}

impl EvalJournal {
    /// Opens `dir`'s progress file for an evaluation with `settings`, creating `dir` and
    /// the file as needed, and returns the runs an interrupted evaluation with the same
    /// settings already finished there, in the order they finished.
    ///
    /// A last line cut short by a kill in the middle of a write is dropped (its run is
    /// made again). A journal that holds no run yet is started afresh with `settings`.
    ///
    /// # Errors
    ///
    /// [`EvalError::Journal`] when the file holds runs of an evaluation with other
    /// settings (naming the first that differs) or holds a line that is not a journal line
    /// (naming it), and [`EvalError::Write`] when the file cannot be read or written.
    pub fn open(dir: &Path, settings: &Map<String, Value>) -> Result<(EvalJournal, Vec<RunMeasurement>), EvalError> {
        std::fs::create_dir_all(dir).map_err(|source| EvalError::Write { path: dir.to_path_buf(), source })?;
        let path = dir.join(PROGRESS_FILE);
        let io = |source| EvalError::Write { path: path.clone(), source };
        let (mut saved, finished, mut valid_len) = read_journal(&path)?;
        if saved.is_some() && finished.is_empty() {
            // No run finished under those settings: nothing to keep, whatever they were.
            (saved, valid_len) = (None, 0);
        }
        if let Some(problem) = saved.as_ref().and_then(|saved| first_difference(saved, settings)) {
            return Err(EvalError::Journal {
                path,
                problem: format!(
                    "it holds the runs of another evaluation: {problem}\nhint: run the command that wrote it again to finish that evaluation, or remove the file to start this one"
                ),
            });
        }
        let mut file =
            flowmem_model::open_append(&path).map_err(|err| EvalError::Write { path: err.path, source: err.source })?;
        if file.metadata().map_err(io)?.len() != valid_len {
            // A half-written last line: cut it off, so the next line starts clean.
            file.set_len(valid_len).map_err(io)?;
        }
        if saved.is_none() {
            write_line(&mut file, &Line::Settings(settings.clone())).map_err(io)?;
        }
        Ok((EvalJournal { path, file: Mutex::new(file) }, finished))
    }

    /// Appends one finished run and flushes it to disk before returning.
    ///
    /// # Errors
    ///
    /// [`EvalError::Write`] naming the file when the line cannot be written.
    pub fn record(&self, run: &RunMeasurement) -> Result<(), EvalError> {
        let mut file = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        write_line(&mut file, &Line::Run(Box::new(run.clone())))
            .map_err(|source| EvalError::Write { path: self.path.clone(), source })
    }

    /// A short fingerprint of an input (records, a workflow) for the settings: the
    /// SHA-256 of its JSON, in hex. Equal inputs give equal fingerprints.
    ///
    /// # Errors
    ///
    /// The serialiser's error when `value` does not serialise.
    pub fn fingerprint(value: &impl Serialize) -> Result<String, serde_json::Error> {
        let json = serde_json::to_vec(value)?;
        Ok(crate::task_check::hex(&Sha256::digest(&json)))
    }

    /// The progress file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the progress file: the evaluation is complete and its report written, so
    /// running the command again starts a new evaluation.
    ///
    /// # Errors
    ///
    /// [`EvalError::Write`] naming the file when it cannot be removed.
    pub fn finish(self) -> Result<(), EvalError> {
        drop(self.file);
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(EvalError::Write { path: self.path, source }),
        }
    }
}

fn write_line(file: &mut File, line: &Line) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(line).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    file.write_all(&bytes)?;
    file.sync_data()
}

/// The saved settings, the finished runs and the length in bytes of the file's complete
/// lines.
type Journal = (Option<Map<String, Value>>, Vec<RunMeasurement>, u64);

fn read_journal(path: &Path) -> Result<Journal, EvalError> {
    let io = |source| EvalError::Write { path: path.to_path_buf(), source };
    let file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok((None, Vec::new(), 0)),
        Err(err) => return Err(io(err)),
    };
    let mut reader = BufReader::new(file);
    let (mut settings, mut runs, mut valid_len) = (None, Vec::new(), 0u64);
    let mut buf = String::new();
    for number in 1.. {
        buf.clear();
        let n = reader.read_line(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        let complete = buf.ends_with('\n');
        let text = buf.trim();
        if !text.is_empty() {
            let bad = |problem: String| EvalError::Journal { path: path.to_path_buf(), problem };
            match serde_json::from_str::<Line>(text) {
                Ok(Line::Settings(saved)) if number == 1 => settings = Some(saved),
                Ok(Line::Settings(_)) => return Err(bad(format!("line {number} repeats the settings of line 1"))),
                Ok(Line::Run(_)) if settings.is_none() => {
                    return Err(bad(format!("line {number} holds a run, but line 1 holds no settings")));
                }
                Ok(Line::Run(run)) => runs.push(*run),
                // A kill in the middle of a write leaves a last line without its newline.
                Err(_) if !complete => break,
                Err(err) => return Err(bad(format!("line {number} is not a journal line: {err}"))),
            }
        }
        if !complete {
            break;
        }
        valid_len += n as u64;
    }
    Ok((settings, runs, valid_len))
}

/// The first setting whose value differs between the journal and this evaluation, said
/// for a person.
fn first_difference(saved: &Map<String, Value>, now: &Map<String, Value>) -> Option<String> {
    let keys: std::collections::BTreeSet<&String> = saved.keys().chain(now.keys()).collect();
    keys.into_iter().find_map(|key| {
        let (before, after) = (saved.get(key), now.get(key));
        (before != after).then(|| {
            let show = |value: Option<&Value>| value.map_or_else(|| "unset".to_owned(), Value::to_string);
            format!("`{key}` was {} there and is {} now", show(before), show(after))
        })
    })
}
