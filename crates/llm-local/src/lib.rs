//! flowmem's embedded default model: SmolLM2-135M-Instruct (Q4_1 GGUF) running on the
//! CPU in pure Rust with candle, behind the [`ChatModel`](flowmem_llm::ChatModel) trait.
//!
//! It makes every LLM-driven feature of flowmem runnable with no API key. Its JSON is
//! always valid: when a request carries a response schema or tools, the logits are
//! masked at each step (with llguidance) so that only tokens that keep the output valid
//! can be chosen.
//!
//! # Brief overview
//!
//! - [`LocalModel`] implements `ChatModel`. It loads the GGUF lazily, once per process
//!   (shared by every `LocalModel` of the same file), and runs calls one at a time on
//!   tokio's blocking pool. [`LocalConfig`] says where the file is and how to hold the
//!   weights ([`Precision`]).
//! - The tokenizer is rebuilt from the GGUF's own vocabulary and merges (GPT-2
//!   byte-level BPE, digits split singly); [`LocalModel::tokenize`] exposes it.
//! - A second model, Gemma 3 270M ([`LocalConfig::gemma3`], the name [`GEMMA_NAME`],
//!   fetched by [`GEMMA_SETUP_COMMAND`]), runs on the same engine: the file's
//!   `general.architecture` (`llama` or `gemma3`) picks the forward pass, its
//!   SentencePiece vocabulary the tokenizer, and the chat format follows (Gemma's turns,
//!   stopping at `<end_of_turn>`). The file is the pretrained model, not the
//!   instruction-tuned one: its free text is poor, its constrained JSON valid.
//! - Prompts are ChatML, rendered from `prompts/*.j2`. A prefix cache (a radix tree of
//!   KV blocks, shared by every request in the process) means no prompt prefix is
//!   prefilled twice, with output identical to a run without it; usage reports the
//!   reused tokens as `cached_tokens`.
//! - Tool calls: tools are ranked by word overlap, then by the likelihood of their
//!   name; the call is then generated under the chosen tool's argument schema.
//! - [`LocalEmbeddingModel`] is the embedded sentence-embedding model,
//!   all-MiniLM-L6-v2 (candle's BERT encoder, our mean pooling and normalisation),
//!   behind [`EmbeddingModel`](flowmem_llm::EmbeddingModel), with its files fetched by
//!   [`EMBEDDING_SETUP_COMMAND`].
//! - [`router`] and [`serve`] put any `ChatModel` (and optionally an `EmbeddingModel`)
//!   behind an OpenAI-compatible HTTP endpoint (`flowmem serve-llm`).
//!
//! The model file is fetched and verified by `bash scripts/setup/30-model.sh`
//! ([`SETUP_COMMAND`]); without it, every call fails with
//! [`LocalError::ModelMissing`], whose message names that command.
//!
//! # Example
//!
//! ```no_run
//! use flowmem_llm::{ChatRequest, Message, Purpose, ResponseFormat};
//! use flowmem_llm_local::{LocalConfig, LocalModel};
//!
//! let model = LocalModel::new(LocalConfig::standard());
//! let mut request = ChatRequest::new(vec![Message::user("Name a colour.")], Purpose::Other);
//! request.response_format = Some(ResponseFormat {
//!     name: "colour".into(),
//!     schema: serde_json::json!({"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}),
//! });
//! let reply = model.chat_blocking(&request)?;
//! let value: serde_json::Value = serde_json::from_str(reply.response.content.as_deref().unwrap_or(""))?;
//! assert!(value["colour"].is_string());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

#[doc(hidden)]
pub mod bench;
mod constrain;
mod embed;
mod engine;
mod error;
mod gemma;
mod kernels;
mod llama;
#[cfg(test)]
mod logit_check;
mod model;
mod prefix;
mod prompt;
mod respond;
mod serve;
mod spm;
mod tokenizer;

pub use crate::constrain::{
    DEFAULT_MAX_INTEGER, DEFAULT_MAX_ITEMS, DEFAULT_MAX_LENGTH, DEFAULT_MAX_PROPERTIES, prepare as prepare_schema,
};
pub use crate::embed::{
    EMBEDDING_DIM, EMBEDDING_DIR, EMBEDDING_FILES, EMBEDDING_MODEL_NAME, LocalEmbeddingConfig, LocalEmbeddingModel,
    MAX_TOKENS, default_embedding_dir,
};
pub use crate::engine::Precision;
pub use crate::error::{EMBEDDING_SETUP_COMMAND, GEMMA_SETUP_COMMAND, LocalError, SETUP_COMMAND};
pub use crate::model::{
    GEMMA_FILE, GEMMA_NAME, LocalConfig, LocalModel, LocalReply, MODEL_FILE, MODEL_NAME, default_model_path,
    gemma_model_path, to_llm_error,
};
pub use crate::prefix::{DEFAULT_PREFIX_CACHE_MB, PrefixCacheStats};
pub use crate::respond::{DEFAULT_MAX_JSON_TOKENS, DEFAULT_MAX_TOKENS, MAX_SCORED_TOOLS};
pub use crate::serve::{router, serve};
