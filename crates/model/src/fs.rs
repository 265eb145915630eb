//! Writing files atomically: a reader sees the old file or the new one, never half of
//! either.
//!
//! Every writer goes through [`AtomicFile`]: the bytes go to a temporary file in the
//! target's directory (so the rename stays on one file system), which is flushed, synced
//! and then renamed over the target. On any error, or when an [`AtomicFile`] is dropped
//! without [`AtomicFile::commit`], the temporary file is removed and the target is left
//! as it was. [`write_atomic`], [`write_text_atomic`] and [`write_json_atomic`] are the
//! one-call forms; [`write_jsonl_atomic`](crate::write_jsonl_atomic) uses the same file.
//!
//! Appending to a stream that is synced line by line (`progress.jsonl`) is a different
//! operation and does not go through here.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// A file that could not be written atomically.
///
/// The target named by `path` is unchanged. A value that does not serialise is reported
/// with an [`std::io::ErrorKind::InvalidData`] source wrapping serde's error.
#[derive(Debug, thiserror::Error)]
#[error("cannot write `{}`", path.display())]
pub struct WriteError {
    /// The file that was to be written.
    pub path: PathBuf,
    /// The cause.
    #[source]
    pub source: std::io::Error,
}

/// A file being written beside its target, renamed over it by [`AtomicFile::commit`].
///
/// Dropping it without committing removes the temporary file and leaves the target as
/// it was.
///
/// # Example
///
/// ```
/// use std::io::Write;
///
/// use flowmem_model::AtomicFile;
///
/// # let dir = tempfile::tempdir()?;
/// let path = dir.path().join("out.txt");
/// let mut file = AtomicFile::create(&path)?;
/// writeln!(file, "first line")?;
/// assert!(!path.exists(), "nothing is visible before the commit");
/// file.commit()?;
/// assert_eq!(std::fs::read_to_string(&path)?, "first line\n");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AtomicFile {
    path: PathBuf,
    temp: tempfile::NamedTempFile,
}

impl AtomicFile {
    /// Starts writing `path`: creates a temporary file in `path`'s directory.
    ///
    /// # Errors
    ///
    /// [`WriteError`] when the temporary file cannot be created, such as when the
    /// directory does not exist or is not writable.
    pub fn create(path: &Path) -> Result<AtomicFile, WriteError> {
        let dir = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let temp = tempfile::Builder::new()
            .prefix(".flowmem-")
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|source| WriteError { path: path.to_owned(), source })?;
        Ok(AtomicFile { path: path.to_owned(), temp })
    }

    /// The target this file will replace.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Syncs the written bytes to disk and renames the file over its target.
    ///
    /// # Errors
    ///
    /// [`WriteError`] when the sync or the rename fails (for instance when a directory
    /// stands at the target's path); the temporary file is then removed.
    pub fn commit(self) -> Result<(), WriteError> {
        let AtomicFile { path, temp } = self;
        if let Err(source) = temp.as_file().sync_all() {
            return Err(WriteError { path, source });
        }
        // On failure `PersistError` hands the temporary file back; dropping it deletes it.
        match temp.persist(&path) {
            Ok(_) => Ok(()),
            Err(err) => Err(WriteError { path, source: err.error }),
        }
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.temp.as_file_mut().write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.temp.as_file_mut().flush()
    }
}

/// Writes `bytes` to `path` atomically.
///
/// # Errors
///
/// [`WriteError`] naming `path` when the temporary file cannot be created, written,
/// synced or renamed; `path` is then unchanged and no temporary file is left.
///
/// # Example
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("out.bin");
/// flowmem_model::write_atomic(&path, b"\x00\x01")?;
/// assert_eq!(std::fs::read(&path)?, [0, 1]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let mut file = AtomicFile::create(path)?;
    if let Err(source) = file.write_all(bytes) {
        return Err(WriteError { path: path.to_owned(), source });
    }
    file.commit()
}

/// Writes `text` to `path` atomically, as UTF-8.
///
/// # Errors
///
/// As [`write_atomic`].
///
/// # Example
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("report.html");
/// flowmem_model::write_text_atomic(&path, "<p>hello</p>\n")?;
/// assert_eq!(std::fs::read_to_string(&path)?, "<p>hello</p>\n");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_text_atomic(path: &Path, text: &str) -> Result<(), WriteError> {
    write_atomic(path, text.as_bytes())
}

/// Writes `value` to `path` atomically as pretty-printed JSON followed by a newline.
///
/// # Errors
///
/// As [`write_atomic`]; also when `value` does not serialise (a map with non-string
/// keys, a failing `Serialize` impl), with an [`std::io::ErrorKind::InvalidData`] source.
///
/// # Example
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("state.json");
/// flowmem_model::write_json_atomic(&path, &serde_json::json!({"a": 1}))?;
/// assert_eq!(std::fs::read_to_string(&path)?, "{\n  \"a\": 1\n}\n");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_json_atomic<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), WriteError> {
    let mut text = match serde_json::to_vec_pretty(value) {
        Ok(text) => text,
        Err(err) => return Err(WriteError { path: path.to_owned(), source: err.into() }),
    };
    text.push(b'\n');
    write_atomic(path, &text)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::Write;
    use std::path::Path;

    use crate::fs::{AtomicFile, write_atomic, write_json_atomic, write_text_atomic};

    /// The names in `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut res: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|entry| entry.unwrap().file_name().into_string().unwrap()).collect();
        res.sort();
        res
    }

    #[test]
    fn a_write_replaces_the_file_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        write_text_atomic(&path, "old\n").unwrap();
        write_text_atomic(&path, "new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        assert_eq!(names(dir.path()), ["out.txt"]);
    }

    #[test]
    fn a_directory_in_the_way_fails_naming_the_path_and_leaves_it_intact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), "kept").unwrap();
        let err = write_atomic(&path, b"new").unwrap_err();
        assert_eq!(err.path, path);
        assert!(err.to_string().contains("out.txt"), "{err}");
        assert_eq!(std::fs::read_to_string(path.join("inside")).unwrap(), "kept");
        assert_eq!(names(dir.path()), ["out.txt"], "no temporary file is left");
    }

    #[test]
    fn a_missing_directory_fails_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("out.json");
        let err = write_json_atomic(&path, &1).unwrap_err();
        assert_eq!(err.path, path);
        assert_eq!(err.source.kind(), std::io::ErrorKind::NotFound);
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn a_value_that_does_not_serialise_leaves_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write_json_atomic(&path, &serde_json::json!({"n": 1})).unwrap();
        // JSON object keys must be strings.
        let bad: BTreeMap<(u8, u8), u8> = BTreeMap::from([((1, 2), 3)]);
        let err = write_json_atomic(&path, &bad).unwrap_err();
        assert_eq!(err.source.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\n  \"n\": 1\n}\n");
        assert_eq!(names(dir.path()), ["state.json"]);
    }

    #[test]
    fn an_uncommitted_file_leaves_the_old_file_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        write_text_atomic(&path, "old").unwrap();
        let mut file = AtomicFile::create(&path).unwrap();
        file.write_all(b"half of the new").unwrap();
        assert_eq!(names(dir.path()).len(), 2, "the temporary file sits beside the target");
        drop(file);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(names(dir.path()), ["out.txt"]);
    }
}
