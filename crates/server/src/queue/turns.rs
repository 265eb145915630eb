//! The log of the open conversations' turns: an append-only file beside a SQLite
//! memory (`memory.db-turns`), so that a turn costs the queue's writer one write of its
//! record instead of an update of a table row. A conversation goes into the queue table
//! only once, when it ends ([`super::store`]).
//!
//! Each line is one turn: a JSON header (`{"id","at","token"}`), a tab, and the
//! conversation's record so far (compact JSON, which holds no raw newline). The last
//! line of an id is its record; an index in memory says where each open conversation's
//! last line starts. Ending a conversation writes nothing here: the queue table then
//! knows its id, and the lines of ids the table knows are dropped when the log is read
//! at start. The log is rewritten with only the open conversations' last lines
//! (through [`AtomicFile`]) at start when it holds anything else (such as a line cut
//! short by a crash), and when it grew to [`COMPACT_RATIO`] times those lines' size.
//!
//! One server writes the log: it holds a lock on `memory.db-turns.lock` while it runs.
//! A second server on the same memory records its open turns in the table, as a server
//! on PostgreSQL does.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flowmem_model::AtomicFile;

/// The log is rewritten once it is at least this large...
const COMPACT_MIN_BYTES: u64 = 64 << 20;
/// ...and this many times the size of the lines it must keep.
const COMPACT_RATIO: u64 = 4;

/// Where an open conversation's last turn is, and what listing it needs.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The offset of its line.
    start: u64,
    /// The header's length, without the tab.
    header: u32,
    /// The record's length.
    record: u32,
    /// When the turn was written (RFC 3339, milliseconds, UTC).
    pub(crate) updated_at: Arc<str>,
    /// The token that recorded it.
    pub(crate) token_id: Option<i64>,
}

impl Entry {
    fn line_len(&self) -> u64 {
        u64::from(self.header) + u64::from(self.record) + 2
    }
}

/// A turn's header line part.
#[derive(serde::Serialize, serde::Deserialize)]
struct Header<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    at: std::borrow::Cow<'a, str>,
    token: Option<i64>,
}

/// One turn to append: the conversation, its token, and its record so far.
pub(crate) struct Turn<'a> {
    pub id: &'a Arc<str>,
    pub token_id: Option<i64>,
    pub record: &'a str,
}

/// The open turns' log of one memory, held by this process.
pub(crate) struct TurnLog {
    path: PathBuf,
    /// The lock's file, kept open (and the lock held) while the log is.
    _lock: File,
    append: File,
    read: File,
    /// The file's length: where the next line starts.
    len: u64,
    /// The bytes of the lines in `entries`.
    live: u64,
    entries: HashMap<Arc<str>, Entry>,
    /// Lines read at start that were not kept: superseded, or unreadable.
    dropped_at_start: usize,
}

fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

impl TurnLog {
    /// The log of the SQLite memory at `memory`: `memory-turns`.
    pub(crate) fn path_for(memory: &Path) -> PathBuf {
        let mut name = memory.as_os_str().to_owned();
        name.push("-turns");
        PathBuf::from(name)
    }

    /// Opens (or creates) the log at `path` and reads where each conversation's last
    /// turn is; `None` when another process holds it. A line that cannot be read (the
    /// last one, cut short by a crash) is skipped and counted in
    /// [`TurnLog::dropped_at_start`].
    pub(crate) fn open(path: &Path) -> std::io::Result<Option<TurnLog>> {
        let mut lock_path = path.as_os_str().to_owned();
        lock_path.push(".lock");
        let lock = flowmem_model::open_append(Path::new(&lock_path)).map_err(|err| err.source)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(err)) => return Err(err),
        }
        let append = flowmem_model::open_append(path).map_err(|err| err.source)?;
        let read = File::open(path)?;
        let mut log = TurnLog {
            path: path.to_owned(),
            _lock: lock,
            append,
            read,
            len: 0,
            live: 0,
            entries: HashMap::new(),
            dropped_at_start: 0,
        };
        log.replay()?;
        Ok(Some(log))
    }

    fn replay(&mut self) -> std::io::Result<()> {
        let mut reader = BufReader::new(File::open(&self.path)?);
        let mut line = Vec::new();
        let mut start = 0u64;
        let mut dropped = 0;
        loop {
            line.clear();
            let read = reader.read_until(b'\n', &mut line)?;
            if read == 0 {
                break;
            }
            match parse_line(&line, start) {
                Some((id, entry)) => {
                    if let Some(old) = self.entries.insert(id, entry) {
                        self.live -= old.line_len();
                        dropped += 1;
                    }
                    self.live += u64::try_from(read).unwrap_or(u64::MAX);
                }
                None => {
                    dropped += 1;
                    tracing::warn!(
                        file = %self.path.display(),
                        offset = start,
                        "the open turns' log: skipping an unreadable line (cut short by a crash?)"
                    );
                }
            }
            start += u64::try_from(read).unwrap_or(u64::MAX);
        }
        self.len = start;
        self.dropped_at_start = dropped;
        Ok(())
    }

    /// The log's file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Syncs what was appended to disk.
    pub(crate) fn sync(&self) -> std::io::Result<()> {
        self.append.sync_data()
    }

    /// Lines read at start that were not kept: turns a later turn superseded, and
    /// unreadable lines.
    pub(crate) fn dropped_at_start(&self) -> usize {
        self.dropped_at_start
    }

    /// The open conversations, in no order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&Arc<str>, &Entry)> {
        self.entries.iter()
    }

    /// How many conversations are open.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether `id` is open here.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.entries.contains_key(id)
    }

    /// The token and time of `id`'s last turn.
    pub(crate) fn entry(&self, id: &str) -> Option<&Entry> {
        self.entries.get(id)
    }

    /// The last record of open conversation `id`.
    pub(crate) fn record(&self, id: &str) -> std::io::Result<Option<String>> {
        let Some(entry) = self.entries.get(id) else { return Ok(None) };
        let mut bytes = vec![0; entry.record as usize];
        self.read.read_exact_at(&mut bytes, entry.start + u64::from(entry.header) + 1)?;
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| invalid(format!("`{}`: the record of `{id}` is not UTF-8", self.path.display())))
    }

    /// Forgets `id` (it ended, or the queue table holds it already).
    pub(crate) fn remove(&mut self, id: &str) {
        if let Some(entry) = self.entries.remove(id) {
            self.live -= entry.line_len();
        }
    }

    /// Appends `turns`, written at `at`, in one write; each becomes its conversation's
    /// last turn. Then rewrites the log if it grew to [`COMPACT_RATIO`] times what it
    /// must keep.
    ///
    /// # Errors
    ///
    /// When a record holds a newline (it is not compact JSON: nothing is written), or
    /// the write fails (the log is cut back to where it was).
    pub(crate) fn append(&mut self, at: &Arc<str>, turns: &[Turn<'_>]) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(turns.iter().map(|turn| turn.record.len() + 96).sum());
        let mut written = Vec::with_capacity(turns.len());
        for turn in turns {
            if turn.record.as_bytes().contains(&b'\n') {
                return Err(invalid(format!("the record of `{}` holds a newline; it is not compact JSON", turn.id)));
            }
            let offset = bytes.len();
            let header = Header { id: (&**turn.id).into(), at: (&**at).into(), token: turn.token_id };
            serde_json::to_writer(&mut bytes, &header).map_err(std::io::Error::other)?;
            let header_len = bytes.len() - offset;
            bytes.push(b'\t');
            bytes.extend_from_slice(turn.record.as_bytes());
            bytes.push(b'\n');
            let too_long =
                |len: usize| u32::try_from(len).map_err(|_| invalid(format!("a turn of `{}` is over 4 GiB", turn.id)));
            let entry = Entry {
                start: self.len + offset as u64,
                header: too_long(header_len)?,
                record: too_long(turn.record.len())?,
                updated_at: Arc::clone(at),
                token_id: turn.token_id,
            };
            written.push((Arc::clone(turn.id), entry));
        }
        if let Err(err) = self.append.write_all(&bytes) {
            // A part written would shift every later line's offset.
            let _ = self.append.set_len(self.len);
            return Err(err);
        }
        self.len += bytes.len() as u64;
        for (id, entry) in written {
            self.live += entry.line_len();
            if let Some(old) = self.entries.insert(id, entry) {
                self.live -= old.line_len();
            }
        }
        if self.len >= COMPACT_MIN_BYTES && self.len >= COMPACT_RATIO.saturating_mul(self.live) {
            self.compact()?;
        }
        Ok(())
    }

    /// Whether the log holds anything but the open conversations' last lines.
    pub(crate) fn has_garbage(&self) -> bool {
        self.len > self.live
    }

    /// Rewrites the log with only the open conversations' last lines, oldest first.
    pub(crate) fn compact(&mut self) -> std::io::Result<()> {
        let mut kept: Vec<(&Arc<str>, &Entry)> = self.entries.iter().collect();
        kept.sort_unstable_by_key(|(_, entry)| entry.start);
        let mut out = AtomicFile::create(&self.path).map_err(|err| err.source)?;
        let mut moved = Vec::with_capacity(kept.len());
        let mut offset = 0u64;
        let mut line = Vec::new();
        for (id, entry) in kept {
            line.resize(usize::try_from(entry.line_len()).unwrap_or(usize::MAX), 0);
            self.read.read_exact_at(&mut line, entry.start)?;
            out.write_all(&line)?;
            moved.push((Arc::clone(id), offset));
            offset += entry.line_len();
        }
        out.commit().map_err(|err| err.source)?;
        for (id, start) in moved {
            if let Some(entry) = self.entries.get_mut(&id) {
                entry.start = start;
            }
        }
        self.append = flowmem_model::open_append(&self.path).map_err(|err| err.source)?;
        self.read = File::open(&self.path)?;
        self.len = offset;
        self.live = offset;
        tracing::debug!(file = %self.path.display(), bytes = offset, open = self.entries.len(), "rewrote the open turns' log");
        Ok(())
    }
}

/// A line's id and where its record is, if it is whole.
fn parse_line(line: &[u8], start: u64) -> Option<(Arc<str>, Entry)> {
    let body = line.strip_suffix(b"\n")?;
    let tab = body.iter().position(|&byte| byte == b'\t')?;
    let header: Header<'_> = serde_json::from_slice(&body[..tab]).ok()?;
    let record = &body[tab + 1..];
    // A record is a JSON object; a line cut short and completed by a later write is not.
    if record.first() != Some(&b'{') || record.last() != Some(&b'}') {
        return None;
    }
    let entry = Entry {
        start,
        header: u32::try_from(tab).ok()?,
        record: u32::try_from(record.len()).ok()?,
        updated_at: header.at.into(),
        token_id: header.token,
    };
    Some((header.id.into(), entry))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Turn, TurnLog};

    fn append(log: &mut TurnLog, at: &str, turns: &[(&str, &str)]) {
        let ids: Vec<Arc<str>> = turns.iter().map(|(id, _)| Arc::from(*id)).collect();
        let turns: Vec<Turn<'_>> =
            ids.iter().zip(turns).map(|(id, (_, record))| Turn { id, token_id: Some(7), record }).collect();
        log.append(&Arc::from(at), &turns).unwrap();
    }

    /// A log that grew past its threshold to many times what it must keep is rewritten
    /// as it is appended to, and reads the same.
    #[test]
    fn a_log_of_mostly_superseded_turns_is_rewritten_as_it_grows() {
        let dir = tempfile::tempdir().unwrap();
        let path = TurnLog::path_for(&dir.path().join("memory.db"));
        let mut log = TurnLog::open(&path).unwrap().unwrap();
        let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(1 << 20));
        let file_len = || std::fs::metadata(&path).unwrap().len();
        let mut largest = 0;
        for turn in 0..70 {
            append(&mut log, &format!("t{turn}"), &[("c1", &big), ("c2", r#"{"n":2}"#)]);
            largest = largest.max(file_len());
        }
        // It grew to just under the threshold; the append that crossed it rewrote it.
        assert!(largest >= super::COMPACT_MIN_BYTES - (2 << 20), "grew to {largest}");
        assert!(file_len() < 8 << 20, "rewritten: {} bytes", file_len());
        assert_eq!(log.record("c1").unwrap().as_deref(), Some(big.as_str()));
        drop(log);
        let log = TurnLog::open(&path).unwrap().unwrap();
        assert_eq!((log.len(), log.record("c2").unwrap().as_deref()), (2, Some(r#"{"n":2}"#)));
        assert_eq!(log.entry("c1").unwrap().updated_at.as_ref(), "t69");
    }

    /// Turns appended are read back after a reopen, the last of each conversation; a
    /// line cut short by a crash is skipped, and the rewrite keeps only what is open.
    #[test]
    fn the_last_turn_of_each_conversation_survives_a_reopen_and_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = TurnLog::path_for(&dir.path().join("memory.db"));
        {
            let mut log = TurnLog::open(&path).unwrap().unwrap();
            append(&mut log, "t1", &[("c1", r#"{"n":1}"#), ("c2", r#"{"n":1}"#)]);
            append(&mut log, "t2", &[("c1", r#"{"n":2}"#), ("c3", r#"{"n":"tab\there"}"#)]);
            log.remove("c2");
            assert!(TurnLog::open(&path).unwrap().is_none(), "a second process is refused while this one holds it");
            assert_eq!(log.record("c1").unwrap().as_deref(), Some(r#"{"n":2}"#));
            let newline =
                log.append(&Arc::from("t3"), &[Turn { id: &Arc::from("c4"), token_id: None, record: "{\n}" }]);
            assert!(newline.unwrap_err().to_string().contains("newline"));
        }
        // A crash in the middle of a write.
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut file, br#"{"id":"c5","at":"t4","token":null}	{"n":"#).unwrap();
        let mut log = TurnLog::open(&path).unwrap().unwrap();
        // c2 ended in the table, not here: the caller drops it. c1's first turn and the
        // torn line are dropped.
        assert_eq!(log.len(), 3);
        assert_eq!(log.dropped_at_start(), 2);
        assert_eq!(log.record("c1").unwrap().as_deref(), Some(r#"{"n":2}"#));
        assert_eq!(log.record("c3").unwrap().as_deref(), Some(r#"{"n":"tab\there"}"#));
        assert_eq!(log.entry("c1").unwrap().updated_at.as_ref(), "t2");
        log.remove("c2");
        assert!(log.has_garbage());
        log.compact().unwrap();
        assert!(!log.has_garbage());
        append(&mut log, "t5", &[("c6", r#"{"n":6}"#)]);
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        let log = TurnLog::open(&path).unwrap().unwrap();
        assert_eq!((log.len(), log.dropped_at_start()), (3, 0));
        assert_eq!(log.record("c6").unwrap().as_deref(), Some(r#"{"n":6}"#));
        assert_eq!(log.record("c3").unwrap().as_deref(), Some(r#"{"n":"tab\there"}"#));
        assert!(log.record("c2").unwrap().is_none());
    }
}
