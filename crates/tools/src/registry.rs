//! The registry: every configured server's tools under unique names, and calls to them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowmem_model::{JsonObject, ToolCall, TraceEvent, error_chain};
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use serde::Serialize;
use serde_json::Value;

use crate::server::{Restart, Server};
use crate::{ToolServerError, ToolSpec, ToolsConfig};

/// A callback that receives every [`TraceEvent`] the registry emits: one
/// `TraceEvent::ServerRestart` per restart. It runs on the calling task, so keep it cheap.
pub type EventSink = Arc<dyn Fn(&TraceEvent) + Send + Sync>;

/// The tools of every configured MCP server, callable by unique name.
///
/// Cloning is cheap (an `Arc`), and a `Registry` is `Send + Sync`, so independent calls
/// may run concurrently from many tasks; calls to one server share its session.
///
/// # Example
///
/// ```no_run
/// use flowmem_tools::{Registry, ToolsConfig};
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let doc: toml::Value = toml::from_str(r#"
/// [[tools.mcp]]
/// name = "everything"
/// command = "mcp-server-everything"
/// args = ["stdio"]
/// "#)?;
/// let registry = Registry::connect(&ToolsConfig::from_toml(&doc, None)?).await?;
/// let mut args = serde_json::Map::new();
/// args.insert("message".into(), "hi".into());
/// let call = registry.call("echo", args).await;
/// assert_eq!(call.result, Some(serde_json::json!("Echo: hi")));
/// registry.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

/// How one call ended. Every call ends in exactly one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// The tool returned a result.
    Ok,
    /// The tool returned a result flagged as an error (`isError`); the call ran.
    ToolError,
    /// The arguments do not satisfy the tool's input schema; nothing was sent.
    InvalidArguments,
    /// No tool of that name is exposed; nothing was sent.
    UnknownTool,
    /// The server answered with a JSON-RPC error instead of a result.
    ProtocolError,
    /// No answer within the call timeout; the request was cancelled.
    Timeout,
    /// The server could not be reached, or its session broke during the call.
    TransportError,
}

impl CallStatus {
    /// Whether the tool ran and returned a result, error results included.
    #[must_use]
    pub fn executed(self) -> bool {
        matches!(self, CallStatus::Ok | CallStatus::ToolError)
    }

    /// Whether the call failed between flowmem and the server (timeout or broken session).
    #[must_use]
    pub fn is_transport_error(self) -> bool {
        matches!(self, CallStatus::Timeout | CallStatus::TransportError)
    }
}

/// One finished call with what it took to make it.
#[derive(Debug, Clone)]
#[must_use]
pub struct Invocation {
    /// The call as it goes in a trace: `result` and/or `error` filled, latency measured.
    pub call: ToolCall,
    /// How the call ended.
    pub status: CallStatus,
    /// The server that was asked, when the tool is known.
    pub server: Option<String>,
    /// The restart of a dead server that this call triggered, if any.
    pub restart: Option<Restart>,
}

struct Inner {
    servers: Vec<Server>,
    tools: Vec<ToolSpec>,
    // Parallel to `tools`.
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
    warnings: Vec<String>,
    connect_timeout: Duration,
    sink: Option<EventSink>,
}

struct Entry {
    server_idx: usize,
    // None when the server's schema does not compile; `warnings` says so.
    validator: Option<jsonschema::Validator>,
    timeout: Duration,
}

impl Registry {
    /// Starts (stdio) or reaches (HTTP) every configured server, concurrently, and lists
    /// their tools.
    ///
    /// Tools are exposed under the server's own names, except that a name listed by two
    /// or more servers is exposed as `server.tool` on each of them. Filters (`allow`,
    /// `deny`) apply first. Allow-listed names that a server does not list, and input
    /// schemas that do not compile (their calls go unvalidated), become
    /// [`warnings`](Registry::warnings).
    ///
    /// # Errors
    ///
    /// The first server, in configuration order, that could not be started
    /// ([`ToolServerError::Spawn`]), whose handshake failed ([`ToolServerError::Handshake`]), that did not
    /// answer in time ([`ToolServerError::ConnectTimeout`]) or could not list its tools
    /// ([`ToolServerError::ListTools`]). Servers already started are shut down.
    pub async fn connect(config: &ToolsConfig) -> Result<Registry, ToolServerError> {
        Registry::connect_with_events(config, None).await
    }

    /// Like [`Registry::connect`], and every event (server restarts) also goes to `sink`.
    ///
    /// # Errors
    ///
    /// As [`Registry::connect`].
    pub async fn connect_with_events(
        config: &ToolsConfig,
        sink: Option<EventSink>,
    ) -> Result<Registry, ToolServerError> {
        let started = futures::future::join_all(
            config.servers.iter().map(|server| Server::start(server.clone(), config.connect_timeout)),
        )
        .await;
        let mut servers = Vec::with_capacity(started.len());
        let mut listings = Vec::with_capacity(started.len());
        let mut first_err = None;
        for res in started {
            match res {
                Ok((server, tools)) => {
                    servers.push(server);
                    listings.push(tools);
                }
                Err(err) => {
                    first_err.get_or_insert(err);
                }
            }
        }
        if let Some(err) = first_err {
            futures::future::join_all(servers.iter().map(Server::shutdown)).await;
            return Err(err);
        }
        let mut inner = Inner {
            servers,
            tools: Vec::new(),
            entries: Vec::new(),
            by_name: HashMap::new(),
            warnings: Vec::new(),
            connect_timeout: config.connect_timeout,
            sink,
        };
        inner.index(listings, config.call_timeout);
        inner.alias(&config.aliases);
        Ok(Registry { inner: Arc::new(inner) })
    }

    /// Every exposed tool, in server order and then in each server's listing order.
    #[must_use]
    pub fn tools(&self) -> &[ToolSpec] {
        &self.inner.tools
    }

    /// The exposed tool of this name.
    #[must_use]
    pub fn tool(&self, name: &str) -> Option<&ToolSpec> {
        self.inner.by_name.get(name).map(|&idx| &self.inner.tools[idx])
    }

    /// What was odd but not fatal when the registry was built.
    #[must_use]
    pub fn warnings(&self) -> &[String] {
        &self.inner.warnings
    }

    /// The names of the configured servers, in configuration order.
    pub fn servers(&self) -> impl Iterator<Item = &str> {
        self.inner.servers.iter().map(|server| server.config.name.as_str())
    }

    /// The process id of a stdio server's current process (`None` for HTTP servers and
    /// unknown names). Meant for diagnostics and tests.
    #[must_use]
    pub fn server_pid(&self, server: &str) -> Option<u32> {
        let server = self.inner.servers.iter().find(|s| s.config.name == server)?;
        server.current().pid
    }

    /// Calls a tool and returns the call as it goes in a trace.
    ///
    /// This never fails: unknown tools, invalid arguments, error results, timeouts and
    /// broken sessions are all recorded in the returned call's `error`. See
    /// [`Registry::invoke`] for the status and restart report.
    pub async fn call(&self, name: &str, args: JsonObject) -> ToolCall {
        self.invoke(name, args).await.call
    }

    /// Calls a tool and reports how the call ended.
    ///
    /// In order:
    /// 1. an unknown `name` ends as [`CallStatus::UnknownTool`];
    /// 2. `args` are validated against the tool's input schema; a violation ends as
    ///    [`CallStatus::InvalidArguments`] with every violation's JSON path in `error`;
    /// 3. a stdio server that has exited is restarted (an HTTP session that closed is
    ///    reconnected); the restart is returned in [`Invocation::restart`] and sent to the
    ///    event sink;
    /// 4. the call is sent and awaited for at most the tool's timeout.
    ///
    /// On success `result` holds the tool's text content (blocks joined by newlines), or,
    /// when some block is not text, its structured content, or else the content blocks as
    /// JSON. An error result fills both `result` and `error` (its text). `latency_ms`
    /// covers all the steps above.
    #[tracing::instrument(level = "debug", skip(self, args))]
    pub async fn invoke(&self, name: &str, args: JsonObject) -> Invocation {
        let started = Instant::now();
        let mut invocation = self.invoke_timed(name, args).await;
        invocation.call.latency_ms = Some(started.elapsed().as_secs_f64() * 1000.0);
        tracing::debug!(status = ?invocation.status, latency_ms = invocation.call.latency_ms, "tool call finished");
        invocation
    }

    /// Runs independent calls concurrently and returns them in the order given.
    pub async fn invoke_all(&self, calls: Vec<(String, JsonObject)>) -> Vec<Invocation> {
        futures::future::join_all(calls.into_iter().map(|(name, args)| async move { self.invoke(&name, args).await }))
            .await
    }

    /// Ends every session: stdio servers get their stdin closed and are waited for (then
    /// terminated after a grace period). Calls made afterwards restart the servers.
    pub async fn shutdown(&self) {
        futures::future::join_all(self.inner.servers.iter().map(Server::shutdown)).await;
    }

    async fn invoke_timed(&self, name: &str, args: JsonObject) -> Invocation {
        let inner = &self.inner;
        let mut call = ToolCall::with_args(name, args);
        let Some(&tool_idx) = inner.by_name.get(name) else {
            call.error = Some(format!("unknown tool `{name}`; known tools: {}", inner.known_tools()));
            return Invocation { call, status: CallStatus::UnknownTool, server: None, restart: None };
        };
        let (spec, entry) = (&inner.tools[tool_idx], &inner.entries[tool_idx]);
        let server = &inner.servers[entry.server_idx];
        let server_name = Some(server.config.name.clone());
        // One copy of the arguments goes to the server; the original stays in the trace.
        let instance = Value::Object(call.args.clone());
        if let Some(violations) = entry.validator.as_ref().and_then(|validator| violations(validator, &instance)) {
            call.error = Some(format!("invalid arguments for `{name}`: {violations}"));
            return Invocation { call, status: CallStatus::InvalidArguments, server: server_name, restart: None };
        }
        let Value::Object(sent_args) = instance else { unreachable!("built as an object above") };
        let (connection, restart) = match server.live(inner.connect_timeout).await {
            Ok(live) => live,
            Err(err) => {
                call.error = Some(format!(
                    "server `{}` is down and could not be restarted: {}",
                    server.config.name,
                    error_chain(&err)
                ));
                return Invocation { call, status: CallStatus::TransportError, server: server_name, restart: None };
            }
        };
        if let Some(restart) = &restart {
            tracing::warn!(server = %restart.server, reason = %restart.reason, "MCP server restarted");
            if let Some(sink) = &inner.sink {
                sink(&restart.to_trace_event());
            }
        }
        let params = CallToolRequestParams::new(spec.remote_name.clone()).with_arguments(sent_args);
        // Dropping rmcp's request future on timeout sends `notifications/cancelled`.
        let status = match tokio::time::timeout(entry.timeout, connection.peer.call_tool(params)).await {
            Err(_) => {
                call.error = Some(format!("`{name}` timed out after {:?}", entry.timeout));
                CallStatus::Timeout
            }
            Ok(Err(rmcp::ServiceError::McpError(err))) => {
                call.error = Some(format!(
                    "server `{}` refused `{name}` (JSON-RPC error {}): {}",
                    server.config.name, err.code.0, err.message
                ));
                CallStatus::ProtocolError
            }
            Ok(Err(err)) => {
                call.error =
                    Some(format!("calling `{name}` on server `{}` failed: {}", server.config.name, error_chain(&err)));
                CallStatus::TransportError
            }
            Ok(Ok(result)) => {
                let value = result_value(&result);
                if result.is_error == Some(true) {
                    call.error = Some(match &value {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    });
                    call.result = Some(value);
                    CallStatus::ToolError
                } else {
                    call.result = Some(value);
                    CallStatus::Ok
                }
            }
        };
        Invocation { call, status, server: server_name, restart }
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("servers", &self.servers().collect::<Vec<_>>())
            .field("tools", &self.inner.tools.iter().map(|tool| tool.name.as_str()).collect::<Vec<_>>())
            .finish()
    }
}

impl Inner {
    fn index(&mut self, listings: Vec<Vec<Tool>>, default_timeout: Duration) {
        let mut exposed: Vec<(usize, Tool)> = Vec::new();
        for (server_idx, tools) in listings.into_iter().enumerate() {
            let config = &self.servers[server_idx].config;
            if let crate::ToolFilter::Allow(names) = &config.filter {
                for name in names.iter().filter(|name| !tools.iter().any(|tool| tool.name == name.as_str())) {
                    self.warnings
                        .push(format!("server `{}` lists no tool `{name}` (named in its `allow` list)", config.name));
                }
            }
            exposed.extend(
                tools.into_iter().filter(|tool| config.filter.admits(&tool.name)).map(|tool| (server_idx, tool)),
            );
        }
        let mut servers_per_name: HashMap<String, usize> = HashMap::new();
        for (_, tool) in &exposed {
            *servers_per_name.entry(tool.name.to_string()).or_default() += 1;
        }
        for (server_idx, tool) in exposed {
            let server = &self.servers[server_idx].config;
            let remote_name = tool.name.to_string();
            let name = if servers_per_name[&remote_name] > 1 {
                format!("{}.{remote_name}", server.name)
            } else {
                remote_name.clone()
            };
            if self.by_name.contains_key(&name) {
                self.warnings.push(format!("server `{}` lists `{remote_name}` twice (or it clashes with a qualified name); the second is skipped", server.name));
                continue;
            }
            let input_schema = Value::Object(tool.input_schema.as_ref().clone());
            let validator = match jsonschema::validator_for(&input_schema) {
                Ok(validator) => Some(validator),
                Err(err) => {
                    self.warnings.push(format!("input schema of `{name}` on server `{}` does not compile, so its arguments are not validated: {err}", server.name));
                    None
                }
            };
            self.by_name.insert(name.clone(), self.tools.len());
            self.tools.push(ToolSpec {
                name,
                description: tool.description.as_deref().unwrap_or_default().to_owned(),
                input_schema,
                server: server.name.clone(),
                remote_name,
            });
            self.entries.push(Entry { server_idx, validator, timeout: server.call_timeout.unwrap_or(default_timeout) });
        }
    }

    /// Renames the tools `aliases` name (see [`ToolAlias`](crate::ToolAlias)). An alias
    /// of a tool no server exposes, or whose new name another tool has, is a warning.
    fn alias(&mut self, aliases: &[crate::ToolAlias]) {
        for alias in aliases {
            let Some(&idx) = self.by_name.get(&alias.tool) else {
                self.warnings.push(format!(
                    "`[[tools.alias]]` renames `{}`, which no server exposes; known tools: {}",
                    alias.tool,
                    self.known_tools()
                ));
                continue;
            };
            if self.by_name.contains_key(&alias.name) {
                self.warnings.push(format!(
                    "`[[tools.alias]]` cannot rename `{}` to `{}`: a tool of that name is exposed; `{}` keeps its name",
                    alias.tool, alias.name, alias.tool
                ));
                continue;
            }
            self.by_name.remove(&alias.tool);
            self.by_name.insert(alias.name.clone(), idx);
            let tool = &mut self.tools[idx];
            tool.name.clone_from(&alias.name);
            if let Some(description) = &alias.description {
                tool.description.clone_from(description);
            }
        }
    }

    fn known_tools(&self) -> String {
        const SHOWN: usize = 20;
        let mut names: Vec<&str> = self.tools.iter().map(|tool| tool.name.as_str()).collect();
        names.sort_unstable();
        let more = names.len().saturating_sub(SHOWN);
        let mut text = names.into_iter().take(SHOWN).map(|name| format!("`{name}`")).collect::<Vec<_>>().join(", ");
        if text.is_empty() {
            text.push_str("none");
        }
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
        text
    }
}

/// Every schema violation as `at `/path`: message`, or `None` when the arguments are valid.
fn violations(validator: &jsonschema::Validator, instance: &Value) -> Option<String> {
    let found: Vec<String> = validator
        .iter_errors(instance)
        .map(|err| {
            let path = err.instance_path.as_str();
            let path = if path.is_empty() { "/" } else { path };
            format!("at `{path}`: {err}")
        })
        .collect();
    (!found.is_empty()).then(|| found.join("; "))
}

/// Entry points for `cargo fuzz` (the `fuzz/` crate), compiled only under
/// `--cfg fuzzing`.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    /// Reads `json` as an MCP `tools/call` result and turns it into a call's result the
    /// way every call does. Never panics.
    pub fn read_result(json: &[u8]) {
        if let Ok(result) = serde_json::from_slice::<rmcp::model::CallToolResult>(json) {
            let _ = super::result_value(&result);
        }
    }
}

/// A tool's result as one value: its text blocks joined, else its structured content,
/// else its content blocks as JSON; with every registered secret redacted (a tool may
/// echo what it was configured with).
fn result_value(result: &CallToolResult) -> Value {
    let texts: Option<Vec<&str>> =
        result.content.iter().map(|block| block.as_text().map(|text| text.text.as_str())).collect();
    let mut value = match (texts, &result.structured_content) {
        (Some(texts), _) if !texts.is_empty() => Value::String(texts.join("\n")),
        (_, Some(structured)) => structured.clone(),
        // unwrap_or: content blocks are plain serde types; serialising them cannot fail.
        _ => serde_json::to_value(&result.content).unwrap_or(Value::Null),
    };
    flowmem_model::redact_value(&mut value);
    value
}
