//! An OpenAI-compatible HTTP endpoint for any [`ChatModel`], used by
//! `flowmem serve-llm` to put the embedded model on loopback.
//!
//! Routes: `POST /v1/chat/completions` (messages, tools and `tool_choice`,
//! `response_format` of type `json_schema` or `json_object`, `temperature`,
//! `max_tokens` / `max_completion_tokens`, `seed`, `stream` with
//! `stream_options.include_usage`), `GET /v1/models`, and, when an embedding model is
//! given, `POST /v1/embeddings` (`input` a string or an array of strings,
//! `encoding_format` `float`, or `base64` of little-endian `f32`s, which the official
//! SDKs ask for by default).
//!
//! A streamed answer opens at once with the role chunk, so a client sees the request
//! accepted, then sends the reply when it is decoded: its text, each tool call, the
//! finish reason and the usage, as OpenAI's `chat.completion.chunk` events. It is not
//! streamed token by token: the model decodes one whole reply per request.

use std::future::Future;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

use flowmem_llm::{
    ChatModel, ChatRequest, ChatResponse, EmbeddingModel, FinishReason, LlmError, Message, Purpose, ResponseFormat,
    Role, ToolChoice, ToolDefinition,
};

/// The router serving `model`, and `embedder` at `/v1/embeddings` when given.
pub fn router(model: Arc<dyn ChatModel>, embedder: Option<Arc<dyn EmbeddingModel>>) -> Router {
    let chat = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .with_state(model);
    match embedder {
        Some(embedder) => chat.merge(Router::new().route("/v1/embeddings", post(embeddings)).with_state(embedder)),
        None => chat,
    }
}

/// Serves `model` (and `embedder`, when given) on `listener` until `shutdown` resolves.
///
/// # Errors
///
/// The listener's IO errors.
pub async fn serve(
    listener: tokio::net::TcpListener,
    model: Arc<dyn ChatModel>,
    embedder: Option<Arc<dyn EmbeddingModel>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(model, embedder)).with_graceful_shutdown(shutdown).await
}

#[derive(Deserialize)]
struct WireEmbeddingRequest {
    #[serde(default)]
    model: Option<String>,
    input: Value,
    #[serde(default)]
    encoding_format: Option<String>,
}

/// The most texts one `/v1/embeddings` request may carry.
const MAX_EMBEDDING_INPUTS: usize = 2048;

async fn embeddings(
    State(embedder): State<Arc<dyn EmbeddingModel>>,
    body: Result<Json<WireEmbeddingRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(wire) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let base64 = match wire.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "`$.encoding_format`: expected `float` or `base64`, not `{other}`"
            )));
        }
    };
    let texts: Vec<String> = match wire.input {
        Value::String(text) => vec![text],
        Value::Array(items) => {
            let mut texts = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                match item {
                    Value::String(text) => texts.push(text),
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "`$.input[{i}]`: expected a string (token arrays are not served)"
                        )));
                    }
                }
            }
            texts
        }
        _ => return Err(ApiError::bad_request("`$.input`: expected a string or an array of strings")),
    };
    if texts.is_empty() || texts.len() > MAX_EMBEDDING_INPUTS {
        return Err(ApiError::bad_request(format!("`$.input`: expected 1 to {MAX_EMBEDDING_INPUTS} texts")));
    }
    let out = embedder.embed(&texts).await?;
    let model = wire.model.unwrap_or_else(|| embedder.name().to_owned());
    let data: Vec<Value> = out
        .vectors
        .iter()
        .enumerate()
        .map(|(index, vector)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(vector)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let tokens = out.prompt_tokens;
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response())
}

/// An error answer: its status and OpenAI-style body.
struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    /// Fields added to the `error` object: its `code`, and for a context overflow the
    /// token counts under llama.cpp's names, so that clients can shorten the request.
    extra: serde_json::Map<String, Value>,
}

impl ApiError {
    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            extra: serde_json::Map::new(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        tracing::warn!(status = self.status.as_u16(), message = %self.message, "chat completion failed");
        let mut error = serde_json::Map::new();
        error.insert("message".into(), Value::String(self.message));
        error.insert("type".into(), Value::String(self.kind.to_owned()));
        error.insert("code".into(), Value::Null);
        error.extend(self.extra);
        (self.status, Json(json!({ "error": error }))).into_response()
    }
}

impl From<LlmError> for ApiError {
    fn from(e: LlmError) -> ApiError {
        let mut extra = serde_json::Map::new();
        let (status, kind) = match &e {
            LlmError::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "model_unavailable"),
            LlmError::InvalidReply { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_reply"),
            LlmError::InvalidRequest { .. } => (StatusCode::BAD_REQUEST, "invalid_request_error"),
            LlmError::ContextExceeded { tokens, limit, .. } => {
                extra.insert("code".into(), json!("context_length_exceeded"));
                extra.insert("n_prompt_tokens".into(), json!(tokens));
                extra.insert("n_ctx".into(), json!(limit));
                (StatusCode::BAD_REQUEST, "invalid_request_error")
            }
            LlmError::Timeout { .. } => (StatusCode::GATEWAY_TIMEOUT, "timeout"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "server_error"),
        };
        ApiError { status, kind, message: e.to_string(), extra }
    }
}

#[derive(Deserialize)]
struct WireRequest {
    #[serde(default)]
    model: Option<String>,
    messages: Vec<WireMessage>,
    #[serde(default)]
    tools: Vec<WireTool>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    response_format: Option<Value>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Deserialize)]
struct WireMessage {
    role: String,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Vec<WireToolCall>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

#[derive(Deserialize)]
struct WireToolCall {
    id: String,
    function: WireFunctionCall,
}

#[derive(Deserialize)]
struct WireFunctionCall {
    name: String,
    arguments: String,
}

#[derive(Deserialize)]
struct WireTool {
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
}

async fn models(State(model): State<Arc<dyn ChatModel>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{"id": model.name(), "object": "model", "created": 0, "owned_by": "flowmem"}]
    }))
}

async fn chat_completions(
    State(model): State<Arc<dyn ChatModel>>,
    body: Result<Json<WireRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(wire) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let requested = wire.model.clone().unwrap_or_else(|| model.name().to_owned());
    let stream = wire.stream.then(|| wire.stream_options.as_ref().is_some_and(|options| options.include_usage));
    let request = to_request(wire)?;
    match stream {
        None => {
            let response = model.chat(&request).await?;
            Ok(Json(to_wire(&response, &requested)).into_response())
        }
        Some(include_usage) => Ok(streamed(model, request, requested, include_usage)),
    }
}

/// The answer to `request` as server-sent events: the role chunk at once, the rest
/// when the reply is decoded (see the module docs). A failure after the stream opened
/// is sent as an `error` event, since the status is already 200.
fn streamed(model: Arc<dyn ChatModel>, request: ChatRequest, requested: String, include_usage: bool) -> Response {
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let id = format!("chatcmpl-{created}");
    let chunk = {
        let (id, requested) = (id.clone(), requested.clone());
        move |choices: Value| json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": requested, "choices": choices})
    };
    let opening =
        event(&chunk(json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}])));
    let rest = async move {
        let mut text = String::new();
        match model.chat(&request).await {
            Ok(response) => {
                for chunk in reply_chunks(&to_wire(&response, &requested), include_usage, &chunk) {
                    text.push_str(&event(&chunk));
                }
            }
            Err(err) => {
                let err = ApiError::from(err);
                tracing::warn!(message = %err.message, "streamed chat completion failed");
                text.push_str(&event(&json!({"error": {"message": err.message, "type": err.kind, "code": null}})));
            }
        }
        text.push_str("data: [DONE]\n\n");
        Ok::<_, std::convert::Infallible>(axum::body::Bytes::from(text))
    };
    let body = futures::stream::iter([Ok(axum::body::Bytes::from(opening))]).chain(futures::stream::once(rest));
    Response::builder()
        .header(axum::http::header::CONTENT_TYPE, "text/event-stream")
        .header(axum::http::header::CACHE_CONTROL, "no-cache")
        .body(axum::body::Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// One server-sent event carrying `value`.
fn event(value: &Value) -> String {
    format!("data: {value}\n\n")
}

/// The chunks after the role chunk for a completed `completion` (as [`to_wire`] gives
/// it): the text, each tool call whole (id, name and arguments in one delta), the
/// finish reason, and the usage (with no choices) when asked for.
fn reply_chunks(completion: &Value, include_usage: bool, chunk: &dyn Fn(Value) -> Value) -> Vec<Value> {
    let choice = &completion["choices"][0];
    let message = &choice["message"];
    let mut chunks = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|text| !text.is_empty()) {
        chunks.push(chunk(json!([{"index": 0, "delta": {"content": text}, "finish_reason": null}])));
    }
    for (index, call) in message["tool_calls"].as_array().into_iter().flatten().enumerate() {
        let mut call = call.clone();
        call["index"] = json!(index);
        chunks.push(chunk(json!([{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}])));
    }
    chunks.push(chunk(json!([{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}])));
    if include_usage {
        let mut last = chunk(json!([]));
        last["usage"] = completion["usage"].clone();
        chunks.push(last);
    }
    chunks
}

fn to_request(wire: WireRequest) -> Result<ChatRequest, ApiError> {
    let mut messages = Vec::with_capacity(wire.messages.len());
    for (i, m) in wire.messages.into_iter().enumerate() {
        let role = match m.role.as_str() {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            other => return Err(ApiError::bad_request(format!("`$.messages[{i}].role`: unknown role `{other}`"))),
        };
        let content = match m.content {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(Value::Array(parts)) => {
                Some(parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join(""))
            }
            Some(_) => {
                return Err(ApiError::bad_request(format!(
                    "`$.messages[{i}].content`: expected a string or an array of parts"
                )));
            }
        };
        let mut tool_calls = Vec::with_capacity(m.tool_calls.len());
        for (j, c) in m.tool_calls.into_iter().enumerate() {
            let arguments = match serde_json::from_str::<Value>(&c.function.arguments) {
                Ok(Value::Object(map)) => map,
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "`$.messages[{i}].tool_calls[{j}].function.arguments`: not a JSON object"
                    )));
                }
            };
            tool_calls.push(flowmem_llm::AssistantToolCall { id: c.id, name: c.function.name, arguments });
        }
        messages.push(Message { role, content, tool_calls, tool_call_id: m.tool_call_id });
    }
    let mut tools: Vec<ToolDefinition> = wire
        .tools
        .into_iter()
        .map(|t| ToolDefinition {
            name: t.function.name,
            description: t.function.description.unwrap_or_default(),
            parameters: t.function.parameters.unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        })
        .collect();
    let tool_choice = match wire.tool_choice {
        None => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            "none" => ToolChoice::None,
            other => return Err(ApiError::bad_request(format!("`$.tool_choice`: unknown value `{other}`"))),
        },
        Some(Value::Object(choice)) => {
            let Some(name) = choice.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) else {
                return Err(ApiError::bad_request("`$.tool_choice.function.name` is missing"));
            };
            tools.retain(|t| t.name == name);
            if tools.is_empty() {
                return Err(ApiError::bad_request(format!("`$.tool_choice`: no tool named `{name}`")));
            }
            ToolChoice::Required
        }
        Some(_) => return Err(ApiError::bad_request("`$.tool_choice`: expected a string or an object")),
    };
    let response_format = match wire.response_format {
        None => None,
        Some(format) => match format.get("type").and_then(Value::as_str) {
            Some("text") => None,
            Some("json_object") => {
                Some(ResponseFormat { name: "json_object".to_owned(), schema: json!({"type": "object"}) })
            }
            Some("json_schema") => {
                let spec = format.get("json_schema");
                let Some(schema) = spec.and_then(|s| s.get("schema")) else {
                    return Err(ApiError::bad_request("`$.response_format.json_schema.schema` is missing"));
                };
                let name = spec.and_then(|s| s.get("name")).and_then(Value::as_str).unwrap_or("response");
                Some(ResponseFormat { name: name.to_owned(), schema: schema.clone() })
            }
            _ => {
                return Err(ApiError::bad_request(
                    "`$.response_format.type`: expected text, json_object or json_schema",
                ));
            }
        },
    };
    Ok(ChatRequest {
        messages,
        tools,
        tool_choice,
        response_format,
        temperature: wire.temperature.unwrap_or(0.0),
        max_tokens: wire.max_completion_tokens.or(wire.max_tokens),
        seed: wire.seed,
        purpose: Purpose::Other,
        prompts: Vec::new(),
    })
}

fn to_wire(response: &ChatResponse, model: &str) -> Value {
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let tool_calls: Vec<Value> = response
        .tool_calls
        .iter()
        .map(|c| {
            json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": Value::Object(c.arguments.clone()).to_string()}
            })
        })
        .collect();
    let mut message = json!({"role": "assistant", "content": response.content});
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    let finish_reason = match response.finish_reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Other => "stop",
    };
    let usage = response.usage;
    json!({
        "id": format!("chatcmpl-{created}"),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens}
        }
    })
}
