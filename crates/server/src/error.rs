//! The server crate's errors.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Why the server could not start or keep serving.
///
/// Problems with a single call are not errors of the server: they go back to that
/// client as a tool result with `isError`, and every other call goes on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The memory database could not be opened or read.
    #[error(transparent)]
    Memory(#[from] flowmem_memory::MemoryError),
    /// A server table in the memory database (tokens, the gateway queue) failed.
    #[error("memory database `{path}`: {what}")]
    Database {
        /// The database file, or the PostgreSQL URL without its password.
        path: PathBuf,
        /// What the server was doing.
        what: &'static str,
        /// The database's error.
        #[source]
        source: flowmem_db::DbError,
    },
    /// A non-loopback address was asked for while no token exists, which would expose
    /// the memory to the network without authentication.
    #[error(
        "refusing to listen on {addr} without authentication: the memory `{memory}` has no access token\nhint: create one with `flowmem serve token create --memory {memory} --scope read` (or `--scope write`), or listen on 127.0.0.1"
    )]
    UnprotectedBind {
        /// The address asked for.
        addr: SocketAddr,
        /// The memory database.
        memory: PathBuf,
    },
    /// The listener could not be bound or failed.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP server or the stdio transport failed.
    #[error("the server failed: {what}")]
    Io {
        /// What it was doing.
        what: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The open turns' log beside a SQLite memory could not be read or written.
    #[error("the open turns' log `{}`: {what} failed", path.display())]
    TurnLog {
        /// The log.
        path: std::path::PathBuf,
        /// What was being done.
        what: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The MCP session over stdio could not start.
    #[error("the MCP session over stdio could not start: {message}")]
    Stdio {
        /// The transport's message.
        message: String,
    },
    /// A deployed workflow graph could not be read, is invalid, or clashes with another.
    #[error("workflow graph `{path}`: {message}")]
    Graph {
        /// The graph file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Memory's prompt templates did not load.
    #[error("memory's prompt templates did not load: {0}")]
    Prompt(String),
    /// The gateway's upstream cannot be used (`--upstream`, `[gateway] upstream`).
    #[error("the gateway's upstream (`--upstream` or `[gateway] upstream`): {0}")]
    Upstream(String),
    /// A background task (blocking memory work) panicked or was cancelled.
    #[error("a background task failed: {0}")]
    Join(String),
}
