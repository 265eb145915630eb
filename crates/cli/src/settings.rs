//! Settings shared by commands: finding `flowmem.toml`, and building the LLM stack for a
//! purpose from it and the environment.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use flowmem_llm::{
    AccountedModel, Accounting, CacheMode, CachedModel, ChatModel, HttpModel, LlmSettings, LocalModelConfig,
    ModelChoice, Purpose, ResponseCache,
};
use flowmem_llm_local::{LocalConfig, LocalError, LocalModel};

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

/// The embedded local model from `cfg` (its configured file, else the file the setup
/// script installs). The weights load on first use; a missing file is reported now, with
/// the setup command to run.
fn local_model(cfg: &LocalModelConfig) -> anyhow::Result<Arc<dyn ChatModel>> {
    let mut config = LocalConfig::standard();
    if let Some(path) = &cfg.path {
        config.path.clone_from(path);
    }
    if !config.path.is_file() {
        let error = LocalError::ModelMissing { path: config.path };
        return Err(anyhow::Error::new(error).context(format!("model `{}`", cfg.name)));
    }
    Ok(Arc::new(LocalModel::new(config)))
}
