//! Model configuration: `flowmem.toml` `[models]`, `[roles]` and `[llm]`, the
//! `OPENAI_*` environment, and resolving which model a role uses.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::{ApiKey, CacheMode, HttpEmbeddingConfig, HttpModelConfig, LlmError, Purpose, RetryPolicy, list_models};

/// The LLM part of `flowmem.toml`. Other tables of the file are ignored here.
///
/// ```toml
/// [models.big]
/// base_url = "https://api.openai.com/v1"
/// model = "gpt-4.1"
/// api_key_env = "OPENAI_API_KEY"   # optional; default OPENAI_API_KEY if set
/// timeout = 120                    # seconds per call, retries included
/// attempt_timeout = 60             # optional: seconds per HTTP attempt
/// max_concurrency = 8              # requests in flight at once
/// retries = 4                      # retries of 429, 5xx, timeouts, connection errors
///
/// [models.small]
/// kind = "local"                   # the embedded model
///
/// [models.gemma]
/// kind = "local"
/// model = "gemma3-270m"            # the second embedded model, Gemma 3 270M
///
/// [models.embed]                  # an OpenAI-compatible /embeddings endpoint
/// base_url = "http://localhost:8088/v1"
/// model = "all-minilm-l6-v2"
///
/// [roles]                          # which model each purpose uses
/// default = "small"
/// optimizer = "big"
/// judge = "big"
/// embedding = "embed"              # retrieval by meaning; default: the embedded all-MiniLM-L6-v2
///
/// [llm]
/// cache = "read-write"             # or read-only, off
/// cache_path = ".flowmem/llm-cache.sqlite"
///
/// [llm.local]                      # the embedded model
/// prefix_cache_mb = 2048           # KV of prompt prefixes kept for reuse; 0 is off
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct LlmSettings {
    /// Named models.
    #[serde(default)]
    pub models: BTreeMap<String, ModelEntry>,
    /// Which model each purpose uses.
    #[serde(default)]
    pub roles: RoleTable,
    /// Response-cache settings.
    #[serde(default)]
    pub llm: CacheSettings,
    /// The file these settings came from, for error messages.
    #[serde(skip)]
    pub origin: Option<PathBuf>,
}

/// One `[models.NAME]` entry.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// `openai` (an OpenAI-compatible endpoint, the default) or `local`.
    #[serde(default)]
    pub kind: ModelKind,
    /// The API base URL; defaults to `OPENAI_BASE_URL`.
    pub base_url: Option<String>,
    /// The model id sent to the server. Required for `openai` models. For `local`
    /// models, which embedded model ([`EMBEDDED_CHAT_MODELS`]); SmolLM2 when absent.
    pub model: Option<String>,
    /// The environment variable holding the API key.
    pub api_key_env: Option<String>,
    /// Seconds a call may take in all, retries and waits included.
    pub timeout: Option<f64>,
    /// Seconds one HTTP attempt may take (within `timeout`), so that a stalled attempt
    /// leaves time for a retry.
    pub attempt_timeout: Option<f64>,
    /// Requests in flight at once.
    pub max_concurrency: Option<usize>,
    /// Retries after the first attempt.
    pub retries: Option<u32>,
    /// For `local` models: the model file (for the `embedding` role, the directory of
    /// the embedding model's files), instead of the default download location.
    pub path: Option<PathBuf>,
}

/// Where a configured model runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// An OpenAI-compatible HTTP endpoint.
    #[default]
    Openai,
    /// The embedded local model.
    Local,
}

/// The `[roles]` table: a model name per purpose.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleTable {
    /// The model for purposes not named here.
    pub default: Option<String>,
    /// The MCTS optimizer.
    pub optimizer: Option<String>,
    /// Workflow nodes.
    pub executor: Option<String>,
    /// The ES judge and the AWM evaluator.
    pub judge: Option<String>,
    /// Workflow induction.
    pub inducer: Option<String>,
    /// The agent.
    pub agent: Option<String>,
    /// The sentence-embedding model of vector and hybrid retrieval (not a chat
    /// purpose: see [`LlmSettings::resolve_embedding`]).
    pub embedding: Option<String>,
}

impl RoleTable {
    /// The model named for `purpose`, if any (not falling back to `default`).
    #[must_use]
    pub fn get(&self, purpose: Purpose) -> Option<&str> {
        match purpose {
            Purpose::Optimizer => self.optimizer.as_deref(),
            Purpose::Executor => self.executor.as_deref(),
            Purpose::Judge => self.judge.as_deref(),
            Purpose::Inducer => self.inducer.as_deref(),
            Purpose::Agent => self.agent.as_deref(),
            Purpose::Other => None,
        }
    }
}

/// The `[llm]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSettings {
    /// The response-cache mode; `read-write` when absent.
    pub cache: Option<CacheMode>,
    /// The cache file; `.flowmem/llm-cache.sqlite` when absent.
    pub cache_path: Option<PathBuf>,
    /// `[llm.local]`: the embedded model's runtime.
    #[serde(default)]
    pub local: LocalRuntimeSettings,
}

/// The `[llm.local]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalRuntimeSettings {
    /// The prefix cache's bound in MiB (0: off); the embedded model's default when
    /// absent.
    pub prefix_cache_mb: Option<u64>,
}

/// Which model to use, as resolved by [`LlmSettings::resolve`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ModelChoice {
    /// An OpenAI-compatible endpoint; build it with [`HttpModel::new`](crate::HttpModel::new).
    Http(HttpModelConfig),
    /// The embedded local model, built by the caller (`flowmem-llm-local`), which this
    /// crate does not depend on.
    Local(LocalModelConfig),
}

impl ModelChoice {
    /// flowmem's name for the chosen model.
    #[must_use]
    pub fn name(&self) -> &str {
        match self {
            ModelChoice::Http(cfg) => &cfg.name,
            ModelChoice::Local(cfg) => &cfg.name,
        }
    }
}

/// Names that choose an embedded chat model other than the default SmolLM2, as a
/// `local` entry's `model` or as a requested model name with no `[models]` entry.
pub const EMBEDDED_CHAT_MODELS: &[&str] = &["gemma3-270m"];

/// The embedded local model's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalModelConfig {
    /// flowmem's name for it: the `[models]` key, or `local` for the default.
    pub name: String,
    /// Which embedded model: one of [`EMBEDDED_CHAT_MODELS`], or `None` for the
    /// default (SmolLM2).
    pub model: Option<String>,
    /// The model file, if configured.
    pub path: Option<PathBuf>,
    /// `[llm.local] prefix_cache_mb`, if set.
    pub prefix_cache_mb: Option<u64>,
}

/// Which embedding model to use, as resolved by [`LlmSettings::resolve_embedding`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum EmbeddingChoice {
    /// An OpenAI-compatible `/embeddings` endpoint; build it with
    /// [`HttpEmbeddingModel::new`](crate::HttpEmbeddingModel::new).
    Http(HttpEmbeddingConfig),
    /// The embedded all-MiniLM-L6-v2, built by the caller (`flowmem-llm-local`).
    Local(LocalModelConfig),
}

impl EmbeddingChoice {
    /// flowmem's name for the chosen model.
    #[must_use]
    pub fn name(&self) -> &str {
        match self {
            EmbeddingChoice::Http(cfg) => &cfg.name,
            EmbeddingChoice::Local(cfg) => &cfg.name,
        }
    }
}

/// An error in the model configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelConfigError {
    /// The file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or a field has the wrong type.
    #[error("{}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        message: String,
    },
    /// A field is missing or wrong.
    #[error("{origin}: `{field}`: {problem}")]
    Invalid {
        /// The file, or `environment`.
        origin: String,
        /// The field, such as `models.big.base_url` or `OPENAI_BASE_URL`.
        field: String,
        /// What is wrong, with what to do.
        problem: String,
    },
    /// Asking the endpoint which models it serves failed.
    #[error("cannot choose a model at {base_url}: set --model or FLOWMEM_MODEL, or fix the endpoint")]
    Discovery {
        /// The endpoint.
        base_url: String,
        /// The cause.
        #[source]
        source: LlmError,
    },
}

/// Reads environment variables; [`std_env`] reads the process environment, tests pass
/// a map.
pub type EnvLookup<'a> = &'a (dyn Fn(&str) -> Option<String> + Sync);

/// Looks up a variable in the process environment, treating an empty value as unset.
#[must_use]
pub fn std_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

impl LlmSettings {
    /// Parses the LLM tables of a `flowmem.toml` text read from `origin`.
    ///
    /// # Errors
    ///
    /// [`ModelConfigError::Parse`] naming the file, line and field when the text is not
    /// TOML, a field has the wrong type, or a `[models.*]`, `[roles]` or `[llm]` table
    /// has an unknown field.
    pub fn from_toml(text: &str, origin: &Path) -> Result<LlmSettings, ModelConfigError> {
        let mut settings: LlmSettings = toml::from_str(text).map_err(|err| ModelConfigError::Parse {
            path: origin.to_path_buf(),
            message: flowmem_model::with_suggestion(err.to_string()),
        })?;
        settings.origin = Some(origin.to_path_buf());
        Ok(settings)
    }

    /// Reads and parses `path`; see [`LlmSettings::from_toml`].
    ///
    /// # Errors
    ///
    /// [`ModelConfigError::Read`] when the file cannot be read, otherwise as
    /// [`LlmSettings::from_toml`].
    pub fn load(path: &Path) -> Result<LlmSettings, ModelConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ModelConfigError::Read { path: path.to_path_buf(), source })?;
        LlmSettings::from_toml(&text, path)
    }

    /// Chooses the model for `purpose`.
    ///
    /// `requested` is the `--model` flag; `FLOWMEM_MODEL` stands in when it is absent.
    /// In order:
    /// 1. a requested name that is a `[models]` key;
    /// 2. a requested name of [`EMBEDDED_CHAT_MODELS`], that embedded model;
    /// 3. the `[roles]` entry for `purpose`;
    /// 4. a requested name that is not a key, as a model id at `OPENAI_BASE_URL`;
    /// 5. `[roles] default`, then a model named `default`, then the only configured model;
    /// 6. with `OPENAI_BASE_URL` set, that endpoint, with the first model its
    ///    `GET /models` lists;
    /// 7. the embedded local model.
    ///
    /// API keys come from the entry's `api_key_env`, else from `OPENAI_API_KEY`.
    ///
    /// # Errors
    ///
    /// - [`ModelConfigError::Invalid`] when a role names an unknown model, a requested name
    ///   is unknown and `OPENAI_BASE_URL` is unset, an entry lacks `model` or a base URL,
    ///   or its `api_key_env` variable is unset;
    /// - [`ModelConfigError::Discovery`] when `GET /models` fails or lists nothing.
    pub async fn resolve(
        &self,
        purpose: Purpose,
        requested: Option<&str>,
        env: EnvLookup<'_>,
    ) -> Result<ModelChoice, ModelConfigError> {
        let from_env = env("FLOWMEM_MODEL");
        let requested = requested.map(str::to_owned).or(from_env);
        if let Some(name) = requested.as_deref().filter(|name| self.models.contains_key(*name)) {
            return self.configured(name, env);
        }
        if let Some(name) = requested.as_deref().filter(|name| EMBEDDED_CHAT_MODELS.contains(name)) {
            return Ok(ModelChoice::Local(LocalModelConfig {
                name: name.to_owned(),
                model: Some(name.to_owned()),
                path: None,
                prefix_cache_mb: self.llm.local.prefix_cache_mb,
            }));
        }
        if let Some(name) = self.roles.get(purpose) {
            return self.role_model(purpose.as_str(), name, env);
        }
        let base_url = env("OPENAI_BASE_URL");
        if let Some(name) = requested.as_deref() {
            let Some(base_url) = base_url else {
                let known: Vec<&str> = self.models.keys().map(String::as_str).collect();
                return Err(ModelConfigError::Invalid {
                    origin: "--model".to_owned(),
                    field: name.to_owned(),
                    problem: format!(
                        "no such model in [models] (configured: {}) and OPENAI_BASE_URL is not set",
                        if known.is_empty() { "none".to_owned() } else { known.join(", ") },
                    ),
                });
            };
            return Ok(ModelChoice::Http(env_endpoint(base_url, name.to_owned(), env)));
        }
        if let Some(name) = &self.roles.default {
            return self.role_model("default", name, env);
        }
        if self.models.contains_key("default") {
            return self.configured("default", env);
        }
        if self.models.len() == 1 {
            let name = self.models.keys().next().expect("one model").clone();
            return self.configured(&name, env);
        }
        if let Some(base_url) = base_url {
            let key = env("OPENAI_API_KEY").map(ApiKey::new);
            let timeout = Duration::from_secs(30);
            let ids = list_models(&base_url, key.as_ref(), timeout)
                .await
                .map_err(|source| ModelConfigError::Discovery { base_url: base_url.clone(), source })?;
            let Some(model) = ids.into_iter().next() else {
                return Err(ModelConfigError::Discovery {
                    base_url: base_url.clone(),
                    source: LlmError::Unavailable {
                        model: base_url,
                        reason: "GET /models listed no models".to_owned(),
                    },
                });
            };
            return Ok(ModelChoice::Http(env_endpoint(base_url, model, env)));
        }
        Ok(ModelChoice::Local(LocalModelConfig {
            name: "local".to_owned(),
            model: None,
            path: None,
            prefix_cache_mb: self.llm.local.prefix_cache_mb,
        }))
    }

    /// Chooses the embedding model: the `[models]` entry `[roles] embedding` names (an
    /// OpenAI-compatible endpoint, or `kind = "local"` for the embedded model from its
    /// `path`), else the embedded all-MiniLM-L6-v2. `OPENAI_BASE_URL` alone never
    /// chooses an endpoint for embeddings: a chat endpoint need not serve them.
    ///
    /// # Errors
    ///
    /// [`ModelConfigError::Invalid`] when the role names an unknown model, or the entry
    /// lacks `model` or a base URL, or its `api_key_env` variable is unset.
    pub fn resolve_embedding(&self, env: EnvLookup<'_>) -> Result<EmbeddingChoice, ModelConfigError> {
        let Some(name) = &self.roles.embedding else {
            return Ok(EmbeddingChoice::Local(LocalModelConfig {
                name: "local-embedding".to_owned(),
                model: None,
                path: None,
                prefix_cache_mb: None,
            }));
        };
        match self.role_model("embedding", name, env)? {
            ModelChoice::Local(cfg) => Ok(EmbeddingChoice::Local(LocalModelConfig { prefix_cache_mb: None, ..cfg })),
            ModelChoice::Http(chat) => {
                let mut cfg = HttpEmbeddingConfig::new(chat.name, chat.base_url, chat.model);
                cfg.api_key = chat.api_key;
                cfg.timeout = chat.timeout;
                cfg.attempt_timeout = chat.attempt_timeout;
                cfg.retry = chat.retry;
                if self.models[name].max_concurrency.is_some() {
                    cfg.max_concurrency = chat.max_concurrency;
                }
                Ok(EmbeddingChoice::Http(cfg))
            }
        }
    }

    /// The cache mode, `read-write` by default.
    #[must_use]
    pub fn cache_mode(&self) -> CacheMode {
        self.llm.cache.unwrap_or_default()
    }

    /// The cache file: `[llm] cache_path` (relative to the config file's directory), or
    /// `.flowmem/llm-cache.sqlite` in the working directory.
    #[must_use]
    pub fn cache_path(&self) -> PathBuf {
        match (&self.llm.cache_path, &self.origin) {
            (Some(path), Some(origin)) => origin.parent().unwrap_or(Path::new("")).join(path),
            (Some(path), None) => path.clone(),
            (None, _) => PathBuf::from(".flowmem/llm-cache.sqlite"),
        }
    }

    fn origin(&self) -> String {
        self.origin.as_ref().map_or_else(|| "configuration".to_owned(), |path| path.display().to_string())
    }

    fn role_model(&self, role: &str, name: &str, env: EnvLookup<'_>) -> Result<ModelChoice, ModelConfigError> {
        if !self.models.contains_key(name) {
            return Err(ModelConfigError::Invalid {
                origin: self.origin(),
                field: format!("roles.{role}"),
                problem: format!("names model `{name}`, which has no [models.{name}] entry"),
            });
        }
        self.configured(name, env)
    }

    fn configured(&self, name: &str, env: EnvLookup<'_>) -> Result<ModelChoice, ModelConfigError> {
        let entry = &self.models[name];
        let invalid = |field: &str, problem: String| ModelConfigError::Invalid {
            origin: self.origin(),
            field: format!("models.{name}.{field}"),
            problem,
        };
        if entry.kind == ModelKind::Local {
            if let Some(model) = entry.model.as_deref().filter(|m| !EMBEDDED_CHAT_MODELS.contains(m)) {
                return Err(invalid(
                    "model",
                    format!("`{model}` is no embedded model (known: {})", EMBEDDED_CHAT_MODELS.join(", ")),
                ));
            }
            return Ok(ModelChoice::Local(LocalModelConfig {
                name: name.to_owned(),
                model: entry.model.clone(),
                path: entry.path.clone(),
                prefix_cache_mb: self.llm.local.prefix_cache_mb,
            }));
        }
        let base_url = entry
            .base_url
            .clone()
            .or_else(|| env("OPENAI_BASE_URL"))
            .ok_or_else(|| invalid("base_url", "is missing and OPENAI_BASE_URL is not set".to_owned()))?;
        let model = entry.model.clone().ok_or_else(|| invalid("model", "is missing".to_owned()))?;
        let api_key = match &entry.api_key_env {
            Some(var) => Some(ApiKey::new(
                env(var).ok_or_else(|| invalid("api_key_env", format!("environment variable `{var}` is not set")))?,
            )),
            None => env("OPENAI_API_KEY").map(ApiKey::new),
        };
        let mut cfg = HttpModelConfig::new(name, base_url, model);
        cfg.api_key = api_key;
        if let Some(seconds) = entry.timeout {
            cfg.timeout = Duration::try_from_secs_f64(seconds)
                .ok()
                .filter(|timeout| !timeout.is_zero())
                .ok_or_else(|| invalid("timeout", format!("{seconds} is not a positive number of seconds")))?;
        }
        if let Some(seconds) = entry.attempt_timeout {
            cfg.attempt_timeout =
                Some(Duration::try_from_secs_f64(seconds).ok().filter(|timeout| !timeout.is_zero()).ok_or_else(
                    || invalid("attempt_timeout", format!("{seconds} is not a positive number of seconds")),
                )?);
        }
        if let Some(max) = entry.max_concurrency {
            if max == 0 {
                return Err(invalid("max_concurrency", "must be at least 1".to_owned()));
            }
            cfg.max_concurrency = max;
        }
        if let Some(retries) = entry.retries {
            cfg.retry = RetryPolicy { max_retries: retries, ..RetryPolicy::standard() };
        }
        Ok(ModelChoice::Http(cfg))
    }
}

fn env_endpoint(base_url: String, model: String, env: EnvLookup<'_>) -> HttpModelConfig {
    let mut cfg = HttpModelConfig::new(model.clone(), base_url, model);
    cfg.api_key = env("OPENAI_API_KEY").map(ApiKey::new);
    cfg
}
