//! The PostgreSQL backend: the synchronous `postgres` client on a thread of its own.
//!
//! The client drives a runtime of its own and may not be called from a thread that runs
//! async tasks, which the CLI and the server's handlers do. So each connection lives on
//! a dedicated thread, and the backend hands it one statement at a time over a channel:
//! callable from anywhere, blocking the caller as a SQLite call does.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::str::FromStr;
use std::sync::mpsc;
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use crate::{Backend, DbError, Dialect, Row, Value};

/// The key of the advisory lock every write transaction holds: "flmmwrit".
const WRITE_LOCK: i64 = 0x666C_6D6D_7772_6974;

/// How many rows a query sends back at a time.
const CHUNK: usize = 256;

/// A PostgreSQL connection as a [`Backend`]. Statements are prepared once per
/// connection and cached.
#[derive(Debug)]
pub struct PostgresBackend {
    jobs: mpsc::Sender<Job>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rows,
    Execute,
    Batch,
}

struct Job {
    kind: Kind,
    sql: String,
    params: Vec<Value>,
    reply: mpsc::SyncSender<Reply>,
}

enum Reply {
    Rows(Vec<Row>),
    Done(u64),
    Failed(DbError),
}

impl PostgresBackend {
    /// Connects to `url` (libpq's URL form; no TLS, so keep the server on a trusted
    /// network or loopback). Each wait for a lock is bounded by `lock_timeout`, the
    /// connection attempt by 10 s unless the URL says otherwise.
    ///
    /// # Errors
    ///
    /// [`DbError::Postgres`] when the URL does not parse or the server refuses.
    pub fn connect(url: &str, lock_timeout: Duration) -> Result<PostgresBackend, DbError> {
        let mut config = postgres::Config::from_str(url)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready_tx, ready) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("flowmem-postgres".to_owned())
            .spawn(move || {
                let mut client = match open_session(&config, lock_timeout) {
                    Ok(client) => client,
                    Err(err) => {
                        let _ = ready_tx.send(Err(err));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                serve(&mut client, &queue, || open_session(&config, lock_timeout));
            })
            .map_err(|err| DbError::Disconnected(format!("no thread for the connection: {err}")))?;
        match ready.recv() {
            Ok(Ok(())) => Ok(PostgresBackend { jobs }),
            Ok(Err(err)) => Err(err),
            Err(_) => Err(DbError::Disconnected("the connection thread ended".to_owned())),
        }
    }

    fn run(
        &self,
        kind: Kind,
        sql: &str,
        params: &[Value],
        mut each: impl FnMut(&Row) -> Result<(), DbError>,
    ) -> Result<u64, DbError> {
        let (reply, replies) = mpsc::sync_channel(2);
        let job = Job { kind, sql: sql.to_owned(), params: params.to_vec(), reply };
        if self.jobs.send(job).is_err() {
            return Err(DbError::Disconnected("the connection thread ended".to_owned()));
        }
        loop {
            match replies.recv() {
                Ok(Reply::Rows(rows)) => {
                    for row in &rows {
                        // Dropping `replies` on error stops the query on the thread.
                        each(row)?;
                    }
                }
                Ok(Reply::Done(n)) => return Ok(n),
                Ok(Reply::Failed(err)) => return Err(err),
                Err(_) => return Err(DbError::Disconnected("the connection thread ended".to_owned())),
            }
        }
    }
}

/// A new session: connected, with the lock timeout set.
fn open_session(config: &postgres::Config, lock_timeout: Duration) -> Result<postgres::Client, DbError> {
    let mut client = config.connect(postgres::NoTls)?;
    client.batch_execute(&format!("SET lock_timeout = {}", lock_timeout.as_millis().max(1)))?;
    Ok(client)
}

/// The connection thread: runs jobs until the backend is dropped.
///
/// A connection the server closed (a restart, an administrator's `pg_terminate_backend`)
/// fails the job that met it; the next job outside a transaction reconnects. Inside a
/// transaction every job fails until its `COMMIT` or `ROLLBACK`, which fails too: a
/// transaction cut in two is never committed in part.
fn serve(
    client: &mut postgres::Client,
    queue: &mpsc::Receiver<Job>,
    reconnect: impl Fn() -> Result<postgres::Client, DbError>,
) {
    let mut statements: HashMap<String, postgres::Statement> = HashMap::new();
    let mut in_transaction = false;
    while let Ok(job) = queue.recv() {
        let ends = job.kind == Kind::Batch && (job.sql == "COMMIT" || job.sql == "ROLLBACK");
        let begins = job.kind == Kind::Batch && job.sql.starts_with("BEGIN");
        if client.is_closed()
            && !in_transaction
            && let Ok(fresh) = reconnect()
        {
            *client = fresh;
            statements.clear();
        }
        let res = if client.is_closed() {
            Err(DbError::Disconnected("the server closed the connection".to_owned()))
        } else {
            match job.kind {
                Kind::Batch => client.batch_execute(&job.sql).map(|()| 0).map_err(DbError::Postgres),
                Kind::Rows | Kind::Execute => run_statement(client, &mut statements, &job),
            }
        };
        if begins && res.is_ok() {
            in_transaction = true;
        }
        if ends {
            in_transaction = false;
        }
        let _ = job.reply.send(match res {
            Ok(n) => Reply::Done(n),
            Err(err) => Reply::Failed(err),
        });
    }
}

fn run_statement(
    client: &mut postgres::Client,
    statements: &mut HashMap<String, postgres::Statement>,
    job: &Job,
) -> Result<u64, DbError> {
    let stmt = match statements.get(&job.sql) {
        Some(stmt) => stmt.clone(),
        None => {
            let stmt = client.prepare(&job.sql)?;
            statements.insert(job.sql.clone(), stmt.clone());
            stmt
        }
    };
    if job.kind == Kind::Execute {
        let params: Vec<&(dyn ToSql + Sync)> = job.params.iter().map(|value| value as &(dyn ToSql + Sync)).collect();
        return Ok(client.execute(&stmt, &params)?);
    }
    let mut rows = client.query_raw(&stmt, job.params.iter())?;
    let mut chunk = Vec::with_capacity(CHUNK);
    while let Some(row) = rows.next()? {
        chunk.push(read_row(&row)?);
        if chunk.len() == CHUNK && job.reply.send(Reply::Rows(std::mem::take(&mut chunk))).is_err() {
            // The caller stopped reading.
            return Ok(0);
        }
    }
    if !chunk.is_empty() {
        let _ = job.reply.send(Reply::Rows(chunk));
    }
    Ok(0)
}

fn read_row(row: &postgres::Row) -> Result<Row, DbError> {
    let mut values = Vec::with_capacity(row.len());
    for (idx, column) in row.columns().iter().enumerate() {
        let ty = column.type_();
        let value = match *ty {
            Type::INT8 => row.try_get::<_, Option<i64>>(idx)?.map(Value::Int),
            Type::INT4 => row.try_get::<_, Option<i32>>(idx)?.map(|v| Value::Int(i64::from(v))),
            Type::INT2 => row.try_get::<_, Option<i16>>(idx)?.map(|v| Value::Int(i64::from(v))),
            Type::OID => row.try_get::<_, Option<u32>>(idx)?.map(|v| Value::Int(i64::from(v))),
            Type::BOOL => row.try_get::<_, Option<bool>>(idx)?.map(|v| Value::Int(i64::from(v))),
            Type::FLOAT8 => row.try_get::<_, Option<f64>>(idx)?.map(Value::Real),
            Type::FLOAT4 => row.try_get::<_, Option<f32>>(idx)?.map(|v| Value::Real(f64::from(v))),
            Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR | Type::UNKNOWN => {
                row.try_get::<_, Option<String>>(idx)?.map(Value::Text)
            }
            Type::BYTEA => row.try_get::<_, Option<Vec<u8>>>(idx)?.map(Value::Blob),
            _ => return Err(DbError::Unsupported { index: idx, ty: ty.name().to_owned() }),
        };
        values.push(value.unwrap_or(Value::Null));
    }
    Ok(Row(values))
}

impl ToSql for Value {
    fn to_sql(&self, ty: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(value) => match *ty {
                Type::INT2 => i16::try_from(*value)?.to_sql(ty, out),
                Type::INT4 => i32::try_from(*value)?.to_sql(ty, out),
                Type::BOOL => (*value != 0).to_sql(ty, out),
                Type::FLOAT8 => (*value as f64).to_sql(ty, out),
                _ => value.to_sql(ty, out),
            },
            Value::Real(value) => value.to_sql(ty, out),
            Value::Text(value) => value.to_sql(ty, out),
            Value::Blob(value) => value.to_sql(ty, out),
        }
    }

    // Each arm checks its own type when it encodes.
    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

impl Backend for PostgresBackend {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn for_each_row(
        &self,
        sql: &str,
        params: &[Value],
        each: &mut dyn FnMut(&Row) -> Result<(), DbError>,
    ) -> Result<(), DbError> {
        self.run(Kind::Rows, sql, params, each).map(|_| ())
    }

    fn execute(&self, sql: &str, params: &[Value]) -> Result<u64, DbError> {
        self.run(Kind::Execute, sql, params, |_| Ok(()))
    }

    fn batch(&self, sql: &str) -> Result<(), DbError> {
        self.run(Kind::Batch, sql, &[], |_| Ok(())).map(|_| ())
    }

    fn begin_write(&self) -> Result<(), DbError> {
        let res = self.batch(&format!("BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})"));
        if res.is_err() {
            // A lock timeout leaves the transaction aborted; end it.
            let _ = self.batch("ROLLBACK");
        }
        res
    }
}

/// A thread that `LISTEN`s on a PostgreSQL channel and calls its `wake` for every
/// notification, and once after each (re)connection so that its owner catches up on
/// what it may have missed; it reconnects after losing the server. Stops when dropped.
#[derive(Debug)]
pub struct Listener {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Listener {
    /// Listens on `channel` (an SQL identifier: letters, digits and `_`) of the database
    /// at `url`, calling `wake` from the listener's thread.
    ///
    /// # Panics
    ///
    /// When `channel` is not such an identifier.
    pub fn start(url: &str, channel: &str, wake: impl Fn() + Send + 'static) -> Listener {
        assert!(
            !channel.is_empty() && channel.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "channel {channel:?} is not a plain identifier"
        );
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = std::sync::Arc::clone(&stop);
        let (url, listen) = (url.to_owned(), format!("LISTEN {channel}"));
        let spawned = std::thread::Builder::new().name("flowmem-listen".to_owned()).spawn(move || {
            let stopping = || stopped.load(std::sync::atomic::Ordering::Relaxed);
            while !stopping() {
                let client = postgres::Config::from_str(&url)
                    .and_then(|config| config.connect(postgres::NoTls))
                    .and_then(|mut client| client.batch_execute(&listen).map(|()| client));
                let mut client = match client {
                    Ok(client) => client,
                    Err(_) => {
                        std::thread::sleep(Duration::from_secs(1));
                        continue;
                    }
                };
                wake();
                while !stopping() {
                    let next = client.notifications().timeout_iter(Duration::from_millis(250)).next();
                    match next {
                        Ok(Some(_)) => wake(),
                        Ok(None) if !client.is_closed() => {}
                        _ => break,
                    }
                }
            }
        });
        // Without a thread, the owner still has its polling.
        drop(spawned);
        Listener { stop }
    }
}
