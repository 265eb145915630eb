//! A wrapper that gives free-text requests a default length limit.

use std::sync::Arc;

use crate::{ChatModel, ChatRequest, ChatResponse, LlmError};

/// A [`ChatModel`] that sets `max_tokens` on free-text requests that do not set one.
///
/// Small local models tend to repeat themselves until they hit the token limit; in a
/// workflow that makes every LLM node as slow as the limit and feeds the repetition to the
/// next node. Requests that carry tools or a response schema, and requests with their own
/// `max_tokens`, are passed on unchanged: cutting constrained output short would make it
/// invalid, and an explicit limit is the caller's choice.
#[derive(Clone)]
pub struct TextLimitModel {
    inner: Arc<dyn ChatModel>,
    limit: u32,
}

impl std::fmt::Debug for TextLimitModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextLimitModel").field("inner", &self.inner.name()).field("limit", &self.limit).finish()
    }
}

impl TextLimitModel {
    /// Wraps `inner`, giving free-text requests without a limit `limit` tokens.
    #[must_use]
    pub fn new(inner: Arc<dyn ChatModel>, limit: u32) -> TextLimitModel {
        TextLimitModel { inner, limit }
    }

    /// The request as it is sent on, when it differs from `request`.
    #[must_use]
    pub fn limited(&self, request: &ChatRequest) -> Option<ChatRequest> {
        let free_text = request.tools.is_empty() && request.response_format.is_none();
        if !free_text || request.max_tokens.is_some() {
            return None;
        }
        let mut limited = request.clone();
        limited.max_tokens = Some(self.limit);
        Some(limited)
    }
}

#[async_trait::async_trait]
impl ChatModel for TextLimitModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn cache_id(&self) -> String {
        self.inner.cache_id()
    }

    fn room(&self, request: &ChatRequest) -> Option<i64> {
        match self.limited(request) {
            Some(limited) => self.inner.room(&limited),
            None => self.inner.room(request),
        }
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        match self.limited(request) {
            Some(limited) => self.inner.chat(&limited).await,
            None => self.inner.chat(request).await,
        }
    }
}
