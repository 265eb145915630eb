//! Why a registry could not be built.
//!
//! Failures of single calls are not errors of this kind: they are observations, recorded
//! in the returned [`ToolCall`](flowmem_model::ToolCall) with a [`CallStatus`](crate::CallStatus).

use std::path::PathBuf;
use std::time::Duration;

/// A server that could not be started, reached or listed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolServerError {
    /// The stdio server's program could not be started.
    #[error("cannot start MCP server `{server}`: `{}` did not run", command.display())]
    Spawn {
        /// The server's name.
        server: String,
        /// The program configured as its `command`.
        command: PathBuf,
        /// The OS error (often: no such file).
        #[source]
        source: std::io::Error,
    },
    /// The MCP handshake failed.
    #[error("MCP handshake with server `{server}` failed")]
    Handshake {
        /// The server's name.
        server: String,
        /// rmcp's initialisation error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Starting the server, its handshake or its tool listing took too long.
    #[error("MCP server `{server}` did not answer within {timeout:?}")]
    ConnectTimeout {
        /// The server's name.
        server: String,
        /// The connect timeout in force.
        timeout: Duration,
    },
    /// The server failed to list its tools.
    #[error("MCP server `{server}` failed to list its tools")]
    ListTools {
        /// The server's name.
        server: String,
        /// rmcp's error.
        #[source]
        source: rmcp::ServiceError,
    },
}

impl ToolServerError {
    /// The name of the server the error is about.
    #[must_use]
    pub fn server(&self) -> &str {
        match self {
            ToolServerError::Spawn { server, .. }
            | ToolServerError::Handshake { server, .. }
            | ToolServerError::ConnectTimeout { server, .. }
            | ToolServerError::ListTools { server, .. } => server,
        }
    }
}
