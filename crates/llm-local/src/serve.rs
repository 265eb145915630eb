//! An OpenAI-compatible HTTP endpoint for any [`ChatModel`], used by
//! `flowmem serve-llm` to put the embedded model on loopback.
//!
//! Routes: `POST /v1/chat/completions` (messages, tools and `tool_choice`,
//! `response_format` of type `json_schema` or `json_object`, `temperature`,
//! `max_tokens` / `max_completion_tokens`, `seed`) and `GET /v1/models`. Streaming is
//! not supported and is refused with 400.

use std::future::Future;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use flowmem_llm::{
    ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Message, Purpose, ResponseFormat, Role, ToolChoice,
    ToolDefinition,
};

/// The router serving `model`.
pub fn router(model: Arc<dyn ChatModel>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .with_state(model)
}

/// Serves `model` on `listener` until `shutdown` resolves.
///
/// # Errors
///
/// The listener's IO errors.
pub async fn serve(
    listener: tokio::net::TcpListener,
    model: Arc<dyn ChatModel>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(model)).with_graceful_shutdown(shutdown).await
}

/// An error answer: its status and OpenAI-style body.
struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::BAD_REQUEST, kind: "invalid_request_error", message: message.into() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        tracing::warn!(status = self.status.as_u16(), message = %self.message, "chat completion failed");
        let body = json!({"error": {"message": self.message, "type": self.kind, "code": null}});
        (self.status, Json(body)).into_response()
    }
}

impl From<LlmError> for ApiError {
    fn from(e: LlmError) -> ApiError {
        let (status, kind) = match &e {
            LlmError::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "model_unavailable"),
            LlmError::InvalidReply { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_reply"),
            LlmError::Timeout { .. } => (StatusCode::GATEWAY_TIMEOUT, "timeout"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "server_error"),
        };
        ApiError { status, kind, message: e.to_string() }
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
) -> Result<Json<Value>, ApiError> {
    let Json(wire) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if wire.stream {
        return Err(ApiError::bad_request("`stream: true` is not supported by this server"));
    }
    let requested = wire.model.clone();
    let request = to_request(wire)?;
    let response = model.chat(&request).await?;
    Ok(Json(to_wire(&response, requested.as_deref().unwrap_or(model.name()))))
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
            "total_tokens": usage.prompt_tokens + usage.completion_tokens
        }
    })
}
