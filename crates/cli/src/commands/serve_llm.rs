//! `flowmem serve-llm`: the embedded model behind an OpenAI-compatible endpoint on
//! loopback.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use anyhow::Context;
use flowmem_llm::EmbeddingModel;
use flowmem_llm_local::{EMBEDDING_SETUP_COMMAND, LocalConfig, LocalEmbeddingConfig, LocalEmbeddingModel, LocalModel};

use crate::args::ServeLlmArgs;
use crate::commands::ExitStatus;
use crate::printer::Printer;

/// Loads the model, binds `127.0.0.1:PORT`, prints the base URL, and serves until
/// Ctrl-C. The embedding model answers `/v1/embeddings`; when its files are missing the
/// chat model is still served, and each embeddings request fails naming the setup script.
pub fn run(args: &ServeLlmArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let mut config = LocalConfig::standard();
    if let Some(path) = &args.model {
        config.path.clone_from(path);
    }
    config.prefix_cache_mb = args.prefix_cache_mb;
    let model = LocalModel::new(config);
    // Load before binding, so a missing file fails now with the setup command to run.
    model.load().with_context(|| "cannot start the embedded model")?;
    let mut embedding_config = LocalEmbeddingConfig::standard();
    if let Some(dir) = &args.embedding_model {
        embedding_config.dir.clone_from(dir);
    }
    let embedder = LocalEmbeddingModel::new(embedding_config);
    if let Err(err) = embedder.load() {
        printer.warn(&format!("{err}; embedding requests answer 503 until `{EMBEDDING_SETUP_COMMAND}` has run"));
    }
    let embedder: Arc<dyn EmbeddingModel> = Arc::new(embedder);

    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let shutdown = crate::commands::common::shutdown_signal();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port));
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
        let bound = listener.local_addr()?;
        if printer.json {
            printer.json_result(
                &serde_json::json!({"base_url": format!("http://{bound}/v1"), "model": flowmem_llm_local::MODEL_NAME}),
            )?;
        } else {
            printer.result(&format!("http://{bound}/v1"))?;
        }
        printer.info(&format!("listening on http://{bound}/v1"));
        printer.info("serving the embedded model (chat and embeddings); Ctrl-C or SIGTERM stops it");
        flowmem_llm_local::serve(listener, Arc::new(model), Some(embedder), shutdown)
            .await
            .context("the server failed")?;
        anyhow::Ok(())
    })?;
    Ok(ExitStatus::Success)
}
