//! `flowmem serve`: the workflow memory over MCP (streamable HTTP or stdio), and
//! `flowmem serve token create`. Opens one [`Session`] the way `flowmem run` does and
//! hands its tools and models to `flowmem-server`.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, bail};
use flowmem_exec::{ToolBox, visible_tools};
use flowmem_llm::Purpose;
use flowmem_memory::{MemoryStore, StoreConfig};
use flowmem_server::{AppState, Parts, ServeConfig, TokenScope, TokenStore, load_graphs, serve_http, serve_stdio};

use crate::args::{ServeArgs, ServeCommand, TokenCommand, TokenCreateArgs, TokenScopeArg};
use crate::commands::ExitStatus;
use crate::commands::common::block_on;
use crate::printer::Printer;
use crate::session::{CacheUse, PromptSettings, Session, SessionSettings, ToolsUse};
use crate::settings::{Config, ModelRoles};

/// The state key prefix of calls that name no state of their own.
const STATE_KEY: &str = "flowmem-serve";

/// Runs `flowmem serve` or its `token` subcommand.
pub fn run(args: &ServeArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let Some(memory) = args.memory.as_deref() else {
        bail!("`flowmem serve` needs the memory to serve\nhint: pass --memory DB, or set FLOWMEM_MEMORY");
    };
    match &args.command {
        Some(ServeCommand::Token(TokenCommand::Create(create))) => create_token(memory, create, printer),
        None => block_on(serve(args, memory, printer)),
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
        memory.display()
    ));
    Ok(ExitStatus::Success)
}

async fn serve(args: &ServeArgs, memory: &Path, printer: &Printer) -> anyhow::Result<ExitStatus> {
    if args.state.task_check {
        bail!("--task-check does not apply to `flowmem serve`");
    }
    let settings = SessionSettings {
        config: Config::load(&args.config)?,
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
    let mut cfg = ServeConfig::standard(memory.to_path_buf());
    cfg.max_workflow_tools = args.max_workflow_tools;
    cfg.isolation = isolation;
    let n_graphs = graphs.len();
    let state = AppState::open(cfg, Parts { tools, runtime, evaluator, graphs })
        .with_context(|| format!("cannot serve the memory `{}`", memory.display()))?;
    let res = if args.stdio {
        // stdout carries the MCP session: nothing else may be printed there.
        tracing::info!(memory = %memory.display(), graphs = n_graphs, "serving over stdio");
        serve_stdio(state, shutdown_signal()).await
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
        tracing::info!(memory = %memory.display(), graphs = n_graphs, "serving over HTTP; Ctrl-C stops");
        serve_http(state, listener, shutdown_signal()).await
    };
    session.close().await;
    res?;
    printer.info("stopped");
    Ok(ExitStatus::Success)
}

/// Completes on the first Ctrl-C, or SIGTERM on Unix.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
