//! An OpenAI-compatible endpoint spoken to verbatim: request bodies go out as they are
//! and replies come back as bytes (streamed or whole), with their status and headers.
//! The memory gateway of `flowmem serve` forwards agents' requests through it, so that
//! every model request of the workspace is still sent from this crate.
//!
//! # Example
//!
//! ```
//! use flowmem_llm::Passthrough;
//!
//! let upstream = Passthrough::new("http://127.0.0.1:8000/v1/", None)?;
//! assert_eq!(upstream.base_url(), "http://127.0.0.1:8000/v1");
//!
//! let err = Passthrough::new("127.0.0.1:8000/v1", None).unwrap_err();
//! assert_eq!(err.to_string(), "not a valid base URL: relative URL without a base");
//! # Ok::<(), flowmem_llm::PassthroughError>(())
//! ```

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt as _};

use crate::openai::ApiKey;

/// The chat-completions path, under a base URL such as `http://host/v1`.
pub const CHAT_COMPLETIONS_PATH: &str = "/chat/completions";
/// The model-list path, under a base URL.
pub const MODELS_PATH: &str = "/models";

/// Why a forwarded request got no reply. Its message never holds the URL's query or
/// the key.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PassthroughError(String);

impl From<reqwest::Error> for PassthroughError {
    fn from(err: reqwest::Error) -> PassthroughError {
        PassthroughError(err.without_url().to_string())
    }
}

/// One upstream endpoint.
#[derive(Debug, Clone)]
pub struct Passthrough {
    http: reqwest::Client,
    base_url: String,
    /// The two endpoints' URLs, parsed once: a URL is parsed (and its host name
    /// normalised) each time one is given as text, on every forwarded request.
    chat_url: reqwest::Url,
    models_url: reqwest::Url,
    key: Option<ApiKey>,
}

/// An upstream reply: status, headers, and a body still to be read.
#[derive(Debug)]
pub struct RawReply {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    response: reqwest::Response,
}

/// The body of a streamed reply, piece by piece.
pub type RawStream = Pin<Box<dyn Stream<Item = Result<Bytes, PassthroughError>> + Send>>;

impl Passthrough {
    /// An endpoint at `base_url` (a trailing `/` is dropped), sending `key` as a bearer
    /// token when given.
    ///
    /// # Errors
    ///
    /// When `base_url` is not a URL, or the HTTP client cannot be built.
    pub fn new(base_url: &str, key: Option<ApiKey>) -> Result<Passthrough, PassthroughError> {
        let base_url = base_url.trim_end_matches('/').to_owned();
        // The parser's message names what is wrong, never the URL (which may hold a
        // password).
        let url = |path: &str| {
            reqwest::Url::parse(&format!("{base_url}{path}"))
                .map_err(|err| PassthroughError(format!("not a valid base URL: {err}")))
        };
        let (chat_url, models_url) = (url(CHAT_COMPLETIONS_PATH)?, url(MODELS_PATH)?);
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|err| PassthroughError(format!("building the HTTP client: {err}")))?;
        Ok(Passthrough { http, base_url, chat_url, models_url, key })
    }

    /// The base URL.
    #[must_use]
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    fn authorised(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self.key.as_ref().and_then(ApiKey::bearer_header) {
            Some(value) => request.header(reqwest::header::AUTHORIZATION, value),
            None => request,
        }
    }

    /// Posts a JSON chat-completions `body` as it is (`Bytes` are sent without a copy).
    ///
    /// # Errors
    ///
    /// When the endpoint cannot be reached or the reply's head is not read.
    pub async fn chat(&self, body: impl Into<Bytes>) -> Result<RawReply, PassthroughError> {
        let body: Bytes = body.into();
        let request =
            self.http.post(self.chat_url.clone()).header(reqwest::header::CONTENT_TYPE, "application/json").body(body);
        Ok(RawReply::read(self.authorised(request).send().await?))
    }

    /// Gets the model list.
    ///
    /// # Errors
    ///
    /// As [`Passthrough::chat`].
    pub async fn models(&self) -> Result<RawReply, PassthroughError> {
        let request = self.http.get(self.models_url.clone());
        Ok(RawReply::read(self.authorised(request).send().await?))
    }
}

impl RawReply {
    fn read(response: reqwest::Response) -> RawReply {
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect();
        RawReply { status: response.status().as_u16(), headers, response }
    }

    /// The HTTP status.
    #[must_use]
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The headers, names in lowercase.
    #[must_use]
    pub fn headers(&self) -> &[(String, Vec<u8>)] {
        &self.headers
    }

    /// Whether the body is a stream of server-sent events.
    #[must_use]
    pub fn is_event_stream(&self) -> bool {
        self.headers.iter().any(|(name, value)| name == "content-type" && value.starts_with(b"text/event-stream"))
    }

    /// The whole body, with every registered secret redacted (an upstream error may echo
    /// the key flowmem sent it).
    ///
    /// # Errors
    ///
    /// When the body breaks off.
    pub async fn bytes(self) -> Result<Bytes, PassthroughError> {
        let bytes = self.response.bytes().await?;
        if let Ok(text) = std::str::from_utf8(&bytes)
            && let std::borrow::Cow::Owned(redacted) = flowmem_model::redact(text)
        {
            return Ok(Bytes::from(redacted));
        }
        Ok(bytes)
    }

    /// The body as it arrives, with every registered secret redacted: a piece is passed
    /// on at once, but for a tail that could start a secret cut between two pieces
    /// ([`flowmem_model::StreamRedactor`]). A secret the upstream split across two
    /// server-sent events (two deltas of a reply) is not contiguous in the bytes and is
    /// not caught here; the gateway redacts its recorded copy after assembling it.
    #[must_use]
    pub fn into_stream(self) -> RawStream {
        let pieces = Box::pin(self.response.bytes_stream());
        let redacted = futures::stream::unfold(
            (pieces, Some(flowmem_model::StreamRedactor::default())),
            |(mut pieces, redactor)| async move {
                let mut redactor = redactor?;
                loop {
                    match pieces.next().await {
                        Some(Ok(piece)) => {
                            let out = redactor.push(&piece);
                            if !out.is_empty() {
                                return Some((Ok(Bytes::from(out)), (pieces, Some(redactor))));
                            }
                        }
                        Some(Err(err)) => return Some((Err(PassthroughError::from(err)), (pieces, None))),
                        None => {
                            let rest = redactor.finish();
                            return (!rest.is_empty()).then(|| (Ok(Bytes::from(rest)), (pieces, None)));
                        }
                    }
                }
            },
        );
        Box::pin(redacted)
    }
}
