//! The REST API under `/api/v1`: browse and curate the workflow memory. JSON in and out,
//! behind the same bearer tokens as every other route; the routes that change memory
//! need a `write` token. `GET /api/v1/openapi.json` is the OpenAPI 3.1 document, built
//! by [`openapi::Api`] from the table that registers the routes.
//!
//! Every error is `{"error": {"kind", "message"}}` with a status that says whose fault
//! it is: 400 for a bad parameter (named), 403 for a read token on a write route, 404
//! for an unknown workflow, 415 and 422 for a body that is not what the route takes, 500
//! when the memory cannot be read or written.

mod openapi;
mod records;

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post};
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use flowmem_memory::{MemoryError, MemoryStore, PageQuery, PageSort, PageStatus, UsageDay, success_rate};
use flowmem_model::{Provenance, Retirement, Scope, Workflow, WorkflowStats};

use crate::api::openapi::{Api, Doc};
use crate::auth::{Caller, TokenScope};
use crate::error::ServerError;
use crate::state::AppState;

/// The longest page [`list_workflows`] gives.
const MAX_LIMIT: u64 = 500;
/// The furthest offset [`list_workflows`] takes.
const MAX_OFFSET: u64 = 1_000_000_000;
/// The longest description or retirement reason, in characters.
pub(crate) const MAX_TEXT: usize = 2000;

/// A 422 when `text` (the body's `field`) is longer than [`MAX_TEXT`] characters.
fn too_long(field: &str, text: &str) -> Option<Response> {
    let chars = text.chars().count();
    (chars > MAX_TEXT).then(|| {
        error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unprocessable",
            format!("`{field}` has {chars} characters; the most is {MAX_TEXT}"),
        )
    })
}

/// Every error reply: what kind of failure, and a message naming what failed.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ApiError {
    error: ErrorBody,
}

#[derive(Debug, Serialize, JsonSchema)]
struct ErrorBody {
    /// `bad_request`, `unauthorized`, `forbidden`, `not_found`, `unsupported_media_type`,
    /// `unprocessable` or `server_error`.
    kind: String,
    /// What failed, naming the parameter, field or workflow.
    message: String,
}

fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    (status, Json(ApiError { error: ErrorBody { kind: kind.to_owned(), message: message.into() } })).into_response()
}

fn memory_error(err: &ServerError) -> Response {
    match err {
        ServerError::Memory(MemoryError::NotFound { id, .. }) => {
            error(StatusCode::NOT_FOUND, "not_found", format!("no workflow `{id}`"))
        }
        ServerError::Memory(MemoryError::InvalidWorkflow { reason, .. }) => {
            error(StatusCode::UNPROCESSABLE_ENTITY, "unprocessable", reason.clone())
        }
        other => {
            tracing::error!(error = %other, "an API request failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "the memory could not be read or written")
        }
    }
}

fn bad_query(rejection: &QueryRejection) -> Response {
    error(StatusCode::BAD_REQUEST, "bad_request", format!("bad query string: {}", rejection.body_text()))
}

fn bad_body(rejection: &JsonRejection) -> Response {
    let (status, kind) = match rejection {
        JsonRejection::MissingJsonContentType(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
        JsonRejection::JsonDataError(_) => (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable"),
        _ => (StatusCode::BAD_REQUEST, "bad_request"),
    };
    error(status, kind, format!("bad body: {}", rejection.body_text()))
}

fn refuse_read(caller: Caller) -> Option<Response> {
    (caller.scope != TokenScope::Write).then(|| {
        error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "changing memory needs a write token (flowmem serve token create --scope write)",
        )
    })
}

/// The query of `GET /workflows`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListParams {
    /// Words the description or the steps must contain, verbatim (case-folded for ASCII).
    q: Option<String>,
    /// Only workflows of this domain.
    domain: Option<String>,
    /// Only workflows of this site.
    site: Option<String>,
    /// In use (the default), retired, or all.
    status: Option<PageStatus>,
    /// The order (default: oldest first).
    sort: Option<PageSort>,
    /// How many matching workflows to skip (default 0, at most 1,000,000,000).
    #[schemars(range(max = 1_000_000_000))]
    offset: Option<u64>,
    /// The page size, 1 to 500 (default 50).
    #[schemars(range(min = 1, max = 500))]
    limit: Option<u64>,
}

/// A page of workflows.
#[derive(Debug, Serialize, JsonSchema)]
struct WorkflowPage {
    /// How many workflows match, on every page.
    total: u64,
    /// The offset of this page.
    offset: u64,
    /// The page size asked for.
    limit: u64,
    /// This page's workflows.
    items: Vec<WorkflowSummary>,
}

/// A workflow as a listing shows it.
#[derive(Debug, Serialize, JsonSchema)]
struct WorkflowSummary {
    id: String,
    description: String,
    scope: Scope,
    /// The tools its steps call, in order.
    tools: Vec<String>,
    stats: WorkflowStats,
    /// The Laplace-smoothed success rate of the runs that used it.
    success_rate: f64,
    /// When it was first stored, RFC 3339.
    created_at: Option<String>,
    /// Set when it is retired.
    retired: Option<Retirement>,
}

impl WorkflowSummary {
    fn of(workflow: Workflow) -> WorkflowSummary {
        WorkflowSummary {
            tools: workflow.tool_sequence().map(str::to_owned).collect(),
            success_rate: success_rate(&workflow.stats),
            created_at: workflow.provenance.created_at.clone(),
            id: workflow.id,
            description: workflow.description,
            scope: workflow.scope,
            stats: workflow.stats,
            retired: workflow.retired,
        }
    }
}

/// One workflow in full, and every induction that produced it or merged into it.
#[derive(Debug, Serialize, JsonSchema)]
struct WorkflowDetail {
    workflow: Workflow,
    /// Oldest first; each names the trajectories it was induced from.
    provenances: Vec<Provenance>,
}

/// A workflow's usage over time.
#[derive(Debug, Serialize, JsonSchema)]
struct WorkflowUsage {
    id: String,
    /// The running totals since it was stored.
    totals: WorkflowStats,
    /// Per UTC day, oldest first: the days it was retrieved or used.
    days: Vec<UsageDay>,
}

/// The body of `PATCH /workflows/{id}`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EditWorkflow {
    /// The new description: up to 2,000 characters, not all blank.
    #[schemars(length(min = 1, max = 2000), regex(pattern = r"\S"))]
    description: String,
}

/// The body of `POST /workflows/{id}/retire`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RetireWorkflow {
    /// Why, kept with the workflow.
    #[serde(default)]
    #[schemars(length(max = 2000))]
    reason: String,
}

/// What a change did.
#[derive(Debug, Serialize, JsonSchema)]
struct Changed {
    /// The workflow.
    id: String,
    /// `edited`, `retired`, `restored` or `deleted`.
    action: String,
}

/// The routes of `/api/v1`, nested there by the server's router, and their OpenAPI
/// document at `/api/v1/openapi.json`.
pub(crate) fn routes(state: Arc<AppState>) -> Router {
    let doc = |method, path, id, summary, write| Doc { method, path, id, summary, write };
    let api = Api::new()
        .route::<ListParams, (), WorkflowPage>(
            doc(
                "get",
                "/workflows",
                "listWorkflows",
                "List workflows: filter by text, scope and status; sort; page",
                false,
            ),
            200,
            get(list_workflows),
        )
        .route::<(), (), WorkflowDetail>(
            doc(
                "get",
                "/workflows/{id}",
                "getWorkflow",
                "One workflow with its steps, statistics and provenance",
                false,
            ),
            200,
            get(get_workflow),
        )
        .route::<(), (), WorkflowUsage>(
            doc("get", "/workflows/{id}/usage", "getWorkflowUsage", "A workflow's retrievals and uses per day", false),
            200,
            get(workflow_usage),
        )
        .route::<(), EditWorkflow, Changed>(
            doc("patch", "/workflows/{id}", "editWorkflow", "Replace a workflow's description", true),
            200,
            patch(edit_workflow),
        )
        .route::<(), (), Changed>(
            doc("delete", "/workflows/{id}", "deleteWorkflow", "Delete a workflow and its provenance for good", true),
            200,
            delete(delete_workflow),
        )
        .route::<(), RetireWorkflow, Changed>(
            doc(
                "post",
                "/workflows/{id}/retire",
                "retireWorkflow",
                "Retire a workflow: kept, but no search or agent sees it",
                true,
            ),
            200,
            post(retire_workflow),
        )
        .route::<(), (), Changed>(
            doc("post", "/workflows/{id}/restore", "restoreWorkflow", "Put a retired workflow back in use", true),
            200,
            post(restore_workflow),
        );
    let api = records::register(api);
    let (router, document) = api.finish::<ApiError>("/api/v1");
    let document = Arc::new(document);
    router
        .route("/openapi.json", get(move || async move { Json(Value::clone(&document)) }))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such API route; see /api/v1/openapi.json") })
        .with_state(state)
}

/// The `offset` (default 0) and `limit` (default 50) of a listing, or what is out of
/// range (for a 400).
fn page_bounds(offset: Option<u64>, limit: Option<u64>) -> Result<(u64, u64), String> {
    let limit = limit.unwrap_or(50);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(format!("`limit` must be 1 to {MAX_LIMIT}, not {limit}"));
    }
    let offset = offset.unwrap_or(0);
    if offset > MAX_OFFSET {
        return Err(format!("`offset` must be at most {MAX_OFFSET}, not {offset}"));
    }
    Ok((offset, limit))
}

/// `GET /workflows`.
async fn list_workflows(
    State(state): State<Arc<AppState>>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Response {
    let params = match params {
        Ok(Query(params)) => params,
        Err(rejection) => return bad_query(&rejection),
    };
    let (offset, limit) = match page_bounds(params.offset, params.limit) {
        Ok(bounds) => bounds,
        Err(message) => return error(StatusCode::BAD_REQUEST, "bad_request", message),
    };
    let query = PageQuery {
        text: params.q,
        scope: Scope { site: params.site, domain: params.domain },
        status: params.status.unwrap_or_default(),
        sort: params.sort.unwrap_or_default(),
        offset,
        limit,
    };
    match state.read(move |store| store.page(&query)).await {
        Ok(page) => Json(WorkflowPage {
            total: page.total,
            offset,
            limit,
            items: page.workflows.into_iter().map(WorkflowSummary::of).collect(),
        })
        .into_response(),
        Err(err) => memory_error(&err),
    }
}

/// `GET /workflows/{id}`.
async fn get_workflow(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    let read = state.read(move |store| Ok((store.get(&id)?, store.provenances(&id)?))).await;
    match read {
        Ok((workflow, provenances)) => Json(WorkflowDetail { workflow, provenances }).into_response(),
        Err(err) => memory_error(&err),
    }
}

/// `GET /workflows/{id}/usage`.
async fn workflow_usage(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    let read = state.read(move |store| Ok((store.get(&id)?, store.usage(&id)?))).await;
    match read {
        Ok((workflow, days)) => Json(WorkflowUsage { id: workflow.id, totals: workflow.stats, days }).into_response(),
        Err(err) => memory_error(&err),
    }
}

/// `PATCH /workflows/{id}`: a new description, re-embedded at once when the server
/// ranks by meaning.
async fn edit_workflow(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Result<Json<EditWorkflow>, JsonRejection>,
) -> Response {
    if let Some(refused) = refuse_read(caller) {
        return refused;
    }
    let edit = match body {
        Ok(Json(edit)) => edit,
        Err(rejection) => return bad_body(&rejection),
    };
    if let Some(refused) = too_long("description", &edit.description) {
        return refused;
    }
    let (changed_id, description) = (id.clone(), edit.description.clone());
    if let Err(err) = state.write(move |store| Ok(store.set_description(&changed_id, &description)?)).await {
        return memory_error(&err);
    }
    reembed(&state, &id).await;
    Json(Changed { id, action: "edited".to_owned() }).into_response()
}

/// Embeds workflow `id` again after its description changed, when the server ranks by
/// meaning. The vector was dropped with the old words; a failure here leaves it to the
/// next `sync_vectors` and is logged, not the caller's.
pub(crate) async fn reembed(state: &Arc<AppState>, id: &str) {
    if let Some(embedder) = state.parts.embedder.clone() {
        let reread = id.to_owned();
        let embedded = match state.read(move |store| store.get(&reread)).await {
            Ok(workflow) => flowmem_memory::embed_workflows(embedder.as_ref(), &[workflow]).await.ok(),
            Err(_) => None,
        };
        if let Some(vectors) = embedded {
            let target = id.to_owned();
            if let Err(err) = state.write(move |store| Ok(store.set_vectors(&[target.as_str()], &vectors)?)).await {
                tracing::warn!(error = %err, "re-embedding an edited workflow failed");
            }
        }
    }
}

/// `POST /workflows/{id}/retire`; the body is optional.
async fn retire_workflow(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Result<Json<RetireWorkflow>, JsonRejection>,
) -> Response {
    // A read token is refused before its body is looked at, as on every write route.
    if let Some(refused) = refuse_read(caller) {
        return refused;
    }
    let retire = match body {
        Ok(Json(retire)) => retire,
        Err(JsonRejection::MissingJsonContentType(_)) => RetireWorkflow::default(),
        Err(rejection) => return bad_body(&rejection),
    };
    if let Some(refused) = too_long("reason", &retire.reason) {
        return refused;
    }
    change(&state, caller, id, "retired", move |store, id| store.retire(id, &retire.reason)).await
}

/// `POST /workflows/{id}/restore`.
async fn restore_workflow(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    change(&state, caller, id, "restored", |store, id| store.restore(id)).await
}

/// `DELETE /workflows/{id}`.
async fn delete_workflow(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    change(&state, caller, id, "deleted", |store, id| store.delete(id)).await
}

/// Runs `work` on the writer for the workflow `id` when `caller` may write, and replies
/// with what it did (`action`) or why it could not.
async fn change(
    state: &Arc<AppState>,
    caller: Caller,
    id: String,
    action: &str,
    work: impl FnOnce(&mut MemoryStore, &str) -> Result<(), MemoryError> + Send + 'static,
) -> Response {
    if let Some(refused) = refuse_read(caller) {
        return refused;
    }
    let target = id.clone();
    match state.write(move |store| Ok(work(store, &target)?)).await {
        Ok(()) => Json(Changed { id, action: action.to_owned() }).into_response(),
        Err(err) => memory_error(&err),
    }
}
