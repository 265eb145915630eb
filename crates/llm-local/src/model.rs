//! [`LocalModel`]: the embedded model behind [`ChatModel`], loaded once per process.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

use flowmem_llm::{AssistantToolCall, ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Usage};

use crate::engine::{Engine, Finish, Precision};
use crate::error::LocalError;
use crate::prefix::{DEFAULT_PREFIX_CACHE_MB, PrefixCacheStats};
use crate::prompt::Templates;
use crate::respond::respond;

/// The model file's name.
pub const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The name the embedded model reports.
pub const MODEL_NAME: &str = "smollm2-135m-instruct";
/// The second embedded model's file: Gemma 3 270M (instruction-tuned), Q4_K_M.
pub const GEMMA_FILE: &str = "gemma-3-270m-q4_k_m.gguf";
/// The name of the second embedded model, as a configuration chooses it.
pub const GEMMA_NAME: &str = "gemma3-270m";

/// Where the setup script puts the model: `$FLOWMEM_MODEL_DIR`, else
/// `~/.cache/flowmem/models/`, joined with [`MODEL_FILE`].
#[must_use]
pub fn default_model_path() -> PathBuf {
    model_dir().join(MODEL_FILE)
}

/// Where the setup script puts Gemma 3 270M: the model cache folder joined with
/// [`GEMMA_FILE`].
#[must_use]
pub fn gemma_model_path() -> PathBuf {
    model_dir().join(GEMMA_FILE)
}

/// The model cache folder the setup scripts fill: `$FLOWMEM_MODEL_DIR`, else
/// `~/.cache/flowmem/models/`.
pub(crate) fn model_dir() -> PathBuf {
    match std::env::var_os("FLOWMEM_MODEL_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
            home.join(".cache").join("flowmem").join("models")
        }
    }
}

/// The default model file's path for crate tests, or `None` (with a message naming the
/// setup command) when it is absent; under CI a missing file fails the test instead.
#[cfg(test)]
pub(crate) fn default_path_for_tests() -> Option<PathBuf> {
    present_for_tests(default_model_path(), crate::SETUP_COMMAND)
}

/// The Gemma 3 model file's path for crate tests, as [`default_path_for_tests`].
#[cfg(test)]
pub(crate) fn gemma_path_for_tests() -> Option<PathBuf> {
    present_for_tests(gemma_model_path(), crate::error::GEMMA_SETUP_COMMAND)
}

#[cfg(test)]
#[allow(clippy::print_stderr, reason = "a skipped test says why")]
fn present_for_tests(path: PathBuf, setup: &str) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path);
    }
    assert!(std::env::var_os("CI").is_none(), "model file `{}` is missing under CI", path.display());
    eprintln!("SKIPPED: model file `{}` is missing; run `{setup}`", path.display());
    None
}

/// How to load the embedded model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalConfig {
    /// The GGUF file.
    pub path: PathBuf,
    /// How the weights are held in memory.
    pub precision: Precision,
    /// The name reported by [`ChatModel::name`].
    pub name: String,
    /// The prefix cache's bound, in MiB; 0 turns it off. Models of the same file,
    /// precision and bound share one copy of the weights and one cache.
    pub prefix_cache_mb: u64,
}

impl LocalConfig {
    /// The model at [`default_model_path`], dequantised to F32 (measured 2.5 times
    /// faster than F16 on our x86 build machines), named [`MODEL_NAME`], with a prefix
    /// cache of [`DEFAULT_PREFIX_CACHE_MB`].
    #[must_use]
    pub fn standard() -> LocalConfig {
        LocalConfig {
            path: default_model_path(),
            precision: Precision::F32,
            name: MODEL_NAME.to_owned(),
            prefix_cache_mb: DEFAULT_PREFIX_CACHE_MB,
        }
    }

    /// Gemma 3 270M at [`gemma_model_path`], named [`GEMMA_NAME`], with a prefix cache
    /// of [`DEFAULT_PREFIX_CACHE_MB`], prefilling on F32 copies of its projections (its
    /// tied 262,144-token embedding stays in the file's Q8_0 blocks).
    #[must_use]
    pub fn gemma3() -> LocalConfig {
        LocalConfig { path: gemma_model_path(), name: GEMMA_NAME.to_owned(), ..LocalConfig::standard() }
    }

    /// The embedded model named `name` ([`MODEL_NAME`] or [`GEMMA_NAME`]) at its
    /// default path, or `None` for a name of no embedded model.
    #[must_use]
    pub fn named(name: &str) -> Option<LocalConfig> {
        match name {
            MODEL_NAME => Some(LocalConfig::standard()),
            GEMMA_NAME => Some(LocalConfig::gemma3()),
            _ => None,
        }
    }
}

/// A loaded model with its templates.
pub(crate) struct Loaded {
    pub(crate) engine: Engine,
    pub(crate) templates: Templates,
}

/// A loaded model and what it was loaded for: file, precision and prefix-cache bound.
type LoadedEntry = (PathBuf, Precision, u64, Arc<Loaded>);

/// Every model loaded in this process.
static LOADED: Mutex<Vec<LoadedEntry>> = Mutex::new(Vec::new());

/// An embedded model: SmolLM2-135M-Instruct by default, or Gemma 3 270M.
///
/// Cheap to create and clone: the weights load on the first call (or
/// [`LocalModel::load`]) and are shared by every `LocalModel` of the same file in the
/// process. Calls run one at a time on tokio's blocking pool.
///
/// # Example
///
/// ```no_run
/// use flowmem_llm::{ChatModel, ChatRequest, Message, Purpose};
/// use flowmem_llm_local::{LocalConfig, LocalModel};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let model = LocalModel::new(LocalConfig::standard());
/// let mut request = ChatRequest::new(vec![Message::user("Say hello.")], Purpose::Other);
/// request.max_tokens = Some(16);
/// let reply = model.chat(&request).await?;
/// assert!(reply.content.is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LocalModel {
    config: LocalConfig,
    loaded: Arc<OnceLock<Arc<Loaded>>>,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel").field("config", &self.config).finish_non_exhaustive()
    }
}

/// A reply with what the OpenAI shape leaves out.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalReply {
    /// The reply.
    pub response: ChatResponse,
    /// The control token that ended generation (SmolLM2's `<|im_end|>` or
    /// `<|endoftext|>`, Gemma's `<end_of_turn>` or `<eos>`), if one did; `None` for the
    /// token limit or a completed grammar.
    pub stop_token: Option<&'static str>,
}

impl LocalModel {
    /// A model that loads from `config` on first use.
    #[must_use]
    pub fn new(config: LocalConfig) -> LocalModel {
        LocalModel { config, loaded: Arc::new(OnceLock::new()) }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &LocalConfig {
        &self.config
    }

    /// Loads the model now (blocking; about a second), or returns the copy already
    /// loaded in this process.
    ///
    /// # Errors
    ///
    /// [`LocalError::ModelMissing`] when the file is absent (its message names the
    /// setup command), [`LocalError::Load`] or [`LocalError::Gguf`] when it is
    /// unreadable.
    pub fn load(&self) -> Result<(), LocalError> {
        self.loaded().map(|_| ())
    }

    fn loaded(&self) -> Result<&Arc<Loaded>, LocalError> {
        if let Some(loaded) = self.loaded.get() {
            return Ok(loaded);
        }
        let shared = shared(&self.config)?;
        Ok(self.loaded.get_or_init(|| shared))
    }

    pub(crate) fn loaded_for_bench(&self) -> Result<&Arc<Loaded>, LocalError> {
        self.loaded()
    }

    /// Answers `request` on the current thread (blocking).
    ///
    /// # Errors
    ///
    /// Load errors as for [`LocalModel::load`]; [`LocalError::Request`] for an empty
    /// conversation or a prompt beyond the context; [`LocalError::Grammar`] when a
    /// schema cannot be compiled or constrained output was cut by `max_tokens`;
    /// [`LocalError::Inference`] when a forward pass fails.
    pub fn chat_blocking(&self, request: &ChatRequest) -> Result<LocalReply, LocalError> {
        self.answer(request, &AtomicBool::new(false))
    }

    /// [`LocalModel::chat_blocking`] that stops with [`LocalError::Cancelled`] once
    /// `cancel` is set: before the prompt is prefilled and before each token.
    fn answer(&self, request: &ChatRequest, cancel: &AtomicBool) -> Result<LocalReply, LocalError> {
        let started = Instant::now();
        let loaded = self.loaded()?;
        let reply = respond(&loaded.engine, &loaded.templates, request, cancel)?;
        let usage = Usage {
            prompt_tokens: reply.prompt_tokens as u64,
            completion_tokens: reply.completion_tokens as u64,
            cached_tokens: reply.cached_tokens as u64,
        };
        let finish_reason = match (reply.finish, &reply.tool_call) {
            (Finish::Length, _) => FinishReason::Length,
            (Finish::Stop, Some(_)) => FinishReason::ToolCalls,
            (Finish::Stop, None) => FinishReason::Stop,
        };
        let tool_calls = reply
            .tool_call
            .into_iter()
            .map(|(name, arguments)| AssistantToolCall { id: next_call_id(), name, arguments })
            .collect();
        Ok(LocalReply {
            response: ChatResponse {
                content: reply.content,
                tool_calls,
                finish_reason,
                usage,
                latency: started.elapsed(),
                cached: false,
            },
            stop_token: reply.stop_token.map(|t| loaded.engine.stop_name(t)),
        })
    }

    /// Splits `text` into the model's token ids (control-token names become control
    /// tokens).
    ///
    /// # Errors
    ///
    /// Load errors as for [`LocalModel::load`].
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, LocalError> {
        self.loaded()?.engine.tokenizer.encode(text)
    }

    /// The prefix cache's counters for this process's copy of the model: requests
    /// that reused a prefix, tokens reused and prefilled, blocks held and evicted.
    ///
    /// # Errors
    ///
    /// Load errors as for [`LocalModel::load`].
    pub fn prefix_cache_stats(&self) -> Result<PrefixCacheStats, LocalError> {
        Ok(self.loaded()?.engine.prefix_stats())
    }
}

#[async_trait::async_trait]
impl ChatModel for LocalModel {
    fn name(&self) -> &str {
        &self.config.name
    }

    /// Counts exactly, with the model's own template and tokenizer, once the model is
    /// loaded (`None` before: the first request loads it).
    fn room(&self, request: &ChatRequest) -> Option<i64> {
        let loaded = self.loaded.get()?;
        crate::respond::room(&loaded.engine, &loaded.templates, request).ok()
    }

    /// The model runs on a blocking thread. Dropping the returned future (a client that
    /// went away, a timeout, Ctrl-C) stops it: a request still waiting for the model is
    /// never prefilled, and one being decoded stops at the next token, so the model is
    /// free for the next request and a process can exit at once.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let model = self.clone();
        let request = request.clone();
        let name = self.config.name.clone();
        let cancel = CancelOnDrop(Arc::new(AtomicBool::new(false)));
        let flag = Arc::clone(&cancel.0);
        let joined = tokio::task::spawn_blocking(move || model.answer(&request, &flag)).await;
        drop(cancel);
        match joined {
            Ok(Ok(reply)) => Ok(reply.response),
            Ok(Err(e)) => Err(to_llm_error(&name, e)),
            Err(e) => Err(to_llm_error(&name, LocalError::Worker(e.to_string()))),
        }
    }
}

/// Sets its flag when dropped: the future of [`LocalModel::chat`] holds it, so the
/// blocking work learns when nobody waits for it any longer.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Maps a local error to the chat trait's error, keeping the hint.
#[must_use]
pub fn to_llm_error(model: &str, error: LocalError) -> LlmError {
    let mut reason = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        reason.push_str(": ");
        reason.push_str(&cause.to_string());
        source = cause.source();
    }
    match error {
        LocalError::Truncated { text, .. } => {
            LlmError::InvalidReply { model: model.to_owned(), problem: reason, raw: text }
        }
        LocalError::Grammar { .. } | LocalError::Request(_) => {
            LlmError::InvalidReply { model: model.to_owned(), problem: reason.clone(), raw: String::new() }
        }
        // Asking again cannot help: the caller must shorten the request.
        LocalError::ContextExceeded { tokens, limit } => LlmError::ContextExceeded {
            model: model.to_owned(),
            problem: reason,
            tokens: Some(tokens),
            limit: Some(limit),
        },
        _ => LlmError::Unavailable { model: model.to_owned(), reason },
    }
}

fn shared(config: &LocalConfig) -> Result<Arc<Loaded>, LocalError> {
    let LocalConfig { path, precision, prefix_cache_mb, .. } = config;
    // Holding the lock while loading makes concurrent first calls wait for one load.
    let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((.., l)) = loaded.iter().find(|(p, q, mb, _)| p == path && q == precision && mb == prefix_cache_mb) {
        return Ok(Arc::clone(l));
    }
    let bytes = usize::try_from(prefix_cache_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    let engine = Engine::load(path, *precision, bytes)?;
    let templates = Templates::new(engine.format);
    let l = Arc::new(Loaded { engine, templates });
    loaded.push((path.clone(), *precision, *prefix_cache_mb, Arc::clone(&l)));
    Ok(l)
}

fn next_call_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("call_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowmem_llm::{Message, Purpose};

    /// The guard `chat`'s future holds sets its flag when dropped.
    #[test]
    fn a_dropped_guard_sets_its_flag() {
        let flag = Arc::new(AtomicBool::new(false));
        let guard = CancelOnDrop(Arc::clone(&flag));
        assert!(!flag.load(Ordering::Relaxed));
        drop(guard);
        assert!(flag.load(Ordering::Relaxed));
    }

    /// A request whose flag is set when it reaches the model (its caller stopped waiting
    /// while another request held the model) is never prefilled; an unset flag answers.
    #[test]
    fn a_cancelled_request_is_never_prefilled() {
        let Some(path) = default_path_for_tests() else { return };
        // A cache bound of its own: no other test's requests touch these counters.
        let model = LocalModel::new(LocalConfig { path, prefix_cache_mb: 24, ..LocalConfig::standard() });
        let mut request = ChatRequest::new(vec![Message::user("Which volcanoes of Iceland erupted?")], Purpose::Agent);
        request.max_tokens = Some(4);
        let cancelled = model.answer(&request, &AtomicBool::new(true));
        assert!(matches!(cancelled, Err(LocalError::Cancelled)), "{cancelled:?}");
        let stats = model.prefix_cache_stats().unwrap();
        assert_eq!((stats.hits, stats.misses, stats.prefilled_tokens), (0, 0, 0), "{stats:?}");
        let answered = model.answer(&request, &AtomicBool::new(false)).unwrap().response;
        let stats = model.prefix_cache_stats().unwrap();
        assert_eq!(stats.prefilled_tokens, answered.usage.prompt_tokens, "{stats:?}");
    }
}
