//! One MCP server: starting or reaching it, and restarting it when it died.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use process_wrap::tokio::CommandWrap;
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
    // A stdio server's process group, ended when the connection is shut down or dropped.
    // Declared after `service`, so dropping a connection first closes the session.
    group: Mutex<Option<ProcessGroup>>,
}

/// The process group a stdio server leads. Dropping it sends `SIGKILL` to every process
/// still in the group, synchronously: whatever a server started (a wrapper script's
/// children) ends with it, even when no async runtime is left to run a kill.
pub(crate) struct ProcessGroup {
    pgid: nix::unistd::Pid,
}

impl ProcessGroup {
    /// The group led by the process `pid`, which was started as a group leader.
    fn led_by(pid: u32) -> Option<ProcessGroup> {
        let pgid = i32::try_from(pid).ok().filter(|&pgid| pgid > 1)?;
        Some(ProcessGroup { pgid: nix::unistd::Pid::from_raw(pgid) })
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // `ESRCH`: every process of the group has exited already.
        if let Err(err) = nix::sys::signal::killpg(self.pgid, nix::sys::signal::Signal::SIGKILL)
            && err != nix::errno::Errno::ESRCH
        {
            tracing::warn!(pgid = self.pgid.as_raw(), error = %err, "cannot end a tool server's process group");
        }
    }
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

    /// Ends the session, closing a stdio server's stdin and waiting for it to exit, then
    /// ends whatever is left of its process group.
    pub(crate) async fn shutdown(&self) {
        let connection = self.current();
        // unwrap: the lock is only held to take the value.
        let service = connection.service.lock().unwrap().take();
        if let Some(mut service) = service {
            let _ = service.close_with_timeout(Duration::from_secs(5)).await;
        }
        // unwrap: as above. Dropping the group ends its remaining processes.
        drop(connection.group.lock().unwrap().take());
    }
}

async fn connect(config: &ServerConfig, timeout: Duration) -> Result<Connection, ToolServerError> {
    let server = config.name.clone();
    let (handshake, pid, group) = match &config.transport {
        TransportConfig::Stdio { command, args, env, cwd, inherit_stderr } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env);
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            let stderr = if *inherit_stderr { Stdio::inherit() } else { Stdio::null() };
            // The server leads a process group of its own, and ending it (on shutdown, on
            // a timed-out handshake, when the session is dropped) signals the whole group:
            // a server started through a wrapper script leaves no children behind.
            let mut cmd = CommandWrap::from(cmd);
            cmd.wrap(process_wrap::tokio::ProcessGroup::leader());
            let (process, _stderr) = TokioChildProcess::builder(cmd).stderr(stderr).spawn().map_err(|source| {
                ToolServerError::Spawn { server: server.clone(), command: command.clone(), source }
            })?;
            let pid = process.id();
            let group = pid.and_then(ProcessGroup::led_by);
            (tokio::time::timeout(timeout, ().serve(process)).await, pid, group)
        }
        TransportConfig::Http { url } => {
            let transport = StreamableHttpClientTransport::from_uri(url.as_str());
            (tokio::time::timeout(timeout, ().serve(transport)).await, None, None)
        }
    };
    // On a failed or timed-out handshake `group` is dropped here, ending the server and
    // everything it started.
    let service = match handshake {
        Ok(Ok(service)) => service,
        Ok(Err(source)) => return Err(ToolServerError::Handshake { server, source: Box::new(source) }),
        Err(_) => return Err(ToolServerError::ConnectTimeout { server, timeout }),
    };
    Ok(Connection { peer: service.peer().clone(), pid, service: Mutex::new(Some(service)), group: Mutex::new(group) })
}
