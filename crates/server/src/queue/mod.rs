//! The judge-and-induce queue every live source of runs feeds: the gateway's ended
//! conversations and the traces the OTLP receiver assembled. Runs wait in a durable
//! table ([`store`]); one worker takes them oldest first, has the evaluator judge each
//! (unless its source gave the outcome), and induces the successful ones into memory
//! ([`crate::learn`]). A run that fails is tried again, up to the attempt limit.
//!
//! The queue's read routes live here too, under `/v1/flowmem`: the recorded runs
//! (`conversations`, each with what was learned from it) and the status counts.

pub(crate) mod store;
mod turns;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use flowmem_model::{Scope, Trajectory};

use crate::auth::Caller;
use crate::error::ServerError;
use crate::learn::{RunToLearn, learn, learn_trajectory};
use crate::state::AppState;

use self::store::{QueueStore, Queued, Write};

/// The queue's part of the server state.
pub(crate) struct LearnQueue {
    pub(crate) store: Arc<QueueStore>,
    writes: mpsc::UnboundedSender<Write>,
    writes_rx: Mutex<Option<mpsc::UnboundedReceiver<Write>>>,
    /// Woken when a run was queued.
    pub(crate) queued: Notify,
    /// Recording or learning failures since start, logged each time.
    pub(crate) failures: AtomicU64,
    /// Writes handed to the writer and not yet stored (or failed): how far the recording
    /// is behind the replies.
    backlog: AtomicU64,
    /// Attempts at learning from one run before it is marked failed.
    max_attempts: u32,
}

impl LearnQueue {
    /// Opens the queue table in the memory database at `memory`, and the open turns'
    /// log beside it when the server records gateway conversations (`turn_log`).
    pub(crate) fn open(memory: &std::path::Path, max_attempts: u32, turn_log: bool) -> Result<LearnQueue, ServerError> {
        let (writes, writes_rx) = mpsc::unbounded_channel();
        Ok(LearnQueue {
            store: Arc::new(QueueStore::open(memory, turn_log)?),
            writes,
            writes_rx: Mutex::new(Some(writes_rx)),
            queued: Notify::new(),
            failures: AtomicU64::new(0),
            backlog: AtomicU64::new(0),
            max_attempts: max_attempts.max(1),
        })
    }

    /// Hands `write` to the queue's one writer task.
    pub(crate) fn send(&self, write: Write) {
        // The receiver lives until the writer stops at shutdown; later writes are lost
        // with the process, as an unanswered request is.
        // Counted first: the writer may store it before `send` returns.
        self.backlog.fetch_add(1, Ordering::Relaxed);
        if self.writes.send(write).is_err() {
            self.backlog.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Counts and logs a failure of `what`.
    pub(crate) fn failed(&self, what: &str, err: &dyn std::fmt::Display) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(error = %err, "learning queue: {what} failed");
    }

    /// Runs `work` on the queue table on a blocking thread.
    pub(crate) async fn on_store<T: Send + 'static>(
        &self,
        work: impl FnOnce(&QueueStore) -> Result<T, ServerError> + Send + 'static,
    ) -> Result<T, ServerError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || work(&store)).await.map_err(|err| ServerError::Join(err.to_string()))?
    }
}

/// Starts the queue's tasks: the writer and the learner.
pub(crate) fn start(state: &Arc<AppState>) {
    let Some(queue) = state.queue.as_deref() else { return };
    let receiver = queue.writes_rx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some(receiver) = receiver {
        state.background.spawn(write_queue(state.clone(), receiver));
    }
    state.background.spawn(learn_queued(state.clone()));
}

/// How long the queue's writer gathers turns before it stores them.
const WRITE_BATCH: Duration = Duration::from_millis(10);

/// The most writes the queue's writer stores in one batch.
const WRITE_BATCH_MAX: usize = 512;

/// The one writer of the queue (the table, and the open turns' log when there is one),
/// so turns are stored in order; what arrives within [`WRITE_BATCH`] of a write is
/// stored with it in one batch ([`QueueStore::apply`]). Ends once the server stops and
/// every write sent before is stored.
async fn write_queue(state: Arc<AppState>, mut receiver: mpsc::UnboundedReceiver<Write>) {
    let Some(queue) = state.queue.as_deref() else { return };
    loop {
        let first = tokio::select! {
            write = receiver.recv() => write,
            () = state.stop.cancelled() => receiver.try_recv().ok(),
        };
        let Some(first) = first else { return };
        // Gather a moment's worth into one transaction (a busy gateway records a turn per
        // request, and every commit costs a WAL append and makes the memory's readers
        // reread their pages), unless a full batch is waiting already. A stopping server
        // writes at once.
        if receiver.len() + 1 < WRITE_BATCH_MAX {
            state.pause(WRITE_BATCH).await;
        }
        let mut batch = vec![first];
        while batch.len() < WRITE_BATCH_MAX
            && let Ok(more) = receiver.try_recv()
        {
            batch.push(more);
        }
        let queued = batch.iter().any(|write| matches!(write, Write::End { .. }));
        let written = batch.len() as u64;
        // Under `SCHED_BATCH`: waking every few milliseconds, the writer would
        // otherwise take the CPU from whatever thread answers requests there.
        let stored = queue.on_store(move |store| crate::sched::in_background(|| store.apply(&batch))).await;
        queue.backlog.fetch_sub(written, Ordering::Relaxed);
        match stored {
            Ok(()) if queued => queue.queued.notify_one(),
            Ok(()) => {}
            Err(err) => queue.failed("storing conversations", &err),
        }
    }
}

/// Learns from queued runs one at a time, oldest first, until the server stops.
async fn learn_queued(state: Arc<AppState>) {
    let Some(queue) = state.queue.as_deref() else { return };
    loop {
        if state.stop.is_cancelled() {
            return;
        }
        let queued = match queue.on_store(QueueStore::take_next).await {
            Ok(Some(queued)) => queued,
            Ok(None) => {
                tokio::select! {
                    () = queue.queued.notified() => {}
                    () = tokio::time::sleep(Duration::from_secs(5)) => {}
                    () = state.stop.cancelled() => return,
                }
                continue;
            }
            Err(err) => {
                queue.failed("reading the queue", &err);
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let outcome = learn_one(&state, &queued).await;
        let (final_state, result) = match outcome {
            Ok(result) => (Some("done"), result),
            Err(message) => {
                queue.failed("learning from a run", &message);
                let state_after = (queued.attempts >= queue.max_attempts).then_some("failed");
                (state_after, json!({"error": message, "attempts": queued.attempts}))
            }
        };
        let id = queued.id.clone();
        if let Err(err) = queue.on_store(move |store| store.finish(&id, final_state, &result)).await {
            queue.failed("finishing a queued run", &err);
        }
        if final_state.is_none() {
            // Give a failing judge a moment before the next attempt.
            if state.pause(Duration::from_secs(1)).await {
                return;
            }
        }
    }
}

/// The strings of the array `record[key]` (workflow ids); none when it is absent.
pub(crate) fn record_strings(record: &Value, key: &str) -> Vec<String> {
    record
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// Learns from one queued run: a trajectory the OTLP receiver assembled
/// (`record.trajectory`), or a gateway conversation's chat messages.
async fn learn_one(state: &Arc<AppState>, queued: &Queued) -> Result<Value, String> {
    let record = &queued.record;
    let scope: Scope = serde_json::from_value(record.get("scope").cloned().unwrap_or(Value::Null)).unwrap_or_default();
    let shown = record_strings(record, "shown");
    let origin = record.get("source").and_then(Value::as_str).unwrap_or("gateway");
    let source = format!(
        "{origin} model={} token={} at={}",
        record.get("model").and_then(Value::as_str).unwrap_or(""),
        record.get("token_id").and_then(Value::as_i64).map_or_else(|| "none".to_owned(), |id| id.to_string()),
        record.get("recorded_at").and_then(Value::as_str).unwrap_or(""),
    );
    if let Some(trajectory) = record.get("trajectory") {
        let mut trajectory: Trajectory = serde_json::from_value(trajectory.clone())
            .map_err(|err| format!("the queued trajectory cannot be read: {err}"))?;
        trajectory.id.clone_from(&queued.id);
        trajectory.meta.site = scope.site;
        trajectory.meta.domain = scope.domain;
        trajectory.meta.source = Some(source);
        return learn_trajectory(state, trajectory, queued.outcome, &shown).await;
    }
    let messages = record.get("messages").cloned().unwrap_or(Value::Null);
    let run = RunToLearn {
        messages: &messages,
        id: queued.id.clone(),
        scope,
        outcome: queued.outcome,
        source: Some(source),
        shown: &shown,
    };
    learn(state, run).await
}

/// The queue's read routes, nested under `/v1` by the server's router.
pub(crate) fn routes(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/flowmem/conversations", get(recent_conversations))
        .route("/flowmem/conversations/{id}", get(conversation))
        .route("/flowmem/status", get(status))
        .with_state(state)
}

/// A JSON error reply in OpenAI's shape (the gateway's clients read these routes too).
pub(crate) fn json_error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"message": message.into(), "type": kind, "param": null, "code": null}});
    (status, axum::Json(body)).into_response()
}

/// The reply of a route of the queue on a server that has none.
fn no_queue() -> Response {
    json_error(StatusCode::NOT_FOUND, "not_found", "this server records no runs (start it with --gateway or --otlp)")
}

fn server_error(err: &ServerError) -> Response {
    json_error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", err.to_string())
}

/// `GET /v1/flowmem/conversations/{id}`: a recorded run and what was learned.
async fn conversation(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let Some(queue) = state.queue.as_deref() else { return no_queue() };
    let looked_up = id.clone();
    // A token sees only its own runs (open access sees all).
    let row = queue.on_store(move |store| store.get(&looked_up, caller.token_id)).await;
    match row {
        Ok(Some(row)) => axum::Json(row).into_response(),
        Ok(None) => json_error(StatusCode::NOT_FOUND, "not_found", format!("no recorded conversation `{id}`")),
        Err(err) => server_error(&err),
    }
}

/// `GET /v1/flowmem/conversations`: the 100 most recently updated recorded runs of the
/// caller's token (all, under open access), newest first.
async fn recent_conversations(State(state): State<Arc<AppState>>, Extension(caller): Extension<Caller>) -> Response {
    let Some(queue) = state.queue.as_deref() else { return no_queue() };
    match queue.on_store(move |store| store.recent(100, 0, caller.token_id)).await {
        Ok(rows) => axum::Json(json!({"conversations": rows})).into_response(),
        Err(err) => server_error(&err),
    }
}

/// `GET /v1/flowmem/status`: the queue's counts and the failures since start, the
/// recording's backlog (writes not yet stored), the gateway's open conversations, and
/// the OTLP receiver's buffered traces.
async fn status(State(state): State<Arc<AppState>>) -> Response {
    let Some(queue) = state.queue.as_deref() else { return no_queue() };
    let counts = match queue.on_store(QueueStore::counts).await {
        Ok(counts) => counts,
        Err(err) => return server_error(&err),
    };
    let mut body = json!({
        "conversations": counts,
        "failures": queue.failures.load(Ordering::Relaxed),
        "recording_backlog": queue.backlog.load(Ordering::Relaxed),
        "induce": state.parts.induce.describe(),
    });
    if let Some(gateway) = state.gateway.as_deref() {
        body["open_in_memory"] = json!(gateway.open_count());
    }
    if let Some(otlp) = state.otlp.as_deref() {
        match otlp.status().await {
            Ok(otlp) => body["otlp"] = otlp,
            Err(err) => return server_error(&err),
        }
    }
    axum::Json(body).into_response()
}
