//! The durable learning queue: one row per recorded run in the memory database's
//! `gateway_conversations` table (the server's own, outside memory's migrations; named
//! for its first feeder, the gateway, and kept so for the databases that hold it). A
//! gateway conversation is `open` while it runs; a run is `queued` once it ended (a
//! conversation, or a trace the OTLP receiver assembled), and `done` or `failed` once
//! learned from, so a restart loses no recorded run and learns from none twice.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

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

/// A write of the queue's one writer task; a batch of them is one transaction.
pub(crate) enum Write {
    /// A turn finished: the open conversation's record so far.
    Open { id: String, record: Value },
    /// The conversation ended: queue it for learning, with the app's outcome if given.
    Queue { id: String, record: Value, outcome: Option<bool> },
}

/// A queued conversation, as the worker takes it.
#[derive(Debug, Clone)]
pub(crate) struct Queued {
    pub id: String,
    pub record: Value,
    pub outcome: Option<bool>,
    pub attempts: u32,
}

/// The queue table.
pub(crate) struct QueueStore {
    db: ServerDb,
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Queues run `id` for learning, in `conn`'s transaction: a new row, or the open
/// conversation of that id, ended. Returns false, and changes nothing, when a row of
/// that id is already queued or learned from.
pub(crate) fn enqueue(conn: &Connection, id: &str, record: &Value, outcome: Option<bool>) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(
            "INSERT INTO gateway_conversations (id, state, record, outcome, updated_at)
             VALUES (?1, 'queued', ?2, ?3, ?4)
             ON CONFLICT (id) DO UPDATE SET state = 'queued', record = excluded.record,
                 outcome = excluded.outcome, updated_at = excluded.updated_at
             WHERE state = 'open'",
        )?
        .execute(params![id, record.to_string(), outcome, now()])?;
    Ok(changed > 0)
}

/// Creates the queue table in `conn`'s database if it is not there.
pub(crate) fn create_table(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(CREATE_TABLE)
}

impl QueueStore {
    /// Opens the table in the memory database at `path`, creating it if needed.
    pub(crate) fn open(path: &Path) -> Result<QueueStore, ServerError> {
        Ok(QueueStore { db: ServerDb::open(path, "opening the learning queue", create_table)? })
    }

    /// Applies `writes` in order, in one transaction.
    pub(crate) fn apply(&self, writes: &[Write]) -> Result<(), ServerError> {
        self.db.run("storing conversations", |conn| {
            let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
            for write in writes {
                match write {
                    Write::Open { id, record } => {
                        tx.prepare_cached(
                            "INSERT INTO gateway_conversations (id, state, record, updated_at) VALUES (?1, 'open', ?2, ?3)
                             ON CONFLICT (id) DO UPDATE SET record = excluded.record, updated_at = excluded.updated_at
                             WHERE state = 'open'",
                        )?
                        .execute(params![id, record.to_string(), now()])?;
                    }
                    Write::Queue { id, record, outcome } => {
                        enqueue(&tx, id, record, *outcome)?;
                    }
                }
            }
            tx.commit()
        })
    }

    /// The oldest queued conversation, its attempt counted before any work is done, so a
    /// conversation that crashes the server every time is given up after a few tries.
    pub(crate) fn take_next(&self) -> Result<Option<Queued>, ServerError> {
        self.db.run("taking the next queued conversation", |conn| {
            let row: Option<(String, String, Option<bool>, u32)> = conn
                .prepare_cached(
                    "SELECT id, record, outcome, attempts FROM gateway_conversations WHERE state = 'queued'
                     ORDER BY updated_at, id LIMIT 1",
                )?
                .query_row([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
                .optional()?;
            let Some((id, record, outcome, attempts)) = row else { return Ok(None) };
            conn.prepare_cached("UPDATE gateway_conversations SET attempts = attempts + 1 WHERE id = ?1")?
                .execute([&id])?;
            let record = serde_json::from_str(&record).unwrap_or(Value::Null);
            Ok(Some(Queued { id, record, outcome, attempts: attempts + 1 }))
        })
    }

    /// Ends a queued conversation's life: `done` with what learning did, or `failed`
    /// with why; `None` leaves it queued for another attempt.
    pub(crate) fn finish(&self, id: &str, state: Option<&str>, result: &Value) -> Result<(), ServerError> {
        self.db.run("finishing a queued conversation", |conn| {
            match state {
                Some(state) => conn
                    .prepare_cached(
                        "UPDATE gateway_conversations SET state = ?2, result = ?3, updated_at = ?4 WHERE id = ?1",
                    )?
                    .execute(params![id, state, result.to_string(), now()]),
                None => conn
                    .prepare_cached("UPDATE gateway_conversations SET result = ?2, updated_at = ?3 WHERE id = ?1")?
                    .execute(params![id, result.to_string(), now()]),
            }
            .map(drop)
        })
    }

    /// The open conversations a previous run left, to resume.
    pub(crate) fn open_records(&self) -> Result<Vec<(String, Value)>, ServerError> {
        self.db.run("reading open conversations", |conn| {
            let mut stmt = conn.prepare("SELECT id, record FROM gateway_conversations WHERE state = 'open'")?;
            let rows = stmt.query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))?;
            let mut open = Vec::new();
            for row in rows {
                let (id, record) = row?;
                open.push((id, serde_json::from_str(&record).unwrap_or(Value::Null)));
            }
            Ok(open)
        })
    }

    /// How many conversations are in each state.
    pub(crate) fn counts(&self) -> Result<Value, ServerError> {
        self.db.run("counting conversations", |conn| {
            let mut stmt = conn.prepare("SELECT state, COUNT(*) FROM gateway_conversations GROUP BY state")?;
            let rows = stmt.query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?)))?;
            let mut counts = serde_json::Map::new();
            for state in ["open", "queued", "done", "failed"] {
                counts.insert(state.to_owned(), Value::from(0));
            }
            for row in rows {
                let (state, n) = row?;
                counts.insert(state, Value::from(n));
            }
            Ok(Value::Object(counts))
        })
    }

    /// The most recently updated conversations, newest first, skipping `offset`: id,
    /// state, updated_at, outcome, source and the first user message, and what learning
    /// did (the verdict and its reason, workflows stored and merged, why any were
    /// rejected, or the error); only those of token `token_id` when it is given.
    pub(crate) fn recent(&self, limit: usize, offset: usize, token_id: Option<i64>) -> Result<Vec<Value>, ServerError> {
        self.db.run("listing conversations", |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, state, updated_at, outcome, json_extract(record, '$.source'),
                    (SELECT json_extract(value, '$.content') FROM json_each(record, '$.messages')
                     WHERE json_extract(value, '$.role') = 'user' LIMIT 1),
                    json_extract(result, '$.judgement.success'), json_extract(result, '$.judgement.reason'),
                    json_array_length(result, '$.stored'), json_array_length(result, '$.merged'),
                    (SELECT group_concat(json_extract(value, '$.message'), '; ') FROM json_each(result, '$.rejected')),
                    json_extract(result, '$.error')
                 FROM gateway_conversations
                 WHERE ?2 IS NULL OR json_extract(record, '$.token_id') = ?2
                 ORDER BY updated_at DESC, id DESC LIMIT ?1 OFFSET ?3",
            )?;
            let as_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
            let rows = stmt.query_map(params![as_i64(limit), token_id, as_i64(offset)], |row| {
                Ok(serde_json::json!({"id": row.get::<_, String>(0)?, "state": row.get::<_, String>(1)?,
                "updated_at": row.get::<_, String>(2)?, "outcome": row.get::<_, Option<bool>>(3)?,
                "source": row.get::<_, Option<String>>(4)?,
                "first_user": row.get::<_, Option<rusqlite::types::Value>>(5)?.map(|value| match value {
                    rusqlite::types::Value::Text(text) => text,
                    other => format!("{other:?}"),
                }),
                "verdict": row.get::<_, Option<bool>>(6)?, "verdict_reason": row.get::<_, Option<String>>(7)?,
                "learned": row.get::<_, Option<u32>>(8)?, "merged": row.get::<_, Option<u32>>(9)?,
                "rejected": row.get::<_, Option<String>>(10)?, "error": row.get::<_, Option<String>>(11)?}))
            })?;
            rows.collect()
        })
    }

    /// Which of `ids` name a kept conversation, in one query.
    pub(crate) fn known(&self, ids: &[String]) -> Result<std::collections::HashSet<String>, ServerError> {
        let ids = serde_json::to_string(ids).unwrap_or_else(|_| "[]".to_owned());
        self.db.run("looking conversations up", |conn| {
            let mut stmt = conn
                .prepare_cached("SELECT id FROM gateway_conversations WHERE id IN (SELECT value FROM json_each(?1))")?;
            let rows = stmt.query_map([ids], |row| row.get::<_, String>(0))?;
            rows.collect()
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
        self.db.run("keeping a reported run", |conn| {
            conn.prepare_cached(
                "INSERT INTO gateway_conversations (id, state, record, outcome, result, attempts, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6)",
            )?
            .execute(params![id, state, record.to_string(), outcome, result.to_string(), now()])?;
            Ok(())
        })
    }

    /// A conversation's row as JSON: state, record, outcome, result, attempts; only one
    /// of token `token_id` when it is given (a token reads its own runs).
    pub(crate) fn get(&self, id: &str, token_id: Option<i64>) -> Result<Option<Value>, ServerError> {
        self.db.run("reading a conversation", |conn| {
            conn.prepare_cached(
                "SELECT state, record, outcome, result, attempts FROM gateway_conversations
                 WHERE id = ?1 AND (?2 IS NULL OR json_extract(record, '$.token_id') = ?2)",
            )?
            .query_row(params![id, token_id], |row| {
                let record: String = row.get(1)?;
                let result: Option<String> = row.get(3)?;
                Ok(serde_json::json!({
                    "id": id,
                    "state": row.get::<_, String>(0)?,
                    "record": serde_json::from_str::<Value>(&record).unwrap_or(Value::Null),
                    "outcome": row.get::<_, Option<bool>>(2)?,
                    "result": result.and_then(|text| serde_json::from_str::<Value>(&text).ok()),
                    "attempts": row.get::<_, u32>(4)?,
                }))
            })
            .optional()
        })
    }
}
