//! The OTLP receiver's durable span buffer: the spans and GenAI log events of traces not
//! yet complete, in the memory database's `otlp_traces` and `otlp_items` tables (the
//! server's own, outside memory's migrations). A trace leaves the buffer in the same
//! transaction that puts its trajectory on the learning queue, so a crash loses
//! neither and queues nothing twice.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use flowmem_db::{Db, DbError, Dialect};
use serde_json::{Value, json};

use flowmem_model::{Item, OtlpLogEvent, OtlpSpan, Scope, assemble_otlp, redact_value};

use crate::db::ServerDb;
use crate::error::ServerError;
use crate::queue::store::{create_table as create_queue_table, enqueue};

const CREATE_TABLES: &str = "
CREATE TABLE IF NOT EXISTS otlp_traces (
    trace_id TEXT PRIMARY KEY,
    root_ended INTEGER NOT NULL DEFAULT 0,
    token_id INTEGER,
    scope TEXT NOT NULL,
    first_seen_ms INTEGER NOT NULL,
    last_seen_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS otlp_items (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    trace_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('span', 'event')),
    item TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS otlp_items_trace ON otlp_items (trace_id);
";

/// The same tables in PostgreSQL.
const CREATE_TABLES_POSTGRES: &str = "
CREATE TABLE IF NOT EXISTS otlp_traces (
    trace_id TEXT PRIMARY KEY,
    root_ended BIGINT NOT NULL DEFAULT 0,
    token_id BIGINT,
    scope TEXT NOT NULL,
    first_seen_ms BIGINT NOT NULL,
    last_seen_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS otlp_items (
    seq BIGSERIAL PRIMARY KEY,
    trace_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('span', 'event')),
    item TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS otlp_items_trace ON otlp_items (trace_id);
";

/// Whether any trace is complete (see [`SpanBuffer::assemble_ready`]).
const READY_EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM otlp_traces
    WHERE (root_ended = 1 AND last_seen_ms <= $1) OR last_seen_ms <= $2)";

/// The most traces assembled in one pass; the rest wait for the next.
const MAX_TRACES_PER_PASS: i64 = 256;

/// Who sent a batch and where its runs apply.
#[derive(Debug, Clone)]
pub(crate) struct Sender {
    /// The token that sent it; `None` under open access.
    pub token_id: Option<i64>,
    /// The scope its runs are learned in.
    pub scope: Scope,
}

/// What one assembly pass did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Assembled {
    /// Traces taken out of the buffer.
    pub traces: usize,
    /// Trajectories queued for learning.
    pub queued: usize,
    /// Runs that gave no trajectory (logged with why).
    pub skipped: usize,
}

/// The buffer tables.
pub(crate) struct SpanBuffer {
    db: ServerDb,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

impl SpanBuffer {
    /// Opens the buffer (and the learning queue's table, which it writes into) in the
    /// memory database at `path`.
    pub(crate) fn open(path: &Path) -> Result<SpanBuffer, ServerError> {
        let setup = |db: &Db| {
            db.batch(match db.dialect() {
                Dialect::Sqlite => CREATE_TABLES,
                Dialect::Postgres => CREATE_TABLES_POSTGRES,
            })?;
            create_queue_table(db)
        };
        Ok(SpanBuffer { db: ServerDb::open(path, "opening the OTLP span buffer", setup)? })
    }

    /// Stores `spans` and `events` in one transaction, each under its trace; a trace
    /// whose root span arrived is marked so. A trace keeps the sender of its first batch.
    pub(crate) fn store(
        &self,
        spans: &[OtlpSpan],
        events: &[OtlpLogEvent],
        sender: &Sender,
    ) -> Result<(), ServerError> {
        let scope = serde_json::to_string(&sender.scope).unwrap_or_else(|_| "{}".to_owned());
        let touch_sql = format!(
            "INSERT INTO otlp_traces (trace_id, root_ended, token_id, scope, first_seen_ms, last_seen_ms)
             VALUES ($1, $2, $3, $4, $5, $5)
             ON CONFLICT (trace_id) DO UPDATE SET root_ended = {},
                 last_seen_ms = excluded.last_seen_ms",
            self.db.dialect().greatest("otlp_traces.root_ended", "excluded.root_ended")
        );
        self.db.run("buffering spans", |db| {
            let tx = db.write()?;
            let now = now_ms();
            let touch = |trace_id: &str, root: bool| -> Result<(), DbError> {
                db.execute(
                    &touch_sql,
                    &[
                        trace_id.into(),
                        i64::from(root).into(),
                        sender.token_id.into(),
                        scope.as_str().into(),
                        now.into(),
                    ],
                )?;
                Ok(())
            };
            for span in spans {
                touch(&span.trace_id, span.parent_span_id.is_none())?;
            }
            for event in events {
                touch(&event.trace_id, false)?;
            }
            let insert = |trace_id: &str, kind: &str, item: String| -> Result<(), DbError> {
                db.execute(
                    "INSERT INTO otlp_items (trace_id, kind, item) VALUES ($1, $2, $3)",
                    &[trace_id.into(), kind.into(), item.into()],
                )?;
                Ok(())
            };
            for span in spans {
                insert(&span.trace_id, "span", json_text(span))?;
            }
            for event in events {
                insert(&event.trace_id, "event", json_text(event))?;
            }
            tx.commit()
        })
    }

    /// How many traces and items the buffer holds.
    pub(crate) fn counts(&self) -> Result<(i64, i64), ServerError> {
        self.db.run("counting buffered spans", |db| {
            let traces = db.query_one("SELECT COUNT(*) FROM otlp_traces", &[])?.int(0)?;
            let items = db.query_one("SELECT COUNT(*) FROM otlp_items", &[])?.int(0)?;
            Ok((traces, items))
        })
    }

    /// Assembles the complete traces into trajectories and queues them for learning, in
    /// one transaction that also takes the traces out of the buffer. A trace is complete
    /// once its root span arrived and nothing came for `quiet`, or, rootless, once
    /// nothing came for `abandon`. Traces of one sender and scope are assembled together,
    /// so the traces of one conversation become one run.
    pub(crate) fn assemble_ready(&self, quiet: Duration, abandon: Duration) -> Result<Assembled, ServerError> {
        self.db.run("assembling complete traces", |db| {
            let now = now_ms();
            let (quiet_since, abandoned_since) = (now - millis(quiet), now - millis(abandon));
            // Most passes find nothing: look first without taking the write lock, which
            // the memory's own writer needs too.
            let any_ready = db.query_one(READY_EXISTS, &[quiet_since.into(), abandoned_since.into()])?.bool(0)?;
            if !any_ready {
                return Ok(Assembled::default());
            }
            let tx = db.write()?;
            let ready: Vec<(String, Option<i64>, String)> = db.query_map(
                "SELECT trace_id, token_id, scope FROM otlp_traces
                 WHERE (root_ended = 1 AND last_seen_ms <= $1) OR last_seen_ms <= $2
                 ORDER BY first_seen_ms, trace_id LIMIT $3",
                &[quiet_since.into(), abandoned_since.into(), MAX_TRACES_PER_PASS.into()],
                |row| Ok((row.text(0)?, row.opt_int(1)?, row.text(2)?)),
            )?;
            let mut done = Assembled::default();
            if ready.is_empty() {
                tx.commit()?;
                return Ok(done);
            }
            // Group by sender and scope, in first-seen order.
            let mut groups: BTreeMap<(Option<i64>, String), Vec<String>> = BTreeMap::new();
            for (trace_id, token_id, scope) in &ready {
                groups.entry((*token_id, scope.clone())).or_default().push(trace_id.clone());
            }
            for ((token_id, scope), traces) in groups {
                let (spans, events) = load_items(db, &traces)?;
                let imported = assemble_otlp(spans, events, "otlp:receiver");
                let scope: Value = serde_json::from_str(&scope).unwrap_or(Value::Null);
                for skipped in &imported.skipped {
                    done.skipped += 1;
                    tracing::warn!(reason = %skipped.reason, "otlp: a run gave no trajectory and is not learned from");
                }
                let recorded_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                let gaps: Vec<&str> = imported.gaps.iter().map(|gap| gap.reason.as_str()).collect();
                for item in &imported.items {
                    let Item::Trajectory(trajectory) = item else { continue };
                    let mut record = json!({
                        "trajectory": trajectory,
                        "scope": scope,
                        "token_id": token_id,
                        "source": "otlp",
                        "traces": traces,
                        // Each gap names its span; they are those of every trace
                        // assembled with this run.
                        "gaps": gaps,
                        "recorded_at": recorded_at,
                    });
                    redact_value(&mut record);
                    if queue_under_free_id(db, &trajectory.id, &record)? {
                        done.queued += 1;
                    }
                }
                for trace_id in &traces {
                    db.execute("DELETE FROM otlp_items WHERE trace_id = $1", &[trace_id.into()])?;
                    db.execute("DELETE FROM otlp_traces WHERE trace_id = $1", &[trace_id.into()])?;
                }
                done.traces += traces.len();
            }
            tx.commit()?;
            Ok(done)
        })
    }
}

fn json_text<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

/// The buffered spans and events of `traces`, in arrival order. An item that no longer
/// reads (written by another version) is logged and left out.
fn load_items(db: &Db, traces: &[String]) -> Result<(Vec<OtlpSpan>, Vec<OtlpLogEvent>), DbError> {
    let mut spans = Vec::new();
    let mut events = Vec::new();
    for trace_id in traces {
        let rows = db.query_map(
            "SELECT kind, item FROM otlp_items WHERE trace_id = $1 ORDER BY seq",
            &[trace_id.into()],
            |row| Ok((row.text(0)?, row.text(1)?)),
        )?;
        for (kind, item) in rows {
            let read = if kind == "span" {
                serde_json::from_str(&item).map(|span| spans.push(span))
            } else {
                serde_json::from_str(&item).map(|event| events.push(event))
            };
            if let Err(err) = read {
                tracing::warn!(trace = %trace_id, error = %err, "otlp: a buffered {kind} cannot be read; left out");
            }
        }
    }
    Ok((spans, events))
}

/// Queues `record` as `otlp:ID`, or `otlp:ID~2`, `~3`, … when a run of that id was
/// queued before (a conversation that went on after it was learned from).
fn queue_under_free_id(db: &Db, id: &str, record: &Value) -> Result<bool, DbError> {
    for n in 1..=1000 {
        let key = if n == 1 { format!("otlp:{id}") } else { format!("otlp:{id}~{n}") };
        let taken = db.query_opt("SELECT 1 FROM gateway_conversations WHERE id = $1", &[key.as_str().into()])?;
        if taken.is_none() {
            return enqueue(db, &key, record, None);
        }
    }
    tracing::warn!(run = %id, "otlp: a thousand runs share this id; this one is not queued");
    Ok(false)
}
