//! The HTTP server: one axum `Router` over one shared state, with each surface nested
//! under its own path. Today `/mcp` (streamable HTTP MCP) and `/healthz`; the gateway
//! (`/v1`) and the web UI (`/`, `/api/v1`) nest here later, behind the same auth layer.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::require_token;
use crate::error::ServerError;
use crate::mcp::FlowmemMcp;
use crate::state::AppState;

/// How long the HTTP server gets to close its connections once the calls drained.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The whole router: every surface, each behind the token layer where it needs one.
///
/// `mcp_cancel` ends every MCP session (and its event streams) when cancelled.
pub fn router(state: Arc<AppState>, mcp_cancel: CancellationToken, listen: SocketAddr) -> Router {
    let mut mcp_cfg = StreamableHttpServerConfig::default().with_cancellation_token(mcp_cancel);
    if !listen.ip().is_loopback() {
        // rmcp guards loopback servers against DNS rebinding by checking `Host`; a server
        // on the network is reached by names we cannot know, and tokens protect it.
        mcp_cfg = mcp_cfg.disable_allowed_hosts();
    }
    let session_state = state.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(FlowmemMcp::http(session_state.clone())),
        Arc::new(LocalSessionManager::default()),
        mcp_cfg,
    );
    let authenticated = Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(state.clone(), require_token));
    Router::new().route("/healthz", get(|| async { "ok" })).merge(authenticated)
}

/// Serves every HTTP surface on `listener` until `shutdown` completes, then drains:
/// new connections are refused, calls in flight finish (bounded by the drain timeout),
/// background work is written, and the sessions close.
///
/// # Errors
///
/// [`ServerError::UnprotectedBind`] when the listener is not on loopback and the memory
/// has no token, and [`ServerError::Io`] when serving fails.
pub async fn serve_http(
    state: Arc<AppState>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let addr = listener.local_addr().map_err(|source| ServerError::Io { what: "reading the bound address", source })?;
    state.check_bind(addr)?;
    state.start_background();
    let mcp_cancel = CancellationToken::new();
    let app = router(state.clone(), mcp_cancel.clone(), addr);
    let stop_accepting = CancellationToken::new();
    let server = axum::serve(listener, app).with_graceful_shutdown(stop_accepting.clone().cancelled_owned());
    let mut server = std::pin::pin!(server.into_future());
    tokio::select! {
        res = &mut server => {
            state.drain().await;
            return res.map_err(|source| ServerError::Io { what: "serving HTTP", source });
        }
        () = shutdown => {}
    }
    tracing::info!("shutting down: draining calls in flight");
    stop_accepting.cancel();
    state.drain().await;
    mcp_cancel.cancel();
    match tokio::time::timeout(CLOSE_TIMEOUT, &mut server).await {
        Ok(res) => res.map_err(|source| ServerError::Io { what: "serving HTTP", source }),
        Err(_) => {
            tracing::warn!("connections still open after the close timeout; exiting anyway");
            Ok(())
        }
    }
}
