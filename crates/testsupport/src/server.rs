//! The scripted OpenAI-compatible chat server.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::script::{Reply, ReplyKind, Script};

/// A real HTTP server on `127.0.0.1` speaking the OpenAI chat-completions API, with
/// replies taken from a [`Script`].
///
/// It serves `POST /v1/chat/completions`, `POST /v1/embeddings` and `GET /v1/models`,
/// records every request it receives, and tracks how many chat requests were in flight
/// at once. The server stops when the handle is dropped.
///
/// Embeddings are a deterministic bag of words ([`bag_of_words`]): texts that share
/// words get similar vectors, so retrieval by meaning can be tested over real HTTP
/// without a model. [`Script::embedding_faults`] injects failures.
///
/// # Example
///
/// ```
/// use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let server = ScriptedLlmServer::start(Script::in_order([
///     Reply::tool_call("get_order", json!({"order_id": "#W42"})),
///     Reply::text("It shipped."),
/// ]))
/// .await;
/// // Point the client under test at `server.base_url()`, e.g. "http://127.0.0.1:PORT/v1".
/// assert!(server.base_url().ends_with("/v1"));
/// assert_eq!(server.requests().len(), 0);
/// # }
/// ```
#[derive(Debug)]
pub struct ScriptedLlmServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The HTTP method.
    pub method: String,
    /// The path, such as `/v1/chat/completions`.
    pub path: String,
    /// The headers, names lower-case.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON, or `Value::String` of the raw text if it is not JSON,
    /// or `Value::Null` when empty.
    pub body: Value,
    /// When it arrived, relative to the server's start.
    pub at: std::time::Duration,
}

impl RecordedRequest {
    /// The value of header `name` (case-insensitive), if present.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(key, _)| *key == name).map(|(_, value)| value.as_str())
    }

    /// Whether this is a chat-completions request.
    #[must_use]
    pub fn is_chat(&self) -> bool {
        self.path.ends_with("/chat/completions")
    }

    /// The messages of a chat request.
    #[must_use]
    pub fn messages(&self) -> &[Value] {
        self.body["messages"].as_array().map_or(&[], Vec::as_slice)
    }

    /// The text of the last message with `role`, if any.
    #[must_use]
    pub fn last_text(&self, role: &str) -> Option<&str> {
        self.messages().iter().rev().find(|message| message["role"] == role)?["content"].as_str()
    }
}

#[derive(Debug)]
struct Shared {
    script: Mutex<Script>,
    requests: Mutex<Vec<RecordedRequest>>,
    // Whether `requests` keeps each request; a bench's upstream does not (see
    // `ScriptedLlmServer::start_unlogged`).
    logged: bool,
    n_requests: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    n_chat: AtomicUsize,
    // Woken whenever a request is recorded, for tests that wait for the n-th request.
    arrived: tokio::sync::Notify,
    started: Instant,
}

impl ScriptedLlmServer {
    /// Starts a server on `127.0.0.1` with an OS-assigned port.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound, which a test cannot recover from. Must be
    /// called within a Tokio runtime.
    pub async fn start(script: Script) -> ScriptedLlmServer {
        ScriptedLlmServer::start_with(script, true).await
    }

    /// Starts a server that keeps no request: [`ScriptedLlmServer::requests`] stays
    /// empty, and [`ScriptedLlmServer::request_count`] and the in-flight counts still
    /// work. For benches, whose upstream answers hundreds of thousands of requests: a log
    /// of their bodies would grow by gigabytes, and its growth (page faults, the lock
    /// held while the log reallocates) would stall the bench's own clients.
    ///
    /// # Panics
    ///
    /// As [`ScriptedLlmServer::start`].
    pub async fn start_unlogged(script: Script) -> ScriptedLlmServer {
        ScriptedLlmServer::start_with(script, false).await
    }

    async fn start_with(script: Script, logged: bool) -> ScriptedLlmServer {
        let listener =
            tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("scripted LLM server: binding a loopback port");
        let addr = listener.local_addr().expect("scripted LLM server: local address");
        let shared = Arc::new(Shared {
            script: Mutex::new(script),
            requests: Mutex::new(Vec::new()),
            logged,
            n_requests: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            n_chat: AtomicUsize::new(0),
            arrived: tokio::sync::Notify::new(),
            started: Instant::now(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route("/v1/models", get(models))
            .route("/v1/embeddings", post(embeddings))
            .fallback(not_found)
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            // An accept error ends the server; requests then fail as connection errors,
            // which the test will report.
            let _ = axum::serve(listener, app).await;
        });
        ScriptedLlmServer { addr, shared, task }
    }

    /// The API base URL, `http://127.0.0.1:PORT/v1`, as in `OPENAI_BASE_URL`.
    #[must_use]
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The socket address the server listens on.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far (chat and models), in arrival order.
    #[must_use]
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().expect("request log lock").clone()
    }

    /// The chat-completions requests received so far, in arrival order.
    #[must_use]
    pub fn chat_requests(&self) -> Vec<RecordedRequest> {
        self.requests().into_iter().filter(RecordedRequest::is_chat).collect()
    }

    /// How many requests of any kind arrived so far.
    #[must_use]
    pub fn request_count(&self) -> usize {
        self.shared.n_requests.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` chat requests have arrived: the readiness signal for a
    /// test that acts while a request is in flight (such as killing the client).
    pub async fn wait_for_chat_requests(&self, n: usize) {
        loop {
            // Registered before counting, so a request recorded in between still wakes it.
            let arrived = self.shared.arrived.notified();
            if self.chat_requests().len() >= n {
                return;
            }
            arrived.await;
        }
    }

    /// The embeddings requests received so far, in arrival order.
    #[must_use]
    pub fn embedding_requests(&self) -> Vec<RecordedRequest> {
        self.requests().into_iter().filter(|request| request.path.ends_with("/embeddings")).collect()
    }

    /// The largest number of chat requests being answered at the same moment.
    #[must_use]
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// How many chat requests are being answered right now.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for ScriptedLlmServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn record(shared: &Shared, method: &Method, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Value {
    let parsed = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
    };
    if shared.logged {
        let headers = headers
            .iter()
            .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
            .collect();
        shared.requests.lock().expect("request log lock").push(RecordedRequest {
            method: method.to_string(),
            path: uri.path().to_owned(),
            headers,
            body: parsed.clone(),
            at: shared.started.elapsed(),
        });
    }
    shared.n_requests.fetch_add(1, Ordering::SeqCst);
    shared.arrived.notify_waiters();
    parsed
}

/// Counts a request in flight for as long as it lives.
struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    fn enter(shared: &'a Shared) -> InFlight<'a> {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(shared)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let _in_flight = InFlight::enter(&shared);
    let request = record(&shared, &method, &uri, &headers, &body);
    let n = shared.n_chat.fetch_add(1, Ordering::SeqCst);
    let reply = shared.script.lock().expect("script lock").next_reply(&request);
    let Some(reply) = reply else {
        return json_response(
            StatusCode::BAD_REQUEST,
            json!({"error": {
                "message": format!("scripted server: the script has no reply for chat request #{n}"),
                "type": "script_exhausted",
            }})
            .to_string(),
        );
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut response = render(&reply, &request, n);
    for (name, value) in &reply.headers {
        if let (Ok(name), Ok(value)) =
            (header::HeaderName::try_from(name.as_str()), header::HeaderValue::try_from(value.as_str()))
        {
            response.headers_mut().append(name, value);
        }
    }
    response
}

async fn models(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    record(&shared, &method, &uri, &headers, &body);
    let ids = shared.script.lock().expect("script lock").models.clone();
    let data: Vec<Value> = ids
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "flowmem-testsupport"}))
        .collect();
    json_response(StatusCode::OK, json!({"object": "list", "data": data}).to_string())
}

/// The dimension of [`bag_of_words`] vectors.
pub const BAG_OF_WORDS_DIM: usize = 64;

/// The scripted server's embedding of `text`: each lowercase alphanumeric word adds 1
/// to one of [`BAG_OF_WORDS_DIM`] buckets, chosen by a fixed hash of the word; an empty
/// text gets a vector with one bucket set, so no vector is zero.
#[must_use]
pub fn bag_of_words(text: &str) -> Vec<f32> {
    let mut vector = vec![0.0; BAG_OF_WORDS_DIM];
    for word in text.split(|ch: char| !ch.is_alphanumeric()).filter(|word| !word.is_empty()) {
        // FNV-1a, so the buckets never change between runs or platforms.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in word.to_lowercase().bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        vector[(hash % BAG_OF_WORDS_DIM as u64) as usize] += 1.0;
    }
    if vector.iter().all(|&x| x == 0.0) {
        vector[0] = 1.0;
    }
    vector
}

async fn embeddings(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = record(&shared, &method, &uri, &headers, &body);
    let fault = shared.script.lock().expect("script lock").embedding_faults.pop_front();
    if let Some(fault) = fault {
        if !fault.delay.is_zero() {
            tokio::time::sleep(fault.delay).await;
        }
        if matches!(fault.kind, ReplyKind::Status { .. } | ReplyKind::Raw { .. }) {
            return render(&fault, &request, 0);
        }
    }
    let texts: Vec<String> = match &request["input"] {
        Value::String(text) => vec![text.clone()],
        Value::Array(items) => items.iter().map(|item| item.as_str().unwrap_or_default().to_owned()).collect(),
        _ => {
            let message = "scripted server: `input` must be a string or an array of strings";
            return json_response(StatusCode::BAD_REQUEST, json!({"error": {"message": message}}).to_string());
        }
    };
    let data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(index, text)| json!({"object": "embedding", "index": index, "embedding": bag_of_words(text)}))
        .collect();
    let tokens: usize = texts.iter().map(|text| text.split_whitespace().count()).sum();
    let body = json!({"object": "list", "data": data, "model": request["model"],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens}});
    json_response(StatusCode::OK, body.to_string())
}

async fn not_found(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    record(&shared, &method, &uri, &headers, &body);
    let message = format!("scripted server: no route for {method} {}", uri.path());
    json_response(StatusCode::NOT_FOUND, json!({"error": {"message": message}}).to_string())
}

fn render(reply: &Reply, request: &Value, n: usize) -> Response {
    let (message, default_finish, completion_words) = match &reply.kind {
        ReplyKind::Status { status, retry_after, body } => {
            let mut builder = Response::builder().status(*status).header(header::CONTENT_TYPE, "application/json");
            if let Some(seconds) = retry_after {
                builder = builder.header(header::RETRY_AFTER, seconds.as_str());
            }
            return builder.body(Body::from(body.clone())).expect("valid response");
        }
        ReplyKind::Raw { status, body } => {
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::OK);
            return json_response(status, body.clone());
        }
        ReplyKind::Text(text) => {
            (json!({"role": "assistant", "content": text}), "stop", text.split_whitespace().count())
        }
        ReplyKind::ToolCalls(calls) => {
            let tool_calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, arguments))| {
                    json!({
                        "id": format!("call_{n}_{i}"),
                        "type": "function",
                        "function": {"name": name, "arguments": arguments},
                    })
                })
                .collect();
            let words = calls.iter().map(|(_, args)| args.split_whitespace().count() + 1).sum();
            (json!({"role": "assistant", "content": null, "tool_calls": tool_calls}), "tool_calls", words)
        }
    };
    let (prompt_tokens, completion_tokens) = reply.usage.unwrap_or_else(|| {
        let prompt_words: usize = request["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|message| message["content"].as_str())
            .map(|text| text.split_whitespace().count())
            .sum();
        (prompt_words as u64, completion_words as u64)
    });
    let mut body = json!({
        "id": format!("chatcmpl-scripted-{n}"),
        "object": "chat.completion",
        "created": 0,
        "model": request["model"].as_str().unwrap_or("scripted-model"),
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": reply.finish_reason.as_deref().unwrap_or(default_finish),
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    });
    for pointer in &reply.remove {
        remove_pointer(&mut body, pointer);
    }
    if request["stream"].as_bool() == Some(true) {
        return stream_response(&body);
    }
    json_response(StatusCode::OK, body.to_string())
}

/// A completion as OpenAI streams it: `chat.completion.chunk` events (the role, the
/// text in pieces of a few characters, each tool call's id and name then its arguments
/// in pieces, the finish reason, the usage), then `data: [DONE]`.
fn stream_response(body: &Value) -> Response {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": body["id"], "object": "chat.completion.chunk", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    let message = &body["choices"][0]["message"];
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    if let Some(text) = message["content"].as_str() {
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(5) {
            events.push(chunk(json!({"content": piece.iter().collect::<String>()}), Value::Null));
        }
    }
    for (idx, call) in message["tool_calls"].as_array().into_iter().flatten().enumerate() {
        events.push(chunk(
            json!({"tool_calls": [{"index": idx, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""}}]}),
            Value::Null,
        ));
        let arguments: Vec<char> = call["function"]["arguments"].as_str().unwrap_or("").chars().collect();
        for piece in arguments.chunks(7) {
            events.push(chunk(
                json!({"tool_calls": [{"index": idx, "function": {"arguments": piece.iter().collect::<String>()}}]}),
                Value::Null,
            ));
        }
    }
    events.push(chunk(json!({}), body["choices"][0]["finish_reason"].clone()));
    let mut text = String::new();
    for event in events {
        text.push_str(&format!("data: {event}\n\n"));
    }
    text.push_str("data: [DONE]\n\n");
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from(text))
        .expect("valid response")
}

/// Removes the value at a JSON pointer, if present.
fn remove_pointer(root: &mut Value, pointer: &str) {
    let Some((parent, last)) = pointer.rsplit_once('/') else { return };
    let Some(parent) = root.pointer_mut(parent) else { return };
    match parent {
        Value::Object(map) => {
            map.remove(last);
        }
        Value::Array(items) => {
            if let Ok(idx) = last.parse::<usize>()
                && idx < items.len()
            {
                items.remove(idx);
            }
        }
        _ => {}
    }
}

fn json_response(status: StatusCode, body: String) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("valid response")
}
