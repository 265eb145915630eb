//! The durable learning queue: one row per recorded run in the memory database's
//! `gateway_conversations` table (the server's own, outside memory's migrations; named
//! for its first feeder, the gateway, and kept so for the databases that hold it). A
//! run is `queued` once it ended (a gateway conversation, or a trace the OTLP receiver
//! assembled), and `done` or `failed` once learned from, so a restart loses no recorded
//! run and learns from none twice.
//!
//! A gateway conversation is `open` while it runs. On a SQLite memory its turns go to
//! the log beside it ([`super::turns`]), and it becomes a row of the table when it
//! ends; on PostgreSQL (or when another server holds that log) it is a row in state
//! `open`, rewritten each turn. Every read here shows both the same way. Only a server
//! with the gateway opens the log; one without it shows the table's runs.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use flowmem_db::{Db, DbError, DbLocation, Dialect, Row, Value as SqlValue};
use serde_json::Value;

use super::turns::{Turn, TurnLog};
use crate::db::ServerDb;
use crate::error::ServerError;

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS gateway_conversations (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('open', 'queued', 'done', 'failed')),
    record TEXT NOT NULL,
    outcome INTEGER,
    result TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL
)";

/// The same table in PostgreSQL (`outcome` 0 or 1 as in SQLite).
const CREATE_TABLE_POSTGRES: &str = "CREATE TABLE IF NOT EXISTS gateway_conversations (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL CHECK (state IN ('open', 'queued', 'done', 'failed')),
    record TEXT NOT NULL,
    outcome BIGINT,
    result TEXT,
    attempts BIGINT NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL
)";

/// The index of the queued runs, on both backends; see [`TAKE_NEXT`].
const CREATE_QUEUED_INDEX: &str = "CREATE INDEX IF NOT EXISTS gateway_conversations_queued
    ON gateway_conversations (updated_at, id) WHERE state = 'queued'";

/// The oldest queued run. The worker asks every few seconds, while a busy gateway's
/// table holds tens of thousands of open conversations: the partial index
/// `gateway_conversations_queued` finds it without reading them (a scan of the table
/// read every page of it, tens of megabytes, each time).
const TAKE_NEXT: &str = "SELECT id, record, outcome, attempts FROM gateway_conversations WHERE state = 'queued'
    ORDER BY updated_at, id LIMIT 1";

/// A write of the queue's one writer task; a batch of them is one transaction.
pub(crate) enum Write {
    /// A turn finished: the open conversation's record so far, as compact JSON text,
    /// and the token that recorded it.
    Open { id: Arc<str>, token_id: Option<i64>, record: String },
    /// The conversation ended: queue its stored record (its last `Open` write) for
    /// learning, with the app's outcome if given. The gateway keeps no transcript in
    /// memory: each turn's request carries the turns before it, and the stored record
    /// has them all.
    End { id: Arc<str>, outcome: Option<bool> },
}

/// A queued conversation, as the worker takes it.
#[derive(Debug, Clone)]
pub(crate) struct Queued {
    pub id: String,
    pub record: Value,
    pub outcome: Option<bool>,
    pub attempts: u32,
}

/// How long the writer stores rows before it offers its CPU to other threads
/// ([`std::thread::yield_now`]). A batch of a busy gateway's turns takes milliseconds
/// to store; a thread that answers requests and waits for the writer's CPU would wait
/// for the next scheduler tick (4 ms at 250 Hz), as a thread that ran there a moment
/// ago is not moved to an idle CPU meanwhile.
const GIVE_WAY_AFTER: Duration = Duration::from_micros(200);

/// The queue table, and the open turns' log when this server keeps one.
pub(crate) struct QueueStore {
    db: ServerDb,
    /// Where open conversations' turns go: the log beside a SQLite memory, held by
    /// this server; `None` stores them in the table (PostgreSQL, or a second server).
    /// Locked before `db` when both are.
    turns: Option<Mutex<TurnLog>>,
}

/// A conversation a batch ends, as [`QueueStore::apply`] queues it.
struct Ended<'a> {
    id: &'a Arc<str>,
    /// Its last turn, when the batch holds it.
    in_batch: Option<Turn<'a>>,
    /// Else its last record in the log, if it is there.
    logged: Option<String>,
    /// The app's outcome.
    outcome: Option<bool>,
}

/// Offers the CPU to other threads once [`GIVE_WAY_AFTER`] passed `since`.
fn give_way(since: &mut Instant) {
    if since.elapsed() >= GIVE_WAY_AFTER {
        std::thread::yield_now();
        *since = Instant::now();
    }
}

/// Opens the open turns' log at `path` for the queue in `db`, if no other process holds
/// it: forgets the conversations the table holds already (ended before a crash could
/// tell the log), moves the table's open conversations into it (left by a server that
/// kept them there), and rewrites it if it holds anything else.
fn open_turns(db: &ServerDb, path: &Path) -> Result<Option<TurnLog>, ServerError> {
    let Some(mut turns) = TurnLog::open(path).map_err(log_failed(path, "opening"))? else {
        tracing::info!(file = %path.display(), "another server keeps the open turns' log; open conversations go to the table");
        return Ok(None);
    };
    let ids: Vec<&str> = turns.entries().map(|(id, _)| &**id).collect();
    let ids = serde_json::to_string(&ids).unwrap_or_else(|_| "[]".to_owned());
    let (queued, open) = db.run("reading the queue's conversations", |db| {
        let sql = format!(
            "SELECT id FROM gateway_conversations WHERE state <> 'open' AND id IN ({})",
            db.dialect().json_texts("$1")
        );
        let queued = db.query_map(&sql, &[ids.into()], |row| row.text(0))?;
        let open = db.query_map(
            "SELECT id, record, updated_at FROM gateway_conversations WHERE state = 'open' ORDER BY updated_at",
            &[],
            |row| Ok((row.text(0)?, row.text(1)?, row.text(2)?)),
        )?;
        Ok((queued, open))
    })?;
    for id in &queued {
        turns.remove(id);
    }
    let mut moved = Vec::new();
    for (id, record, at) in &open {
        let Some(record) = read_json(Some(record.clone())) else {
            tracing::warn!(conversation = %id, "an open conversation's record in the table is not JSON; left there");
            continue;
        };
        if !turns.contains(id) {
            let turn = Turn {
                id: &Arc::from(id.as_str()),
                token_id: record["token_id"].as_i64(),
                record: &record.to_string(),
            };
            turns
                .append(&Arc::from(at.as_str()), &[turn])
                .map_err(log_failed(path, "moving the table's open conversations in"))?;
        }
        moved.push(id.as_str());
    }
    let n_moved = moved.len();
    if !moved.is_empty() {
        turns.sync().map_err(log_failed(path, "syncing"))?;
        let moved = serde_json::to_string(&moved).unwrap_or_else(|_| "[]".to_owned());
        db.run("moving open conversations to the log", |db| {
            let sql = format!(
                "DELETE FROM gateway_conversations WHERE state = 'open' AND id IN ({})",
                db.dialect().json_texts("$1")
            );
            db.execute(&sql, &[moved.into()]).map(drop)
        })?;
    }
    if turns.has_garbage() {
        turns.compact().map_err(log_failed(path, "rewriting"))?;
    }
    tracing::info!(
        file = %path.display(),
        open = turns.len(),
        dropped = turns.dropped_at_start(),
        moved_from_table = n_moved,
        "opened the open turns' log"
    );
    Ok(Some(turns))
}

/// The error of the open turns' log at `path` when `what` failed.
fn log_failed<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> ServerError + 'a {
    move |source| ServerError::TurnLog { path: path.to_owned(), what, source }
}

/// The last record of open conversation `id` in `turns`, as JSON (`null` when it is
/// not open there, or not JSON).
fn open_record(turns: &TurnLog, id: &str) -> Result<Value, ServerError> {
    let record = turns.record(id).map_err(log_failed(turns.path(), "reading an open conversation"))?;
    Ok(read_json(record).unwrap_or(Value::Null))
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn outcome_value(outcome: Option<bool>) -> SqlValue {
    outcome.map_or(SqlValue::Null, |outcome| SqlValue::Int(i64::from(outcome)))
}

fn read_outcome(row: &Row, idx: usize) -> Result<Option<bool>, DbError> {
    Ok(row.opt_int(idx)?.map(|outcome| outcome != 0))
}

fn read_json(text: Option<String>) -> Option<Value> {
    text.and_then(|text| serde_json::from_str(&text).ok())
}

/// Queues run `id` for learning, in `db`'s write transaction: a new row, or the open
/// conversation of that id, ended. Returns false, and changes nothing, when a row of
/// that id is already queued or learned from.
pub(crate) fn enqueue(db: &Db, id: &str, record: &Value, outcome: Option<bool>) -> Result<bool, DbError> {
    enqueue_text(db, id, &record.to_string(), outcome, &now())
}

/// [`enqueue`] with the record as JSON text, at time `at`.
fn enqueue_text(db: &Db, id: &str, record: &str, outcome: Option<bool>, at: &str) -> Result<bool, DbError> {
    let changed = db.execute(
        "INSERT INTO gateway_conversations (id, state, record, outcome, updated_at)
         VALUES ($1, 'queued', $2, $3, $4)
         ON CONFLICT (id) DO UPDATE SET state = 'queued', record = excluded.record,
             outcome = excluded.outcome, updated_at = excluded.updated_at
         WHERE gateway_conversations.state = 'open'",
        &[id.into(), record.into(), outcome_value(outcome), at.into()],
    )?;
    Ok(changed > 0)
}

/// Creates the queue table in `db` if it is not there.
pub(crate) fn create_table(db: &Db) -> Result<(), DbError> {
    db.batch(match db.dialect() {
        Dialect::Sqlite => CREATE_TABLE,
        Dialect::Postgres => CREATE_TABLE_POSTGRES,
    })?;
    db.batch(CREATE_QUEUED_INDEX)
}

impl QueueStore {
    /// Opens the table in the memory database at `path`, creating it if needed, and,
    /// with `turn_log` (a server with the gateway, the only writer of open turns) on a
    /// SQLite memory, the open turns' log beside it (see [`QueueStore::turns`]).
    pub(crate) fn open(path: &Path, turn_log: bool) -> Result<QueueStore, ServerError> {
        let db = ServerDb::open(path, "opening the learning queue", create_table)?;
        let turns = match DbLocation::parse(path.as_os_str()) {
            DbLocation::Sqlite(memory) if turn_log => open_turns(&db, &TurnLog::path_for(&memory))?,
            DbLocation::Sqlite(_) | DbLocation::Postgres(_) => None,
        };
        Ok(QueueStore { db, turns: turns.map(Mutex::new) })
    }

    /// The open turns' log, locked, if this server keeps one.
    fn turns(&self) -> Option<MutexGuard<'_, TurnLog>> {
        self.turns.as_ref().map(|turns| turns.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Applies `writes` in order: each conversation's last turn is kept (in the log,
    /// else in the table), and an `End` queues the conversation with its last turn's
    /// record, in one transaction. An `End` of a conversation that is not open (never
    /// recorded, or already queued) changes nothing.
    pub(crate) fn apply(&self, writes: &[Write]) -> Result<(), ServerError> {
        match self.turns() {
            Some(mut turns) => self.apply_to_log(&mut turns, writes),
            None => self.apply_to_table(writes),
        }
    }

    /// [`QueueStore::apply`] with a log: the batch's open turns are appended in one
    /// write, and only the ended conversations touch the table.
    fn apply_to_log(&self, turns: &mut TurnLog, writes: &[Write]) -> Result<(), ServerError> {
        // Each conversation's last turn in the batch, in the order of their first turns.
        let mut last: Vec<Option<Turn<'_>>> = Vec::new();
        let mut slot: HashMap<&str, usize> = HashMap::new();
        let mut ended: Vec<Ended<'_>> = Vec::new();
        for write in writes {
            match write {
                Write::Open { id, token_id, record } => {
                    let turn = Turn { id, token_id: *token_id, record };
                    match slot.get(&**id) {
                        Some(&at) => last[at] = Some(turn),
                        None => {
                            slot.insert(id, last.len());
                            last.push(Some(turn));
                        }
                    }
                }
                Write::End { id, outcome } => {
                    let in_batch = slot.remove(&**id).and_then(|at| last[at].take());
                    let logged = match in_batch {
                        Some(_) => None,
                        None => turns
                            .record(id)
                            .map_err(log_failed(turns.path(), "reading an ended conversation's record"))?,
                    };
                    ended.push(Ended { id, in_batch, logged, outcome: *outcome });
                }
            }
        }
        let at: Arc<str> = Arc::from(now());
        if !ended.is_empty() {
            let queued = self.db.run("queueing ended conversations", |db| {
                let tx = db.write()?;
                let mut since = Instant::now();
                for Ended { id, in_batch, logged, outcome } in &ended {
                    give_way(&mut since);
                    if let Some(record) = in_batch.as_ref().map(|turn| turn.record).or(logged.as_deref()) {
                        enqueue_text(db, id, record, *outcome, &at)?;
                    }
                }
                tx.commit()
            });
            if let Err(err) = queued {
                // Kept open instead, so that a restart resumes them: the ended ones that
                // were not in the log yet, then the batch's open turns (which may reopen
                // one of them).
                let mut open: Vec<Turn<'_>> = ended.into_iter().filter_map(|ended| ended.in_batch).collect();
                open.extend(last.into_iter().flatten());
                if let Err(log_err) = turns.append(&at, &open) {
                    tracing::warn!(error = %log_err, file = %turns.path().display(), "the turns of a failed batch could not be kept either");
                }
                return Err(err);
            }
            for ended in &ended {
                turns.remove(ended.id);
            }
        }
        let open: Vec<Turn<'_>> = last.into_iter().flatten().collect();
        if open.is_empty() {
            return Ok(());
        }
        turns.append(&at, &open).map_err(log_failed(turns.path(), "appending turns"))
    }

    /// [`QueueStore::apply`] without a log, in one transaction, skipping each `Open`
    /// write that a later `Open` write of the same conversation in `writes` supersedes.
    fn apply_to_table(&self, writes: &[Write]) -> Result<(), ServerError> {
        // A turn's record holds the turns before it: of one conversation's records in a
        // batch, only the last needs storing (a busy server's batches repeat its
        // tool-call loops). An `End` queues whatever record is stored when it runs.
        let mut later = HashSet::new();
        let mut superseded = vec![false; writes.len()];
        for (idx, write) in writes.iter().enumerate().rev() {
            if let Write::Open { id, .. } = write {
                superseded[idx] = !later.insert(&**id);
            }
        }
        self.db.run("storing conversations", |db| {
            let tx = db.write()?;
            let updated_at = now();
            let mut since = Instant::now();
            for (write, superseded) in writes.iter().zip(superseded) {
                give_way(&mut since);
                match write {
                    Write::Open { .. } if superseded => {}
                    Write::Open { id, record, .. } => {
                        db.execute(
                            "INSERT INTO gateway_conversations (id, state, record, updated_at) VALUES ($1, 'open', $2, $3)
                             ON CONFLICT (id) DO UPDATE SET record = excluded.record, updated_at = excluded.updated_at
                             WHERE gateway_conversations.state = 'open'",
                            &[(&**id).into(), record.as_str().into(), updated_at.as_str().into()],
                        )?;
                    }
                    Write::End { id, outcome } => {
                        db.execute(
                            "UPDATE gateway_conversations SET state = 'queued', outcome = $2, updated_at = $3
                             WHERE id = $1 AND state = 'open'",
                            &[(&**id).into(), outcome_value(*outcome), updated_at.as_str().into()],
                        )?;
                    }
                }
            }
            tx.commit()
        })
    }

    /// The oldest queued conversation, its attempt counted before any work is done, so a
    /// conversation that crashes the server every time is given up after a few tries.
    pub(crate) fn take_next(&self) -> Result<Option<Queued>, ServerError> {
        self.db.run("taking the next queued conversation", |db| {
            let tx = db.write()?;
            let row = db.query_opt(TAKE_NEXT, &[])?;
            let Some(row) = row else { return tx.commit().map(|()| None) };
            let id = row.text(0)?;
            db.execute(
                "UPDATE gateway_conversations SET attempts = attempts + 1 WHERE id = $1",
                &[id.as_str().into()],
            )?;
            tx.commit()?;
            let record = serde_json::from_str(&row.text(1)?).unwrap_or(Value::Null);
            let attempts = u32::try_from(row.count(3)?).unwrap_or(u32::MAX);
            Ok(Some(Queued { id, record, outcome: read_outcome(&row, 2)?, attempts: attempts.saturating_add(1) }))
        })
    }

    /// Ends a queued conversation's life: `done` with what learning did, or `failed`
    /// with why; `None` leaves it queued for another attempt.
    pub(crate) fn finish(&self, id: &str, state: Option<&str>, result: &Value) -> Result<(), ServerError> {
        self.db.run("finishing a queued conversation", |db| {
            match state {
                Some(state) => db.execute(
                    "UPDATE gateway_conversations SET state = $2, result = $3, updated_at = $4 WHERE id = $1",
                    &[id.into(), state.into(), result.to_string().into(), now().into()],
                ),
                None => db.execute(
                    "UPDATE gateway_conversations SET result = $2, updated_at = $3 WHERE id = $1",
                    &[id.into(), result.to_string().into(), now().into()],
                ),
            }
            .map(drop)
        })
    }

    /// The open conversations a previous run left, to resume.
    pub(crate) fn open_records(&self) -> Result<Vec<(String, Value)>, ServerError> {
        let mut open = Vec::new();
        if let Some(turns) = self.turns() {
            for (id, _) in turns.entries() {
                let record = open_record(&turns, id)?;
                open.push((id.to_string(), record));
            }
        }
        let in_table = self.db.run("reading open conversations", |db| {
            db.query_map("SELECT id, record FROM gateway_conversations WHERE state = 'open'", &[], |row| {
                Ok((row.text(0)?, read_json(Some(row.text(1)?)).unwrap_or(Value::Null)))
            })
        })?;
        open.extend(in_table);
        Ok(open)
    }

    /// How many conversations are in each state.
    pub(crate) fn counts(&self) -> Result<Value, ServerError> {
        let mut counts = self.db.run("counting conversations", |db| {
            let rows =
                db.query_map("SELECT state, COUNT(*) FROM gateway_conversations GROUP BY state", &[], |row| {
                    Ok((row.text(0)?, row.int(1)?))
                })?;
            let mut counts = serde_json::Map::new();
            for state in ["open", "queued", "done", "failed"] {
                counts.insert(state.to_owned(), Value::from(0));
            }
            for (state, n) in rows {
                counts.insert(state, Value::from(n));
            }
            Ok(counts)
        })?;
        if let Some(turns) = self.turns() {
            let in_table = counts["open"].as_u64().unwrap_or(0);
            counts.insert("open".to_owned(), Value::from(in_table + turns.len() as u64));
        }
        Ok(Value::Object(counts))
    }

    /// The condition that keeps only the rows of the token in parameter `param` (all
    /// when it is `NULL`).
    fn token_filter(&self, param: &str) -> String {
        let field = self.db.dialect().json_integer_field("record", "token_id");
        format!("(CAST({param} AS BIGINT) IS NULL OR {field} = {param})")
    }

    /// The most recently updated conversations, newest first, skipping `offset`: id,
    /// state, updated_at, outcome, source and the first user message, and what learning
    /// did (the verdict and its reason, workflows stored and merged, why any were
    /// rejected, or the error); only those of token `token_id` when it is given.
    pub(crate) fn recent(&self, limit: usize, offset: usize, token_id: Option<i64>) -> Result<Vec<Value>, ServerError> {
        let wanted = limit.saturating_add(offset);
        let mut rows = self.open_in_log(wanted, token_id)?;
        let sql = format!(
            "SELECT id, state, updated_at, outcome, record, result FROM gateway_conversations
             WHERE {} ORDER BY updated_at DESC, id DESC LIMIT $1",
            self.token_filter("$2")
        );
        let in_table = self.db.run("listing conversations", |db| {
            db.query_map(&sql, &[(wanted as u64).into(), token_id.into()], |row| {
                let record = read_json(Some(row.text(4)?)).unwrap_or(Value::Null);
                let result = read_json(row.opt_text(5)?).unwrap_or(Value::Null);
                Ok(summary(row.text(0)?, &row.text(1)?, row.text(2)?, read_outcome(row, 3)?, &record, &result))
            })
        })?;
        if !rows.is_empty() {
            // A conversation the table holds is shown as the table has it.
            let ids: Vec<String> = rows.iter().filter_map(|row| row["id"].as_str().map(str::to_owned)).collect();
            let known = self.known_in_table(&ids)?;
            rows.retain(|row| !row["id"].as_str().is_some_and(|id| known.contains(id)));
        }
        rows.extend(in_table);
        let key = |row: &Value| {
            (row["updated_at"].as_str().unwrap_or("").to_owned(), row["id"].as_str().unwrap_or("").to_owned())
        };
        rows.sort_by_cached_key(|row| std::cmp::Reverse(key(row)));
        Ok(rows.into_iter().skip(offset).take(limit).collect())
    }

    /// The `wanted` most recently updated conversations in the log, as [`summary`]
    /// lines; only those of token `token_id` when it is given.
    fn open_in_log(&self, wanted: usize, token_id: Option<i64>) -> Result<Vec<Value>, ServerError> {
        let Some(turns) = self.turns() else { return Ok(Vec::new()) };
        let mut open: Vec<(&Arc<str>, &Arc<str>)> = turns
            .entries()
            .filter(|(_, entry)| token_id.is_none() || entry.token_id == token_id)
            .map(|(id, entry)| (id, &entry.updated_at))
            .collect();
        // Newest first; a busy gateway has tens of thousands open, and a page wants few.
        let newest_first = |a: &(&Arc<str>, &Arc<str>), b: &(&Arc<str>, &Arc<str>)| (b.1, b.0).cmp(&(a.1, a.0));
        if open.len() > wanted {
            open.select_nth_unstable_by(wanted, newest_first);
            open.truncate(wanted);
        }
        open.sort_unstable_by(newest_first);
        open.into_iter()
            .map(|(id, at)| {
                let record = open_record(&turns, id)?;
                Ok(summary(id.to_string(), "open", at.to_string(), None, &record, &Value::Null))
            })
            .collect()
    }

    /// Which of `ids` name a kept conversation, in one query.
    pub(crate) fn known(&self, ids: &[String]) -> Result<HashSet<String>, ServerError> {
        let mut known = self.known_in_table(ids)?;
        if let Some(turns) = self.turns() {
            known.extend(ids.iter().filter(|id| turns.contains(id)).cloned());
        }
        Ok(known)
    }

    /// Which of `ids` name a row of the table.
    fn known_in_table(&self, ids: &[String]) -> Result<HashSet<String>, ServerError> {
        let ids = serde_json::to_string(ids).unwrap_or_else(|_| "[]".to_owned());
        let sql = format!("SELECT id FROM gateway_conversations WHERE id IN ({})", self.db.dialect().json_texts("$1"));
        self.db.run("looking conversations up", |db| {
            Ok(db.query_map(&sql, &[ids.into()], |row| row.text(0))?.into_iter().collect())
        })
    }

    /// Keeps a run that was learned from at once (`report_run`): `done` with what
    /// learning did, or `failed` with why.
    pub(crate) fn record_learned(
        &self,
        id: &str,
        record: &Value,
        outcome: Option<bool>,
        learned: Result<Value, String>,
    ) -> Result<(), ServerError> {
        let (state, result) = match learned {
            Ok(result) => ("done", result),
            Err(message) => ("failed", serde_json::json!({"error": message, "attempts": 1})),
        };
        self.db.run("keeping a reported run", |db| {
            db.execute(
                "INSERT INTO gateway_conversations (id, state, record, outcome, result, attempts, updated_at)
                 VALUES ($1, $2, $3, $4, $5, 1, $6)",
                &[
                    id.into(),
                    state.into(),
                    record.to_string().into(),
                    outcome_value(outcome),
                    result.to_string().into(),
                    now().into(),
                ],
            )
            .map(drop)
        })
    }

    /// A conversation's row as JSON: state, record, outcome, result, attempts; only one
    /// of token `token_id` when it is given (a token reads its own runs).
    pub(crate) fn get(&self, id: &str, token_id: Option<i64>) -> Result<Option<Value>, ServerError> {
        let sql = format!(
            "SELECT state, record, outcome, result, attempts FROM gateway_conversations WHERE id = $1 AND {}",
            self.token_filter("$2")
        );
        let row = self.db.run("reading a conversation", |db| {
            db.query_opt(&sql, &[id.into(), token_id.into()])?
                .map(|row| {
                    Ok(serde_json::json!({
                        "id": id,
                        "state": row.text(0)?,
                        "record": read_json(Some(row.text(1)?)).unwrap_or(Value::Null),
                        "outcome": read_outcome(&row, 2)?,
                        "result": read_json(row.opt_text(3)?),
                        "attempts": row.count(4)?,
                    }))
                })
                .transpose()
        })?;
        if row.is_some() {
            return Ok(row);
        }
        let Some(turns) = self.turns() else { return Ok(None) };
        match turns.entry(id) {
            Some(entry) if token_id.is_none() || entry.token_id == token_id => {}
            _ => return Ok(None),
        }
        let record = open_record(&turns, id)?;
        Ok(Some(serde_json::json!({
            "id": id,
            "state": "open",
            "record": record,
            "outcome": null,
            "result": null,
            "attempts": 0,
        })))
    }
}

/// One line of [`QueueStore::recent`]: the run's id, state, time and outcome, and what
/// its record and learning result say.
fn summary(
    id: String,
    state: &str,
    updated_at: String,
    outcome: Option<bool>,
    record: &Value,
    result: &Value,
) -> Value {
    let first_user = record["messages"]
        .as_array()
        .and_then(|messages| messages.iter().find(|message| message["role"] == "user"))
        .map(|message| match &message["content"] {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        });
    let rejected: Vec<&str> =
        result["rejected"].as_array().into_iter().flatten().filter_map(|line| line["message"].as_str()).collect();
    let count = |key: &str| result[key].as_array().map(Vec::len);
    serde_json::json!({
        "id": id,
        "state": state,
        "updated_at": updated_at,
        "outcome": outcome,
        "source": record["source"].as_str(),
        "first_user": first_user,
        "verdict": result["judgement"]["success"].as_bool(),
        "verdict_reason": result["judgement"]["reason"].as_str(),
        "learned": count("stored"),
        "merged": count("merged"),
        "rejected": if rejected.is_empty() { None } else { Some(rejected.join("; ")) },
        "error": result["error"].as_str(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use flowmem_db::Dialect;

    use crate::queue::store::{QueueStore, TAKE_NEXT, Write};

    /// The queue's life on both backends: open, queued, taken with its attempt counted,
    /// done or failed; a run queued or learned from is never queued again; listing,
    /// lookups and a token's view of its own runs.
    #[test]
    fn conversations_move_through_the_queue_the_same_on_both_backends() {
        let dir = tempfile::tempdir().unwrap();
        for path in crate::db::backends::new_memories(&dir) {
            let queue = QueueStore::open(&path, true).unwrap();
            let record = |user: &str, token: i64| {
                json!({"source": "gateway", "token_id": token, "messages": [
                    {"role": "system", "content": "be brief"}, {"role": "user", "content": user}]})
            };
            queue
                .apply(&[
                    Write::Open {
                        id: "c1".into(),
                        token_id: Some(7),
                        record: record("cancel my order", 7).to_string(),
                    },
                    Write::Open {
                        id: "c2".into(),
                        token_id: Some(8),
                        record: record("where is my parcel", 8).to_string(),
                    },
                ])
                .unwrap();
            assert_eq!(queue.open_records().unwrap().len(), 2);
            queue
                .apply(&[
                    Write::Open {
                        id: "c1".into(),
                        token_id: Some(7),
                        record: record("cancel my order now", 7).to_string(),
                    },
                    Write::End { id: "c1".into(), outcome: Some(true) },
                ])
                .unwrap();
            let counts = queue.counts().unwrap();
            assert_eq!((counts["open"].as_i64(), counts["queued"].as_i64()), (Some(1), Some(1)), "{counts}");

            let taken = queue.take_next().unwrap().expect("c1 is queued");
            assert_eq!((taken.id.as_str(), taken.outcome, taken.attempts), ("c1", Some(true), 1));
            assert_eq!(taken.record["messages"][1]["content"], "cancel my order now");
            queue.finish("c1", None, &json!({"error": "judge down"})).unwrap();
            assert_eq!(queue.take_next().unwrap().unwrap().attempts, 2, "left queued, counted again");
            let result = json!({"judgement": {"success": true, "reason": "solved"}, "stored": ["wf-1"], "merged": [],
                "rejected": [{"message": "too short"}, {"message": "unknown tool"}]});
            queue.finish("c1", Some("done"), &result).unwrap();
            assert!(queue.take_next().unwrap().is_none());
            // A learned run is neither changed nor queued again.
            queue
                .apply(&[
                    Write::Open { id: "c1".into(), token_id: Some(7), record: record("again", 7).to_string() },
                    Write::End { id: "c1".into(), outcome: None },
                ])
                .unwrap();
            assert_eq!(queue.counts().unwrap()["done"].as_i64(), Some(1));
            assert_eq!(
                queue.get("c1", None).unwrap().unwrap()["record"]["messages"][1]["content"],
                "cancel my order now"
            );
            // Ending a conversation that was never recorded stores nothing.
            queue.apply(&[Write::End { id: "c9".into(), outcome: Some(true) }]).unwrap();
            assert!(queue.get("c9", None).unwrap().is_none());

            queue.record_learned("r1", &record("report", 7), Some(false), Err("no steps".into())).unwrap();
            let recent = queue.recent(10, 0, None).unwrap();
            assert_eq!(recent.len(), 3);
            let c1 = recent.iter().find(|row| row["id"] == "c1").unwrap();
            assert_eq!(c1["first_user"], "cancel my order now");
            assert_eq!((c1["verdict"].as_bool(), c1["verdict_reason"].as_str()), (Some(true), Some("solved")));
            assert_eq!((c1["learned"].as_u64(), c1["merged"].as_u64()), (Some(1), Some(0)));
            assert_eq!(c1["rejected"], "too short; unknown tool");
            assert_eq!((c1["outcome"].as_bool(), c1["source"].as_str()), (Some(true), Some("gateway")));
            let r1 = recent.iter().find(|row| row["id"] == "r1").unwrap();
            assert_eq!((r1["state"].as_str(), r1["error"].as_str()), (Some("failed"), Some("no steps")));
            assert_eq!(
                queue.recent(10, 0, Some(8)).unwrap().iter().map(|row| row["id"].clone()).collect::<Vec<_>>(),
                ["c2"]
            );
            assert_eq!(queue.recent(1, 1, None).unwrap().len(), 1, "paged");

            let known = queue.known(&["c1".into(), "zz".into(), "r1".into()]).unwrap();
            assert_eq!(known.len(), 2);
            assert!(known.contains("c1") && known.contains("r1"));
            let got = queue.get("c1", Some(7)).unwrap().expect("token 7's run");
            assert_eq!((got["state"].as_str(), got["attempts"].as_u64()), (Some("done"), Some(2)));
            assert_eq!(got["result"]["stored"][0], "wf-1");
            assert!(queue.get("c1", Some(8)).unwrap().is_none(), "another token's run is not shown");
            assert!(queue.get("nope", None).unwrap().is_none());
        }
    }

    /// A batch that holds several turns of one conversation stores its last record, on
    /// both backends, and an end in the batch queues the record stored before it.
    #[test]
    fn a_batch_stores_each_conversations_last_write() {
        let dir = tempfile::tempdir().unwrap();
        for path in crate::db::backends::new_memories(&dir) {
            let queue = QueueStore::open(&path, true).unwrap();
            let turns = |n: usize| json!({"messages": (0..n).map(|k| json!({"role": "user", "content": k})).collect::<Vec<_>>()});
            queue
                .apply(&[
                    Write::Open { id: "c1".into(), token_id: None, record: turns(1).to_string() },
                    Write::Open { id: "c2".into(), token_id: None, record: turns(1).to_string() },
                    Write::Open { id: "c1".into(), token_id: None, record: turns(2).to_string() },
                    Write::Open { id: "c2".into(), token_id: None, record: turns(2).to_string() },
                    Write::Open { id: "c2".into(), token_id: None, record: turns(3).to_string() },
                    Write::End { id: "c2".into(), outcome: None },
                    Write::Open { id: "c1".into(), token_id: None, record: turns(3).to_string() },
                ])
                .unwrap();
            let open = queue.open_records().unwrap();
            assert_eq!(open.len(), 1, "{open:?}");
            assert_eq!((open[0].0.as_str(), open[0].1["messages"].as_array().map(Vec::len)), ("c1", Some(3)));
            let queued = queue.take_next().unwrap().expect("c2 is queued");
            assert_eq!((queued.id.as_str(), queued.record["messages"].as_array().map(Vec::len)), ("c2", Some(3)));
        }
    }

    /// On a SQLite memory the open turns live in the log beside it: reopened, the queue
    /// resumes them; a conversation ended before the reopen is not open again; a second
    /// queue on the same memory keeps its open turns in the table, and the next queue to
    /// hold the log moves them in.
    #[test]
    fn open_turns_survive_a_reopen_and_move_from_the_table_into_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let memory = crate::db::backends::new_memories(&dir).remove(0);
        let record = |user: &str| json!({"token_id": 3, "messages": [{"role": "user", "content": user}]}).to_string();
        let open = |id: &str, user: &str| Write::Open { id: id.into(), token_id: Some(3), record: record(user) };
        // A server without the gateway writes no open turns and leaves the log alone.
        let without_gateway = QueueStore::open(&memory, false).unwrap();
        assert!(without_gateway.turns.is_none());
        assert!(!crate::queue::turns::TurnLog::path_for(&memory).exists(), "no log is created");
        let first = QueueStore::open(&memory, true).unwrap();
        assert!(first.turns.is_some(), "the first queue holds the log");
        first.apply(&[open("c1", "one"), open("c2", "two"), open("c1", "one more")]).unwrap();
        first.apply(&[Write::End { id: "c2".into(), outcome: Some(true) }]).unwrap();
        let second = QueueStore::open(&memory, true).unwrap();
        assert!(second.turns.is_none(), "a second queue on the memory uses the table");
        second.apply(&[open("t1", "from the table")]).unwrap();
        assert_eq!(first.counts().unwrap()["open"], 2, "c1 in the log, t1 in the table");
        assert_eq!(first.get("t1", Some(3)).unwrap().unwrap()["state"], "open");
        assert_eq!(first.get("c1", Some(3)).unwrap().unwrap()["record"]["messages"][0]["content"], "one more");
        assert!(first.get("c1", Some(4)).unwrap().is_none(), "another token's conversation");
        let listed: Vec<_> = first.recent(10, 0, Some(3)).unwrap().into_iter().map(|row| row["id"].clone()).collect();
        assert_eq!(listed.len(), 3, "{listed:?}");
        assert_eq!(first.recent(10, 0, Some(3)).unwrap()[0]["id"], "t1", "newest first");
        drop((first, second));
        // The log still holds c2's turn; the table says it ended.
        let log = std::fs::read_to_string(crate::queue::turns::TurnLog::path_for(&memory)).unwrap();
        assert!(log.contains("\"c2\""), "{log}");

        let reopened = QueueStore::open(&memory, true).unwrap();
        assert!(reopened.turns.is_some());
        let mut resumed = reopened.open_records().unwrap();
        resumed.sort_by(|a, b| a.0.cmp(&b.0));
        let resumed: Vec<_> =
            resumed.iter().map(|(id, record)| (id.as_str(), record["messages"][0]["content"].clone())).collect();
        assert_eq!(resumed, [("c1", json!("one more")), ("t1", json!("from the table"))]);
        let counts = reopened.counts().unwrap();
        assert_eq!((counts["open"].as_i64(), counts["queued"].as_i64()), (Some(2), Some(1)), "{counts}");
        let in_table = reopened
            .db
            .run("counting", |db| {
                db.query_map("SELECT id FROM gateway_conversations WHERE state = 'open'", &[], |row| row.text(0))
            })
            .unwrap();
        assert!(in_table.is_empty(), "moved into the log: {in_table:?}");
        let log = std::fs::read_to_string(crate::queue::turns::TurnLog::path_for(&memory)).unwrap();
        assert_eq!(log.lines().count(), 2, "rewritten with the open turns only: {log}");

        // Paged, newest first, across the log (t1, c1) and the table (c2); ties in time
        // would be broken by id, the same order here.
        let page = |offset| reopened.recent(1, offset, None).unwrap()[0]["id"].clone();
        assert_eq!([page(0), page(1), page(2)], ["t1", "c2", "c1"]);
        reopened.apply(&[Write::End { id: "t1".into(), outcome: None }]).unwrap();
        assert_eq!(reopened.take_next().unwrap().unwrap().id, "c2");
        reopened.finish("c2", Some("done"), &json!({})).unwrap();
        let taken = reopened.take_next().unwrap().expect("t1 was queued with its record");
        assert_eq!((taken.id.as_str(), &taken.record["messages"][0]["content"]), ("t1", &json!("from the table")));
        assert_eq!(reopened.counts().unwrap()["open"], 1);
    }

    /// When the ended conversations of a batch cannot be queued, the batch fails and
    /// they stay open in the log with its other turns, to be resumed after a restart.
    #[test]
    fn ends_that_cannot_be_queued_stay_open_in_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let memory = crate::db::backends::new_memories(&dir).remove(0);
        let queue = QueueStore::open(&memory, true).unwrap();
        let open = |id: &str| Write::Open { id: id.into(), token_id: None, record: json!({"turn": id}).to_string() };
        let rename = |from: &str, to: &str| {
            let sql = format!("ALTER TABLE {from} RENAME TO {to}");
            queue.db.run("renaming", |db| db.batch(&sql)).unwrap();
        };
        rename("gateway_conversations", "elsewhere");
        let err = queue.apply(&[open("c1"), Write::End { id: "c1".into(), outcome: None }, open("c2")]).unwrap_err();
        assert!(err.to_string().contains("queueing ended conversations"), "{err}");
        rename("elsewhere", "gateway_conversations");
        let mut open_ids: Vec<String> = queue.open_records().unwrap().into_iter().map(|(id, _)| id).collect();
        open_ids.sort();
        assert_eq!(open_ids, ["c1", "c2"]);
        assert_eq!(queue.counts().unwrap()["queued"], 0);
    }

    /// The worker's query for the next queued run reads the partial index, on both
    /// backends, not the table of every conversation (PostgreSQL told to avoid scans,
    /// as it would with a table of any size).
    #[test]
    fn the_next_queued_run_is_found_through_its_index() {
        let dir = tempfile::tempdir().unwrap();
        for path in crate::db::backends::new_memories(&dir) {
            let queue = QueueStore::open(&path, true).unwrap();
            let plan = queue
                .db
                .run("explaining", |db| {
                    let (explain, column) = match db.dialect() {
                        Dialect::Sqlite => ("EXPLAIN QUERY PLAN", 3),
                        Dialect::Postgres => {
                            db.batch("SET enable_seqscan = off")?;
                            ("EXPLAIN", 0)
                        }
                    };
                    db.query_map(&format!("{explain} {TAKE_NEXT}"), &[], |row| row.text(column))
                })
                .unwrap()
                .join("\n");
            assert!(plan.contains("gateway_conversations_queued"), "{}: {plan}", path.display());
        }
    }
}
