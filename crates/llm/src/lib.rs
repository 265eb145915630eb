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
//! - [`ChatModel`] is implemented by the OpenAI-compatible HTTP backend and by the
//!   embedded local model (`flowmem-llm-local`).
//! - [`Prompts`] renders the named, versioned minijinja templates every crate keeps in
//!   `prompts/<name>.j2`; each render carries a [`PromptId`] for traces and cache keys.

mod chat;
mod error;
mod prompt;

pub use crate::chat::{
    AssistantToolCall, ChatModel, ChatRequest, ChatResponse, FinishReason, Message, Purpose,
    ResponseFormat, Role, ToolChoice, ToolDefinition, Usage,
};
pub use crate::error::LlmError;
pub use crate::prompt::{
    EmbeddedPrompt, PromptError, PromptHeader, PromptId, Prompts, RenderedPrompt, parse_header,
};
