//! Sentence embeddings: the [`EmbeddingModel`] trait, and its OpenAI-compatible
//! `/embeddings` client [`HttpEmbeddingModel`].
//!
//! The embedded all-MiniLM-L6-v2 (`flowmem-llm-local`) implements the same trait, so
//! whoever retrieves by meaning (the memory's vector and hybrid search) takes a
//! `&dyn EmbeddingModel` and never knows which one it got.

use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;

use crate::endpoint::{Endpoint, EndpointConfig, Failure};
use crate::{ApiKey, LlmError, RetryPolicy};

/// The embeddings path, under a base URL such as `http://host/v1`.
pub const EMBEDDINGS_PATH: &str = "/embeddings";

/// A model that turns texts into vectors whose cosine similarity says how alike the
/// texts are in meaning.
#[async_trait::async_trait]
pub trait EmbeddingModel: Send + Sync {
    /// The model's configured name, for logs and errors.
    fn name(&self) -> &str;

    /// What identifies the vectors this model makes: vectors of two models are never
    /// compared, and a memory records this id beside every vector it stores, so that a
    /// change of model is seen and the vectors rebuilt.
    fn model_id(&self) -> String;

    /// Embeds `texts`, one vector per text in the same order, all of one dimension.
    ///
    /// # Errors
    ///
    /// Any [`LlmError`]: transport failures after retries, timeouts, a reply with the
    /// wrong number of vectors or ragged dimensions, a missing local model.
    async fn embed(&self, texts: &[String]) -> Result<Embeddings, LlmError>;
}

/// Scales `vector` to unit length in place, so that a dot product is the cosine; a zero
/// vector stays zero. The one normalisation of embedding vectors: the embedded model's
/// output and the memory's stored and query vectors go through it.
pub fn normalize(vector: &mut [f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
}

/// The vectors of one [`EmbeddingModel::embed`] call.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    /// One vector per input text, in input order.
    pub vectors: Vec<Vec<f32>>,
    /// Input tokens the model counted, when it says.
    pub prompt_tokens: u64,
    /// Wall time of the call.
    pub latency: Duration,
}

/// How to reach one OpenAI-compatible embeddings endpoint.
#[derive(Debug, Clone)]
pub struct HttpEmbeddingConfig {
    /// flowmem's name for the model (a `[models.NAME]` key).
    pub name: String,
    /// The API base; requests go to `<base_url>/embeddings`.
    pub base_url: String,
    /// The model id sent to the server.
    pub model: String,
    /// The key sent as `Authorization: Bearer`, if any.
    pub api_key: Option<ApiKey>,
    /// The deadline of one request (one batch of texts), every retry and wait included.
    pub timeout: Duration,
    /// The longest one HTTP attempt may take (within `timeout`), so that a stalled
    /// attempt leaves time for a retry; `None`: whatever remains of the deadline.
    pub attempt_timeout: Option<Duration>,
    /// The most requests in flight at once.
    pub max_concurrency: usize,
    /// How failed attempts are retried.
    pub retry: RetryPolicy,
    /// The most texts sent in one request; longer inputs are split into several.
    pub batch_size: usize,
}

impl HttpEmbeddingConfig {
    /// A configuration with a 60 s deadline per request (no separate attempt timeout), 4 concurrent requests, batches of 64 texts
    /// and [`RetryPolicy::standard`].
    #[must_use]
    pub fn new(name: impl Into<String>, base_url: impl Into<String>, model: impl Into<String>) -> HttpEmbeddingConfig {
        HttpEmbeddingConfig {
            name: name.into(),
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Duration::from_secs(60),
            attempt_timeout: None,
            max_concurrency: 4,
            retry: RetryPolicy::standard(),
            batch_size: 64,
        }
    }
}

/// An embedding model behind an OpenAI-compatible `POST /embeddings` endpoint (OpenAI,
/// vLLM, Ollama, llama.cpp's server, `flowmem serve-llm`, and others).
///
/// Texts go out in batches of [`HttpEmbeddingConfig::batch_size`] as
/// `{"model", "input": [...], "encoding_format": "float"}`; the reply's vectors are put
/// back in input order by their `index`. Transport failures, 408, 429 and 5xx are
/// retried as [`HttpModel`](crate::HttpModel) retries them. The API key is never logged.
///
/// # Example
///
/// ```no_run
/// use flowmem_llm::{EmbeddingModel, HttpEmbeddingConfig, HttpEmbeddingModel};
///
/// # async fn demo() -> Result<(), flowmem_llm::LlmError> {
/// let cfg = HttpEmbeddingConfig::new("embed", "http://localhost:8088/v1", "all-minilm-l6-v2");
/// let model = HttpEmbeddingModel::new(cfg)?;
/// let out = model.embed(&["exchange a delivered item".to_owned()]).await?;
/// assert_eq!(out.vectors.len(), 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct HttpEmbeddingModel {
    cfg: HttpEmbeddingConfig,
    endpoint: Endpoint,
}

impl HttpEmbeddingModel {
    /// Builds a client for `cfg`.
    ///
    /// # Errors
    ///
    /// [`LlmError::Unavailable`] when the HTTP client cannot be built or the API key is
    /// not a valid header value.
    pub fn new(cfg: HttpEmbeddingConfig) -> Result<HttpEmbeddingModel, LlmError> {
        let endpoint = Endpoint::new(EndpointConfig {
            name: &cfg.name,
            base_url: &cfg.base_url,
            path: EMBEDDINGS_PATH,
            api_key: cfg.api_key.as_ref(),
            timeout: cfg.timeout,
            attempt_timeout: cfg.attempt_timeout,
            max_concurrency: cfg.max_concurrency,
            retry: cfg.retry,
        })?;
        Ok(HttpEmbeddingModel { cfg, endpoint })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &HttpEmbeddingConfig {
        &self.cfg
    }

    async fn embed_batch(&self, texts: &[String]) -> Result<(Vec<Vec<f32>>, u64), LlmError> {
        let body = json!({"model": self.cfg.model, "input": texts, "encoding_format": "float"});
        let deadline = tokio::time::Instant::now() + self.cfg.timeout;
        self.endpoint.post(&body, "embeddings", deadline, |text| self.parse(text, texts.len())).await
    }

    fn parse(&self, text: &str, n_inputs: usize) -> Result<(Vec<Vec<f32>>, u64), Failure> {
        let invalid = |problem: String| LlmError::InvalidReply {
            model: self.cfg.name.clone(),
            problem,
            raw: crate::endpoint::shorten(text, 2000),
        };
        // A body that is not an embedding list may be a proxy's error page: retry it.
        let wire: WireEmbeddings = serde_json::from_str(text).map_err(|err| Failure {
            retryable: true,
            retry_after: None,
            error: invalid(format!("a body that is not an embedding list ({err})")),
        })?;
        if wire.data.len() != n_inputs {
            return Err(Failure::fatal(invalid(format!("{} embeddings for {n_inputs} inputs", wire.data.len()))));
        }
        let mut vectors: Vec<Option<Vec<f32>>> = vec![None; n_inputs];
        for (position, item) in wire.data.into_iter().enumerate() {
            let index = item.index.unwrap_or(position);
            let Some(slot) = vectors.get_mut(index).filter(|slot| slot.is_none()) else {
                return Err(Failure::fatal(invalid(format!(
                    "`$.data[{position}].index` {index} is out of range or repeated"
                ))));
            };
            *slot = Some(item.embedding);
        }
        let vectors: Vec<Vec<f32>> = vectors.into_iter().flatten().collect();
        let dim = vectors.first().map_or(0, Vec::len);
        if dim == 0 || vectors.iter().any(|vector| vector.len() != dim) {
            return Err(Failure::fatal(invalid("embeddings that are empty or of different dimensions".to_owned())));
        }
        Ok((vectors, wire.usage.map_or(0, |usage| usage.prompt_tokens)))
    }
}

#[async_trait::async_trait]
impl EmbeddingModel for HttpEmbeddingModel {
    fn name(&self) -> &str {
        &self.cfg.name
    }

    fn model_id(&self) -> String {
        format!("openai:{}", self.cfg.model)
    }

    async fn embed(&self, texts: &[String]) -> Result<Embeddings, LlmError> {
        let started = Instant::now();
        let mut out =
            Embeddings { vectors: Vec::with_capacity(texts.len()), prompt_tokens: 0, latency: Duration::ZERO };
        for batch in texts.chunks(self.cfg.batch_size.max(1)) {
            let (vectors, tokens) = self.embed_batch(batch).await?;
            if out.vectors.first().is_some_and(|first| first.len() != vectors[0].len()) {
                return Err(LlmError::InvalidReply {
                    model: self.cfg.name.clone(),
                    problem: "batches answered with vectors of different dimensions".to_owned(),
                    raw: String::new(),
                });
            }
            out.vectors.extend(vectors);
            out.prompt_tokens += tokens;
        }
        out.latency = started.elapsed();
        Ok(out)
    }
}

#[derive(Deserialize)]
struct WireEmbeddings {
    data: Vec<WireEmbedding>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireEmbedding {
    embedding: Vec<f32>,
    #[serde(default)]
    index: Option<usize>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
}
