//! flowmem's one door to language models.
//!
//! Every LLM step in flowmem (AWM induction, the agent, workflow nodes, the optimizer,
//! the ES judge) goes through the [`ChatModel`] trait defined here.
//!
//! # Brief overview
//!
//! - [`ChatRequest`] holds messages, optional tool definitions, an optional response
//!   JSON Schema, and sampling parameters.
//! - [`ChatResponse`] holds the text and/or tool calls, the finish reason, token usage
//!   and latency.
//! - [`ChatModel`] is implemented by the OpenAI-compatible [`HttpModel`] and by the
//!   embedded local model (`flowmem-llm-local`).
//! - [`CachedModel`] and [`AccountedModel`] wrap any model: the first replays replies
//!   from a SQLite [`ResponseCache`], the second counts calls, tokens and time in an
//!   [`Accounting`]; [`TextLimitModel`] gives free-text requests a default length limit.
//! - [`EmbeddingModel`] turns texts into vectors for retrieval by meaning; it is
//!   implemented by the OpenAI-compatible [`HttpEmbeddingModel`] (`/embeddings`) and by
//!   the embedded all-MiniLM-L6-v2 (`flowmem-llm-local`).
//! - [`LlmSettings`] reads the `[models]`, `[roles]` and `[llm]` tables of
//!   `flowmem.toml` and [resolves](LlmSettings::resolve) which model a purpose uses,
//!   as a [`ModelChoice`].
//! - [`Prompts`] renders the named, versioned minijinja templates every crate keeps in
//!   `prompts/<name>.j2`; each render carries a [`PromptId`] for traces and cache keys.
//!
//! A typical stack is `AccountedModel(CachedModel(HttpModel))`, shared as
//! `Arc<dyn ChatModel>`.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use flowmem_llm::{
//!     Accounting, AccountedModel, CacheMode, CachedModel, ChatModel, ChatRequest, HttpModel,
//!     HttpModelConfig, Message, Purpose, ResponseCache,
//! };
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let http = HttpModel::new(HttpModelConfig::new("local", "http://localhost:8000/v1", "qwen"))?;
//! let cache = Arc::new(ResponseCache::open(std::path::Path::new(".flowmem/llm-cache.sqlite"))?);
//! let accounting = Accounting::new();
//! let model: Arc<dyn ChatModel> = Arc::new(AccountedModel::new(
//!     Arc::new(CachedModel::new(Arc::new(http), cache, CacheMode::ReadWrite)),
//!     accounting.clone(),
//! ));
//! let reply = model.chat(&ChatRequest::new(vec![Message::user("Hi")], Purpose::Agent)).await?;
//! # let _ = reply;
//! println!("{}", serde_json::to_string(&accounting.snapshot())?);
//! # Ok(())
//! # }
//! ```

mod accounting;
mod cache;
mod chat;
mod config;
mod embed;
mod endpoint;
mod error;
mod limit;
mod openai;
mod passthrough;
mod prompt;
mod retry;

pub use crate::accounting::{AccountedModel, Accounting, AccountingSnapshot, Totals};
pub use crate::cache::{CacheMode, CacheStats, CachedModel, ResponseCache, UnknownCacheMode, cache_key};
pub use crate::chat::{
    AssistantToolCall, ChatModel, ChatRequest, ChatResponse, FinishReason, Message, Purpose, ResponseFormat, Role,
    ToolChoice, ToolDefinition, Usage,
};
pub use crate::config::{
    CacheSettings, EMBEDDED_CHAT_MODELS, EmbeddingChoice, EnvLookup, LlmSettings, LocalModelConfig, ModelChoice,
    ModelConfigError, ModelEntry, ModelKind, RoleTable, std_env,
};
pub use crate::embed::{
    EMBEDDINGS_PATH, EmbeddingModel, Embeddings, HttpEmbeddingConfig, HttpEmbeddingModel, normalize,
};
pub use crate::error::LlmError;
pub use crate::limit::TextLimitModel;
#[cfg(fuzzing)]
#[doc(hidden)]
pub use crate::openai::fuzzing;
pub use crate::openai::{ApiKey, EMBEDDED_PROMPTS, HttpModel, HttpModelConfig, list_models};
pub use crate::passthrough::{CHAT_COMPLETIONS_PATH, MODELS_PATH, Passthrough, PassthroughError, RawReply, RawStream};
pub use crate::prompt::{
    EmbeddedPrompt, HeaderError, PromptError, PromptHeader, PromptId, Prompts, RenderedPrompt, clip, parse_header,
};
pub use crate::retry::RetryPolicy;
