//! The embedded sentence-embedding model: all-MiniLM-L6-v2 (a 6-layer BERT encoder,
//! 384 dimensions) run on the CPU with candle, behind
//! [`EmbeddingModel`](flowmem_llm::EmbeddingModel).
//!
//! It computes what sentence-transformers computes for this model: WordPiece tokens
//! (`[CLS] … [SEP]`, at most [`MAX_TOKENS`]), the encoder's last hidden states, their
//! mean over the real tokens (padding masked out), then L2 normalisation. Parity with
//! sentence-transformers is checked on the committed fixture written by
//! `scripts/reference/embedding_fixture.py`.
//!
//! The files (weights, config, tokenizer) are fetched and verified by
//! [`EMBEDDING_SETUP_COMMAND`](crate::EMBEDDING_SETUP_COMMAND); without them every call fails with
//! [`LocalError::EmbeddingModelMissing`], whose message names that command.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use flowmem_llm::{EmbeddingModel, Embeddings, LlmError};
use tokenizers::{Tokenizer, TruncationParams};

use crate::error::LocalError;
use crate::model::to_llm_error;

/// The directory name of the embedding model under the model cache folder.
pub const EMBEDDING_DIR: &str = "all-MiniLM-L6-v2";
/// The files the model needs, all in [`EMBEDDING_DIR`].
pub const EMBEDDING_FILES: [&str; 3] = ["model.safetensors", "config.json", "tokenizer.json"];
/// The name the embedded embedding model reports, and its model id.
pub const EMBEDDING_MODEL_NAME: &str = "all-minilm-l6-v2";
/// The dimension of its vectors.
pub const EMBEDDING_DIM: usize = 384;
/// The most tokens of a text that are embedded (sentence-transformers' `max_seq_length`
/// for this model); the rest is cut off.
pub const MAX_TOKENS: usize = 256;

/// Where the setup script puts the model: `$FLOWMEM_MODEL_DIR`, else
/// `~/.cache/flowmem/models/`, joined with [`EMBEDDING_DIR`].
#[must_use]
pub fn default_embedding_dir() -> PathBuf {
    crate::model::model_dir().join(EMBEDDING_DIR)
}

/// How to load the embedded embedding model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalEmbeddingConfig {
    /// The directory holding [`EMBEDDING_FILES`].
    pub dir: PathBuf,
    /// The name reported by [`EmbeddingModel::name`].
    pub name: String,
    /// How many texts one forward pass takes; texts are sorted by length first, so a
    /// batch pads little.
    pub batch_size: usize,
}

impl LocalEmbeddingConfig {
    /// The model at [`default_embedding_dir`], named [`EMBEDDING_MODEL_NAME`], in
    /// batches of 32.
    #[must_use]
    pub fn standard() -> LocalEmbeddingConfig {
        LocalEmbeddingConfig { dir: default_embedding_dir(), name: EMBEDDING_MODEL_NAME.to_owned(), batch_size: 32 }
    }
}

/// The loaded encoder and tokenizer.
struct Encoder {
    bert: BertModel,
    tokenizer: Tokenizer,
}

/// Every embedding model loaded in this process, by directory.
static LOADED: Mutex<Vec<(PathBuf, Arc<Encoder>)>> = Mutex::new(Vec::new());

/// The embedded all-MiniLM-L6-v2.
///
/// Cheap to create and clone: the weights load on the first call (or
/// [`LocalEmbeddingModel::load`]) and are shared by every model of the same directory in
/// the process. Calls run on tokio's blocking pool.
///
/// # Example
///
/// ```no_run
/// use flowmem_llm_local::{LocalEmbeddingConfig, LocalEmbeddingModel};
///
/// let model = LocalEmbeddingModel::new(LocalEmbeddingConfig::standard());
/// let vectors = model.embed_blocking(&["exchange a delivered item".to_owned()])?;
/// assert_eq!(vectors[0].len(), 384);
/// # Ok::<(), flowmem_llm_local::LocalError>(())
/// ```
#[derive(Clone)]
pub struct LocalEmbeddingModel {
    config: LocalEmbeddingConfig,
    loaded: Arc<OnceLock<Arc<Encoder>>>,
}

impl std::fmt::Debug for LocalEmbeddingModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbeddingModel").field("config", &self.config).finish_non_exhaustive()
    }
}

impl LocalEmbeddingModel {
    /// A model that loads from `config` on first use.
    #[must_use]
    pub fn new(config: LocalEmbeddingConfig) -> LocalEmbeddingModel {
        LocalEmbeddingModel { config, loaded: Arc::new(OnceLock::new()) }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &LocalEmbeddingConfig {
        &self.config
    }

    /// The first of [`EMBEDDING_FILES`] missing from `dir`, if any.
    #[must_use]
    pub fn missing_file(dir: &Path) -> Option<PathBuf> {
        EMBEDDING_FILES.iter().map(|file| dir.join(file)).find(|path| !path.is_file())
    }

    /// Loads the model now (blocking; well under a second), or returns the copy already
    /// loaded in this process.
    ///
    /// # Errors
    ///
    /// [`LocalError::EmbeddingModelMissing`] when a file is absent (its message names the
    /// setup command), [`LocalError::Load`] when one is unreadable.
    pub fn load(&self) -> Result<(), LocalError> {
        self.encoder().map(|_| ())
    }

    fn encoder(&self) -> Result<&Arc<Encoder>, LocalError> {
        if let Some(encoder) = self.loaded.get() {
            return Ok(encoder);
        }
        let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
        let shared = match loaded.iter().find(|(dir, _)| *dir == self.config.dir) {
            Some((_, encoder)) => Arc::clone(encoder),
            None => {
                let encoder = Arc::new(Encoder::load(&self.config.dir)?);
                loaded.push((self.config.dir.clone(), Arc::clone(&encoder)));
                encoder
            }
        };
        Ok(self.loaded.get_or_init(|| shared))
    }

    /// Embeds `texts` on the current thread (blocking): one L2-normalised vector of
    /// [`EMBEDDING_DIM`] floats per text, in order.
    ///
    /// # Errors
    ///
    /// Load errors as for [`LocalEmbeddingModel::load`]; [`LocalError::Tokenizer`] and
    /// [`LocalError::Inference`] when a text cannot be encoded.
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, LocalError> {
        self.embed_counted(texts).map(|(vectors, _)| vectors)
    }

    /// The vectors of `texts` and the number of tokens they were embedded from.
    fn embed_counted(&self, texts: &[String]) -> Result<(Vec<Vec<f32>>, usize), LocalError> {
        let encoder = self.encoder()?;
        let encodings = encoder
            .tokenizer
            .encode_batch(texts.iter().map(String::as_str).collect(), true)
            .map_err(|err| LocalError::Tokenizer(err.to_string()))?;
        let ids: Vec<&[u32]> = encodings.iter().map(tokenizers::Encoding::get_ids).collect();
        // Shortest first, so each batch pads to a length close to its own texts'.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&idx| ids[idx].len());
        let mut vectors: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for batch in order.chunks(self.config.batch_size.max(1)) {
            let batch_ids: Vec<&[u32]> = batch.iter().map(|&idx| ids[idx]).collect();
            for (&idx, vector) in batch.iter().zip(encoder.forward(&batch_ids)?) {
                vectors[idx] = vector;
            }
        }
        Ok((vectors, ids.iter().map(|ids| ids.len()).sum()))
    }

    /// How many tokens the model sees of `text` (special tokens included, after
    /// truncation to [`MAX_TOKENS`]).
    ///
    /// # Errors
    ///
    /// Load errors as for [`LocalEmbeddingModel::load`], and [`LocalError::Tokenizer`].
    pub fn count_tokens(&self, text: &str) -> Result<usize, LocalError> {
        let encoding =
            self.encoder()?.tokenizer.encode(text, true).map_err(|err| LocalError::Tokenizer(err.to_string()))?;
        Ok(encoding.get_ids().len())
    }
}

impl Encoder {
    fn load(dir: &Path) -> Result<Encoder, LocalError> {
        if let Some(path) = LocalEmbeddingModel::missing_file(dir) {
            return Err(LocalError::EmbeddingModelMissing { path });
        }
        let load_error = |path: &Path| {
            let path = path.to_path_buf();
            move |source: Box<dyn std::error::Error + Send + Sync>| LocalError::Load { path, source }
        };
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path).map_err(|err| load_error(&config_path)(Box::new(err)))?;
        let config: Config = serde_json::from_str(&text).map_err(|err| load_error(&config_path)(Box::new(err)))?;
        let weights_path = dir.join("model.safetensors");
        let bytes = std::fs::read(&weights_path).map_err(|err| load_error(&weights_path)(Box::new(err)))?;
        let vb = VarBuilder::from_buffered_safetensors(bytes, DType::F32, &Device::Cpu)
            .map_err(|err| load_error(&weights_path)(Box::new(err)))?;
        let bert = BertModel::load(vb, &config).map_err(|err| load_error(&weights_path)(Box::new(err)))?;
        let tokenizer_path = dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path).map_err(|err| load_error(&tokenizer_path)(err))?;
        // The file pads every text to 128 tokens and cuts at 128; sentence-transformers
        // cuts at 256 and pads per batch, as `forward` does.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: MAX_TOKENS, ..TruncationParams::default() }))
            .map_err(|err| load_error(&tokenizer_path)(err))?;
        Ok(Encoder { bert, tokenizer })
    }

    /// The normalised mean-pooled embeddings of a batch of token-id sequences.
    fn forward(&self, batch: &[&[u32]]) -> Result<Vec<Vec<f32>>, LocalError> {
        let n = batch.len();
        let len = batch.iter().map(|ids| ids.len()).max().unwrap_or(0).max(1);
        let mut ids = vec![0u32; n * len];
        let mut mask = vec![0u32; n * len];
        for (row, tokens) in batch.iter().enumerate() {
            ids[row * len..row * len + tokens.len()].copy_from_slice(tokens);
            mask[row * len..row * len + tokens.len()].fill(1);
        }
        let device = Device::Cpu;
        let ids = Tensor::from_vec(ids, (n, len), &device)?;
        let mask = Tensor::from_vec(mask, (n, len), &device)?;
        let types = ids.zeros_like()?;
        let hidden = self.bert.forward(&ids, &types, Some(&mask))?;
        // Mean over the real tokens: padding positions are multiplied by 0.
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
        let counts = mask.sum(1)?.clamp(1.0, f64::MAX)?;
        let mean = summed.broadcast_div(&counts)?;
        let mut rows = mean.to_vec2::<f32>()?;
        for row in &mut rows {
            flowmem_llm::normalize(row);
        }
        Ok(rows)
    }
}

#[async_trait::async_trait]
impl EmbeddingModel for LocalEmbeddingModel {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn model_id(&self) -> String {
        format!("local:{EMBEDDING_MODEL_NAME}")
    }

    async fn embed(&self, texts: &[String]) -> Result<Embeddings, LlmError> {
        let started = Instant::now();
        let model = self.clone();
        let owned = texts.to_vec();
        let name = self.config.name.clone();
        let joined = tokio::task::spawn_blocking(move || model.embed_counted(&owned)).await;
        match joined {
            Ok(Ok((vectors, tokens))) => {
                Ok(Embeddings { vectors, prompt_tokens: tokens as u64, latency: started.elapsed() })
            }
            Ok(Err(err)) => Err(to_llm_error(&name, err)),
            Err(err) => Err(to_llm_error(&name, LocalError::Worker(err.to_string()))),
        }
    }
}
