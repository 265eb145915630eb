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

mod chat;
mod error;

pub use crate::chat::{
    AssistantToolCall, ChatModel, ChatRequest, ChatResponse, FinishReason, Message, Purpose,
    ResponseFormat, Role, ToolChoice, ToolDefinition, Usage,
};
pub use crate::error::LlmError;
