//! One database connection for flowmem's stores: a SQLite file or a PostgreSQL
//! database, chosen by the location, with each store's SQL written once.
//!
//! # Brief overview
//!
//! - [`DbLocation`] tells a SQLite path from a `postgres://` URL, and names either without
//!   a password ([`DbLocation::display`]), so that errors and logs never carry one.
//! - [`Db`] is a connection behind the [`Backend`] trait, with two implementations:
//!   [`SqliteBackend`] (rusqlite) and [`PostgresBackend`] (the synchronous `postgres`
//!   client; call it from a thread that is not running async tasks).
//! - SQL is written in PostgreSQL's placeholder style, `$1`, `$2`, … (a number may
//!   repeat); the SQLite backend reads `$N` as `?N`. Parameters and columns are
//!   [`Value`]s; use integers as `BIGINT` in PostgreSQL schemas.
//! - [`Db::write`] starts a write transaction that holds the database's single write
//!   lock until it ends: SQLite's `BEGIN IMMEDIATE`, PostgreSQL's transaction-scoped
//!   advisory lock. Writers are serialised in both, so a check-then-insert inside one
//!   transaction (a store's dedup) cannot race, and PostgreSQL's sequence numbers
//!   commit in order, so a reader following a log table by sequence misses nothing.
//!
//! # Example
//!
//! ```
//! use flowmem_db::{Db, DbLocation, Value};
//! let dir = tempfile::tempdir()?;
//! let location = DbLocation::parse(dir.path().join("notes.db").as_os_str());
//! let db = Db::open(&location, std::time::Duration::from_secs(5))?;
//! db.batch("CREATE TABLE notes (pk INTEGER PRIMARY KEY, text TEXT NOT NULL)")?;
//! let tx = db.write()?;
//! db.execute("INSERT INTO notes (text) VALUES ($1), ($1)", &[Value::from("hello")])?;
//! tx.commit()?;
//! let row = db.query_one("SELECT COUNT(*) FROM notes WHERE text = $1", &["hello".into()])?;
//! assert_eq!(row.count(0)?, 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod location;
mod postgres;
mod sqlite;
mod value;

use std::cell::Cell;
use std::time::Duration;

pub use crate::location::DbLocation;
pub use crate::postgres::{Listener, PostgresBackend};
pub use crate::sqlite::SqliteBackend;
pub use crate::value::{Row, Value};

/// Which SQL a [`Db`] speaks, for the few statements that differ (schemas, JSON lists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite, through rusqlite.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

impl Dialect {
    /// A subquery yielding the integers of the JSON array in the text parameter
    /// `param` (such as `$1`): `x IN (…)` with one parameter, whatever the list's length.
    #[must_use]
    pub fn json_integers(self, param: &str) -> String {
        match self {
            Dialect::Sqlite => format!("SELECT value FROM json_each({param})"),
            Dialect::Postgres => format!("SELECT value::bigint FROM json_array_elements_text({param}::json)"),
        }
    }

    /// A subquery yielding the strings of the JSON array in the text parameter `param`.
    #[must_use]
    pub fn json_texts(self, param: &str) -> String {
        match self {
            Dialect::Sqlite => format!("SELECT value FROM json_each({param})"),
            Dialect::Postgres => format!("SELECT value FROM json_array_elements_text({param}::json)"),
        }
    }

    /// The integer at the top-level `key` of the JSON text in `column` (`NULL` when it
    /// is missing). `key` is a literal of the caller's: letters, digits and `_` only.
    #[must_use]
    pub fn json_integer_field(self, column: &str, key: &str) -> String {
        debug_assert!(key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        match self {
            Dialect::Sqlite => format!("json_extract({column}, '$.{key}')"),
            Dialect::Postgres => format!("CAST(({column})::jsonb ->> '{key}' AS BIGINT)"),
        }
    }

    /// The greater of two integer expressions.
    #[must_use]
    pub fn greatest(self, a: &str, b: &str) -> String {
        match self {
            Dialect::Sqlite => format!("MAX({a}, {b})"),
            Dialect::Postgres => format!("GREATEST({a}, {b})"),
        }
    }
}

/// What went wrong talking to the database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DbError {
    /// SQLite failed.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL failed, or could not be reached.
    #[error("PostgreSQL: {0}")]
    Postgres(#[from] ::postgres::Error),
    /// A column holds another type than the one read.
    #[error("column {index} holds {found}, not {expected}")]
    Column {
        /// The 0-based column.
        index: usize,
        /// The type asked for.
        expected: &'static str,
        /// The type found.
        found: &'static str,
    },
    /// The connection to PostgreSQL closed, or its thread could not start.
    #[error("the connection to PostgreSQL is closed: {0}")]
    Disconnected(String),
    /// A query that must return a row returned none.
    #[error("the query returned no row")]
    NoRow,
    /// A column's type has no [`Value`].
    #[error("column {index} has the PostgreSQL type `{ty}`, which flowmem does not read")]
    Unsupported {
        /// The 0-based column.
        index: usize,
        /// The type's name.
        ty: String,
    },
}

impl DbError {
    /// Whether the database was busy or locked for longer than the lock timeout.
    #[must_use]
    pub fn is_busy(&self) -> bool {
        match self {
            DbError::Sqlite(rusqlite::Error::SqliteFailure(err, _)) => {
                err.code == rusqlite::ErrorCode::DatabaseBusy || err.code == rusqlite::ErrorCode::DatabaseLocked
            }
            DbError::Postgres(err) => {
                err.code().is_some_and(|code| *code == ::postgres::error::SqlState::LOCK_NOT_AVAILABLE)
            }
            _ => false,
        }
    }
}

/// A database connection: what each backend must do. [`Db`] adds the conveniences.
pub trait Backend: Send {
    /// The SQL this backend speaks.
    fn dialect(&self) -> Dialect;

    /// Runs `sql` with `params` and calls `each` with every row, in order, as they
    /// arrive. An error from `each` stops the query and is returned.
    ///
    /// # Errors
    ///
    /// The database's, or `each`'s.
    fn for_each_row(
        &self,
        sql: &str,
        params: &[Value],
        each: &mut dyn FnMut(&Row) -> Result<(), DbError>,
    ) -> Result<(), DbError>;

    /// Runs `sql` with `params` and returns the number of rows changed.
    ///
    /// # Errors
    ///
    /// The database's.
    fn execute(&self, sql: &str, params: &[Value]) -> Result<u64, DbError>;

    /// Runs statements without parameters, separated by `;`.
    ///
    /// # Errors
    ///
    /// The database's.
    fn batch(&self, sql: &str) -> Result<(), DbError>;

    /// Starts a transaction holding the database's write lock (see the crate doc).
    ///
    /// # Errors
    ///
    /// The database's; [`DbError::is_busy`] when the lock was not had in time.
    fn begin_write(&self) -> Result<(), DbError>;
}

/// A connection to a SQLite file or a PostgreSQL database.
pub struct Db {
    backend: Box<dyn Backend>,
    // Whether a write transaction is open, so that they never nest.
    in_write: Cell<bool>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("dialect", &self.dialect()).finish_non_exhaustive()
    }
}

impl Db {
    /// Opens `location`: a SQLite file (created if missing, in WAL mode) or a PostgreSQL
    /// database. `lock_timeout` bounds each wait for another writer.
    ///
    /// # Errors
    ///
    /// [`DbError`] when the file cannot be opened or the server cannot be reached.
    pub fn open(location: &DbLocation, lock_timeout: Duration) -> Result<Db, DbError> {
        match location {
            DbLocation::Sqlite(path) => {
                let conn = rusqlite::Connection::open(path)?;
                conn.busy_timeout(lock_timeout)?;
                Ok(Db::new(SqliteBackend::new(conn)))
            }
            DbLocation::Postgres(url) => Ok(Db::new(PostgresBackend::connect(url, lock_timeout)?)),
        }
    }

    /// A database over `backend`.
    #[must_use]
    pub fn new(backend: impl Backend + 'static) -> Db {
        Db { backend: Box::new(backend), in_write: Cell::new(false) }
    }

    /// The SQL this database speaks.
    #[must_use]
    pub fn dialect(&self) -> Dialect {
        self.backend.dialect()
    }

    /// Every row of `sql`.
    ///
    /// # Errors
    ///
    /// The database's.
    pub fn query(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>, DbError> {
        let mut rows = Vec::new();
        self.backend.for_each_row(sql, params, &mut |row| {
            rows.push(row.clone());
            Ok(())
        })?;
        Ok(rows)
    }

    /// Every row of `sql`, each made into a `T` by `read`.
    ///
    /// # Errors
    ///
    /// The database's, or `read`'s.
    pub fn query_map<T>(
        &self,
        sql: &str,
        params: &[Value],
        mut read: impl FnMut(&Row) -> Result<T, DbError>,
    ) -> Result<Vec<T>, DbError> {
        let mut res = Vec::new();
        self.backend.for_each_row(sql, params, &mut |row| {
            res.push(read(row)?);
            Ok(())
        })?;
        Ok(res)
    }

    /// Calls `each` with every row of `sql`, without collecting them.
    ///
    /// # Errors
    ///
    /// The database's, or `each`'s.
    pub fn for_each(
        &self,
        sql: &str,
        params: &[Value],
        mut each: impl FnMut(&Row) -> Result<(), DbError>,
    ) -> Result<(), DbError> {
        self.backend.for_each_row(sql, params, &mut each)
    }

    /// The first row of `sql`, if any.
    ///
    /// # Errors
    ///
    /// The database's.
    pub fn query_opt(&self, sql: &str, params: &[Value]) -> Result<Option<Row>, DbError> {
        let mut first = None;
        self.backend.for_each_row(sql, params, &mut |row| {
            if first.is_none() {
                first = Some(row.clone());
            }
            Ok(())
        })?;
        Ok(first)
    }

    /// The first row of `sql`.
    ///
    /// # Errors
    ///
    /// The database's, and [`DbError::NoRow`] when there is none.
    pub fn query_one(&self, sql: &str, params: &[Value]) -> Result<Row, DbError> {
        self.query_opt(sql, params)?.ok_or(DbError::NoRow)
    }

    /// Runs `sql` and returns the number of rows changed.
    ///
    /// # Errors
    ///
    /// The database's.
    pub fn execute(&self, sql: &str, params: &[Value]) -> Result<u64, DbError> {
        self.backend.execute(sql, params)
    }

    /// Runs statements without parameters.
    ///
    /// # Errors
    ///
    /// The database's.
    pub fn batch(&self, sql: &str) -> Result<(), DbError> {
        self.backend.batch(sql)
    }

    /// Starts a write transaction: statements run through this `Db` until the returned
    /// guard is committed belong to it; dropping the guard rolls it back.
    ///
    /// # Errors
    ///
    /// The database's; [`DbError::is_busy`] when another writer held the lock too long.
    ///
    /// # Panics
    ///
    /// When a write transaction is already open on this connection.
    pub fn write(&self) -> Result<WriteTx<'_>, DbError> {
        assert!(!self.in_write.get(), "write transactions do not nest");
        self.backend.begin_write()?;
        self.in_write.set(true);
        Ok(WriteTx { db: self, done: false })
    }
}

/// An open write transaction of a [`Db`]; rolled back when dropped uncommitted.
#[must_use = "a write transaction is rolled back unless committed"]
pub struct WriteTx<'a> {
    db: &'a Db,
    done: bool,
}

impl WriteTx<'_> {
    /// Commits the transaction.
    ///
    /// # Errors
    ///
    /// The database's; then nothing of the transaction is stored.
    pub fn commit(mut self) -> Result<(), DbError> {
        self.done = true;
        self.db.in_write.set(false);
        if let Err(err) = self.db.backend.batch("COMMIT") {
            // SQLite keeps a transaction open after a failed commit; end it.
            let _ = self.db.backend.batch("ROLLBACK");
            return Err(err);
        }
        Ok(())
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.db.in_write.set(false);
            // Nothing to report: the transaction's statements already failed or were
            // abandoned, and a connection that cannot roll back is closed by its owner.
            let _ = self.db.backend.batch("ROLLBACK");
        }
    }
}
