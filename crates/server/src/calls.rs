//! What each MCP tool does. Every function returns the tool's result; a failure of the
//! call (bad arguments, a failed step, a tool server that died) is a result with
//! `isError`, never an error of the server.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

use flowmem_exec::IsolatedTools;
use flowmem_exec::{NoObserver, RunInput, Runtime, ToolBox, compile, run};
use flowmem_memory::{UseOutcome, WorkflowTools, prompt_memory, retention_score, success_rate, workflow_variables};
use flowmem_model::{JsonObject, Scope};
use flowmem_tools::StateIsolation;

use crate::auth::{Caller, TokenScope};
use crate::catalog::Catalog;
use crate::learn::{RunToLearn, learn};
use crate::state::AppState;

/// A tool result: the JSON as text (every client reads text) and as structured content.
fn json_result(value: Value, is_error: bool) -> CallToolResult {
    let text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string());
    let mut result = if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    result.structured_content = Some(value);
    result
}

/// A failed call, with its message.
pub(crate) fn failure(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

fn scope_arg(args: &JsonObject) -> Scope {
    let field =
        |name: &str| args.get("scope").and_then(|scope| scope.get(name)).and_then(Value::as_str).map(str::to_owned);
    Scope { site: field("site"), domain: field("domain") }
}

/// `find_workflows {task, scope?, k?}`: prompt memory for any agent.
pub(crate) async fn find_workflows(state: &Arc<AppState>, args: &JsonObject) -> CallToolResult {
    let Some(task) = args.get("task").and_then(Value::as_str).map(str::to_owned) else {
        return failure("`task` is required: the task to find workflows for");
    };
    let k = match args.get("k") {
        None | Some(Value::Null) => state.cfg.default_k,
        Some(value) => match value.as_u64().and_then(|k| usize::try_from(k).ok()) {
            Some(k) if k >= 1 => k.min(state.cfg.max_k),
            _ => return failure("`k` must be a positive integer"),
        },
    };
    let scope = scope_arg(args);
    let retrieval = match state.retrieve(&state.retriever, &task, scope, k).await {
        Ok(retrieval) => retrieval,
        Err(err) => return failure(format!("searching the memory failed: {err}")),
    };
    tracing::info!(retrieval = %retrieval.record(), "find_workflows");
    let hits = &retrieval.hits;
    let catalog = state.catalog.borrow().clone();
    let mut text = String::new();
    let mut listed = Vec::with_capacity(hits.len());
    for hit in hits {
        let workflow = &hit.workflow;
        let rendered = match prompt_memory(&state.prompts, std::slice::from_ref(workflow), usize::MAX) {
            Ok(memory) => memory.text,
            Err(err) => return failure(format!("rendering workflow `{}` failed: {err}", workflow.id)),
        };
        let tool = tool_name_of(&catalog, &workflow.id);
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&format!("Workflow id: {}\n", workflow.id));
        if let Some(tool) = &tool {
            text.push_str(&format!("Callable as tool: {tool}\n"));
        }
        text.push_str(rendered.trim_end());
        listed.push(json!({"id": workflow.id, "description": workflow.description, "score": hit.score,
            "bm25": hit.bm25, "similarity": hit.similarity, "tool": tool}));
    }
    state.count_retrieved(hits.iter().map(|hit| hit.workflow.id.clone()).collect());
    if text.is_empty() {
        text.push_str("No stored workflow fits this task.");
    }
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(json!({"workflows": listed, "retrieval": retrieval.record()}));
    result
}

fn tool_name_of(catalog: &Catalog, id: &str) -> Option<String> {
    catalog.workflows.iter().find(|(_, workflow)| workflow.id == id).map(|(name, _)| name.clone())
}

/// `get_workflow {id}`: steps, variables, provenance and usage statistics.
pub(crate) async fn get_workflow(state: &Arc<AppState>, args: &JsonObject) -> CallToolResult {
    let Some(id) = args.get("id").and_then(Value::as_str).map(str::to_owned) else {
        return failure("`id` is required: a workflow id, such as one `find_workflows` listed");
    };
    match workflow_document(state, id).await {
        Ok(document) => json_result(document, false),
        Err(message) => failure(message),
    }
}

/// The JSON document of one workflow, as `get_workflow` and the resource give it.
pub(crate) async fn workflow_document(state: &Arc<AppState>, id: String) -> Result<Value, String> {
    let looked_up = id.clone();
    let (workflow, provenances) = state
        .read(move |store| Ok((store.get(&looked_up)?, store.provenances(&looked_up)?)))
        .await
        .map_err(|err| err.to_string())?;
    let catalog = state.catalog.borrow().clone();
    Ok(json!({
        "id": workflow.id,
        "description": workflow.description,
        "scope": workflow.scope,
        "tool": tool_name_of(&catalog, &id),
        "variables": workflow_variables(&workflow),
        "steps": workflow.steps,
        "composed_of": workflow.composed_of,
        "provenance": provenances,
        "stats": {
            "retrieved": workflow.stats.retrieved,
            "used_success": workflow.stats.used_success,
            "used_failure": workflow.stats.used_failure,
            "success_rate": success_rate(&workflow.stats),
            "retention_score": retention_score(&workflow.stats),
        },
    }))
}

/// The tools a call runs against, with a tool state of its own when isolation is on:
/// the state the client named with the key argument, or a fresh one, reset first.
async fn call_tools(
    state: &Arc<AppState>,
    args: &mut JsonObject,
) -> Result<(Arc<dyn ToolBox>, Option<String>), String> {
    let Some(isolation) = &state.cfg.isolation else {
        return Ok((state.parts.tools.clone(), None));
    };
    let named = match args.remove(&isolation.key_arg) {
        Some(Value::String(key)) => Some(key),
        None | Some(Value::Null) => None,
        Some(_) => return Err(format!("`{}` must be a string", isolation.key_arg)),
    };
    let fresh = named.is_none();
    let key = named.unwrap_or_else(|| state.fresh_id("flowmem-serve"));
    let tools = IsolatedTools::new(state.parts.tools.clone(), StateIsolation { key: key.clone(), ..isolation.clone() });
    if fresh {
        tools.reset().await.map_err(|err| format!("resetting the tool state failed: {err}"))?;
    }
    Ok((Arc::new(tools), Some(key)))
}

/// A stored workflow called as a tool: its steps run in order through the configured
/// tools, arguments filled from its variables, stopping at the first failed step.
pub(crate) async fn call_workflow(state: &Arc<AppState>, name: &str, mut args: JsonObject) -> CallToolResult {
    let Some(workflow) = state.catalog.borrow().workflow(name).cloned() else {
        return failure(format!("no workflow tool `{name}` (the list changed; list the tools again)"));
    };
    let (tools, state_key) = match call_tools(state, &mut args).await {
        Ok(tools) => tools,
        Err(message) => return failure(message),
    };
    let workflow_tools = WorkflowTools::with_names(tools, vec![(name.to_owned(), workflow.clone())]);
    let call = workflow_tools.call(name, args).await;
    let used = workflow_tools.uses().pop();
    let failed_step = used.as_ref().and_then(|used| used.failed_step);
    let mut document = call.result.unwrap_or_else(|| json!({}));
    if let Value::Object(map) = &mut document {
        map.insert("failed_step".to_owned(), json!(failed_step));
        map.insert("error".to_owned(), json!(call.error));
        if let Some(key) = state_key {
            map.insert("state_key".to_owned(), json!(key));
        }
    }
    // No evaluator judges the caller's run, so a use counts by whether every step ran,
    // as `flowmem agent --memory` counts it.
    let outcome = if failed_step.is_none() { UseOutcome::Success } else { UseOutcome::Failure };
    let id = workflow.id.clone();
    if let Err(err) = state.write(move |store| store.record_use(&id, outcome).map_err(Into::into)).await {
        tracing::warn!(workflow = %workflow.id, error = %err, "recording a workflow use failed");
    }
    json_result(document, call.error.is_some())
}

/// A deployed graph called as `run_<name> {query}`: executed end to end; returns the
/// answer and the trace id.
pub(crate) async fn run_graph(state: &Arc<AppState>, name: &str, mut args: JsonObject) -> CallToolResult {
    let Some(graph) = state.parts.graphs.iter().find(|graph| graph.tool == name) else {
        return failure(format!("no graph tool `{name}`"));
    };
    let Some(runtime) = &state.parts.runtime else {
        return failure("this server has no executor model, so it cannot run graphs");
    };
    let Some(query) = args.get("query").and_then(Value::as_str).map(str::to_owned) else {
        return failure("`query` is required: the task for the workflow");
    };
    let (tools, state_key) = match call_tools(state, &mut args).await {
        Ok(tools) => tools,
        Err(message) => return failure(message),
    };
    let runtime = Runtime { tools, ..runtime.clone() };
    let plan = match compile(&graph.graph, runtime) {
        Ok(plan) => plan,
        Err(err) => return failure(format!("`{}` does not compile against the tools: {err}", graph.path.display())),
    };
    let trace_id = state.fresh_id("trace");
    let trace = run(&plan, &RunInput { id: trace_id.clone(), query }, &NoObserver).await;
    let document = json!({
        "answer": trace.result,
        "trace_id": trace_id,
        "error": trace.error,
        "tool_calls": trace.tool_calls.len(),
        "state_key": state_key,
    });
    let is_error = trace.result.is_none();
    state.keep_trace(trace_id, Arc::new(trace));
    json_result(document, is_error)
}

/// `report_run {messages, outcome?, scope?}`: online AWM. The run is imported, judged
/// unless the client gave its outcome, induced by rules when successful, and stored.
pub(crate) async fn report_run(state: &Arc<AppState>, args: &JsonObject, caller: Caller) -> CallToolResult {
    if caller.scope != TokenScope::Write {
        return failure("forbidden: report_run needs a token with the `write` scope");
    }
    let Some(messages) = args.get("messages").filter(|messages| messages.is_array()) else {
        return failure("`messages` is required: the run as an array of OpenAI chat messages");
    };
    let id = state.fresh_id("report");
    let run = RunToLearn {
        messages,
        id: id.clone(),
        scope: scope_arg(args),
        outcome: args.get("outcome").and_then(Value::as_bool),
        source: Some("report_run".to_owned()),
        shown: &[],
    };
    let scope = run.scope.clone();
    let outcome = run.outcome;
    let learned = learn(state, run).await;
    // Kept like the gateway's recordings, under the gateway's privacy settings when it
    // is on (else: every registered secret redacted, strings bounded), so the run can be
    // read back (the UI's and the API's conversations). A failure to keep it is logged;
    // the caller still gets what learning did.
    let privacy = state.gateway.as_deref().map(|gateway| gateway.cfg.privacy.clone()).unwrap_or_default();
    if let Some(queue) = state.queue.as_deref().filter(|_| privacy.records(&scope, caller.token_id)) {
        let record = serde_json::json!({
            "messages": privacy.clean(messages),
            "scope": scope,
            "token_id": caller.token_id,
            "source": "report_run",
            "recorded_at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        });
        let result = match &learned {
            Ok(report) => Ok(report.clone()),
            Err(message) => Err(message.clone()),
        };
        if let Err(err) = queue.on_store(move |store| store.record_learned(&id, &record, outcome, result)).await {
            tracing::warn!(error = %err, "keeping a reported run for reading failed");
        }
    }
    match learned {
        Ok(report) => json_result(report, false),
        Err(message) => failure(message),
    }
}
