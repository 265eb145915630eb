//! The OpenAI-compatible memory gateway: `/v1/chat/completions` and `/v1/models`
//! forwarded to an upstream endpoint, with Agent Workflow Memory added on the way and
//! the conversations recorded and learned from in the background (online AWM for an
//! agent that only changes its `OPENAI_BASE_URL`).
//!
//! - A request is matched to its conversation ([`conversation`]). On the first turn the
//!   workflows that fit its first user message are retrieved and, in mode `prompt`,
//!   appended to its system message; later turns get the same text again, so the prompt
//!   prefix stays stable. The response says which in `X-Flowmem-Workflows`.
//! - The upstream reply is passed through unchanged (streamed replies chunk by chunk)
//!   and assembled for the record ([`sse`]).
//! - A conversation ends when its model answered without tool calls and nothing
//!   extended it for the quiet period, or on `POST /v1/flowmem/conversations/{id}/end`.
//!   Ended conversations wait in the server's durable learning queue
//!   ([`crate::queue`]); its worker judges each (unless the app gave its outcome) and
//!   induces the successful ones into memory.
//!   Recording and learning never delay or fail a response.

mod conversation;
mod privacy;
mod sse;

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use futures::{Stream, StreamExt as _};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use flowmem_exec::{CallChecker, CallGuard};
use flowmem_llm::{ApiKey, CHAT_COMPLETIONS_PATH, MODELS_PATH, Passthrough, PassthroughError, RawStream};
use flowmem_memory::{RetrievalMode, Retriever, prompt_memory};
use flowmem_model::{Deviation, Scope};

use crate::auth::Caller;
use crate::error::ServerError;
use crate::queue::store::Write;
use crate::queue::{LearnQueue, record_strings};
use crate::state::AppState;

use self::conversation::{
    Conversations, Named, Open, TranscriptHash, check_calls, content_text, no_retrieval, prefix_hashes, retrieval_text,
};
use self::privacy::Cleaned;
pub use self::privacy::Privacy;
use self::sse::Assembler;

/// What the gateway does with memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InjectMode {
    /// Neither retrieve nor inject; only forward and record.
    Off,
    /// Retrieve on the first turn and add the workflows to the system message.
    Prompt,
    /// Retrieve and record which workflows fit, but inject nothing (for A/B tests).
    Shadow,
}

/// The gateway's settings.
#[derive(Clone)]
pub struct GatewayConfig {
    /// The upstream base URL, such as `https://host/v1` (requests go to
    /// `{upstream}/chat/completions`).
    pub upstream: String,
    /// The upstream API key, sent as a bearer token; never logged or stored.
    pub upstream_key: Option<String>,
    /// What to do with memory.
    pub memory: InjectMode,
    /// How many workflows to retrieve.
    pub top_k: usize,
    /// The token budget of the injected text.
    pub budget_tokens: usize,
    /// How long an answered conversation stays open for another turn.
    pub quiet: Duration,
    /// How long a conversation that stopped mid-way (its last request unanswered, or
    /// answered with tool calls nobody followed up) stays open.
    pub abandon: Duration,
    /// The scope of requests without `X-Flowmem-Scope`, by token id (first) and by
    /// model name.
    pub token_scopes: Vec<(i64, Scope)>,
    /// See `token_scopes`.
    pub model_scopes: Vec<(String, Scope)>,
    /// What is recorded and how.
    pub privacy: Privacy,
    /// The skeletons tool calls are checked against, by scope: each tool call the model
    /// asks for in a conversation of that scope is one step on the skeleton's reachable
    /// markings. A deviation is flagged (never blocked): logged, kept in the
    /// conversation's record with the tools expected, and, on a reply that is not
    /// streamed, named in the `X-Flowmem-Deviations` header.
    pub guards: Vec<(Scope, CallGuard)>,
    /// How workflows are retrieved for a conversation. BM25 by default: it adds
    /// microseconds, where embedding the query adds milliseconds to every first turn
    /// (see the `gateway_latency` bench).
    pub retrieval: RetrievalMode,
}

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("upstream", &self.upstream)
            .field("upstream_key", &self.upstream_key.as_ref().map(|_| "<redacted>"))
            .field("memory", &self.memory)
            .field("quiet", &self.quiet)
            .field("guards", &self.guards.len())
            .finish_non_exhaustive()
    }
}

impl GatewayConfig {
    /// Defaults for `upstream`: mode `prompt`, 3 workflows within 1,000 tokens, a 30 s
    /// quiet period, 10 minutes before a silent conversation counts as abandoned,
    /// recording on.
    #[must_use]
    pub fn standard(upstream: String) -> GatewayConfig {
        GatewayConfig {
            upstream: upstream.trim_end_matches('/').to_owned(),
            upstream_key: None,
            memory: InjectMode::Prompt,
            top_k: 3,
            budget_tokens: 1_000,
            quiet: Duration::from_secs(30),
            abandon: Duration::from_secs(600),
            token_scopes: Vec::new(),
            model_scopes: Vec::new(),
            privacy: Privacy::default(),
            guards: Vec::new(),
            retrieval: RetrievalMode::Bm25,
        }
    }
}

/// The gateway's part of the server state.
pub(crate) struct Gateway {
    pub(crate) cfg: GatewayConfig,
    upstream: Passthrough,
    conversations: Mutex<Conversations>,
    /// The server's learning queue, where ended conversations go.
    queue: Arc<LearnQueue>,
    /// How conversations' workflows are retrieved.
    retriever: Retriever,
}

impl Gateway {
    /// Resumes the conversations a previous run left open in `queue`.
    pub(crate) fn open(
        cfg: GatewayConfig,
        queue: Arc<LearnQueue>,
        retriever: Retriever,
    ) -> Result<Gateway, ServerError> {
        let mut conversations = Conversations::default();
        for (id, record) in queue.store.open_records()? {
            if let Some(open) = resume(&id, &record, &cfg.guards) {
                conversations.insert(open);
            }
        }
        let key = cfg.upstream_key.clone().map(ApiKey::new);
        let upstream = Passthrough::new(&cfg.upstream, key).map_err(|err| ServerError::Upstream(err.to_string()))?;
        Ok(Gateway { cfg, upstream, conversations: Mutex::new(conversations), queue, retriever })
    }

    fn conversations(&self) -> std::sync::MutexGuard<'_, Conversations> {
        self.conversations.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many conversations are open in memory.
    pub(crate) fn open_count(&self) -> usize {
        self.conversations().len()
    }
}

/// The checker of `scope`'s skeleton, at the start, when the gateway guards the scope.
fn guard_for(guards: &[(Scope, CallGuard)], scope: &Scope) -> Option<CallChecker> {
    guards.iter().find(|(guarded, _)| guarded == scope).map(|(_, guard)| guard.start())
}

/// An open conversation from its stored record, answered and quiet from now on. Its
/// guard is brought to where the recorded tool calls left it.
fn resume(id: &str, record: &Value, guards: &[(Scope, CallGuard)]) -> Option<Open> {
    let messages = record.get("messages")?.as_array()?;
    let token_id = record.get("token_id").and_then(Value::as_i64);
    let scope: Scope = serde_json::from_value(record.get("scope").cloned().unwrap_or(Value::Null)).unwrap_or_default();
    let mut guard = guard_for(guards, &scope);
    if let Some(checker) = &mut guard {
        for message in messages.iter().filter(|message| message["role"] == "assistant") {
            // Their deviations were recorded when they were made.
            let _ = check_calls(checker, message);
        }
    }
    let deviations =
        serde_json::from_value(record.get("deviations").cloned().unwrap_or(Value::Null)).unwrap_or_default();
    Some(Open {
        guard,
        deviations,
        id: id.into(),
        named: None,
        hash: prefix_hashes(token_id, messages).last().copied(),
        turns: 1,
        scope,
        model: record.get("model").and_then(Value::as_str).unwrap_or("").into(),
        token_id,
        shown: record_strings(record, "shown").into(),
        shadow: record_strings(record, "shadow").into(),
        memory_text: record.get("memory_text").and_then(Value::as_str).unwrap_or("").into(),
        retrieval: record.get("retrieval").map_or_else(no_retrieval, retrieval_text),
        record: true,
        answered: true,
        last_activity: Instant::now(),
    })
}

/// The record of a conversation whose transcript is `messages`, as stored: the messages
/// redacted and bounded, as JSON text. It is written out here, on the request's own
/// thread, so that its many small parts are freed where they were allocated; the
/// queue's writer frees one string.
fn record_of(gateway: &Gateway, conversation: &Open, messages: &[Value]) -> Result<String, serde_json::Error> {
    /// A stored conversation record's fields, in order.
    #[derive(serde::Serialize)]
    struct Stored<'a> {
        messages: Vec<Cleaned<'a>>,
        scope: &'a Scope,
        model: &'a str,
        token_id: Option<i64>,
        shown: &'a [String],
        shadow: &'a [String],
        memory_text: &'a str,
        retrieval: &'a RawValue,
        deviations: &'a [Deviation],
        source: &'static str,
        recorded_at: String,
    }
    let privacy = &gateway.cfg.privacy;
    serde_json::to_string(&Stored {
        messages: messages.iter().map(|message| privacy.cleaned(message)).collect(),
        scope: &conversation.scope,
        model: &conversation.model,
        token_id: conversation.token_id,
        shown: &conversation.shown,
        shadow: &conversation.shadow,
        memory_text: &conversation.memory_text,
        retrieval: &conversation.retrieval,
        deviations: &conversation.deviations,
        source: "gateway",
        recorded_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
}

/// The gateway's routes, nested under `/v1` by the server's router.
pub(crate) fn routes(state: Arc<AppState>) -> Router {
    Router::new()
        .route(CHAT_COMPLETIONS_PATH, post(chat_completions))
        .route(MODELS_PATH, get(models))
        .route("/flowmem/conversations/{id}/end", post(end_conversation))
        .with_state(state)
}

/// An error in OpenAI's shape, so SDKs show its message.
struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    param: Option<String>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": null}});
        (self.status, axum::Json(body)).into_response()
    }
}

fn bad_request(message: impl Into<String>, param: Option<&str>) -> ApiError {
    ApiError {
        status: StatusCode::BAD_REQUEST,
        kind: "invalid_request_error",
        message: message.into(),
        param: param.map(str::to_owned),
    }
}

fn api_error(status: StatusCode, kind: &'static str, message: impl Into<String>, param: Option<&str>) -> Response {
    ApiError { status, kind, message: message.into(), param: param.map(str::to_owned) }.into_response()
}

fn gateway_of(state: &AppState) -> Result<&Gateway, ApiError> {
    state.gateway.as_deref().ok_or_else(|| ApiError {
        status: StatusCode::NOT_FOUND,
        kind: "not_found",
        message: "this server has no gateway (start it with --gateway or --upstream)".to_owned(),
        param: None,
    })
}

/// Checks the request the way the upstream would, so a malformed one gets a message
/// naming its field before anything is forwarded or recorded.
fn check_request(body: &Bytes) -> Result<Value, ApiError> {
    let request: Value = serde_json::from_slice(body)
        .map_err(|err| bad_request(format!("the request body is not JSON: {err}"), None))?;
    if !request.is_object() {
        return Err(bad_request("the request body must be a JSON object", None));
    }
    let Some(messages) = request.get("messages").and_then(Value::as_array) else {
        return Err(bad_request("`messages` is required: an array of chat messages", Some("messages")));
    };
    for (idx, message) in messages.iter().enumerate() {
        if message.get("role").and_then(Value::as_str).is_none() {
            let param = format!("messages[{idx}].role");
            return Err(bad_request(format!("`{param}` is required: a string such as `user`"), Some(&param)));
        }
    }
    Ok(request)
}

/// The scope of a request: `X-Flowmem-Scope` (`domain`, or `site/domain`), else its
/// token's configured scope, else its model's.
fn scope_of(cfg: &GatewayConfig, headers: &HeaderMap, model: &str, token_id: Option<i64>) -> Scope {
    if let Some(value) = headers.get("x-flowmem-scope").and_then(|value| value.to_str().ok()) {
        return Scope::parse(value);
    }
    let by_token = token_id.and_then(|id| cfg.token_scopes.iter().find(|(token, _)| *token == id));
    if let Some((_, scope)) = by_token {
        return scope.clone();
    }
    cfg.model_scopes.iter().find(|(name, _)| name == model).map(|(_, scope)| scope.clone()).unwrap_or_default()
}

/// The conversation name a request gives, if any.
fn named_of(
    headers: &HeaderMap,
    request: &Value,
    token_id: Option<i64>,
    hashes: &[u64],
) -> Result<Option<Named>, ApiError> {
    if let Some(value) = headers.get("x-flowmem-conversation") {
        let name = value.to_str().unwrap_or("");
        let valid = !name.is_empty()
            && name.len() <= 128
            && name.chars().all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '-' | '_' | '.' | ':'));
        if !valid {
            return Err(bad_request("`X-Flowmem-Conversation` must be 1 to 128 letters, digits or `-_.:`", None));
        }
        return Ok(Some(Named::Header(format!("{}:{name}", token_id.unwrap_or(0)))));
    }
    if let Some(user) = request.get("user").and_then(Value::as_str) {
        // The hash of the first two messages (or fewer).
        let hash = hashes[..hashes.len().min(2)].last().copied().unwrap_or(0);
        return Ok(Some(Named::User(user.to_owned(), hash)));
    }
    Ok(None)
}

/// The first user message's text: what retrieval searches with.
fn first_user_text(messages: &[Value]) -> String {
    messages
        .iter()
        .find(|message| message.get("role").and_then(Value::as_str) == Some("user"))
        .map(|message| content_text(message.get("content")))
        .unwrap_or_default()
}

/// Adds `memory` to the request's system message (a new one first when it has none).
fn inject(request: &mut Value, memory: &str) {
    let Some(messages) = request.get_mut("messages").and_then(Value::as_array_mut) else { return };
    let is_system =
        |message: &Value| matches!(message.get("role").and_then(Value::as_str), Some("system" | "developer"));
    match messages.first_mut().filter(|first| is_system(first)) {
        Some(system) => match system.get_mut("content") {
            Some(Value::String(text)) => {
                text.push_str("\n\n");
                text.push_str(memory);
            }
            Some(Value::Array(parts)) => parts.push(json!({"type": "text", "text": format!("\n\n{memory}")})),
            _ => system["content"] = json!(memory),
        },
        None => messages.insert(0, json!({"role": "system", "content": memory})),
    }
}

/// Starts a conversation: retrieval (unless mode `off`) and the privacy decision.
async fn start_conversation(
    state: &Arc<AppState>,
    gateway: &Gateway,
    named: Option<Named>,
    messages: &[Value],
    scope: Scope,
    model: &str,
    token_id: Option<i64>,
) -> Open {
    let mut shown = Vec::new();
    let mut shadow = Vec::new();
    let mut memory_text = String::new();
    let mut retrieval_record = no_retrieval();
    let task = first_user_text(messages);
    if gateway.cfg.memory != InjectMode::Off && !task.trim().is_empty() {
        match state.retrieve(&gateway.retriever, &task, scope.clone(), gateway.cfg.top_k).await {
            Ok(retrieval) => {
                retrieval_record = retrieval_text(&retrieval.record());
                let workflows: Vec<_> = retrieval.hits.into_iter().map(|hit| hit.workflow).collect();
                match prompt_memory(&state.prompts, &workflows, gateway.cfg.budget_tokens) {
                    Ok(memory) => {
                        state.count_retrieved(memory.included.clone());
                        if gateway.cfg.memory == InjectMode::Prompt {
                            memory_text = memory.text;
                            shown = memory.included;
                        } else {
                            shadow = memory.included;
                        }
                    }
                    Err(err) => gateway.queue.failed("rendering workflows", &err),
                }
            }
            Err(err) => gateway.queue.failed("retrieving workflows", &err),
        }
    }
    let record = gateway.cfg.privacy.records(&scope, token_id);
    Open {
        guard: guard_for(&gateway.cfg.guards, &scope),
        deviations: Vec::new(),
        id: state.fresh_id("conv").into(),
        named,
        turns: 0,
        hash: None,
        scope,
        model: model.into(),
        token_id,
        shown: shown.into(),
        shadow: shadow.into(),
        memory_text: memory_text.into(),
        retrieval: retrieval_record,
        record,
        answered: false,
        last_activity: Instant::now(),
    }
}

/// Headers of an upstream reply that a client may need: its type and the rate limits.
fn passed_headers(upstream: &[(String, Vec<u8>)], response: &mut Response) {
    for (name, value) in upstream {
        let keep = name == "content-type"
            || name.starts_with("retry-after")
            || name.starts_with("x-ratelimit-")
            || name == "x-request-id"
            || name == "openai-processing-ms";
        if keep && let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_bytes(value))
        {
            response.headers_mut().insert(name, value);
        }
    }
}

fn flowmem_headers(response: &mut Response, conversation: &Open) {
    if let Ok(value) = HeaderValue::from_str(&conversation.id) {
        response.headers_mut().insert("x-flowmem-conversation", value);
    }
    if let Ok(value) = HeaderValue::from_str(&conversation.shown.join(",")) {
        response.headers_mut().insert("x-flowmem-workflows", value);
    }
    if !conversation.shadow.is_empty()
        && let Ok(value) = HeaderValue::from_str(&conversation.shadow.join(","))
    {
        response.headers_mut().insert("x-flowmem-shadow-workflows", value);
    }
}

/// Records a finished turn: the request's own messages (without the injected memory)
/// and the model's answer. Returns the deviations of the answer's tool calls from the
/// scope's skeleton, if it is guarded.
fn finish_turn(
    gateway: &Gateway,
    id: &str,
    mut messages: Vec<Value>,
    transcript: TranscriptHash,
    answer: Value,
) -> Vec<Deviation> {
    let (before, updated) = {
        let mut conversations = gateway.conversations();
        let before = conversations.get(id).map_or(0, |conversation| conversation.deviations.len());
        (before, conversations.record_turn(id, &mut messages, transcript, answer))
    };
    let Some(conversation) = updated else { return Vec::new() };
    if conversation.record {
        match record_of(gateway, &conversation, &messages) {
            Ok(record) => gateway.queue.send(Write::Open {
                id: Arc::clone(&conversation.id),
                token_id: conversation.token_id,
                record,
            }),
            Err(err) => gateway.queue.failed("recording a turn", &err),
        }
    }
    conversation.deviations.get(before..).unwrap_or_default().to_vec()
}

/// `POST /v1/chat/completions`.
async fn chat_completions(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let gateway = match gateway_of(&state) {
        Ok(gateway) => gateway,
        Err(err) => return err.into_response(),
    };
    let mut request = match check_request(&body) {
        Ok(request) => request,
        Err(err) => return err.into_response(),
    };
    // Taken out of the request, not copied: only an injection needs them back in it.
    let messages = match request.get_mut("messages").map(Value::take) {
        Some(Value::Array(messages)) => messages,
        _ => Vec::new(),
    };
    // Hashed once: the answer's hash goes on from here when the turn is recorded.
    let mut transcript = TranscriptHash::new(caller.token_id);
    let hashes = transcript.push_all(&messages);
    let named = match named_of(&headers, &request, caller.token_id, &hashes) {
        Ok(named) => named,
        Err(err) => return err.into_response(),
    };
    let model = request.get("model").and_then(Value::as_str).unwrap_or("").to_owned();
    let existing = gateway.conversations().find(named.as_ref(), &hashes);
    let is_new = existing.is_none();
    let conversation = match existing.and_then(|id| gateway.conversations().get(&id).cloned()) {
        Some(conversation) => {
            gateway.conversations().touch(&conversation.id);
            conversation
        }
        None => {
            let scope = scope_of(&gateway.cfg, &headers, &model, caller.token_id);
            let started = start_conversation(&state, gateway, named, &messages, scope, &model, caller.token_id).await;
            gateway.conversations().insert(started).clone()
        }
    };
    let streaming = request.get("stream").and_then(Value::as_bool) == Some(true);
    // The client's own bytes go upstream unless memory is put into them.
    let upstream_body = if conversation.memory_text.is_empty() {
        body
    } else {
        request["messages"] = Value::Array(messages.clone());
        inject(&mut request, &conversation.memory_text);
        Bytes::from(serde_json::to_vec(&request).unwrap_or_default())
    };
    // A conversation whose first request fails never started.
    let discard = || {
        if is_new {
            gateway.conversations().end(&conversation.id);
        }
    };
    let reply = match gateway.upstream.chat(upstream_body).await {
        Ok(reply) => reply,
        Err(err) => {
            discard();
            tracing::warn!(error = %err, "gateway: the upstream model could not be reached");
            return api_error(
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                format!("the upstream model could not be reached: {err}"),
                None,
            );
        }
    };
    let status = StatusCode::from_u16(reply.status()).unwrap_or(StatusCode::BAD_GATEWAY);
    let upstream_headers = reply.headers().to_vec();
    let mut response = if status.is_success() && streaming && reply.is_event_stream() {
        let state = state.clone();
        let id = conversation.id.clone();
        let recorded = Recorded {
            inner: reply.into_stream(),
            assembler: Assembler::default(),
            on_end: Some(Box::new(move |answer: Option<Value>| match (answer, state.gateway.as_deref()) {
                (Some(answer), Some(gateway)) => drop(finish_turn(gateway, &id, messages, transcript, answer)),
                (None, Some(gateway)) => gateway.queue.failed("recording a stream cut short", &"no [DONE]"),
                _ => {}
            })),
        };
        Body::from_stream(recorded).into_response()
    } else {
        let bytes = match reply.bytes().await {
            Ok(bytes) => bytes,
            Err(err) => {
                discard();
                return api_error(
                    StatusCode::BAD_GATEWAY,
                    "upstream_error",
                    format!("the upstream reply broke off: {err}"),
                    None,
                );
            }
        };
        if !status.is_success() {
            discard();
        }
        let mut deviations = Vec::new();
        if status.is_success() {
            let answer = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|reply| reply.pointer("/choices/0/message").cloned());
            match answer {
                Some(answer) => deviations = finish_turn(gateway, &conversation.id, messages, transcript, answer),
                None => gateway.queue.failed("recording a reply", &"the upstream reply has no choices[0].message"),
            }
        }
        let mut response = Response::new(Body::from(bytes));
        *response.status_mut() = status;
        if !deviations.is_empty()
            && let Ok(value) = HeaderValue::from_str(&json!(deviations).to_string())
        {
            response.headers_mut().insert("x-flowmem-deviations", value);
        }
        response
    };
    passed_headers(&upstream_headers, &mut response);
    flowmem_headers(&mut response, &conversation);
    response
}

/// A streamed upstream reply passed through as it comes, assembled for the record.
struct Recorded {
    inner: RawStream,
    assembler: Assembler,
    on_end: Option<Box<dyn FnOnce(Option<Value>) + Send>>,
}

impl Stream for Recorded {
    type Item = Result<Bytes, PassthroughError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.poll_next_unpin(cx);
        match &polled {
            Poll::Ready(Some(Ok(bytes))) => self.assembler.feed(bytes),
            Poll::Ready(None) => {
                let answer = self.assembler.finished().then(|| self.assembler.message());
                if let Some(on_end) = self.on_end.take() {
                    on_end(answer);
                }
            }
            _ => {}
        }
        polled
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        // The client went away, or the upstream broke off: a finished stream is still
        // recorded; a cut one is not.
        if let Some(on_end) = self.on_end.take() {
            on_end(self.assembler.finished().then(|| self.assembler.message()));
        }
    }
}

/// `GET /v1/models`: the upstream's list, passed through.
async fn models(State(state): State<Arc<AppState>>) -> Response {
    let gateway = match gateway_of(&state) {
        Ok(gateway) => gateway,
        Err(err) => return err.into_response(),
    };
    match gateway.upstream.models().await {
        Ok(reply) => {
            let status = StatusCode::from_u16(reply.status()).unwrap_or(StatusCode::BAD_GATEWAY);
            let upstream_headers = reply.headers().to_vec();
            let bytes = reply.bytes().await.unwrap_or_default();
            let mut response = Response::new(Body::from(bytes));
            *response.status_mut() = status;
            passed_headers(&upstream_headers, &mut response);
            response
        }
        Err(err) => api_error(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            format!("the upstream model could not be reached: {err}"),
            None,
        ),
    }
}

/// Ends conversation `id` now and queues it, with the app's outcome if given.
fn end_now(gateway: &Gateway, id: &str, outcome: Option<bool>) -> Option<bool> {
    let conversation = gateway.conversations().end(id)?;
    if !conversation.record || conversation.turns == 0 {
        return Some(false);
    }
    // Its last turn's record, sent to the queue's writer before this, is the one queued.
    gateway.queue.send(Write::End { id: conversation.id, outcome });
    Some(true)
}

/// `POST /v1/flowmem/conversations/{id}/end {outcome?}`: `outcome` is `true`/`false`
/// or a reward in `[0, 1]` (success when at least 0.5).
async fn end_conversation(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let gateway = match gateway_of(&state) {
        Ok(gateway) => gateway,
        Err(err) => return err.into_response(),
    };
    // Only the token that holds a conversation may end it.
    let owner = gateway.conversations().get(&id).map(|conversation| conversation.token_id);
    if owner.is_some_and(|owner| caller.token_id.is_some() && owner != caller.token_id) {
        return api_error(StatusCode::NOT_FOUND, "not_found", format!("no open conversation `{id}`"), None);
    }
    let request: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(request) => request,
            Err(err) => {
                return api_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    format!("the body is not JSON: {err}"),
                    None,
                );
            }
        }
    };
    let outcome = match request.get("outcome") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(success)) => Some(*success),
        Some(Value::Number(reward)) if reward.as_f64().is_some_and(|r| (0.0..=1.0).contains(&r)) => {
            reward.as_f64().map(|reward| reward >= 0.5)
        }
        Some(_) => {
            return api_error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "`outcome` must be true, false, or a reward between 0 and 1",
                Some("outcome"),
            );
        }
    };
    match end_now(gateway, &id, outcome) {
        Some(queued) => axum::Json(json!({"id": id, "ended": true, "queued": queued})).into_response(),
        None => api_error(StatusCode::NOT_FOUND, "not_found", format!("no open conversation `{id}`"), None),
    }
}

/// Starts the gateway's task: the quiet-period ender (the queue runs its own).
pub(crate) fn start(state: &Arc<AppState>) {
    if state.gateway.is_some() {
        state.background.spawn(end_quiet(state.clone()));
    }
}

/// Ends the conversations that were answered and then quiet for the quiet period.
async fn end_quiet(state: Arc<AppState>) {
    let Some(gateway) = state.gateway.as_deref() else { return };
    let tick = (gateway.cfg.quiet / 4).clamp(Duration::from_millis(20), Duration::from_secs(5));
    loop {
        if state.pause(tick).await {
            return;
        }
        let ended = gateway.conversations().ended(gateway.cfg.quiet, gateway.cfg.abandon.max(gateway.cfg.quiet));
        for id in ended {
            tracing::debug!(conversation = %id, "gateway: conversation ended (quiet)");
            end_now(gateway, &id, None);
        }
        gateway.conversations().forget_unused_texts();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use axum::http::HeaderMap;

    use super::{Named, inject, named_of, prefix_hashes};

    /// A request with a `user` field names its conversation by the user and the hash of
    /// its first two messages (or fewer), taken from the request's prefix hashes.
    #[test]
    fn a_user_field_names_the_conversation_by_its_first_two_messages() {
        let messages = [
            json!({"role": "system", "content": "s"}),
            json!({"role": "user", "content": "u"}),
            json!({"role": "assistant", "content": "a"}),
        ];
        let request = json!({"user": "alice", "messages": messages});
        let named = |hashes: &[u64]| named_of(&HeaderMap::new(), &request, Some(3), hashes).ok().flatten();
        let first_two = prefix_hashes(Some(3), &messages[..2])[1];
        assert_eq!(named(&prefix_hashes(Some(3), &messages)), Some(Named::User("alice".into(), first_two)));
        let one = prefix_hashes(Some(3), &messages[..1]);
        assert_eq!(named(&one), Some(Named::User("alice".into(), one[0])));
        assert_eq!(named(&[]), Some(Named::User("alice".into(), 0)));
    }

    #[test]
    fn memory_goes_into_the_system_message_or_a_new_one() {
        let mut request = json!({"messages": [{"role": "system", "content": "You help."}, {"role": "user", "content": "hi"}], "temperature": 0});
        inject(&mut request, "WORKFLOWS");
        assert_eq!(request["messages"][0]["content"], "You help.\n\nWORKFLOWS");
        assert_eq!(request["temperature"], 0, "other fields stay");
        let mut request = json!({"messages": [{"role": "user", "content": "hi"}]});
        inject(&mut request, "WORKFLOWS");
        assert_eq!(request["messages"][0], json!({"role": "system", "content": "WORKFLOWS"}));
        assert_eq!(request["messages"][1]["role"], "user");
    }
}
