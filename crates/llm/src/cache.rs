//! The content-addressed response cache, stored in SQLite.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::{ChatModel, ChatRequest, ChatResponse, LlmError};

/// How a [`CachedModel`] uses its cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheMode {
    /// Replay hits; call the model on a miss and store the reply. Only replayable
    /// requests (temperature 0, or a fixed seed) are cached; others pass through.
    #[default]
    ReadWrite,
    /// Replay only: a miss is [`LlmError::CacheMiss`] and the model is never called.
    ReadOnly,
    /// No caching.
    Off,
}

/// A cache mode name other than `read-write`, `read-only` and `off`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown cache mode `{found}`; expected read-write, read-only or off")]
pub struct UnknownCacheMode {
    /// The name given.
    pub found: String,
}

impl std::str::FromStr for CacheMode {
    type Err = UnknownCacheMode;

    fn from_str(text: &str) -> Result<CacheMode, UnknownCacheMode> {
        match text {
            "read-write" => Ok(CacheMode::ReadWrite),
            "read-only" => Ok(CacheMode::ReadOnly),
            "off" => Ok(CacheMode::Off),
            other => Err(UnknownCacheMode { found: other.to_owned() }),
        }
    }
}

/// Hit, miss and bypass counts of a cache, for run summaries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheStats {
    /// Requests answered from the cache.
    pub hits: u64,
    /// Requests looked up and not found.
    pub misses: u64,
    /// Replies written.
    pub writes: u64,
    /// Requests not looked up because they are not replayable (temperature above 0
    /// without a seed) or the mode is `off`.
    pub bypassed: u64,
}

/// A SQLite file of chat replies keyed by the SHA-256 of the request.
///
/// The key covers the model's [`ChatModel::cache_id`], the messages, tools, tool choice,
/// response format, temperature, max tokens, seed, and the [`PromptId`](crate::PromptId)s
/// of the templates that produced the request. The purpose is not part of it: the same
/// request for a different purpose gets the same reply. Only the reply is stored (text,
/// tool calls, finish reason, usage), never a request header, so no API key reaches the
/// file.
///
/// # Example
///
/// ```
/// use flowmem_llm::{CacheMode, ResponseCache};
///
/// let dir = tempfile::tempdir()?;
/// let cache = ResponseCache::open(&dir.path().join("llm-cache.sqlite"))?;
/// assert_eq!(cache.stats().hits, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ResponseCache {
    path: PathBuf,
    // A std mutex is enough: each statement is a single indexed read or write that takes
    // microseconds, shorter than a task switch, and is never held across an await.
    conn: Mutex<Connection>,
    hits: AtomicU64,
    misses: AtomicU64,
    writes: AtomicU64,
    bypassed: AtomicU64,
}

/// The version of the key derivation and the stored reply format.
const FORMAT_VERSION: i64 = 1;

impl ResponseCache {
    /// Opens (creating if needed) the cache file at `path`, and its parent directory.
    ///
    /// # Errors
    ///
    /// [`LlmError::Cache`] when the file cannot be created or opened, is not a SQLite
    /// database, or was written by an incompatible flowmem version.
    pub fn open(path: &Path) -> Result<ResponseCache, LlmError> {
        let cache_error = |problem: String| LlmError::Cache { path: path.to_path_buf(), problem };
        if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|err| cache_error(format!("cannot create its directory: {err}")))?;
        }
        let conn = Connection::open(path).map_err(|err| cache_error(err.to_string()))?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(|err| cache_error(err.to_string()))?;
        let version: i64 =
            conn.query_row("PRAGMA user_version", [], |row| row.get(0)).map_err(|err| cache_error(err.to_string()))?;
        if version != 0 && version != FORMAT_VERSION {
            return Err(cache_error(format!(
                "format version {version}, expected {FORMAT_VERSION}; delete the file to start afresh"
            )));
        }
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE IF NOT EXISTS responses (
                 key TEXT PRIMARY KEY,
                 model TEXT NOT NULL,
                 response TEXT NOT NULL,
                 created_at INTEGER NOT NULL
             );
             PRAGMA user_version = 1;",
        )
        .map_err(|err| cache_error(err.to_string()))?;
        Ok(ResponseCache {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            bypassed: AtomicU64::new(0),
        })
    }

    /// The cache file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The counts since the cache was opened.
    #[must_use]
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            bypassed: self.bypassed.load(Ordering::Relaxed),
        }
    }

    /// The number of stored replies.
    ///
    /// # Errors
    ///
    /// [`LlmError::Cache`] when the file cannot be read.
    pub fn len(&self) -> Result<u64, LlmError> {
        let conn = self.conn.lock().expect("cache connection lock");
        conn.query_row("SELECT count(*) FROM responses", [], |row| row.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(|err| self.error(&err))
    }

    /// Whether the cache holds no replies.
    ///
    /// # Errors
    ///
    /// [`LlmError::Cache`] when the file cannot be read.
    pub fn is_empty(&self) -> Result<bool, LlmError> {
        Ok(self.len()? == 0)
    }

    fn get(&self, key: &str) -> Result<Option<ChatResponse>, LlmError> {
        let conn = self.conn.lock().expect("cache connection lock");
        let text: Option<String> = conn
            .query_row("SELECT response FROM responses WHERE key = ?1", [key], |row| row.get(0))
            .optional()
            .map_err(|err| self.error(&err))?;
        drop(conn);
        let Some(text) = text else { return Ok(None) };
        let stored: StoredReply = serde_json::from_str(&text).map_err(|err| LlmError::Cache {
            path: self.path.clone(),
            problem: format!("entry {key} is unreadable ({err}); delete the file to start afresh"),
        })?;
        Ok(Some(stored.into_response()))
    }

    fn put(&self, key: &str, model: &str, response: &ChatResponse) -> Result<(), LlmError> {
        let text = serde_json::to_string(&StoredReply::from_response(response)).expect("replies serialise");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs() as i64);
        let conn = self.conn.lock().expect("cache connection lock");
        conn.execute(
            "INSERT OR REPLACE INTO responses (key, model, response, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![key, model, text, now],
        )
        .map_err(|err| self.error(&err))?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn error(&self, err: &rusqlite::Error) -> LlmError {
        LlmError::Cache { path: self.path.clone(), problem: err.to_string() }
    }
}

/// The cache key of `request` sent to a model with cache id `model`: hex SHA-256.
#[must_use]
pub fn cache_key(model: &str, request: &ChatRequest) -> String {
    let material = json!({
        "v": FORMAT_VERSION,
        "model": model,
        "messages": request.messages,
        "tools": request.tools,
        "tool_choice": request.tool_choice,
        "response_format": request.response_format,
        // Through f64, so 0.7f32 always prints the same.
        "temperature": f64::from(request.temperature),
        "max_tokens": request.max_tokens,
        "seed": request.seed,
        "prompts": request.prompts,
    });
    let canonical = flowmem_model::canonical_json(&material);
    Sha256::digest(canonical.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect()
}

/// What the cache stores of a reply.
#[derive(Serialize, Deserialize)]
struct StoredReply {
    content: Option<String>,
    tool_calls: Vec<crate::AssistantToolCall>,
    finish_reason: crate::FinishReason,
    usage: crate::Usage,
}

impl StoredReply {
    fn from_response(response: &ChatResponse) -> StoredReply {
        StoredReply {
            content: response.content.clone(),
            tool_calls: response.tool_calls.clone(),
            finish_reason: response.finish_reason,
            usage: response.usage,
        }
    }

    fn into_response(self) -> ChatResponse {
        ChatResponse {
            content: self.content,
            tool_calls: self.tool_calls,
            finish_reason: self.finish_reason,
            usage: self.usage,
            latency: Duration::ZERO,
            cached: true,
        }
    }
}

/// A [`ChatModel`] that answers from a [`ResponseCache`] before asking its inner model.
///
/// A hit returns the stored reply with `cached: true` and zero latency (its `usage` is
/// what the original call spent). Errors are never cached.
///
/// # Example
///
/// ```no_run
/// use std::sync::Arc;
/// use flowmem_llm::{CacheMode, CachedModel, HttpModel, HttpModelConfig, ResponseCache};
///
/// let http = HttpModel::new(HttpModelConfig::new("local", "http://localhost:8000/v1", "qwen"))?;
/// let cache = Arc::new(ResponseCache::open(std::path::Path::new(".flowmem/llm-cache.sqlite"))?);
/// let model = CachedModel::new(Arc::new(http), cache, CacheMode::ReadWrite);
/// # Ok::<(), flowmem_llm::LlmError>(())
/// ```
#[derive(Clone)]
pub struct CachedModel {
    inner: Arc<dyn ChatModel>,
    cache: Arc<ResponseCache>,
    mode: CacheMode,
}

impl std::fmt::Debug for CachedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedModel")
            .field("inner", &self.inner.name())
            .field("cache", &self.cache.path)
            .field("mode", &self.mode)
            .finish()
    }
}

impl CachedModel {
    /// Wraps `inner` with `cache` in `mode`.
    #[must_use]
    pub fn new(inner: Arc<dyn ChatModel>, cache: Arc<ResponseCache>, mode: CacheMode) -> CachedModel {
        CachedModel { inner, cache, mode }
    }

    /// The cache.
    #[must_use]
    pub fn cache(&self) -> &Arc<ResponseCache> {
        &self.cache
    }
}

#[async_trait::async_trait]
impl ChatModel for CachedModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn cache_id(&self) -> String {
        self.inner.cache_id()
    }

    fn room(&self, request: &ChatRequest) -> Option<i64> {
        self.inner.room(request)
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let replayable = request.temperature == 0.0 || request.seed.is_some();
        let use_cache = match self.mode {
            CacheMode::Off => false,
            CacheMode::ReadOnly => true,
            CacheMode::ReadWrite => replayable,
        };
        if !use_cache {
            self.cache.bypassed.fetch_add(1, Ordering::Relaxed);
            return self.inner.chat(request).await;
        }
        let cache_id = self.inner.cache_id();
        let key = cache_key(&cache_id, request);
        if let Some(hit) = self.cache.get(&key)? {
            self.cache.hits.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(model = %self.inner.name(), %key, "response cache hit");
            return Ok(hit);
        }
        self.cache.misses.fetch_add(1, Ordering::Relaxed);
        if self.mode == CacheMode::ReadOnly {
            return Err(LlmError::CacheMiss { model: self.inner.name().to_owned(), key });
        }
        let response = self.inner.chat(request).await?;
        self.cache.put(&key, &cache_id, &response)?;
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Message, PromptId, Purpose};

    #[test]
    fn key_covers_what_changes_the_reply() {
        let base = ChatRequest::new(vec![Message::user("hi")], Purpose::Judge);
        let key = cache_key("gpt", &base);
        assert_eq!(key.len(), 64);
        assert_eq!(key, cache_key("gpt", &base.clone()));
        assert_ne!(key, cache_key("other", &base));
        let other_purpose = ChatRequest { purpose: Purpose::Agent, ..base.clone() };
        assert_eq!(key, cache_key("gpt", &other_purpose));
        let variants = [
            ChatRequest { temperature: 0.5, ..base.clone() },
            ChatRequest { seed: Some(1), ..base.clone() },
            ChatRequest { max_tokens: Some(9), ..base.clone() },
            ChatRequest { messages: vec![Message::user("hi!")], ..base.clone() },
            ChatRequest { prompts: vec![PromptId { name: "p".into(), version: 2, hash: "ab".into() }], ..base.clone() },
        ];
        for variant in &variants {
            assert_ne!(key, cache_key("gpt", variant), "{variant:?}");
        }
    }

    #[test]
    fn modes_parse() {
        assert_eq!("read-only".parse::<CacheMode>().unwrap(), CacheMode::ReadOnly);
        let err = "rw".parse::<CacheMode>().unwrap_err();
        assert_eq!(err, UnknownCacheMode { found: "rw".to_owned() });
        assert_eq!(err.to_string(), "unknown cache mode `rw`; expected read-write, read-only or off");
    }
}
