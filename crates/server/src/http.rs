//! The HTTP server: one axum `Router` over one shared state, with each surface nested
//! under its own path: `/mcp` (streamable HTTP MCP), `/healthz`, `/api/v1` (the REST
//! API), and under `/v1` the gateway, the OTLP receiver and the learning queue's routes,
//! all behind the token layer; and the web UI's pages (`/`, `/workflows/…`, …), which
//! check their session cookie themselves.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use futures::StreamExt as _;
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
    let mut authenticated = Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(state.clone(), track_replies));
    // `/v1`: the learning queue's read routes, the gateway, the OTLP receiver.
    if state.queue.is_some() {
        let mut v1 = crate::queue::routes(state.clone());
        if state.gateway.is_some() {
            v1 = v1.merge(crate::gateway::routes(state.clone()));
        }
        if state.otlp.is_some() {
            v1 = v1.merge(crate::otlp::routes(state.clone()));
        }
        authenticated = authenticated.nest("/v1", v1);
    }
    authenticated = authenticated.nest("/api/v1", crate::api::routes(state.clone()));
    let authenticated = authenticated.layer(axum::middleware::from_fn_with_state(state.clone(), require_token));
    Router::new().route("/healthz", get(|| async { "ok" })).merge(crate::ui::routes(state)).merge(authenticated)
}

/// Serves every HTTP surface on `listener` until `shutdown` completes, then drains: new
/// tool calls are refused with a result that says the server is stopping, calls in
/// flight finish and their replies are sent (bounded by the drain timeout), background
/// work is written, and only then does the listener close and the sessions end. The
/// listener stays open while draining because a client may need a new connection to
/// finish its call (the MCP Python SDK lists tools after a call, to check its result).
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
    // Keep serving while draining: `drain` makes new calls fail fast.
    tokio::select! {
        res = &mut server => {
            state.drain().await;
            return res.map_err(|source| ServerError::Io { what: "serving HTTP", source });
        }
        () = state.drain() => {}
    }
    stop_accepting.cancel();
    mcp_cancel.cancel();
    match tokio::time::timeout(CLOSE_TIMEOUT, &mut server).await {
        Ok(res) => res.map_err(|source| ServerError::Io { what: "serving HTTP", source }),
        Err(_) => {
            tracing::warn!("connections still open after the close timeout; exiting anyway");
            Ok(())
        }
    }
}

/// Put on every MCP POST request; cancelled when the request's reply is dropped: when it
/// was sent, or when the client went away first. A call still running then is abandoned.
#[derive(Clone, Debug)]
pub(crate) struct ReplyDropped(pub(crate) CancellationToken);

/// Tracks each MCP POST until its reply stream ends, for the drain, and tells the call
/// behind it when the reply is dropped ([`ReplyDropped`]).
async fn track_replies(State(state): State<Arc<AppState>>, mut request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let dropped = CancellationToken::new();
    request.extensions_mut().insert(ReplyDropped(dropped.clone()));
    // Both parts of the guard end with it: the tracker's count, and the token.
    let guard = (state.replies.token(), dropped.drop_guard());
    let response = next.run(request).await;
    let streams = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
    if !streams {
        // A whole reply (an error, or 202 for a notification): nothing runs behind it.
        return response;
    }
    let (parts, body) = response.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _held_until_the_stream_is_dropped = &guard;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}
