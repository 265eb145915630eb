//! The one place where a command's resolved settings become live resources: the models
//! by role, the tool registry, the prompt templates, the LLM cache and accounting, and
//! the tool-state isolation.
//!
//! Every command that talks to a model or a tool opens a [`Session`] from a
//! [`SessionSettings`] (built from its flags by [`crate::settings`]), takes what it needs
//! through the accessors, and closes it. Closing stops the tool servers; a session
//! dropped without [`Session::close`], as on an early `?` return, stops them too.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use flowmem_eval::TaskChecker;
use flowmem_exec::Runtime;
use flowmem_llm::{
    AccountedModel, Accounting, CacheMode, CachedModel, ChatModel, EmbeddedPrompt, EmbeddingChoice, EmbeddingModel,
    HttpEmbeddingModel, HttpModel, LlmSettings, LocalModelConfig, ModelChoice, Prompts, Purpose, ResponseCache,
    TextLimitModel,
};
use flowmem_llm_local::{LocalConfig, LocalEmbeddingConfig, LocalEmbeddingModel, LocalError, LocalModel};
use flowmem_memory::{RetrievalMode, Retriever};
use flowmem_tools::StateIsolation;
use flowmem_tools::{Registry, ToolsConfig};

use crate::args::StateArgs;
use crate::commands::common;
use crate::settings::{Config, ModelRoles};

/// What a command needs from a session, resolved from its flags: no clap types but
/// [`StateArgs`], whose translation into isolation lives in one function.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    /// The configuration file and what it holds.
    pub config: Config,
    /// The model names the command asked for, by role.
    pub models: ModelRoles,
    /// Whether the command starts the configured tool servers.
    pub tools: ToolsUse,
    /// The executor's prompt templates, or `None` for a command that runs no workflow.
    pub prompts: Option<PromptSettings>,
    /// Which LLM response cache [`Session::cached_model`] goes through.
    pub cache: CacheUse,
    /// Per-run tool state and the task check: the flags, and the state key runs start at.
    pub state: Option<(StateArgs, String)>,
}

/// Whether a command uses the configured tool servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolsUse {
    /// No tools: the `[tools]` tables are not even read.
    None,
    /// The configured servers, if there is a configuration file; none otherwise.
    Optional,
    /// The configured servers; a missing configuration file is an error with a hint.
    Required,
}

/// The executor's prompt templates: the built-in ones, overridden from a directory, plus
/// further templates a command renders (the judge's, the optimizer's).
#[derive(Debug, Clone)]
pub struct PromptSettings {
    /// `--prompts`: a directory of `NAME.j2` overrides.
    pub dir: Option<PathBuf>,
    /// Templates registered beside the executor's.
    pub extra: Vec<EmbeddedPrompt>,
}

/// Where [`Session::cached_model`] caches replies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheUse {
    /// No cache: every call reaches the model.
    Off,
    /// The configured cache file (`[llm] cache_path`), in `mode`, or in the configured
    /// mode (`[llm] cache`) when `None`.
    Configured(Option<CacheMode>),
    /// A cache file of the command's own (a scout run directory's), read and written.
    At(PathBuf),
}

/// A command's live resources. See the module docs.
///
/// The accessors are what a long-lived command such as a server needs: models by role
/// ([`Session::model`], [`Session::cached_model`]), the tools ([`Session::registry`]),
/// the templates ([`Session::prompts`]), a [`Runtime`] over them, and the isolation
/// settings ([`Session::isolation`], [`Session::task_checker`]).
pub struct Session {
    config: Config,
    models: ModelRoles,
    accounting: Accounting,
    cache: Option<(Arc<ResponseCache>, CacheMode)>,
    tools: ToolsConfig,
    registry: Arc<Registry>,
    prompts: Arc<Prompts>,
    state: Option<StateArgs>,
    isolation: Option<StateIsolation>,
    grounding: flowmem_exec::Grounding,
    // Invariant: true once the tool servers were asked to stop.
    closed: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The configuration is left out: its models may carry API keys.
        f.debug_struct("Session")
            .field("config_path", &self.config.path())
            .field("models", &self.models)
            .field("n_tools", &self.registry.tools().len())
            .field("isolation", &self.isolation)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Opens the LLM cache, starts the tool servers and loads the prompt templates.
    ///
    /// # Errors
    ///
    /// When the tools are required and there is no configuration file, the `[tools]`
    /// tables are invalid, a server does not start, the cache cannot be opened, or the
    /// templates do not load.
    pub async fn open(settings: SessionSettings) -> anyhow::Result<Session> {
        let SessionSettings { config, models, tools, prompts, cache, state } = settings;
        let tools_config = match tools {
            ToolsUse::None => ToolsConfig::empty(),
            ToolsUse::Optional => config.tools(false)?,
            ToolsUse::Required => config.tools(true)?,
        };
        let cache = open_cache(config.llm(), &cache)?;
        let registry = Arc::new(Registry::connect(&tools_config).await.context("starting the tool servers")?);
        if !tools_config.servers.is_empty() {
            tracing::info!(
                servers = tools_config.servers.len(),
                tools = registry.tools().len(),
                "tool servers started"
            );
        }
        let mut session = Session {
            config,
            models,
            accounting: Accounting::new(),
            cache,
            tools: tools_config,
            registry,
            prompts: Arc::new(Prompts::new()),
            state: None,
            isolation: None,
            grounding: flowmem_exec::Grounding::default(),
            closed: false,
        };
        // From here on, an error drops the session, which stops the servers.
        if let Some(prompts) = prompts {
            session.prompts = Arc::new(session.executor_prompts(&prompts).await?);
        }
        if let Some((flags, key)) = state {
            session.isolation = common::state_isolation(&flags, &key);
            session.state = Some(flags);
        }
        Ok(session)
    }

    /// The model for `purpose`, as the command's flags and the configuration choose it,
    /// counted in [`Session::accounting`] and never cached.
    ///
    /// # Errors
    ///
    /// When the configuration does not resolve or the model cannot be built.
    pub async fn model(&self, purpose: Purpose) -> anyhow::Result<Arc<dyn ChatModel>> {
        let choice = self.model_choice(purpose).await?;
        self.build_model(choice, None)
    }

    /// Like [`Session::model`], with replies going through the session's cache (when it
    /// has one).
    ///
    /// # Errors
    ///
    /// As [`Session::model`].
    pub async fn cached_model(&self, purpose: Purpose) -> anyhow::Result<Arc<dyn ChatModel>> {
        let choice = self.model_choice(purpose).await?;
        self.build_model(choice, self.cache.clone())
    }

    /// The model `name` names (as `--model` would) for `purpose`, counted in
    /// [`Session::accounting`] and never cached: `flowmem study --swap-model`.
    ///
    /// # Errors
    ///
    /// When the name does not resolve or the model cannot be built.
    pub async fn model_named(&self, purpose: Purpose, name: &str) -> anyhow::Result<Arc<dyn ChatModel>> {
        let choice = self.config.llm().resolve(purpose, Some(name), &flowmem_llm::std_env).await?;
        tracing::info!(role = purpose.as_str(), model = choice.name(), "chose a model by name");
        self.build_model(choice, None)
    }

    /// Which model serves `purpose`, resolved but not built.
    ///
    /// # Errors
    ///
    /// When the configuration does not resolve.
    pub async fn model_choice(&self, purpose: Purpose) -> anyhow::Result<ModelChoice> {
        let requested = self.models.requested(purpose);
        let choice = self.config.llm().resolve(purpose, requested, &flowmem_llm::std_env).await?;
        let backend = match &choice {
            ModelChoice::Local(_) => "embedded",
            _ => "http",
        };
        // Names only: a model's configuration may carry an API key.
        tracing::info!(role = purpose.as_str(), model = choice.name(), backend, "chose a model");
        Ok(choice)
    }

    /// Builds `choice`, wrapped in the session's cache when `cached` and in its accounting.
    ///
    /// # Errors
    ///
    /// When the model cannot be built, such as a missing embedded-model file.
    pub fn build_model(
        &self,
        choice: ModelChoice,
        cache: Option<(Arc<ResponseCache>, CacheMode)>,
    ) -> anyhow::Result<Arc<dyn ChatModel>> {
        let mut model: Arc<dyn ChatModel> = match choice {
            ModelChoice::Http(cfg) => Arc::new(HttpModel::new(cfg)?),
            ModelChoice::Local(cfg) => local_model(&cfg)?,
            other => bail!("model `{}` has a kind this build does not support", other.name()),
        };
        if let Some((cache, mode)) = cache {
            model = Arc::new(CachedModel::new(model, cache, mode));
        }
        Ok(Arc::new(AccountedModel::new(model, self.accounting.clone())))
    }

    /// Sets how the runtimes of [`Session::runtime`] ground tool arguments
    /// (`--grounding`).
    pub fn set_grounding(&mut self, grounding: flowmem_exec::Grounding) {
        self.grounding = grounding;
    }

    /// A runtime over `executor`, the session's tools and its templates.
    #[must_use]
    pub fn runtime(&self, executor: Arc<dyn ChatModel>) -> Runtime {
        Runtime {
            executor,
            models: Default::default(),
            tools: self.registry.clone(),
            prompts: self.prompts.clone(),
            grounding: self.grounding,
        }
    }

    /// The tool registry: every configured server's tools (none under [`ToolsUse::None`]).
    #[must_use]
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The prompt templates: the executor's and the extra ones (empty without
    /// [`PromptSettings`]).
    #[must_use]
    pub fn prompts(&self) -> &Arc<Prompts> {
        &self.prompts
    }

    /// The per-run tool-state isolation the flags ask for, if any.
    #[must_use]
    pub fn isolation(&self) -> Option<&StateIsolation> {
        self.isolation.as_ref()
    }

    /// τ-bench's task check, when `--task-check` asks for it.
    ///
    /// # Errors
    ///
    /// When the check is asked for without isolation, or no state directory is found.
    pub fn task_checker(&self) -> anyhow::Result<Option<TaskChecker>> {
        let Some(state) = &self.state else { return Ok(None) };
        common::task_checker(state, &self.tools, &self.registry, self.isolation.as_ref())
    }

    /// The LLM calls and tokens of every model the session built.
    #[must_use]
    pub fn accounting(&self) -> &Accounting {
        &self.accounting
    }

    /// The response cache [`Session::cached_model`] uses, if any.
    #[must_use]
    pub fn cache(&self) -> Option<&Arc<ResponseCache>> {
        self.cache.as_ref().map(|(cache, _)| cache)
    }

    /// Stops the tool servers, waiting for them to exit.
    pub async fn close(mut self) {
        self.closed = true;
        self.registry.shutdown().await;
    }

    /// The executor's templates with the overrides and extra templates of `settings`.
    /// When the executor is the embedded model, each upstream result in a node's prompt
    /// is bounded to [`LOCAL_CONTEXT_ITEM_CHARS`], all of them to [`LOCAL_CONTEXT_CHARS`],
    /// and the optimizer's feedback to [`LOCAL_FEEDBACK_CHARS`].
    async fn executor_prompts(&self, settings: &PromptSettings) -> anyhow::Result<Prompts> {
        let mut prompts =
            flowmem_exec::exec_prompts(settings.dir.as_deref()).context("loading the prompt templates")?;
        let requested = self.models.requested(Purpose::Executor);
        let choice = self.config.llm().resolve(Purpose::Executor, requested, &flowmem_llm::std_env).await?;
        if matches!(choice, ModelChoice::Local(_)) {
            flowmem_exec::limit_context_items(&mut prompts, LOCAL_CONTEXT_ITEM_CHARS);
            flowmem_exec::limit_context(&mut prompts, LOCAL_CONTEXT_CHARS);
            prompts.set_global(flowmem_optimize::FEEDBACK_CHARS, &LOCAL_FEEDBACK_CHARS);
        }
        for extra in &settings.extra {
            prompts.register(*extra).with_context(|| format!("registering the `{}` template", extra.name))?;
        }
        refuse_unknown_overrides(&prompts)?;
        Ok(prompts)
    }
}

/// Every template a `--prompts` directory may replace, whichever command reads it.
fn overridable_prompts() -> impl Iterator<Item = &'static str> {
    let extras = [flowmem_eval::JUDGE_ES_PROMPT, flowmem_optimize::PROPOSE_EDITS];
    flowmem_exec::EXEC_PROMPTS.iter().chain(extras.iter()).map(|prompt| prompt.name).collect::<Vec<_>>().into_iter()
}

/// Refuses a `*.j2` file in the override directory whose name is no template at all (a
/// misspelt name would otherwise be ignored), naming the nearest template. A template
/// of another command (such as `judge_es.j2` for `flowmem run`) is fine: one directory
/// may serve several commands.
fn refuse_unknown_overrides(prompts: &Prompts) -> anyhow::Result<()> {
    for path in prompts.unused_overrides().context("listing the prompt overrides")? {
        let name = path.file_stem().and_then(|stem| stem.to_str()).unwrap_or_default();
        if overridable_prompts().any(|known| known == name) {
            continue;
        }
        let suggestion = match flowmem_model::nearest(name, overridable_prompts()) {
            Some(nearest) => format!("; did you mean `{nearest}`?"),
            None => String::new(),
        };
        let known: Vec<&str> = overridable_prompts().collect();
        anyhow::bail!(
            "`{}` replaces no prompt template{suggestion}\nhint: --prompts files are named after the templates they replace: {}",
            path.display(),
            known.join(", ")
        );
    }
    Ok(())
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        // An early return skipped `close`: stop the servers here, so that none outlives
        // the command. That needs a multi-threaded runtime to block on, which every
        // command with tools runs on (`commands::common::block_on`).
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return;
        }
        let registry = self.registry.clone();
        tokio::task::block_in_place(|| handle.block_on(registry.shutdown()));
    }
}

/// How many characters of each upstream result the embedded model's prompts carry.
///
/// τ² lookups return up to 6,600 characters, and every downstream node of a workflow
/// reads them again; for a 135M model on a CPU, prefill is where the time goes, and it
/// makes little use of long contexts. The whole result stays in the trace.
const LOCAL_CONTEXT_ITEM_CHARS: usize = 800;

/// How many characters of upstream results a node's prompt carries in all, when the
/// executor is the embedded model: the newest results that fit (see
/// [`flowmem_exec::CONTEXT_CHARS`]). Its window is 4,096 tokens, and a workflow that
/// loops or calls many tools before an LLM node would otherwise outgrow it (a verify
/// node after seven tool calls asked for 4,260). Six results of 800 characters fit.
const LOCAL_CONTEXT_CHARS: usize = 5_400;

/// How many characters of feedback the embedded model's optimizer prompt carries. With
/// the node-and-edge listing of a mined τ² skeleton, the whole prompt stays near 2,000
/// tokens, well inside the model's 4,096-token window; unbounded, the feedback on a few
/// queries alone runs to tens of thousands of characters.
const LOCAL_FEEDBACK_CHARS: usize = 3000;

/// The default length of the embedded model's free-text replies.
///
/// SmolLM2-135M says what it has to say in a few sentences and then repeats itself until
/// the limit; 128 tokens keeps plans and answers whole while a workflow's LLM nodes stay
/// quick. A request's own `max_tokens` wins.
const LOCAL_TEXT_LIMIT: u32 = 128;

/// Opens the cache `cache` names, unless it is off or its mode is.
fn open_cache(settings: &LlmSettings, cache: &CacheUse) -> anyhow::Result<Option<(Arc<ResponseCache>, CacheMode)>> {
    let (path, mode) = match cache {
        CacheUse::Off => return Ok(None),
        CacheUse::Configured(mode) => (settings.cache_path(), mode.unwrap_or_else(|| settings.cache_mode())),
        CacheUse::At(path) => (path.clone(), CacheMode::ReadWrite),
    };
    if mode == CacheMode::Off {
        return Ok(None);
    }
    let cache = ResponseCache::open(&path).with_context(|| format!("opening the LLM cache {}", path.display()))?;
    Ok(Some((Arc::new(cache), mode)))
}

/// How a report names the model `choice` chose: flowmem's name for it and, when that
/// is not already the model, the model it runs (`local (smollm2-135m-instruct)`).
pub fn model_label(choice: &ModelChoice) -> String {
    match choice {
        ModelChoice::Local(cfg) => {
            let model = cfg.model.as_deref().unwrap_or(flowmem_llm_local::MODEL_NAME);
            if model == cfg.name { model.to_owned() } else { format!("{} ({model})", cfg.name) }
        }
        ModelChoice::Http(cfg) if cfg.model != cfg.name => format!("{} ({})", cfg.name, cfg.model),
        other => other.name().to_owned(),
    }
}

/// The embedded local model from `cfg` (its configured file, else the file the setup
/// script installs), with free-text replies limited to [`LOCAL_TEXT_LIMIT`] tokens by
/// default. The weights load on first use; a missing file is reported now, with the
/// setup command to run.
fn local_model(cfg: &LocalModelConfig) -> anyhow::Result<Arc<dyn ChatModel>> {
    let mut config = match cfg.model.as_deref() {
        None => LocalConfig::standard(),
        Some(model) => LocalConfig::named(model)
            .with_context(|| format!("model `{}`: `{model}` is no embedded model of this build", cfg.name))?,
    };
    if let Some(path) = &cfg.path {
        config.path.clone_from(path);
    }
    if let Some(mb) = cfg.prefix_cache_mb {
        config.prefix_cache_mb = mb;
    }
    if !config.path.is_file() {
        let error = LocalError::ModelMissing { path: config.path };
        return Err(anyhow::Error::new(error).context(format!("model `{}`", cfg.name)));
    }
    Ok(Arc::new(TextLimitModel::new(Arc::new(LocalModel::new(config)), LOCAL_TEXT_LIMIT)))
}

/// The embedding model the configuration chooses ([`LlmSettings::resolve_embedding`]):
/// an OpenAI-compatible endpoint, or the embedded all-MiniLM-L6-v2. The embedded one's
/// files are checked now; when one is missing, the error names the setup script.
///
/// # Errors
///
/// When the configuration does not resolve, the client cannot be built, or a file of
/// the embedded model is missing.
pub fn embedding_model(config: &Config) -> anyhow::Result<Arc<dyn EmbeddingModel>> {
    let choice = config.llm().resolve_embedding(&flowmem_llm::std_env)?;
    // Names only: the entry may carry an API key.
    tracing::info!(model = choice.name(), "chose the embedding model");
    match choice {
        EmbeddingChoice::Http(cfg) => Ok(Arc::new(HttpEmbeddingModel::new(cfg)?)),
        EmbeddingChoice::Local(cfg) => {
            let mut local = LocalEmbeddingConfig::standard();
            if let Some(dir) = cfg.path {
                local.dir = dir;
            }
            if let Some(path) = LocalEmbeddingModel::missing_file(&local.dir) {
                let error = LocalError::EmbeddingModelMissing { path };
                return Err(anyhow::Error::new(error).context(format!("embedding model `{}`", cfg.name)));
            }
            Ok(Arc::new(LocalEmbeddingModel::new(local)))
        }
        other => bail!("embedding model `{}` has a kind this build does not support", other.name()),
    }
}

/// The retriever a command uses: the mode a flag or the configuration asks for (an
/// error when it needs an embedding model that is missing), else `default`, which falls
/// back to BM25 with a warning when the embedded embedding model is not installed, so
/// that a memory stays searchable without it.
///
/// # Errors
///
/// As [`retriever`], for a mode that was asked for.
pub fn chosen_retriever(
    config: &Config,
    asked: Option<RetrievalMode>,
    default: RetrievalMode,
) -> anyhow::Result<Retriever> {
    if let Some(mode) = asked {
        return retriever(config, mode);
    }
    match retriever(config, default) {
        Err(err) if is_missing_embedding_model(&err) => {
            tracing::warn!(
                "{err:#}; retrieving by BM25 instead of `{default}` (pass --retrieval to choose, or run the setup script)"
            );
            Ok(Retriever::bm25())
        }
        other => other,
    }
}

/// Whether `err` says the embedded embedding model's files are missing.
fn is_missing_embedding_model(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| matches!(cause.downcast_ref(), Some(LocalError::EmbeddingModelMissing { .. })))
}

/// The embedding model when one is usable, for commands that store workflows: their
/// vectors are then written with them; without one (the embedded model's files
/// missing), workflows are stored without vectors and vector retrieval embeds them
/// later.
///
/// # Errors
///
/// When the configuration names a model that cannot be built; a missing embedded model
/// is not an error.
pub fn optional_embedding_model(config: &Config) -> anyhow::Result<Option<Arc<dyn EmbeddingModel>>> {
    match embedding_model(config) {
        Ok(model) => Ok(Some(model)),
        Err(err)
            if err
                .chain()
                .any(|cause| matches!(cause.downcast_ref(), Some(LocalError::EmbeddingModelMissing { .. }))) =>
        {
            tracing::info!(error = %format!("{err:#}"), "storing workflows without vectors");
            Ok(None)
        }
        Err(err) => Err(err),
    }
}

/// The retriever of `mode`: with the configured embedding model when the mode needs
/// one ([`embedding_model`]), none for BM25.
///
/// # Errors
///
/// As [`embedding_model`], for vector and hybrid modes.
pub fn retriever(config: &Config, mode: RetrievalMode) -> anyhow::Result<Retriever> {
    if !mode.needs_vectors() {
        return Ok(Retriever::bm25());
    }
    let model = embedding_model(config).with_context(|| format!("retrieval mode `{mode}` needs an embedding model"))?;
    Ok(Retriever::new(mode, Some(model))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_label_names_the_model_an_entry_runs() {
        let local = |name: &str, model: Option<&str>| {
            ModelChoice::Local(LocalModelConfig {
                name: name.to_owned(),
                model: model.map(str::to_owned),
                path: None,
                prefix_cache_mb: None,
            })
        };
        assert_eq!(model_label(&local("local", None)), format!("local ({})", flowmem_llm_local::MODEL_NAME));
        assert_eq!(model_label(&local("gemma3-270m", Some("gemma3-270m"))), "gemma3-270m");
        assert_eq!(model_label(&local("small", Some("gemma3-270m"))), "small (gemma3-270m)");
    }
}
