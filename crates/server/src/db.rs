//! The server's own tables in the memory database (the learning queue, the OTLP span
//! buffer), each behind one connection of its own: opened with a busy timeout and
//! NORMAL syncs, and used on blocking threads through [`ServerDb::run`].

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::Connection;

use crate::error::ServerError;

/// One connection to the memory database for a table set of the server's.
pub(crate) struct ServerDb {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl ServerDb {
    /// Opens the memory database at `path` and runs `setup` (creating the tables);
    /// `what` names the tables in errors.
    pub(crate) fn open(
        path: &Path,
        what: &'static str,
        setup: impl FnOnce(&Connection) -> rusqlite::Result<()>,
    ) -> Result<ServerDb, ServerError> {
        let sqlite = |what| move |source| ServerError::Database { path: path.to_path_buf(), what, source };
        let conn = Connection::open(path).map_err(sqlite(what))?;
        conn.busy_timeout(Duration::from_secs(30)).map_err(sqlite("setting the busy timeout"))?;
        setup(&conn).map_err(sqlite(what))?;
        // WAL (set by the memory) with NORMAL syncs: a crash of the process loses no
        // committed write, and a commit costs no fsync.
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(sqlite("setting synchronous"))?;
        Ok(ServerDb { path: path.to_path_buf(), conn: Mutex::new(conn) })
    }

    /// Runs `work` on the connection; a failure is [`ServerError::Database`] saying
    /// `what` was being done.
    pub(crate) fn run<T>(
        &self,
        what: &'static str,
        work: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, ServerError> {
        let conn = self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        work(&conn).map_err(|source| ServerError::Database { path: self.path.clone(), what, source })
    }
}
