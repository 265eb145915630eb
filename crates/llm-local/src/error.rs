//! What can go wrong with the embedded model.

use std::path::PathBuf;

/// The command that fetches and verifies the model file.
pub const SETUP_COMMAND: &str = "bash scripts/setup/30-model.sh";

/// The command that fetches and verifies the Gemma 3 270M model file.
pub const GEMMA_SETUP_COMMAND: &str = "bash scripts/setup/32-gemma-model.sh";

/// The command that fetches and verifies the embedding model's files.
pub const EMBEDDING_SETUP_COMMAND: &str = "bash scripts/setup/35-embedding-model.sh";

/// The setup command that fetches the model file `path`: Gemma's for its file name,
/// else SmolLM2's.
fn setup_command(path: &std::path::Path) -> &'static str {
    if path.file_name().is_some_and(|name| name == crate::model::GEMMA_FILE) {
        GEMMA_SETUP_COMMAND
    } else {
        SETUP_COMMAND
    }
}

/// An error from the embedded model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    /// The GGUF file is not there.
    #[error("model file `{}` is missing\nhint: run `{}` from the repository root to fetch and verify it", path.display(), setup_command(path))]
    ModelMissing {
        /// Where we looked.
        path: PathBuf,
    },
    /// A file of the embedding model is not there.
    #[error("embedding model file `{}` is missing\nhint: run `{EMBEDDING_SETUP_COMMAND}` from the repository root to fetch and verify it", path.display())]
    EmbeddingModelMissing {
        /// The first missing file.
        path: PathBuf,
    },
    /// The GGUF file could not be read or loaded.
    #[error("could not load model file `{}`", path.display())]
    Load {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The GGUF file holds a model of an architecture this crate cannot run.
    #[error("model file `{}` has architecture `{architecture}`; only `llama` (SmolLM2) and `gemma3` (Gemma 3) are supported", path.display())]
    Architecture {
        /// The file.
        path: PathBuf,
        /// Its `general.architecture`.
        architecture: String,
    },
    /// A GGUF metadata entry is missing or malformed.
    #[error("GGUF metadata `{key}` {problem}")]
    Gguf {
        /// The metadata key, with an index for array entries.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The tokenizer failed.
    #[error("tokenizer failed: {0}")]
    Tokenizer(String),
    /// A forward pass failed.
    #[error("inference failed")]
    Inference(#[from] candle_core::Error),
    /// The response schema or a tool's parameter schema cannot be compiled to a grammar.
    #[error("cannot constrain output to the schema of {what}: {problem}")]
    Grammar {
        /// Which schema: `response_format` or the tool's name.
        what: String,
        /// The grammar compiler's message.
        problem: String,
    },
    /// A structured reply reached `max_tokens` before its JSON was complete. This is not a
    /// grammar problem: every token kept the output valid, there were just too few.
    #[error("the output was cut at max_tokens = {max_tokens} before its JSON was complete")]
    Truncated {
        /// The limit that was reached.
        max_tokens: usize,
        /// The incomplete output.
        text: String,
    },
    /// The request cannot be served (an empty conversation, a prompt that cannot be
    /// rendered).
    #[error("invalid request: {0}")]
    Request(String),
    /// The prompt, or the prompt and the reply so far, does not fit the model's context.
    #[error("the sequence needs {tokens} tokens; the model's context holds {limit}")]
    ContextExceeded {
        /// The tokens the sequence needs (at least).
        tokens: usize,
        /// The model's context length.
        limit: usize,
    },
    /// The model thread panicked or was cancelled.
    #[error("the model worker stopped: {0}")]
    Worker(String),
    /// The caller stopped waiting (it dropped the request's future: a client that went
    /// away, a timeout, Ctrl-C), so the model stopped before the reply was complete.
    #[error("the request was cancelled before the model finished it")]
    Cancelled,
}
