//! The chat trait and its request and response types.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use flowmem_model::JsonObject;

use crate::{LlmError, PromptId};

/// A chat model: OpenAI-compatible HTTP, or the embedded local model.
#[async_trait::async_trait]
pub trait ChatModel: Send + Sync {
    /// The model's configured name, for accounting and cache keys.
    fn name(&self) -> &str;

    /// Sends one chat request and waits for the reply.
    ///
    /// # Errors
    ///
    /// Any [`LlmError`]: transport failures after retries, timeouts, replies that do not
    /// match the requested schema, and so on.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError>;

    /// What identifies the model's behaviour in response-cache keys.
    ///
    /// Defaults to [`ChatModel::name`]. The HTTP backend returns the model id it sends
    /// to the server, so two configured names for one model share cached replies.
    fn cache_id(&self) -> String {
        self.name().to_owned()
    }

    /// How many tokens of the model's context `request` leaves unused once its prompt
    /// and its reply's `max_tokens` (or the model's default) are counted: negative when
    /// it does not fit, so that a caller can shorten the conversation before sending.
    ///
    /// Defaults to `None`, for a model that cannot count (an HTTP model, whose server
    /// answers an over-long request with an error); the embedded model counts exactly.
    fn room(&self, request: &ChatRequest) -> Option<i64> {
        let _ = request;
        None
    }
}

/// One chat request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Tools the model may call; none when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
    /// Whether the model must call a tool.
    #[serde(default)]
    pub tool_choice: ToolChoice,
    /// A JSON Schema the reply text must satisfy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Sampling temperature; 0 is greedy and replayable from the cache.
    #[serde(default)]
    pub temperature: f32,
    /// The largest number of tokens to generate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// A sampling seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// What the call is for, for accounting. Not sent to the model.
    #[serde(default)]
    pub purpose: Purpose,
    /// The prompt templates that produced the messages. Not sent to the model; part of
    /// the response-cache key, so a new template version invalidates cached replies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<PromptId>,
}

impl ChatRequest {
    /// A greedy request with `messages` and nothing else.
    #[must_use]
    pub fn new(messages: Vec<Message>, purpose: Purpose) -> ChatRequest {
        ChatRequest {
            messages,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            response_format: None,
            temperature: 0.0,
            max_tokens: None,
            seed: None,
            purpose,
            prompts: Vec::new(),
        }
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// The text, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Tool calls made by an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<AssistantToolCall>,
    /// For a tool message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    /// A system message.
    #[must_use]
    pub fn system(text: impl Into<String>) -> Message {
        Message::text(Role::System, text)
    }

    /// A user message.
    #[must_use]
    pub fn user(text: impl Into<String>) -> Message {
        Message::text(Role::User, text)
    }

    /// An assistant message with text only.
    #[must_use]
    pub fn assistant(text: impl Into<String>) -> Message {
        Message::text(Role::Assistant, text)
    }

    /// A tool result answering the call with `call_id`.
    #[must_use]
    pub fn tool_result(call_id: impl Into<String>, text: impl Into<String>) -> Message {
        Message { tool_call_id: Some(call_id.into()), ..Message::text(Role::Tool, text) }
    }

    fn text(role: Role, text: impl Into<String>) -> Message {
        Message { role, content: Some(text.into()), tool_calls: Vec::new(), tool_call_id: None }
    }
}

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// A function tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The tool's name.
    pub name: String,
    /// What the tool does.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of the tool's arguments.
    pub parameters: Value,
}

/// Whether the model must call a tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// The model must call one of the tools.
    Required,
    /// The model must not call a tool.
    None,
}

/// A JSON Schema the reply must satisfy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseFormat {
    /// A short name for the schema (OpenAI's `json_schema.name`).
    pub name: String,
    /// The JSON Schema.
    pub schema: Value,
}

/// A tool call made by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantToolCall {
    /// The call id, echoed back by the tool result.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, parsed into an object.
    pub arguments: JsonObject,
}

/// One model reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The reply text, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Tool calls, if any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<AssistantToolCall>,
    /// Why generation stopped.
    pub finish_reason: FinishReason,
    /// Tokens spent.
    pub usage: Usage,
    /// Wall time of the call, zero for a cache hit.
    #[serde(with = "duration_ms")]
    pub latency: Duration,
    /// Whether the reply came from the response cache.
    #[serde(default)]
    pub cached: bool,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end or a stop token.
    Stop,
    /// The token limit.
    Length,
    /// The model called tools.
    ToolCalls,
    /// Anything else the server said.
    Other,
}

/// Tokens spent by one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Prompt tokens (of `prompt_tokens`) the model served from its prefix cache
    /// instead of prefilling: OpenAI's `usage.prompt_tokens_details.cached_tokens`.
    #[serde(default)]
    pub cached_tokens: u64,
}

/// What a call is for, for accounting per purpose.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// The MCTS optimizer proposing edits.
    Optimizer,
    /// A workflow node being executed.
    Executor,
    /// The ES judge or the AWM evaluator.
    Judge,
    /// Workflow induction.
    Inducer,
    /// The ReAct or memory-augmented agent.
    Agent,
    /// Anything else, such as `flowmem llm chat`.
    #[default]
    Other,
}

impl Purpose {
    /// Every purpose, in declaration order.
    pub const ALL: [Purpose; 6] =
        [Purpose::Optimizer, Purpose::Executor, Purpose::Judge, Purpose::Inducer, Purpose::Agent, Purpose::Other];

    /// The lower-case name used in configuration and summaries (`optimizer`, ...).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Optimizer => "optimizer",
            Purpose::Executor => "executor",
            Purpose::Judge => "judge",
            Purpose::Inducer => "inducer",
            Purpose::Agent => "agent",
            Purpose::Other => "other",
        }
    }
}

mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(duration.as_secs_f64() * 1000.0)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(deserializer)?;
        Ok(Duration::from_secs_f64(ms.max(0.0) / 1000.0))
    }
}
