//! The server's own tables in the memory database (the tokens, the learning queue, the
//! OTLP span buffer), each set behind one connection of its own, SQLite or PostgreSQL
//! as the memory is (`flowmem_db`), and used on blocking threads through
//! [`ServerDb::run`].

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use flowmem_db::{Db, DbError, DbLocation, Dialect};

use crate::error::ServerError;

/// How long a write waits for another writer's lock.
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// One connection to the memory database for a table set of the server's.
pub(crate) struct ServerDb {
    // What messages name: the file, or the URL without its password.
    path: PathBuf,
    db: Mutex<Db>,
    dialect: Dialect,
}

impl ServerDb {
    /// Opens the memory database at `path` and runs `setup` (creating the tables, in the
    /// database's dialect); `what` names the tables in errors.
    pub(crate) fn open(
        path: &Path,
        what: &'static str,
        setup: impl FnOnce(&Db) -> Result<(), DbError>,
    ) -> Result<ServerDb, ServerError> {
        let location = DbLocation::parse(path.as_os_str());
        let shown = PathBuf::from(location.display());
        let error = |what| {
            let shown = shown.clone();
            move |source| ServerError::Database { path: shown, what, source }
        };
        let db = Db::open(&location, LOCK_TIMEOUT).map_err(error(what))?;
        if db.dialect() == Dialect::Sqlite {
            // WAL (set by the memory) with NORMAL syncs: a crash of the process loses no
            // committed write, and a commit costs no fsync.
            db.batch("PRAGMA synchronous = NORMAL").map_err(error("setting synchronous"))?;
        }
        setup(&db).map_err(error(what))?;
        let dialect = db.dialect();
        Ok(ServerDb { path: shown, db: Mutex::new(db), dialect })
    }

    /// The SQL the database speaks.
    pub(crate) fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Runs `work` on the connection; a failure is [`ServerError::Database`] saying
    /// `what` was being done.
    pub(crate) fn run<T>(
        &self,
        what: &'static str,
        work: impl FnOnce(&Db) -> Result<T, DbError>,
    ) -> Result<T, ServerError> {
        let db = self.db.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        work(&db).map_err(|source| ServerError::Database { path: self.path.clone(), what, source })
    }
}

/// Both backends for the server's own tables, for the tests that run on each.
#[cfg(test)]
pub(crate) mod backends {
    use std::path::PathBuf;

    use flowmem_memory::{MemoryStore, StoreConfig};

    /// A new memory on each backend: a SQLite file in `dir`, and a fresh database in the
    /// test process's PostgreSQL cluster; each opened as a memory first, as the server
    /// does.
    pub(crate) fn new_memories(dir: &tempfile::TempDir) -> Vec<PathBuf> {
        let sqlite = dir.path().join("memory.db");
        let postgres = PathBuf::from(flowmem_testsupport::PgCluster::shared().fresh_database());
        for location in [&sqlite, &postgres] {
            drop(MemoryStore::open(location, StoreConfig::standard()).expect("the memory opens"));
        }
        vec![sqlite, postgres]
    }
}
