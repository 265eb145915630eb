//! Writing files: the one home of every output file flowmem writes.
//!
//! A reader sees the old file or the new one, never half of either. Every writer goes
//! through [`AtomicFile`]: the bytes go to a temporary file in the target's directory (so
//! the rename stays on one file system), which is flushed, synced and then renamed over
//! the target. On any error, or when an [`AtomicFile`] is dropped without
//! [`AtomicFile::commit`], the temporary file is removed and the target is left as it
//! was. [`write_atomic`], [`write_text_atomic`] and [`write_json_atomic`] are the
//! one-call forms; [`write_jsonl_atomic`](crate::write_jsonl_atomic) uses the same file.
//!
//! What may be replaced, decided here for every writer:
//! - only a regular file, or nothing: a FIFO, a socket, a device or a directory at the
//!   target is refused with a [`WriteError`] naming it and what it is;
//! - a symbolic link is written *through*: the file it points to (following links to the
//!   end) is replaced and the link stays, as `cp` and editors do;
//! - a new file gets the mode the process's umask allows for `0o666` (as `touch` and
//!   shell redirections create files); a replaced file keeps its permission bits.
//!
//! Appending to a stream that is synced line by line (`progress.jsonl`) is a different
//! operation: [`open_append`] opens it under the same rules about what may be written.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// A file that could not be written.
///
/// The target named by `path` is unchanged. A value that does not serialise is reported
/// with an [`std::io::ErrorKind::InvalidData`] source wrapping serde's error; a target
/// that is not a regular file with an [`std::io::ErrorKind::InvalidInput`] source saying
/// what it is.
#[derive(Debug, thiserror::Error)]
#[error("cannot write `{}`", path.display())]
pub struct WriteError {
    /// The file that was to be written, as given.
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
    // The target as the caller named it, for errors.
    path: PathBuf,
    // Where the rename goes: `path` with symbolic links followed.
    target: PathBuf,
    temp: tempfile::NamedTempFile,
}

impl AtomicFile {
    /// Starts writing `path`: checks that the target may be replaced and creates a
    /// temporary file in its directory.
    ///
    /// # Errors
    ///
    /// [`WriteError`] when the target (after following symbolic links) exists and is not
    /// a regular file, or when the temporary file cannot be created, such as when the
    /// directory does not exist or is not writable.
    pub fn create(path: &Path) -> Result<AtomicFile, WriteError> {
        let error = |source| WriteError { path: path.to_owned(), source };
        let (target, existing) = writable_target(path).map_err(error)?;
        let dir = match target.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let mut builder = tempfile::Builder::new();
        builder.prefix(".flowmem-").suffix(".tmp");
        #[cfg(unix)]
        {
            // File creation narrows `0o666` by the umask, as for any file a shell creates.
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(0o666));
        }
        let temp = builder.tempfile_in(dir).map_err(error)?;
        if let Some(existing) = existing {
            std::fs::set_permissions(temp.path(), existing.permissions()).map_err(error)?;
        }
        Ok(AtomicFile { path: path.to_owned(), target, temp })
    }

    /// The target this file will replace, as given to [`AtomicFile::create`].
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Syncs the written bytes to disk and renames the file over its target.
    ///
    /// # Errors
    ///
    /// [`WriteError`] when the sync or the rename fails (for instance when a directory
    /// now stands at the target's path); the temporary file is then removed.
    pub fn commit(self) -> Result<(), WriteError> {
        let AtomicFile { path, target, temp } = self;
        if let Err(source) = temp.as_file().sync_all() {
            return Err(WriteError { path, source });
        }
        // On failure `PersistError` hands the temporary file back; dropping it deletes it.
        match temp.persist(&target) {
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

/// Opens `path` for appending, creating it (with the umask's mode) when missing, under
/// the same rules as [`AtomicFile`]: only a regular file is opened, through symbolic
/// links.
///
/// # Errors
///
/// [`WriteError`] when the target is not a regular file or cannot be opened.
///
/// # Example
///
/// ```
/// use std::io::Write;
///
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("progress.jsonl");
/// let mut file = flowmem_model::open_append(&path)?;
/// writeln!(file, "{{\"step\": 1}}")?;
/// file.sync_data()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn open_append(path: &Path) -> Result<std::fs::File, WriteError> {
    let error = |source| WriteError { path: path.to_owned(), source };
    let (target, _) = writable_target(path).map_err(error)?;
    std::fs::OpenOptions::new().create(true).append(true).open(target).map_err(error)
}

/// The file a write to `path` replaces: `path` with symbolic links followed, and its
/// metadata when it exists.
///
/// # Errors
///
/// [`std::io::ErrorKind::InvalidInput`] naming `path` and what stands there when that
/// is not a regular file; other errors when links cannot be read or loop.
fn writable_target(path: &Path) -> std::io::Result<(PathBuf, Option<std::fs::Metadata>)> {
    // Linux allows 40 links in one path resolution; more means a loop.
    const MAX_LINKS: usize = 40;
    let mut target = path.to_owned();
    for _ in 0..MAX_LINKS {
        let metadata = match std::fs::symlink_metadata(&target) {
            Ok(metadata) => metadata,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok((target, None)),
            Err(err) => return Err(err),
        };
        let file_type = metadata.file_type();
        if file_type.is_symlink() {
            let link = std::fs::read_link(&target)?;
            target = match target.parent() {
                Some(parent) if link.is_relative() => parent.join(link),
                _ => link,
            };
            continue;
        }
        if !file_type.is_file() {
            let what = file_kind(&file_type);
            let message = if target == path {
                format!("`{}` is {what}, not a regular file; flowmem replaces only regular files", path.display())
            } else {
                format!(
                    "`{}` leads to `{}`, which is {what}, not a regular file; flowmem replaces only regular files",
                    path.display(),
                    target.display()
                )
            };
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, message));
        }
        return Ok((target, Some(metadata)));
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("`{}`: more than {MAX_LINKS} symbolic links in a row (a loop?)", path.display()),
    ))
}

/// What a file type is, for messages: "a directory", "a FIFO", ...
fn file_kind(file_type: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_socket() {
            return "a socket";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
    }
    if file_type.is_dir() { "a directory" } else { "not a file" }
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
    /// Issue 27 (1): a symbolic link is written through; the link stays a link.
    #[cfg(unix)]
    #[test]
    fn a_symlink_is_written_through_to_its_target() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::fs::write(dir.path().join("real/file.txt"), "old").unwrap();
        std::os::unix::fs::symlink("real/file.txt", dir.path().join("link.txt")).unwrap();
        std::os::unix::fs::symlink("link.txt", dir.path().join("link2.txt")).unwrap();
        write_text_atomic(&dir.path().join("link2.txt"), "new").unwrap();
        assert!(std::fs::symlink_metadata(dir.path().join("link.txt")).unwrap().file_type().is_symlink());
        assert!(std::fs::symlink_metadata(dir.path().join("link2.txt")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(dir.path().join("real/file.txt")).unwrap(), "new");
        // A dangling link creates the file it names.
        std::os::unix::fs::symlink("real/made.txt", dir.path().join("dangling.txt")).unwrap();
        write_text_atomic(&dir.path().join("dangling.txt"), "made").unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("real/made.txt")).unwrap(), "made");
        // A loop is an error, not a hang.
        std::os::unix::fs::symlink("loop-b", dir.path().join("loop-a")).unwrap();
        std::os::unix::fs::symlink("loop-a", dir.path().join("loop-b")).unwrap();
        assert!(write_text_atomic(&dir.path().join("loop-a"), "x").is_err());
    }

    /// Issue 27 (1): a new file gets the umask's mode, as any file created with `0o666`
    /// would; a replaced file keeps its own.
    #[cfg(unix)]
    #[test]
    fn new_files_get_the_umask_mode_and_replaced_files_keep_theirs() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let reference = dir.path().join("reference");
        std::fs::File::create(&reference).unwrap();
        let expected = std::fs::metadata(&reference).unwrap().permissions().mode() & 0o777;
        let path = dir.path().join("out.txt");
        write_text_atomic(&path, "one").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, expected);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_text_atomic(&path, "two").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o640);
    }
}
