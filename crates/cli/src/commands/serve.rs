//! `flowmem serve`: the workflow memory over MCP (streamable HTTP or stdio), and
//! `flowmem serve token create`. Opens one [`Session`] the way `flowmem run` does and
//! hands its tools and models to `flowmem-server`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use flowmem_exec::{CallGuard, GuardPolicy, ToolBox, visible_tools};
use flowmem_llm::Purpose;
use flowmem_memory::{MemoryStore, StoreConfig};
use flowmem_server::{
    AppState, GatewayConfig, Induce, InjectMode, OtlpConfig, Parts, Privacy, ServeConfig, TokenScope, TokenStore,
    load_graphs, serve_http, serve_stdio,
};

use crate::args::{
    GatewayMemoryArg, InduceMode, ServeArgs, ServeCommand, TokenCommand, TokenCreateArgs, TokenScopeArg,
};
use crate::commands::ExitStatus;
use crate::commands::common::{block_on, shutdown_signal};
use crate::printer::Printer;
use crate::session::{CacheUse, PromptSettings, Session, SessionSettings, ToolsUse, chosen_retriever, retriever};
use crate::settings::{
    Config, DEFAULT_GATEWAY_RETRIEVAL, DEFAULT_RETRIEVAL, GatewaySettings, ModelRoles, asked_retrieval,
};
use flowmem_model::Scope;

/// The state key prefix of calls that name no state of their own.
const STATE_KEY: &str = "flowmem-serve";

/// Runs `flowmem serve` or its `token` subcommand.
pub fn run(args: &ServeArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let Some(memory) = args.memory.as_deref() else {
        let message = "`flowmem serve` needs the memory to serve\nhint: pass --memory DB, or set FLOWMEM_MEMORY";
        return Err(crate::commands::common::MissingFlag { flag: "--memory", message }.into());
    };
    match &args.command {
        Some(ServeCommand::Token(TokenCommand::Create(create))) => create_token(memory, create, printer),
        None => {
            if !args.huge_pages {
                without_huge_pages();
            }
            with_time_slice(args.time_slice_us);
            block_on(serve(args, memory, printer))
        }
    }
}

/// Turns transparent huge pages off for this process (Linux; elsewhere there are none
/// to turn off). The allocator asks for them on its large regions, and the first touch
/// of each then zeroes 2 MiB while the request that touched it waits: on a virtual
/// machine, where the host backs each page on first use, that is milliseconds.
fn without_huge_pages() {
    #[cfg(target_os = "linux")]
    match nix::sys::prctl::set_thp_disable(true) {
        Ok(()) => tracing::debug!("transparent huge pages off for this process (--huge-pages keeps them)"),
        Err(err) => tracing::warn!("could not turn transparent huge pages off: {err}"),
    }
}

/// Asks Linux for CPU time slices of `micros` µs for the server's threads, before the
/// runtime starts them, so that they inherit it (see `flowmem_server::sched`); 0 asks nothing.
fn with_time_slice(micros: u64) {
    if micros == 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    match flowmem_server::sched::set_time_slice(micros) {
        Ok(threads) => tracing::debug!(threads, "CPU time slice {micros} µs (--time-slice-us 0 keeps the kernel's)"),
        Err(err) => tracing::warn!("could not set the CPU time slice to {micros} µs: {err}"),
    }
}

fn create_token(memory: &Path, args: &TokenCreateArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    // Opening the store creates and migrates the file, so the token lands in a memory.
    drop(MemoryStore::open(memory, StoreConfig::standard())?);
    let tokens = TokenStore::open(memory)?;
    let scope = match args.scope {
        TokenScopeArg::Read => TokenScope::Read,
        TokenScopeArg::Write => TokenScope::Write,
    };
    let token = tokens.create(scope)?;
    if printer.json {
        printer.json_result(&serde_json::json!({"id": token.id, "scope": scope.name(), "token": token.secret}))?;
    } else {
        printer.result(&token.secret)?;
    }
    printer.info(&format!(
        "created {} token #{} for `{}`; it is shown only this once (the memory keeps its hash)",
        scope.name(),
        token.id,
        shown(memory)
    ));
    Ok(ExitStatus::Success)
}

async fn serve(args: &ServeArgs, memory: &Path, printer: &Printer) -> anyhow::Result<ExitStatus> {
    if args.state.task_check {
        bail!("--task-check does not apply to `flowmem serve`");
    }
    let config = Config::load(&args.config)?;
    let gateway_settings = config.gateway()?;
    let session_config = config.clone();
    let settings = SessionSettings {
        config,
        models: ModelRoles::new(&args.model).with_judge(&args.judge),
        tools: ToolsUse::Optional,
        prompts: args.workflows.as_ref().map(|_| PromptSettings { dir: None, extra: Vec::new() }),
        cache: CacheUse::Off,
        state: Some((args.state.clone(), STATE_KEY.to_owned())),
    };
    let session = Session::open(settings).await?;
    let tools: Arc<dyn ToolBox> = session.registry().clone();
    let isolation = session.isolation().cloned();
    // Graphs need the executor; without `--workflows` no model is built for them.
    let (runtime, graphs) = match &args.workflows {
        Some(dir) => {
            let executor = session.model(Purpose::Executor).await.context("`--workflows` needs an executor model")?;
            let graphs = load_graphs(dir, &visible_tools(tools.as_ref(), isolation.as_ref()))?;
            (Some(session.runtime(executor)), graphs)
        }
        None => (None, Vec::new()),
    };
    // Without a judge the memory tools still work; `report_run` then needs an `outcome`.
    let evaluator = match session.model(Purpose::Judge).await {
        Ok(model) => Some(model),
        Err(err) => {
            printer.warn(&format!("no judge model ({err:#}); `report_run` needs an `outcome`"));
            None
        }
    };
    let induce = match args.induce.or(gateway_settings.induce) {
        None | Some(InduceMode::Rule) => Induce::Rules,
        Some(InduceMode::Lm) => {
            Induce::Model(session.model(Purpose::Inducer).await.context("`--induce lm` needs an inducer model")?)
        }
    };
    tracing::info!(induce = %induce.describe(), "successful runs are induced from");
    let mut cfg = ServeConfig::standard(memory.to_path_buf());
    cfg.max_workflow_tools = args.max_workflow_tools;
    cfg.poll_interval = std::time::Duration::from_secs_f64(args.poll_interval);
    cfg.isolation = isolation;
    let asked = asked_retrieval(args.retrieval, session_config.memory()?.retrieval);
    let find_retriever = chosen_retriever(&session_config, asked, DEFAULT_RETRIEVAL)?;
    cfg.retrieval = find_retriever.mode();
    cfg.runs = args.runs.clone();
    // The embedded upstream's server, when the gateway has no upstream of its own.
    let mut embedded_upstream = None;
    if args.gateway || args.upstream.is_some() {
        if args.stdio {
            bail!("the gateway is served over HTTP; drop --stdio or --gateway/--upstream");
        }
        let settings = &gateway_settings;
        let upstream = match args.upstream.clone().or_else(|| settings.upstream.clone()) {
            Some(upstream) => upstream,
            None => {
                let model = session.model(Purpose::Executor).await.context("the gateway needs an upstream model")?;
                let listener =
                    tokio::net::TcpListener::bind("127.0.0.1:0").await.context("binding the embedded upstream")?;
                let addr = listener.local_addr()?;
                embedded_upstream = Some(tokio::spawn(async move {
                    let _ = axum_serve_model(listener, model).await;
                }));
                tracing::info!(%addr, "gateway: forwarding to the session's model (no upstream configured)");
                format!("http://{addr}/v1")
            }
        };
        cfg.gateway = Some(gateway_config(upstream, settings, args, session_config.path())?);
    }
    if args.otlp {
        if args.stdio {
            bail!("the OTLP receiver is served over HTTP; drop --stdio or --otlp");
        }
        let mut otlp = OtlpConfig::standard();
        for (flag, secs, field) in [
            ("--otlp-quiet-secs", args.otlp_quiet_secs, &mut otlp.quiet),
            ("--otlp-abandon-secs", args.otlp_abandon_secs, &mut otlp.abandon),
        ] {
            if !(secs.is_finite() && secs >= 0.0) {
                bail!("{flag} must be a number of seconds, not {secs}");
            }
            *field = std::time::Duration::from_secs_f64(secs);
        }
        if let Some(scope) = &args.otlp_scope {
            otlp.scope = Scope::parse(scope);
        }
        cfg.otlp = Some(otlp);
    }
    // The embedding model is built when a surface retrieves by meaning; the stored
    // workflows are then given vectors of it before serving, and learned ones get theirs
    // as they are stored.
    let gateway_mode = cfg.gateway.as_ref().map(|gateway| gateway.retrieval).filter(|mode| mode.needs_vectors());
    let vector_retriever = match (find_retriever.mode().needs_vectors(), gateway_mode) {
        (true, _) => Some(find_retriever),
        (false, Some(mode)) => Some(retriever(&session_config, mode)?),
        (false, None) => None,
    };
    let embedder = match vector_retriever {
        Some(retriever) => {
            let mut store = MemoryStore::open(memory, StoreConfig::standard())?;
            let embedded = retriever.prepare(&mut store).await?;
            if embedded > 0 {
                printer
                    .info(&format!("embedded {embedded} stored workflows that had no vector of the embedding model"));
            }
            retriever.embedder().cloned()
        }
        None => None,
    };
    tracing::info!(find_workflows = %cfg.retrieval, gateway = ?cfg.gateway.as_ref().map(|g| g.retrieval), "retrieval modes");
    let n_graphs = graphs.len();
    let has_gateway = cfg.gateway.is_some();
    let has_otlp = cfg.otlp.is_some();
    let state = AppState::open(cfg, Parts { tools, runtime, evaluator, induce, graphs, embedder })
        .with_context(|| format!("cannot serve the memory `{}`", shown(memory)))?;
    let stop = shutdown_signal();
    let res = if args.stdio {
        // stdout carries the MCP session: nothing else may be printed there.
        tracing::info!(memory = %shown(memory), graphs = n_graphs, "serving over stdio");
        serve_stdio(state, stop).await
    } else {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let bound = listener.local_addr().context("reading the bound address")?;
        let url = format!("http://{bound}/mcp");
        if printer.json {
            printer.result(&serde_json::json!({"listening": url}).to_string())?;
        }
        printer.info(&format!("listening on {url}"));
        printer.info(&format!("web UI at http://{bound}/ (REST API at http://{bound}/api/v1)"));
        if has_gateway {
            printer.info(&format!("gateway at http://{bound}/v1 (set OPENAI_BASE_URL to it)"));
        }
        if has_otlp {
            printer.info(&format!(
                "OTLP receiver at http://{bound}/v1/traces (set OTEL_EXPORTER_OTLP_ENDPOINT=http://{bound})"
            ));
        }
        tracing::info!(memory = %shown(memory), graphs = n_graphs, "serving over HTTP; Ctrl-C stops");
        serve_http(state, listener, stop).await
    };
    if let Some(task) = embedded_upstream {
        task.abort();
    }
    session.close().await;
    res?;
    printer.info("stopped");
    Ok(ExitStatus::Success)
}

/// Serves `model` as an OpenAI-compatible endpoint on `listener` (the gateway's
/// upstream when none is configured).
async fn axum_serve_model(
    listener: tokio::net::TcpListener,
    model: Arc<dyn flowmem_llm::ChatModel>,
) -> std::io::Result<()> {
    flowmem_llm_local::serve(listener, model, None, std::future::pending()).await
}

/// The gateway's settings: flags over `[gateway]` over the defaults.
fn gateway_config(
    upstream: String,
    settings: &GatewaySettings,
    args: &ServeArgs,
    config_file: Option<&Path>,
) -> anyhow::Result<GatewayConfig> {
    let mut cfg = GatewayConfig::standard(upstream);
    let key_env = settings.api_key_env.as_deref().unwrap_or("FLOWMEM_UPSTREAM_API_KEY");
    cfg.upstream_key = std::env::var(key_env).ok().filter(|key| !key.is_empty());
    cfg.memory = match args.gateway_memory.or(settings.memory) {
        None | Some(GatewayMemoryArg::Prompt) => InjectMode::Prompt,
        Some(GatewayMemoryArg::Shadow) => InjectMode::Shadow,
        Some(GatewayMemoryArg::Off) => InjectMode::Off,
    };
    if let Some(k) = settings.top_k {
        cfg.top_k = k;
    }
    if let Some(budget) = settings.budget_tokens {
        cfg.budget_tokens = budget;
    }
    cfg.retrieval = asked_retrieval(args.gateway_retrieval, settings.retrieval).unwrap_or(DEFAULT_GATEWAY_RETRIEVAL);
    if let Some(secs) = args.quiet_secs.or(settings.quiet_secs) {
        if !(secs.is_finite() && secs >= 0.0) {
            bail!("the quiet period must be a number of seconds, not {secs}");
        }
        cfg.quiet = std::time::Duration::from_secs_f64(secs);
    }
    cfg.model_scopes = settings.models.iter().map(|(model, scope)| (model.clone(), Scope::parse(scope))).collect();
    for (token, scope) in &settings.tokens {
        let id: i64 = token.parse().with_context(|| {
            format!(
                "[gateway.tokens] key `{token}` is not a token id (a number, as `flowmem serve token create` prints)"
            )
        })?;
        cfg.token_scopes.push((id, Scope::parse(scope)));
    }
    let config_dir = config_file.and_then(Path::parent).unwrap_or(Path::new("."));
    let mut guards: Vec<(String, PathBuf)> =
        settings.guards.iter().map(|(scope, path)| (scope.clone(), config_dir.join(path))).collect();
    for flag in &args.gateway_guard {
        let Some((scope, path)) = flag.split_once('=') else {
            bail!("--gateway-guard takes SCOPE=FILE, such as `retail=skeleton.json`, not {flag:?}");
        };
        guards.push((scope.to_owned(), PathBuf::from(path)));
    }
    for (scope, path) in guards {
        // The agent's tools are not known here: a graph position that hints none is silent.
        let guard = CallGuard::load(&path, &[], GuardPolicy::Flag)
            .with_context(|| format!("the gateway guard of scope `{scope}`"))?;
        tracing::info!(%scope, skeleton = %path.display(), "gateway: tool calls checked against a skeleton");
        cfg.guards.push((Scope::parse(&scope), guard));
    }
    let mut patterns = Vec::with_capacity(settings.redact_patterns.len());
    for (idx, pattern) in settings.redact_patterns.iter().enumerate() {
        let compiled = regex::Regex::new(pattern)
            .with_context(|| format!("[gateway] redact_patterns[{idx}] is not a valid regular expression"))?;
        patterns.push(compiled);
    }
    cfg.privacy = Privacy {
        record: settings.record.unwrap_or(true),
        unrecorded_domains: settings.unrecorded_domains.clone(),
        unrecorded_tokens: settings.unrecorded_tokens.clone(),
        redact_fields: settings.redact_fields.clone(),
        redact_patterns: patterns,
        max_field_chars: settings.max_field_chars.unwrap_or(Privacy::default().max_field_chars),
    };
    Ok(cfg)
}

/// The memory as messages name it: the file, or the URL without its password.
fn shown(memory: &Path) -> String {
    flowmem_db::DbLocation::parse(memory.as_os_str()).display()
}
