//! One MCP server: starting or reaching it, and restarting it when it died.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::Tool;
use rmcp::service::RunningService;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{Peer, RoleClient, ServiceExt};

use crate::{ServerConfig, ToolServerError, TransportConfig};

/// A server slot: its configuration and the connection currently in use.
pub(crate) struct Server {
    pub(crate) config: ServerConfig,
    // A std mutex: it is only held to clone or swap the Arc, never across an await.
    current: Mutex<Arc<Connection>>,
    // Held across the reconnect's await so that concurrent callers restart only once.
    restart_lock: tokio::sync::Mutex<()>,
}

/// One live (or dead) MCP session.
pub(crate) struct Connection {
    pub(crate) peer: Peer<RoleClient>,
    pub(crate) pid: Option<u32>,
    // Taken out by `shutdown`; dropping it also ends the session.
    service: Mutex<Option<RunningService<RoleClient, ()>>>,
}

/// What happened when a dead server was brought back for a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restart {
    /// The server's name.
    pub server: String,
    /// Why it was restarted, and the new process id for a stdio server.
    pub reason: String,
}

impl Restart {
    /// The restart as a trace line.
    #[must_use]
    pub fn to_trace_event(&self) -> flowmem_model::TraceEvent {
        flowmem_model::TraceEvent::ServerRestart { server: self.server.clone(), reason: self.reason.clone() }
    }
}

impl Connection {
    pub(crate) fn is_alive(&self) -> bool {
        // The session's loop owns the receiving end of the peer's channel, so the channel
        // closes exactly when the loop ended: the process exited or the transport broke.
        !self.peer.is_transport_closed()
    }
}

impl Server {
    /// Starts or reaches the server and lists its tools.
    pub(crate) async fn start(config: ServerConfig, timeout: Duration) -> Result<(Server, Vec<Tool>), ToolServerError> {
        let connection = connect(&config, timeout).await?;
        let tools = match tokio::time::timeout(timeout, connection.peer.list_all_tools()).await {
            Ok(Ok(tools)) => tools,
            Ok(Err(source)) => return Err(ToolServerError::ListTools { server: config.name.clone(), source }),
            Err(_) => return Err(ToolServerError::ConnectTimeout { server: config.name.clone(), timeout }),
        };
        let server =
            Server { config, current: Mutex::new(Arc::new(connection)), restart_lock: tokio::sync::Mutex::new(()) };
        Ok((server, tools))
    }

    pub(crate) fn current(&self) -> Arc<Connection> {
        // unwrap: the lock is never held across a panic point (clone and swap only).
        self.current.lock().unwrap().clone()
    }

    /// The live connection, restarting (stdio) or reconnecting (HTTP) a dead one first.
    pub(crate) async fn live(&self, timeout: Duration) -> Result<(Arc<Connection>, Option<Restart>), ToolServerError> {
        let current = self.current();
        if current.is_alive() {
            return Ok((current, None));
        }
        let _guard = self.restart_lock.lock().await;
        let current = self.current();
        if current.is_alive() {
            // Another call restarted it while this one waited for the lock.
            return Ok((current, None));
        }
        let fresh = Arc::new(connect(&self.config, timeout).await?);
        let reason = match (&self.config.transport, current.pid, fresh.pid) {
            (TransportConfig::Stdio { .. }, Some(old), Some(new)) => {
                format!("stdio server process {old} had exited; restarted as process {new}")
            }
            (TransportConfig::Stdio { .. }, _, _) => "stdio server process had exited; restarted".to_owned(),
            (TransportConfig::Http { url }, _, _) => format!("session with `{url}` had closed; reconnected"),
        };
        // unwrap: see `current`.
        *self.current.lock().unwrap() = fresh.clone();
        Ok((fresh, Some(Restart { server: self.config.name.clone(), reason })))
    }

    /// Ends the session, closing a stdio server's stdin and waiting for it to exit.
    pub(crate) async fn shutdown(&self) {
        let connection = self.current();
        // unwrap: the lock is only held to take the value.
        let service = connection.service.lock().unwrap().take();
        if let Some(mut service) = service {
            let _ = service.close_with_timeout(Duration::from_secs(5)).await;
        }
    }
}

async fn connect(config: &ServerConfig, timeout: Duration) -> Result<Connection, ToolServerError> {
    let server = config.name.clone();
    let (handshake, pid) = match &config.transport {
        TransportConfig::Stdio { command, args, env, cwd, inherit_stderr } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env);
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            let stderr = if *inherit_stderr { Stdio::inherit() } else { Stdio::null() };
            let (process, _stderr) = TokioChildProcess::builder(cmd).stderr(stderr).spawn().map_err(|source| {
                ToolServerError::Spawn { server: server.clone(), command: command.clone(), source }
            })?;
            let pid = process.id();
            (tokio::time::timeout(timeout, ().serve(process)).await, pid)
        }
        TransportConfig::Http { url } => {
            let transport = StreamableHttpClientTransport::from_uri(url.as_str());
            (tokio::time::timeout(timeout, ().serve(transport)).await, None)
        }
    };
    let service = match handshake {
        Ok(Ok(service)) => service,
        Ok(Err(source)) => return Err(ToolServerError::Handshake { server, source: Box::new(source) }),
        Err(_) => return Err(ToolServerError::ConnectTimeout { server, timeout }),
    };
    Ok(Connection { peer: service.peer().clone(), pid, service: Mutex::new(Some(service)) })
}
