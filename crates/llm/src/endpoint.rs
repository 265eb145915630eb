//! One OpenAI-compatible JSON endpoint with the transport policy every model client
//! shares: a deadline per call (retries and waits included) with an optional timeout per
//! attempt, a bearer key, a concurrency bound, retries with backoff that never pass the
//! deadline, and redaction of every registered secret from what the server sends back.
//! [`HttpModel`](crate::HttpModel) posts chat completions through it and
//! [`HttpEmbeddingModel`](crate::HttpEmbeddingModel) embeddings.

use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::retry::{RetryPolicy, retry_after};
use crate::{ApiKey, LlmError};

/// A failed attempt and whether to retry it.
pub(crate) struct Failure {
    pub(crate) error: LlmError,
    pub(crate) retryable: bool,
    pub(crate) retry_after: Option<Duration>,
}

impl Failure {
    /// A failure that another attempt cannot fix.
    pub(crate) fn fatal(error: LlmError) -> Failure {
        Failure { error, retryable: false, retry_after: None }
    }
}

/// `POST <base_url><path>` with JSON bodies, under one model's name and policy.
#[derive(Debug)]
pub(crate) struct Endpoint {
    name: String,
    client: reqwest::Client,
    auth: Option<HeaderValue>,
    // Invariant: holds at least one permit.
    permits: Semaphore,
    url: String,
    timeout: Duration,
    attempt_timeout: Option<Duration>,
    retry: RetryPolicy,
}

/// What an [`Endpoint`] is built from.
pub(crate) struct EndpointConfig<'a> {
    pub(crate) name: &'a str,
    pub(crate) base_url: &'a str,
    pub(crate) path: &'a str,
    pub(crate) api_key: Option<&'a ApiKey>,
    /// The deadline of one call, retries included.
    pub(crate) timeout: Duration,
    /// The longest one attempt may take, when shorter than what remains of the deadline.
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) max_concurrency: usize,
    pub(crate) retry: RetryPolicy,
}

impl Endpoint {
    /// Builds the HTTP client.
    ///
    /// # Errors
    ///
    /// [`LlmError::Unavailable`] when the client cannot be built or the key is not a
    /// valid header value.
    pub(crate) fn new(cfg: EndpointConfig<'_>) -> Result<Endpoint, LlmError> {
        let unavailable = |reason: String| LlmError::Unavailable { model: cfg.name.to_owned(), reason };
        // Each attempt sets its own timeout: what remains of its call's deadline.
        let client = reqwest::Client::builder()
            .connect_timeout(cfg.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|err| unavailable(format!("cannot build an HTTP client: {err}")))?;
        let auth =
            match cfg.api_key {
                Some(key) => Some(key.bearer_header().ok_or_else(|| {
                    unavailable("the API key holds characters not allowed in an HTTP header".to_owned())
                })?),
                None => None,
            };
        Ok(Endpoint {
            name: cfg.name.to_owned(),
            client,
            auth,
            permits: Semaphore::new(cfg.max_concurrency.max(1)),
            url: format!("{}{}", cfg.base_url.trim_end_matches('/'), cfg.path),
            timeout: cfg.timeout,
            attempt_timeout: cfg.attempt_timeout,
            retry: cfg.retry,
        })
    }

    /// The URL requests go to.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Posts `body` until `parse` accepts a successful reply's text, retrying 408, 429,
    /// 5xx, timeouts, connection errors and the failures `parse` marks retryable, as the
    /// retry policy allows and until `deadline`; `what` names the request in the retry
    /// log line. A retry that could not start before the deadline (a long `Retry-After`,
    /// a backoff) fails the call at once with [`LlmError::RetryPastDeadline`].
    pub(crate) async fn post<T>(
        &self,
        body: &Value,
        what: &'static str,
        deadline: tokio::time::Instant,
        parse: impl Fn(&str) -> Result<T, Failure>,
    ) -> Result<T, LlmError> {
        let mut retry = 0;
        loop {
            let attempt = {
                let Ok(permit) = tokio::time::timeout_at(deadline, self.permits.acquire()).await else {
                    return Err(self.deadline_timeout());
                };
                let _permit = permit.expect("the semaphore is never closed");
                match self.attempt(body, deadline).await {
                    Ok(text) => parse(&text),
                    Err(failure) => Err(failure),
                }
            };
            let failure = match attempt {
                Ok(parsed) => return Ok(parsed),
                Err(failure) => failure,
            };
            if !failure.retryable || retry >= self.retry.max_retries {
                return Err(failure.error);
            }
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                return Err(failure.error);
            }
            let delay = self.retry.delay(retry, failure.retry_after);
            if delay >= remaining {
                let reason = match failure.retry_after {
                    Some(asked) => format!(
                        "the server asked to retry after {:.1} s (Retry-After), and {:.1} s remain",
                        asked.as_secs_f64(),
                        remaining.as_secs_f64()
                    ),
                    None => format!(
                        "retry {} would start in {:.1} s, and {:.1} s remain",
                        retry + 1,
                        delay.as_secs_f64(),
                        remaining.as_secs_f64()
                    ),
                };
                return Err(LlmError::RetryPastDeadline {
                    model: self.name.clone(),
                    seconds: self.timeout.as_secs_f64(),
                    reason,
                    last: Box::new(failure.error),
                });
            }
            tracing::warn!(
                model = %self.name,
                retry = retry + 1,
                delay_ms = delay.as_millis() as u64,
                remaining_ms = remaining.as_millis() as u64,
                error = %failure.error,
                "retrying {what} request",
            );
            tokio::time::sleep(delay).await;
            retry += 1;
        }
    }

    /// One HTTP attempt, bounded by the attempt timeout and by `deadline`: the body of a
    /// successful reply, with every registered secret redacted.
    async fn attempt(&self, body: &Value, deadline: tokio::time::Instant) -> Result<String, Failure> {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        // The timeout an error names: the call's deadline, or the attempt's own when shorter.
        let (limit, named) = match self.attempt_timeout {
            Some(attempt) if attempt < remaining => (attempt, attempt),
            _ => (remaining, self.timeout),
        };
        if limit.is_zero() {
            return Err(Failure::fatal(self.deadline_timeout()));
        }
        let mut request = self.client.post(&self.url).json(body).timeout(limit);
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let response = request.send().await.map_err(|err| self.transport_failure(err, named))?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let text = response.text().await.map_err(|err| self.transport_failure(err, named))?;
        // Whatever the server sent back (an error that echoes the key, a reply) is
        // redacted before anything reads it.
        let text = flowmem_model::redact(&text).into_owned();
        if !status.is_success() {
            let code = status.as_u16();
            if let Some(error) = context_exceeded(&self.name, code, &text) {
                return Err(Failure { retryable: false, retry_after: None, error });
            }
            return Err(Failure {
                retryable: code == 408 || code == 429 || status.is_server_error(),
                retry_after,
                error: LlmError::Status { model: self.name.clone(), status: code, body: shorten(&text, 500) },
            });
        }
        Ok(text)
    }

    /// The call's deadline passed.
    fn deadline_timeout(&self) -> LlmError {
        LlmError::Timeout { model: self.name.clone(), seconds: self.timeout.as_secs_f64() }
    }

    fn transport_failure(&self, err: reqwest::Error, timeout: Duration) -> Failure {
        let error = if err.is_timeout() {
            LlmError::Timeout { model: self.name.clone(), seconds: timeout.as_secs_f64() }
        } else {
            // Strip the URL's query string, if any, in case a deployment put a key there.
            LlmError::Transport { model: self.name.clone(), source: Box::new(err.without_url()) }
        };
        Failure { retryable: true, retry_after: None, error }
    }
}

/// Shortens `text` to at most `max` bytes on a character boundary.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The error for a `400` that says the request does not fit the model's context:
/// OpenAI's `context_length_exceeded` code, llama.cpp's `exceed_context_size_error` type,
/// or vLLM's "maximum context length" message. Such a request fails the same way every
/// time, so it is [`LlmError::ContextExceeded`], never retried. The token counts come
/// from llama.cpp's `n_prompt_tokens` and `n_ctx` fields, or from OpenAI's and vLLM's
/// message ("maximum context length is 4096 tokens ... resulted in 5000 tokens").
fn context_exceeded(model: &str, status: u16, body: &str) -> Option<LlmError> {
    if status != 400 {
        return None;
    }
    let body: serde_json::Value = serde_json::from_str(body).ok()?;
    let error = body.get("error")?;
    let field = |key: &str| error.get(key).and_then(serde_json::Value::as_str).unwrap_or("");
    let message = field("message");
    let exceeded = field("code") == "context_length_exceeded"
        || field("type") == "exceed_context_size_error"
        || message.contains("maximum context length");
    if !exceeded {
        return None;
    }
    let count = |key: &str| error.get(key).and_then(serde_json::Value::as_u64).and_then(|n| usize::try_from(n).ok());
    let limit = count("n_ctx").or_else(|| number_after(message, "maximum context length is "));
    let tokens = count("n_prompt_tokens")
        .or_else(|| number_after(message, "resulted in "))
        .or_else(|| number_after(message, "you requested "));
    Some(LlmError::ContextExceeded { model: model.to_owned(), problem: shorten(message, 300), tokens, limit })
}

/// The whole number right after the first `marker` in `text`, if one is there.
fn number_after(text: &str, marker: &str) -> Option<usize> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(body: &serde_json::Value) -> Option<(Option<usize>, Option<usize>)> {
        match context_exceeded("m", 400, &body.to_string())? {
            LlmError::ContextExceeded { tokens, limit, .. } => Some((tokens, limit)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn context_overflows_are_recognised_with_their_token_counts() {
        let openai = serde_json::json!({"error": {"code": "context_length_exceeded", "type": "invalid_request_error",
            "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens."}});
        assert_eq!(counts(&openai), Some((Some(9001), Some(8192))));
        let llama_cpp = serde_json::json!({"error": {"type": "exceed_context_size_error", "n_prompt_tokens": 5000,
            "n_ctx": 4096, "message": "the request exceeds the available context size"}});
        assert_eq!(counts(&llama_cpp), Some((Some(5000), Some(4096))));
        let vllm = serde_json::json!({"error": {"message": "This model's maximum context length is 2048 tokens. \
            However, you requested 2100 tokens (2000 in the messages, 100 in the completion)."}});
        assert_eq!(counts(&vllm), Some((Some(2100), Some(2048))));
        let bare = serde_json::json!({"error": {"code": "context_length_exceeded", "message": "too long"}});
        assert_eq!(counts(&bare), Some((None, None)));
        let other = serde_json::json!({"error": {"code": "invalid_value", "message": "temperature is 3"}});
        assert_eq!(counts(&other), None);
        assert!(context_exceeded("m", 500, &openai.to_string()).is_none(), "only a 400 says so");
    }
}
