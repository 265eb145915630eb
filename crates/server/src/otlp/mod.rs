//! The OTLP/HTTP receiver: `POST /v1/traces` and `POST /v1/logs`, so an agent already
//! traced with OpenTelemetry's GenAI conventions (or OpenInference's) teaches the memory
//! by pointing `OTEL_EXPORTER_OTLP_ENDPOINT` at the server.
//!
//! - A request is read as a collector reads it: protobuf (`application/x-protobuf`) or
//!   JSON (`application/json`), optionally gzip-compressed, with the same bearer token
//!   as every other surface (a write token: spans teach the memory). It is answered in
//!   its own encoding: success, partial success naming the spans rejected and why, `400`
//!   with a `google.rpc.Status` when nothing in it could be read, and `503` (which
//!   exporters retry) when the spans could not be stored.
//! - Accepted spans go into a durable buffer ([`buffer`]) under their trace. A trace is
//!   complete once its root span arrived and nothing came for the quiet period (or,
//!   rootless, after the abandon period); it is then assembled into a trajectory with
//!   the importer's [`assemble_otlp`](flowmem_model::assemble_otlp) and queued for the
//!   judge-and-induce worker the gateway's conversations go through ([`crate::queue`]).

mod buffer;

use std::io::Read as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Extension;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use flowmem_model::{OtlpEncoding, OtlpSignal, Scope, decode_otlp, encode_export_response, encode_rpc_status};

use crate::auth::{Caller, TokenScope};
use crate::error::ServerError;
use crate::state::AppState;

use self::buffer::{Sender, SpanBuffer};

/// The receiver's settings.
#[derive(Debug, Clone)]
pub struct OtlpConfig {
    /// How long a trace whose root span arrived waits for late spans before it is
    /// assembled.
    pub quiet: Duration,
    /// How long a trace whose root span never arrives waits before it is assembled
    /// anyway (its missing parent is reported as a gap).
    pub abandon: Duration,
    /// The largest request body accepted, in bytes (after gzip, too).
    pub max_body_bytes: usize,
    /// The scope runs are learned in when a request names none with `X-Flowmem-Scope`.
    pub scope: Scope,
}

impl OtlpConfig {
    /// The defaults: a 5 s quiet period, 10 minutes before a rootless trace is
    /// assembled, 64 MiB bodies, no scope.
    #[must_use]
    pub fn standard() -> OtlpConfig {
        OtlpConfig {
            quiet: Duration::from_secs(5),
            abandon: Duration::from_secs(600),
            max_body_bytes: 64 << 20,
            scope: Scope::default(),
        }
    }
}

/// The receiver's part of the server state.
pub(crate) struct OtlpReceiver {
    cfg: OtlpConfig,
    buffer: Arc<SpanBuffer>,
    received_spans: AtomicU64,
    rejected_spans: AtomicU64,
    queued_runs: AtomicU64,
    skipped_runs: AtomicU64,
}

impl OtlpReceiver {
    /// Opens the span buffer in the memory database at `memory`.
    pub(crate) fn open(cfg: OtlpConfig, memory: &std::path::Path) -> Result<OtlpReceiver, ServerError> {
        Ok(OtlpReceiver {
            cfg,
            buffer: Arc::new(SpanBuffer::open(memory)?),
            received_spans: AtomicU64::new(0),
            rejected_spans: AtomicU64::new(0),
            queued_runs: AtomicU64::new(0),
            skipped_runs: AtomicU64::new(0),
        })
    }

    /// The receiver's counts, for `/v1/flowmem/status`.
    pub(crate) async fn status(&self) -> Result<Value, ServerError> {
        let buffer = self.buffer.clone();
        let (traces, items) = tokio::task::spawn_blocking(move || buffer.counts())
            .await
            .map_err(|err| ServerError::Join(err.to_string()))??;
        Ok(json!({
            "buffered_traces": traces,
            "buffered_items": items,
            "received_spans": self.received_spans.load(Ordering::Relaxed),
            "rejected_spans": self.rejected_spans.load(Ordering::Relaxed),
            "queued_runs": self.queued_runs.load(Ordering::Relaxed),
            "skipped_runs": self.skipped_runs.load(Ordering::Relaxed),
        }))
    }
}

/// The receiver's routes, nested under `/v1` by the server's router.
pub(crate) fn routes(state: Arc<AppState>) -> Router {
    let limit = state.otlp.as_deref().map_or(OtlpConfig::standard().max_body_bytes, |otlp| otlp.cfg.max_body_bytes);
    Router::new()
        .route("/traces", post(traces))
        .route("/logs", post(logs))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Starts the receiver's task: the assembler of complete traces.
pub(crate) fn start(state: &Arc<AppState>) {
    if state.otlp.is_some() {
        state.background.spawn(assemble(state.clone()));
    }
}

async fn traces(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    receive(&state, &caller, OtlpSignal::Traces, &headers, &body).await
}

async fn logs(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    receive(&state, &caller, OtlpSignal::Logs, &headers, &body).await
}

/// `google.rpc.Code` values the receiver answers with.
const INVALID_ARGUMENT: i32 = 3;
const PERMISSION_DENIED: i32 = 7;
const RESOURCE_EXHAUSTED: i32 = 8;
const UNAVAILABLE: i32 = 14;

/// The most skip reasons one partial-success message lists.
const MAX_REASONS: usize = 5;

/// An OTLP error reply: a `google.rpc.Status` in the request's encoding.
fn status_reply(status: StatusCode, code: i32, message: &str, protobuf: bool) -> Response {
    let mut response = (status, encode_rpc_status(code, message, protobuf)).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, content_type(protobuf));
    response
}

fn content_type(protobuf: bool) -> HeaderValue {
    HeaderValue::from_static(if protobuf { "application/x-protobuf" } else { "application/json" })
}

/// Reads, checks and buffers one export request, and answers it as a collector does.
async fn receive(
    state: &Arc<AppState>,
    caller: &Caller,
    signal: OtlpSignal,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let Some(otlp) = state.otlp.as_deref() else {
        return status_reply(
            StatusCode::NOT_FOUND,
            5,
            "this server has no OTLP receiver (start it with --otlp)",
            false,
        );
    };
    let media = headers.get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok()).unwrap_or("");
    let media = media.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let encoding = match media.as_str() {
        "application/x-protobuf" | "application/protobuf" => OtlpEncoding::Protobuf(signal),
        "application/json" => OtlpEncoding::Json,
        other => {
            let message = format!(
                "unsupported Content-Type {other:?}: OTLP/HTTP sends application/x-protobuf or application/json"
            );
            return status_reply(StatusCode::UNSUPPORTED_MEDIA_TYPE, INVALID_ARGUMENT, &message, false);
        }
    };
    let protobuf = matches!(encoding, OtlpEncoding::Protobuf(_));
    if caller.scope != TokenScope::Write {
        let message =
            "sending spans teaches the memory: it needs a write token (flowmem serve token create --scope write)";
        return status_reply(StatusCode::FORBIDDEN, PERMISSION_DENIED, message, protobuf);
    }
    let body = match decompress(headers, body, otlp.cfg.max_body_bytes) {
        Ok(body) => body,
        Err((status, code, message)) => return status_reply(status, code, &message, protobuf),
    };
    let label = match signal {
        OtlpSignal::Traces => "POST /v1/traces",
        OtlpSignal::Logs => "POST /v1/logs",
    };
    let batch = decode_otlp(label.as_ref(), &body, encoding);
    let reasons: Vec<String> = batch
        .skipped
        .iter()
        .map(|skipped| match &skipped.location.json_path {
            Some(path) => format!("{path}: {}", skipped.reason),
            None => skipped.reason.clone(),
        })
        .collect();
    for reason in &reasons {
        tracing::info!(%reason, "otlp: skipped part of a request");
    }
    if batch.spans.is_empty() && batch.events.is_empty() && batch.n_envelope_errors > 0 {
        let message = format!("nothing in the request could be read: {}", summary(&reasons));
        return status_reply(StatusCode::BAD_REQUEST, INVALID_ARGUMENT, &message, protobuf);
    }
    let sender =
        Sender { token_id: caller.token_id, scope: scope_of(headers).unwrap_or_else(|| otlp.cfg.scope.clone()) };
    let n_spans = batch.spans.len();
    let buffer = otlp.buffer.clone();
    let stored = tokio::task::spawn_blocking(move || buffer.store(&batch.spans, &batch.events, &sender))
        .await
        .unwrap_or_else(|err| Err(ServerError::Join(err.to_string())));
    if let Err(err) = stored {
        tracing::warn!(error = %err, "otlp: buffering spans failed");
        let message = format!("the spans could not be stored, try again: {err}");
        let mut response = status_reply(StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE, &message, protobuf);
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    }
    otlp.received_spans.fetch_add(n_spans as u64, Ordering::Relaxed);
    otlp.rejected_spans.fetch_add(batch.n_rejected as u64, Ordering::Relaxed);
    let message = if reasons.is_empty() { String::new() } else { summary(&reasons) };
    let mut response =
        (StatusCode::OK, encode_export_response(signal, batch.n_rejected as u64, &message, protobuf)).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, content_type(protobuf));
    response
}

/// The first reasons, and how many more there are.
fn summary(reasons: &[String]) -> String {
    let mut text = reasons.iter().take(MAX_REASONS).cloned().collect::<Vec<_>>().join("; ");
    if reasons.len() > MAX_REASONS {
        text.push_str(&format!("; and {} more", reasons.len() - MAX_REASONS));
    }
    text
}

/// The body, gunzipped when `Content-Encoding: gzip`, and never more than `limit` bytes.
fn decompress(headers: &HeaderMap, body: &Bytes, limit: usize) -> Result<Bytes, (StatusCode, i32, String)> {
    let coding = headers.get(header::CONTENT_ENCODING).and_then(|value| value.to_str().ok()).unwrap_or("identity");
    match coding.trim().to_ascii_lowercase().as_str() {
        "" | "identity" => Ok(body.clone()),
        "gzip" => {
            let mut out = Vec::new();
            let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
            let read = flate2::read::GzDecoder::new(&body[..]).take(cap).read_to_end(&mut out);
            match read {
                Err(err) => {
                    Err((StatusCode::BAD_REQUEST, INVALID_ARGUMENT, format!("the gzip body cannot be read: {err}")))
                }
                Ok(_) if out.len() > limit => Err((
                    StatusCode::PAYLOAD_TOO_LARGE,
                    RESOURCE_EXHAUSTED,
                    format!("the body is over {limit} bytes once gunzipped; send smaller batches"),
                )),
                Ok(_) => Ok(Bytes::from(out)),
            }
        }
        other => Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            INVALID_ARGUMENT,
            format!("unsupported Content-Encoding {other:?}: send gzip or none"),
        )),
    }
}

/// The scope a request names in `X-Flowmem-Scope` (`domain`, or `site/domain`).
fn scope_of(headers: &HeaderMap) -> Option<Scope> {
    let value = headers.get("x-flowmem-scope")?.to_str().ok()?.trim();
    if value.is_empty() {
        return None;
    }
    Some(Scope::parse(value))
}

/// Assembles complete traces and queues their runs until the server stops; what is
/// still buffered then waits in the database for the next start.
async fn assemble(state: Arc<AppState>) {
    let Some(otlp) = state.otlp.as_deref() else { return };
    let tick = (otlp.cfg.quiet / 4).clamp(Duration::from_millis(20), Duration::from_secs(1));
    loop {
        if state.pause(tick).await {
            return;
        }
        let buffer = otlp.buffer.clone();
        let (quiet, abandon) = (otlp.cfg.quiet, otlp.cfg.abandon.max(otlp.cfg.quiet));
        match tokio::task::spawn_blocking(move || buffer.assemble_ready(quiet, abandon)).await {
            Ok(Ok(done)) => {
                if done.traces > 0 {
                    tracing::info!(
                        traces = done.traces,
                        queued = done.queued,
                        skipped = done.skipped,
                        "otlp: traces assembled"
                    );
                }
                otlp.queued_runs.fetch_add(done.queued as u64, Ordering::Relaxed);
                otlp.skipped_runs.fetch_add(done.skipped as u64, Ordering::Relaxed);
                if done.queued > 0
                    && let Some(queue) = state.queue.as_deref()
                {
                    queue.queued.notify_one();
                }
            }
            Ok(Err(err)) => tracing::warn!(error = %err, "otlp: assembling traces failed"),
            Err(err) => tracing::warn!(error = %err, "otlp: assembling traces failed"),
        }
    }
}
