//! The MCP surface over stdin and stdout, the way desktop clients start servers. No
//! token: the process that started the server owns the session.

use std::future::Future;
use std::sync::Arc;

use rmcp::ServiceExt;

use crate::error::ServerError;
use crate::mcp::FlowmemMcp;
use crate::state::AppState;

/// Serves one MCP session on stdin/stdout until the client closes it or `shutdown`
/// completes, then drains as [`serve_http`](crate::serve_http) does.
///
/// # Errors
///
/// [`ServerError::Stdio`] when the handshake fails.
pub async fn serve_stdio(
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    state.start_background();
    let service = FlowmemMcp::stdio(state.clone())
        .serve(rmcp::transport::io::stdio())
        .await
        .map_err(|err| ServerError::Stdio { message: err.to_string() })?;
    let cancel = service.cancellation_token();
    tokio::select! {
        res = service.waiting() => {
            if let Err(err) = res {
                tracing::warn!(error = %err, "the stdio session ended abnormally");
            }
        }
        () = shutdown => {
            state.drain().await;
            cancel.cancel();
            return Ok(());
        }
    }
    state.drain().await;
    Ok(())
}
