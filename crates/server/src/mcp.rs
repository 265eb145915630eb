//! The MCP surface: an rmcp `ServerHandler` over the shared state, one instance per
//! session (streamable HTTP) or per process (stdio).

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::auth::{Caller, TokenScope};
use crate::calls;
use crate::catalog::{FIND_WORKFLOWS, GET_WORKFLOW, REPORT_RUN};
use crate::http::ReplyDropped;
use crate::state::AppState;

/// The URI prefix of workflow resources.
pub const WORKFLOW_URI: &str = "flowmem://workflow/";
/// The URI prefix of graph-run traces.
pub const TRACE_URI: &str = "flowmem://trace/";

/// One MCP session's handler. Cloning is cheap; all sessions share one [`AppState`].
#[derive(Clone)]
pub struct FlowmemMcp {
    state: Arc<AppState>,
    // The scope of a stdio session, which has no HTTP request to carry one.
    fixed_scope: Option<TokenScope>,
}

impl FlowmemMcp {
    /// A handler for HTTP sessions: each request's scope comes from its bearer token.
    #[must_use]
    pub fn http(state: Arc<AppState>) -> FlowmemMcp {
        FlowmemMcp { state, fixed_scope: None }
    }

    /// A handler for a stdio session, which needs no token: the process that started the
    /// server owns it, so it may write.
    #[must_use]
    pub fn stdio(state: Arc<AppState>) -> FlowmemMcp {
        FlowmemMcp { state, fixed_scope: Some(TokenScope::Write) }
    }

    fn caller_of(&self, ctx: &RequestContext<RoleServer>) -> Caller {
        if let Some(scope) = self.fixed_scope {
            return Caller { scope, token_id: None };
        }
        // The auth layer put the caller into the HTTP request, which rmcp hands over as
        // its `Parts`. Without them the request did not pass the layer: read only.
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .copied()
            .unwrap_or(Caller { scope: TokenScope::Read, token_id: None })
    }

    async fn dispatch(&self, name: &str, args: rmcp::model::JsonObject, caller: Caller) -> rmcp::model::CallToolResult {
        let state = &self.state;
        match name {
            FIND_WORKFLOWS => calls::find_workflows(state, &args).await,
            GET_WORKFLOW => calls::get_workflow(state, &args).await,
            REPORT_RUN => calls::report_run(state, &args, caller).await,
            _ if name.starts_with("run_") => calls::run_graph(state, name, args).await,
            _ => calls::call_workflow(state, name, args).await,
        }
    }
}

impl ServerHandler for FlowmemMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder().enable_tools().enable_tool_list_changed().enable_resources().build(),
        )
        .with_server_info(Implementation::new("flowmem", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "flowmem is a memory of workflows learned from earlier agent runs. Call find_workflows with your task before acting; call a wf_* tool to run a stored workflow's steps; call run_* to run an optimised workflow graph end to end; hand finished runs back with report_run.",
        )
    }

    async fn on_initialized(&self, ctx: NotificationContext<RoleServer>) {
        // Tell this client whenever the tool list changes, until it goes away or the
        // server stops.
        let mut changes = self.state.catalog.subscribe();
        changes.mark_unchanged();
        let peer = ctx.peer;
        let stop = self.state.stop.clone();
        self.state.background.spawn(async move {
            loop {
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { return },
                    () = stop.cancelled() => return,
                }
                if peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        });
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.state.catalog.borrow().tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if self.state.is_stopping() {
            return Ok(calls::failure("the server is shutting down; try again later").into());
        }
        let name = request.name.to_string();
        let known = self.state.catalog.borrow().tools.iter().any(|tool| tool.name == name.as_str());
        if !known {
            return Err(ErrorData::invalid_params(format!("unknown tool `{name}`"), None));
        }
        let caller = self.caller_of(&ctx);
        // Over HTTP, the reply stream of this request; dropped early when the client
        // disconnects. Stdio has none: its client going away ends the process.
        let reply_dropped = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<ReplyDropped>())
            .map(|dropped| dropped.0.clone())
            .unwrap_or_default();
        let args = request.arguments.unwrap_or_default();
        let span = tracing::info_span!("tool_call", tool = %name);
        let work = self.state.calls.track_future(self.dispatch(&name, args, caller));
        // A client that cancels the request, whose session ends, or that disconnects,
        // cancels its work: dropping the future stops it at its next await.
        let result = tokio::select! {
            result = work => result,
            () = ctx.ct.cancelled() => {
                tracing::info!(parent: &span, "call cancelled by the client");
                calls::failure("cancelled")
            }
            () = reply_dropped.cancelled() => {
                tracing::info!(parent: &span, "call cancelled: the client went away");
                calls::failure("cancelled: the client went away")
            }
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let catalog = self.state.catalog.borrow().clone();
        let resources = catalog
            .workflows
            .iter()
            .map(|(_, workflow)| {
                Resource::new(format!("{WORKFLOW_URI}{}", workflow.id), workflow.id.clone())
                    .with_description(workflow.description.clone())
                    .with_mime_type("application/json")
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(format!("{WORKFLOW_URI}{{id}}"), "workflow")
                .with_description("A stored workflow: steps, variables, provenance and usage statistics.")
                .with_mime_type("application/json"),
            ResourceTemplate::new(format!("{TRACE_URI}{{id}}"), "trace")
                .with_description("The trace of a recent run_* call.")
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let document = if let Some(id) = uri.strip_prefix(WORKFLOW_URI) {
            calls::workflow_document(&self.state, id.to_owned())
                .await
                .map_err(|message| ErrorData::resource_not_found(message, None))?
        } else if let Some(id) = uri.strip_prefix(TRACE_URI) {
            let trace = self
                .state
                .trace(id)
                .ok_or_else(|| ErrorData::resource_not_found(format!("no recent trace `{id}`"), None))?;
            serde_json::to_value(trace.as_ref()).map_err(|err| ErrorData::internal_error(err.to_string(), None))?
        } else {
            return Err(ErrorData::resource_not_found(format!("no resource `{uri}`"), None));
        };
        let text = serde_json::to_string_pretty(&document).unwrap_or_else(|_| document.to_string());
        let contents = match ResourceContents::text(text, uri) {
            ResourceContents::TextResourceContents { uri, text, meta, .. } => ResourceContents::TextResourceContents {
                uri,
                mime_type: Some("application/json".to_owned()),
                text,
                meta,
            },
            other => other,
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}
