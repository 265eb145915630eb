//! One OpenAI-compatible JSON endpoint with the transport policy every model client
//! shares: per-attempt timeouts, a bearer key, a concurrency bound, and retries with
//! backoff. [`HttpModel`](crate::HttpModel) posts chat completions through it and
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
    retry: RetryPolicy,
}

/// What an [`Endpoint`] is built from.
pub(crate) struct EndpointConfig<'a> {
    pub(crate) name: &'a str,
    pub(crate) base_url: &'a str,
    pub(crate) path: &'a str,
    pub(crate) api_key: Option<&'a ApiKey>,
    pub(crate) timeout: Duration,
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
        let client = reqwest::Client::builder()
            .timeout(cfg.timeout)
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
            retry: cfg.retry,
        })
    }

    /// Posts `body` until `parse` accepts a successful reply's text, retrying 408, 429,
    /// 5xx, timeouts, connection errors and the failures `parse` marks retryable, as the
    /// retry policy allows; `what` names the request in the retry log line.
    pub(crate) async fn post<T>(
        &self,
        body: &Value,
        what: &'static str,
        parse: impl Fn(&str) -> Result<T, Failure>,
    ) -> Result<T, LlmError> {
        let mut retry = 0;
        loop {
            let attempt = {
                let _permit = self.permits.acquire().await.expect("the semaphore is never closed");
                match self.attempt(body).await {
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
            let delay = self.retry.delay(retry, failure.retry_after);
            tracing::warn!(
                model = %self.name,
                retry = retry + 1,
                delay_ms = delay.as_millis() as u64,
                error = %failure.error,
                "retrying {what} request",
            );
            tokio::time::sleep(delay).await;
            retry += 1;
        }
    }

    /// One HTTP attempt: the body of a successful reply.
    async fn attempt(&self, body: &Value) -> Result<String, Failure> {
        let mut request = self.client.post(&self.url).json(body);
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let response = request.send().await.map_err(|err| self.transport_failure(err))?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let text = response.text().await.map_err(|err| self.transport_failure(err))?;
        if !status.is_success() {
            let code = status.as_u16();
            return Err(Failure {
                retryable: code == 408 || code == 429 || status.is_server_error(),
                retry_after,
                error: LlmError::Status { model: self.name.clone(), status: code, body: shorten(&text, 500) },
            });
        }
        Ok(text)
    }

    fn transport_failure(&self, err: reqwest::Error) -> Failure {
        let error = if err.is_timeout() {
            LlmError::Timeout { model: self.name.clone(), seconds: self.timeout.as_secs_f64() }
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
