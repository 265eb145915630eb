//! The OpenAI-compatible chat-completions backend.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::endpoint::{Endpoint, EndpointConfig, Failure, shorten};
use crate::passthrough::CHAT_COMPLETIONS_PATH;
use crate::retry::RetryPolicy;
use crate::{
    AssistantToolCall, ChatModel, ChatRequest, ChatResponse, EmbeddedPrompt, FinishReason, LlmError, Message, Prompts,
    ResponseFormat, Role, ToolChoice, Usage,
};

/// An API key. Its `Debug` output is redacted and it has no `Display` or `Serialize`,
/// so it cannot leak into logs, errors, traces or the cache by accident; and it is
/// registered with [`flowmem_model::register_secret`], so text that echoes it (a server's
/// error body, a reply) is redacted wherever flowmem prints, logs or stores it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(Arc<str>);

impl ApiKey {
    /// Wraps a key and registers it as a secret of the process.
    #[must_use]
    pub fn new(key: impl Into<String>) -> ApiKey {
        let key: Arc<str> = Arc::from(key.into());
        flowmem_model::register_secret(&key);
        ApiKey(key)
    }

    /// The `Authorization: Bearer` value, marked sensitive; `None` when the key is not
    /// a valid header value.
    pub(crate) fn bearer_header(&self) -> Option<HeaderValue> {
        let mut value = HeaderValue::from_str(&format!("Bearer {}", self.0)).ok()?;
        // reqwest redacts sensitive header values from its own Debug output.
        value.set_sensitive(true);
        Some(value)
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// How to reach one OpenAI-compatible model.
#[derive(Debug, Clone)]
pub struct HttpModelConfig {
    /// flowmem's name for the model (a `[models.NAME]` key), for accounting and errors.
    pub name: String,
    /// The API base, such as `https://api.openai.com/v1` or `http://localhost:8000/v1`;
    /// requests go to `<base_url>/chat/completions`.
    pub base_url: String,
    /// The model id sent to the server.
    pub model: String,
    /// The key sent as `Authorization: Bearer`, if any.
    pub api_key: Option<ApiKey>,
    /// The deadline of one call: from [`ChatModel::chat`] to its answer, waiting for a
    /// free slot, every attempt, every backoff and a schema re-ask included. No call
    /// takes longer; a retry that could not start before it fails the call at once.
    pub timeout: Duration,
    /// The longest one HTTP attempt may take (from sending to the end of the body), so
    /// that a stalled attempt leaves time for a retry; `None`: whatever remains of the
    /// deadline.
    pub attempt_timeout: Option<Duration>,
    /// The most requests to this model in flight at once.
    pub max_concurrency: usize,
    /// How failed attempts are retried.
    pub retry: RetryPolicy,
}

impl HttpModelConfig {
    /// A configuration with a 120 s deadline per call (no separate attempt timeout), 8
    /// concurrent requests and [`RetryPolicy::standard`].
    #[must_use]
    pub fn new(name: impl Into<String>, base_url: impl Into<String>, model: impl Into<String>) -> HttpModelConfig {
        HttpModelConfig {
            name: name.into(),
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Duration::from_secs(120),
            attempt_timeout: None,
            max_concurrency: 8,
            retry: RetryPolicy::standard(),
        }
    }
}

/// A chat model behind an OpenAI-compatible `/chat/completions` endpoint (OpenAI, vLLM,
/// Ollama, llama.cpp's server, DeepSeek and others).
///
/// - Tool definitions are sent as `function` tools; the `arguments` strings of the
///   reply's tool calls are parsed into objects.
/// - A [`ResponseFormat`] is sent as `response_format: {type: json_schema}` and the
///   reply is validated against the schema. A reply that does not match is re-asked
///   once with the validation error (prompt `repair_json`); a second failure is
///   [`LlmError::InvalidReply`] carrying the raw reply.
/// - A call has a deadline ([`HttpModelConfig::timeout`]) that covers all of it; an
///   attempt may have a shorter timeout of its own. 408, 429, 5xx, timeouts and connection
///   errors are retried with exponential backoff and jitter, honouring `Retry-After`, and
///   each retry is logged; a retry that would start after the deadline (such as a
///   `Retry-After` longer than what remains) fails the call at once with
///   [`LlmError::RetryPastDeadline`], saying why.
/// - At most `max_concurrency` requests are in flight at once.
///
/// # Example
///
/// ```no_run
/// use flowmem_llm::{ChatModel, ChatRequest, HttpModel, HttpModelConfig, Message, Purpose};
///
/// # async fn demo() -> Result<(), flowmem_llm::LlmError> {
/// let cfg = HttpModelConfig::new("local", "http://localhost:8000/v1", "qwen2.5-7b-instruct");
/// let model = HttpModel::new(cfg)?;
/// let request = ChatRequest::new(vec![Message::user("Say hello.")], Purpose::Other);
/// let reply = model.chat(&request).await?;
/// println!("{}", reply.content.unwrap_or_default());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct HttpModel {
    cfg: HttpModelConfig,
    endpoint: Endpoint,
}

impl HttpModel {
    /// Builds a client for `cfg`.
    ///
    /// # Errors
    ///
    /// [`LlmError::Unavailable`] when the HTTP client cannot be built or the API key is
    /// not a valid header value.
    pub fn new(cfg: HttpModelConfig) -> Result<HttpModel, LlmError> {
        let endpoint = Endpoint::new(EndpointConfig {
            name: &cfg.name,
            base_url: &cfg.base_url,
            path: CHAT_COMPLETIONS_PATH,
            api_key: cfg.api_key.as_ref(),
            timeout: cfg.timeout,
            attempt_timeout: cfg.attempt_timeout,
            max_concurrency: cfg.max_concurrency,
            retry: cfg.retry,
        })?;
        Ok(HttpModel { cfg, endpoint })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &HttpModelConfig {
        &self.cfg
    }

    /// Sends `body` with retries until `deadline` and returns the parsed completion. A
    /// body that is not a chat completion is a protocol error, retried as a fault of the
    /// server (or of a proxy in front of it) and never taken for the model's words; a
    /// completion that cannot be used is not retried.
    async fn complete(&self, body: &Value, deadline: tokio::time::Instant) -> Result<Completion, LlmError> {
        self.endpoint
            .post(body, "chat", deadline, |text| {
                let wire = parse_completion(text).map_err(|problem| Failure {
                    retryable: true,
                    retry_after: None,
                    error: LlmError::Protocol {
                        model: self.cfg.name.clone(),
                        endpoint: self.endpoint.url().to_owned(),
                        problem,
                    },
                })?;
                self.completion(wire).map_err(Failure::fatal)
            })
            .await
    }

    fn completion(&self, wire: WireResponse) -> Result<Completion, LlmError> {
        let Some(choice) = wire.choices.into_iter().next() else {
            return Err(LlmError::Protocol {
                model: self.cfg.name.clone(),
                endpoint: self.endpoint.url().to_owned(),
                problem: "a chat completion with an empty `choices` list".to_owned(),
            });
        };
        let mut tool_calls = Vec::new();
        for (i, call) in choice.message.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let arguments =
                flowmem_model::wire_arguments(&call.function.arguments).map_err(|problem| LlmError::ToolArguments {
                    model: self.cfg.name.clone(),
                    tool: call.function.name.clone(),
                    problem,
                    raw: call.function.arguments.clone(),
                })?;
            let id = call.id.unwrap_or_else(|| format!("call_{i}"));
            tool_calls.push(AssistantToolCall { id, name: call.function.name, arguments });
        }
        let finish_reason = match choice.finish_reason.as_deref() {
            Some("stop") => FinishReason::Stop,
            Some("length") => FinishReason::Length,
            Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
            None if !tool_calls.is_empty() => FinishReason::ToolCalls,
            None => FinishReason::Stop,
            Some(_) => FinishReason::Other,
        };
        let usage = wire.usage.map_or(Usage::default(), |usage| Usage {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            cached_tokens: usage.prompt_tokens_details.map_or(0, |d| d.cached_tokens),
        });
        Ok(Completion { content: choice.message.content, tool_calls, finish_reason, usage })
    }
}

#[async_trait::async_trait]
impl ChatModel for HttpModel {
    fn name(&self) -> &str {
        &self.cfg.name
    }

    fn cache_id(&self) -> String {
        self.cfg.model.clone()
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.cfg.timeout;
        let Some(format) = &request.response_format else {
            let reply = self.complete(&request_body(&self.cfg.model, request, &request.messages), deadline).await?;
            return Ok(reply.into_response(started.elapsed(), Usage::default()));
        };
        let validator = jsonschema::validator_for(&format.schema).map_err(|err| LlmError::InvalidRequest {
            model: self.cfg.name.clone(),
            problem: format!("response format `{}` is not a valid JSON Schema: {err}", format.name),
        })?;
        let first = self.complete(&request_body(&self.cfg.model, request, &request.messages), deadline).await?;
        let problem = match check_reply(&validator, first.content.as_deref()) {
            Ok(json_text) => {
                return Ok(first.with_content(json_text).into_response(started.elapsed(), Usage::default()));
            }
            Err(problem) => problem,
        };
        tracing::info!(model = %self.cfg.name, schema = %format.name, %problem, "re-asking for a reply matching the schema");
        let mut messages = request.messages.clone();
        messages.push(Message::assistant(first.content.clone().unwrap_or_default()));
        let repair = repair_prompt(format, &problem).map_err(|err| LlmError::InvalidRequest {
            model: self.cfg.name.clone(),
            problem: format!("cannot render the repair prompt: {err}"),
        })?;
        messages.push(Message::user(repair));
        let second = self.complete(&request_body(&self.cfg.model, request, &messages), deadline).await?;
        match check_reply(&validator, second.content.as_deref()) {
            Ok(json_text) => Ok(second.with_content(json_text).into_response(started.elapsed(), first.usage)),
            Err(problem) => Err(LlmError::InvalidReply {
                model: self.cfg.name.clone(),
                problem: format!("a reply not matching schema `{}` after one re-ask: {problem}", format.name),
                raw: second.content.unwrap_or_default(),
            }),
        }
    }
}

/// Lists the model ids an OpenAI-compatible endpoint serves (`GET <base_url>/models`),
/// in the server's order.
///
/// # Errors
///
/// [`LlmError::Transport`], [`LlmError::Timeout`] or [`LlmError::Status`] when the
/// request fails, and [`LlmError::InvalidReply`] when the body is not a model list.
pub async fn list_models(base_url: &str, api_key: Option<&ApiKey>, timeout: Duration) -> Result<Vec<String>, LlmError> {
    let name = base_url.to_owned();
    let client = reqwest::Client::builder().timeout(timeout).build().map_err(|err| LlmError::Unavailable {
        model: name.clone(),
        reason: format!("cannot build an HTTP client: {err}"),
    })?;
    let mut request = client.get(format!("{}/models", base_url.trim_end_matches('/')));
    if let Some(auth) = api_key.and_then(ApiKey::bearer_header) {
        request = request.header(AUTHORIZATION, auth);
    }
    let transport = |err: reqwest::Error| {
        if err.is_timeout() {
            LlmError::Timeout { model: name.clone(), seconds: timeout.as_secs_f64() }
        } else {
            LlmError::Transport { model: name.clone(), source: Box::new(err.without_url()) }
        }
    };
    let response = request.send().await.map_err(transport)?;
    let status = response.status();
    let text = response.text().await.map_err(transport)?;
    let text = flowmem_model::redact(&text).into_owned();
    if !status.is_success() {
        return Err(LlmError::Status { model: name, status: status.as_u16(), body: shorten(&text, 500) });
    }
    #[derive(Deserialize)]
    struct List {
        data: Vec<Entry>,
    }
    #[derive(Deserialize)]
    struct Entry {
        id: String,
    }
    let list: List = serde_json::from_str(&text).map_err(|err| LlmError::InvalidReply {
        model: name.clone(),
        problem: format!("a body that is not a model list ({err})"),
        raw: text.clone(),
    })?;
    Ok(list.data.into_iter().map(|entry| entry.id).collect())
}

/// A parsed completion, before schema checking.
struct Completion {
    content: Option<String>,
    tool_calls: Vec<AssistantToolCall>,
    finish_reason: FinishReason,
    usage: Usage,
}

impl Completion {
    fn with_content(self, content: String) -> Completion {
        Completion { content: Some(content), ..self }
    }

    fn into_response(self, latency: Duration, earlier_usage: Usage) -> ChatResponse {
        ChatResponse {
            content: self.content,
            tool_calls: self.tool_calls,
            finish_reason: self.finish_reason,
            usage: Usage {
                prompt_tokens: self.usage.prompt_tokens + earlier_usage.prompt_tokens,
                completion_tokens: self.usage.completion_tokens + earlier_usage.completion_tokens,
                cached_tokens: self.usage.cached_tokens + earlier_usage.cached_tokens,
            },
            latency,
            cached: false,
        }
    }
}

static PROMPTS: LazyLock<Prompts> = LazyLock::new(|| {
    let mut prompts = Prompts::new();
    prompts.register_all(EMBEDDED_PROMPTS).expect("the crate's own templates are valid");
    prompts
});

/// The prompt templates of this crate.
pub const EMBEDDED_PROMPTS: &[EmbeddedPrompt] = &[crate::embedded_prompt!("repair_json")];

fn repair_prompt(format: &ResponseFormat, problem: &str) -> Result<String, crate::PromptError> {
    #[derive(Serialize)]
    struct Repair<'a> {
        schema_name: &'a str,
        problem: &'a str,
        schema: &'a Value,
    }
    let ctx = Repair { schema_name: &format.name, problem, schema: &format.schema };
    PROMPTS.render("repair_json", &ctx).map(|rendered| rendered.text)
}

/// Checks a reply against the schema; returns the JSON text (without code fences).
fn check_reply(validator: &jsonschema::Validator, content: Option<&str>) -> Result<String, String> {
    let Some(content) = content else {
        return Err("the reply has no text".to_owned());
    };
    let json_text = strip_code_fence(content);
    let value: Value = serde_json::from_str(json_text).map_err(|err| format!("the reply is not JSON: {err}"))?;
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .take(5)
        .map(|err| {
            let path = err.instance_path.to_string();
            let path = if path.is_empty() { "/".to_owned() } else { path };
            format!("at `{path}`: {err}")
        })
        .collect();
    if errors.is_empty() { Ok(json_text.to_owned()) } else { Err(errors.join("; ")) }
}

/// Removes a Markdown code fence around a reply, which some models add to JSON.
fn strip_code_fence(text: &str) -> &str {
    let trimmed = text.trim();
    let Some(rest) = trimmed.strip_prefix("```") else { return trimmed };
    let Some(body) = rest.strip_suffix("```") else { return trimmed };
    // Drop an info string such as `json` on the opening line.
    body.split_once('\n').map_or(body, |(_, code)| code).trim()
}

/// Reads a chat-completions body, or says what is wrong with it, quoting its start.
fn parse_completion(text: &str) -> Result<WireResponse, String> {
    let quote = || shorten(text.trim(), 120);
    let value: Value =
        serde_json::from_str(text).map_err(|err| format!("the body is not JSON ({err}); it begins `{}`", quote()))?;
    serde_json::from_value(value)
        .map_err(|err| format!("the body is JSON but not a chat completion ({err}); it begins `{}`", quote()))
}

/// Entry points for `cargo fuzz` (the `fuzz/` crate), compiled only under
/// `--cfg fuzzing`.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    /// Reads `text` as a chat-completions body the way every attempt does, and, when it
    /// is one, turns it into a completion (tool-call arguments parsed). Never panics.
    pub fn read_reply(text: &str) {
        let Ok(wire) = super::parse_completion(text) else { return };
        let cfg = super::HttpModelConfig::new("fuzz", "http://127.0.0.1:9/v1", "fuzz");
        if let Ok(model) = super::HttpModel::new(cfg) {
            let _ = model.completion(wire);
        }
    }
}

/// The JSON body of a chat-completions request.
pub(crate) fn request_body(model: &str, request: &ChatRequest, messages: &[Message]) -> Value {
    let messages: Vec<Value> = messages.iter().map(wire_message).collect();
    let mut body = json!({"model": model, "messages": messages, "temperature": request.temperature});
    let map = body.as_object_mut().expect("an object literal");
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({"type": "function", "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                }})
            })
            .collect();
        map.insert("tools".to_owned(), Value::Array(tools));
        let choice = match request.tool_choice {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
            ToolChoice::None => "none",
        };
        map.insert("tool_choice".to_owned(), json!(choice));
    }
    if let Some(format) = &request.response_format {
        map.insert(
            "response_format".to_owned(),
            json!({"type": "json_schema", "json_schema": {"name": format.name, "schema": format.schema}}),
        );
    }
    if let Some(max_tokens) = request.max_tokens {
        map.insert("max_tokens".to_owned(), json!(max_tokens));
    }
    if let Some(seed) = request.seed {
        map.insert("seed".to_owned(), json!(seed));
    }
    body
}

fn wire_message(message: &Message) -> Value {
    let role = match message.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut wire = json!({"role": role, "content": message.content});
    let map = wire.as_object_mut().expect("an object literal");
    if !message.tool_calls.is_empty() {
        let calls: Vec<Value> = message
            .tool_calls
            .iter()
            .map(|call| {
                json!({"id": call.id, "type": "function", "function": {
                    "name": call.name,
                    "arguments": Value::Object(call.arguments.clone()).to_string(),
                }})
            })
            .collect();
        map.insert("tool_calls".to_owned(), Value::Array(calls));
    }
    if let Some(id) = &message.tool_call_id {
        map.insert("tool_call_id".to_owned(), json!(id));
    }
    wire
}

#[derive(Deserialize)]
struct WireResponse {
    choices: Vec<WireChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: WireMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<WirePromptDetails>,
}

#[derive(Deserialize)]
struct WirePromptDetails {
    #[serde(default)]
    cached_tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_is_redacted() {
        let key = ApiKey::new("sk-secret-123");
        assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
        let mut cfg = HttpModelConfig::new("m", "http://127.0.0.1:9/v1", "gpt");
        cfg.api_key = Some(key);
        let model = HttpModel::new(cfg).unwrap();
        assert!(!format!("{model:?}").contains("sk-secret-123"));
    }

    #[test]
    fn fences_and_shortening() {
        assert_eq!(strip_code_fence("```json\n{\"a\": 1}\n```"), "{\"a\": 1}");
        assert_eq!(strip_code_fence("  {\"a\": 1} "), "{\"a\": 1}");
        assert_eq!(shorten("héllo", 2), "h…");
    }

    #[test]
    fn request_body_shape() {
        let mut request = ChatRequest::new(
            vec![
                Message::user("hi"),
                Message {
                    role: Role::Assistant,
                    content: None,
                    tool_calls: vec![AssistantToolCall {
                        id: "c1".into(),
                        name: "f".into(),
                        arguments: serde_json::from_str("{\"a\": 1}").unwrap(),
                    }],
                    tool_call_id: None,
                },
                Message::tool_result("c1", "ok"),
            ],
            crate::Purpose::Agent,
        );
        request.max_tokens = Some(5);
        request.seed = Some(7);
        let body = request_body("gpt", &request, &request.messages);
        assert_eq!(body["model"], "gpt");
        assert_eq!(body["messages"][1]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        assert_eq!(body["messages"][2]["tool_call_id"], "c1");
        assert_eq!(body["max_tokens"], 5);
        assert_eq!(body["seed"], 7);
        assert!(body.get("tools").is_none());
        assert!(body.get("purpose").is_none());
    }
}
