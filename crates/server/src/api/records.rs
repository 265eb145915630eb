//! The REST API's read routes over what the server recorded and found besides memory:
//! the conversations and traces the learning queue recorded (with what was learned from
//! each), the queue's status, and the scout runs under `--runs`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api::openapi::{Api, Doc};
use crate::api::{bad_query, error, page_bounds};
use crate::auth::Caller;
use crate::error::ServerError;
use crate::runs::{self, CandidateDetail, RunDetail, RunRow};
use crate::state::AppState;

/// Adds this module's routes to `api`.
pub(super) fn register(api: Api<Arc<AppState>>) -> Api<Arc<AppState>> {
    let doc = |method, path, id, summary| Doc { method, path, id, summary, write: false };
    api.route::<PageParams, (), ConversationPage>(
        doc(
            "get",
            "/conversations",
            "listConversations",
            "Recorded runs (gateway conversations, OTLP traces), newest first",
        ),
        200,
        get(list_conversations),
    )
    .route::<(), (), ConversationDetail>(
        doc(
            "get",
            "/conversations/{id}",
            "getConversation",
            "One recorded run: its messages, tool calls and results, and what was learned",
        ),
        200,
        get(get_conversation),
    )
    .route::<(), (), LearningStatus>(
        doc(
            "get",
            "/learning",
            "getLearningStatus",
            "The learning queue: runs queued, judged and learned, and failures",
        ),
        200,
        get(learning_status),
    )
    .route::<(), (), RunList>(
        doc("get", "/runs", "listRuns", "The scout runs under the server's --runs directories"),
        200,
        get(list_runs),
    )
    .route::<(), (), RunDetail>(
        doc("get", "/runs/{key}", "getRun", "One scout run: its search tree, validation history and test table"),
        200,
        get(get_run),
    )
    .route::<(), (), CandidateDetail>(
        doc(
            "get",
            "/runs/{key}/candidates/{candidate}",
            "getCandidate",
            "One candidate of a scout run: graph, plan, scores, diff against its parent",
        ),
        200,
        get(get_candidate),
    )
}

fn server_error(err: &ServerError) -> Response {
    tracing::error!(error = %err, "an API request failed");
    error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "the recorded runs could not be read")
}

/// The paging of a listing.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PageParams {
    /// How many to skip (default 0, at most 1,000,000,000).
    #[schemars(range(max = 1_000_000_000))]
    offset: Option<u64>,
    /// The page size, 1 to 500 (default 50).
    #[schemars(range(min = 1, max = 500))]
    limit: Option<u64>,
}

/// A page of recorded runs.
#[derive(Debug, Serialize, JsonSchema)]
struct ConversationPage {
    /// Whether this server records runs at all (`--gateway` or `--otlp`).
    recording: bool,
    offset: u64,
    limit: u64,
    items: Vec<ConversationSummary>,
}

/// A recorded run as a listing shows it.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct ConversationSummary {
    id: String,
    /// `open`, `queued`, `done` or `failed`.
    state: String,
    /// RFC 3339.
    updated_at: String,
    /// The outcome its client gave, if any.
    outcome: Option<bool>,
    /// `gateway` or `otlp`.
    source: Option<String>,
    /// The first user message.
    first_user: Option<String>,
    /// The evaluator's verdict (or the client's outcome), once judged.
    verdict: Option<bool>,
    /// Why, in the evaluator's words.
    verdict_reason: Option<String>,
    /// Workflows stored from it, and merged into existing ones, once learned.
    learned: Option<u32>,
    merged: Option<u32>,
    /// Why workflows induced from it were not stored (`; `-separated).
    rejected: Option<String>,
    /// Why learning from it failed.
    error: Option<String>,
}

/// One recorded run.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct ConversationDetail {
    id: String,
    state: String,
    /// Attempts at learning from it.
    attempts: u32,
    outcome: Option<bool>,
    /// What was recorded: `messages` (OpenAI chat messages, with tool calls and
    /// results), `scope`, `model`, `shown` (the workflows injected), `source`, ….
    record: Value,
    /// What learning did: `judgement`, `stored`, `merged`, `rejected` (each with a
    /// reason); `null` until it ran.
    result: Option<Value>,
}

/// `GET /conversations`: a token sees its own runs; open access sees all.
async fn list_conversations(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    params: Result<Query<PageParams>, QueryRejection>,
) -> Response {
    let params = match params {
        Ok(Query(params)) => params,
        Err(rejection) => return bad_query(&rejection),
    };
    let (offset, limit) = match page_bounds(params.offset, params.limit) {
        Ok(bounds) => bounds,
        Err(message) => return error(StatusCode::BAD_REQUEST, "bad_request", message),
    };
    let Some(queue) = state.queue.as_deref() else {
        return Json(ConversationPage { recording: false, offset, limit, items: Vec::new() }).into_response();
    };
    let (skip, take) = (usize::try_from(offset).unwrap_or(usize::MAX), usize::try_from(limit).unwrap_or(50));
    match queue.on_store(move |store| store.recent(take, skip, caller.token_id)).await {
        Ok(rows) => {
            let items = rows.into_iter().filter_map(|row| serde_json::from_value(row).ok()).collect();
            Json(ConversationPage { recording: true, offset, limit, items }).into_response()
        }
        Err(err) => server_error(&err),
    }
}

/// `GET /conversations/{id}`.
async fn get_conversation(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let not_found = |id: &str| error(StatusCode::NOT_FOUND, "not_found", format!("no recorded conversation `{id}`"));
    let Some(queue) = state.queue.as_deref() else { return not_found(&id) };
    let looked_up = id.clone();
    let row = match queue.on_store(move |store| store.get(&looked_up, caller.token_id)).await {
        Ok(row) => row,
        Err(err) => return server_error(&err),
    };
    match row {
        Some(row) => match serde_json::from_value::<ConversationDetail>(row) {
            Ok(detail) => Json(detail).into_response(),
            Err(err) => {
                tracing::error!(error = %err, "a recorded conversation does not decode");
                error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    format!("the conversation `{id}` does not decode"),
                )
            }
        },
        None => not_found(&id),
    }
}

/// The learning queue's state.
#[derive(Debug, Serialize, JsonSchema)]
struct LearningStatus {
    /// Whether this server records runs at all (`--gateway` or `--otlp`).
    recording: bool,
    /// Recorded runs per state: `open`, `queued`, `done`, `failed`.
    counts: BTreeMap<String, u64>,
    /// Recording or learning failures since the server started.
    failures_since_start: u64,
    /// How successful runs become workflows: `rules`, or the inducer model.
    induce: String,
}

/// `GET /learning`.
async fn learning_status(State(state): State<Arc<AppState>>) -> Response {
    let induce = state.parts.induce.describe();
    let Some(queue) = state.queue.as_deref() else {
        return Json(LearningStatus { recording: false, counts: BTreeMap::new(), failures_since_start: 0, induce })
            .into_response();
    };
    match queue.on_store(crate::queue::store::QueueStore::counts).await {
        Ok(counts) => {
            let counts = counts
                .as_object()
                .map(|counts| counts.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0))).collect())
                .unwrap_or_default();
            let failures_since_start = queue.failures.load(Ordering::Relaxed);
            Json(LearningStatus { recording: true, counts, failures_since_start, induce }).into_response()
        }
        Err(err) => server_error(&err),
    }
}

/// The scout runs found.
#[derive(Debug, Serialize, JsonSchema)]
struct RunList {
    /// The `--runs` directories searched.
    roots: Vec<String>,
    items: Vec<RunRow>,
}

/// `GET /runs`.
async fn list_runs(State(state): State<Arc<AppState>>) -> Response {
    let roots = state.cfg.runs.clone();
    let shown = roots.iter().map(|root| root.display().to_string()).collect();
    let items = tokio::task::spawn_blocking(move || runs::list(&roots)).await.unwrap_or_default();
    Json(RunList { roots: shown, items }).into_response()
}

fn no_run(key: &str) -> Response {
    error(StatusCode::NOT_FOUND, "not_found", format!("no scout run `{key}` under the run directories"))
}

fn unreadable(problem: &str) -> Response {
    tracing::error!(problem, "a scout run could not be read");
    error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", format!("the run could not be read: {problem}"))
}

/// `GET /runs/{key}`.
async fn get_run(State(state): State<Arc<AppState>>, Path(key): Path<String>) -> Response {
    let Some(dir) = runs::resolve(&state.cfg.runs, &key) else { return no_run(&key) };
    match tokio::task::spawn_blocking(move || runs::detail(&dir)).await {
        Ok(Ok(detail)) => Json(detail).into_response(),
        Ok(Err(problem)) => unreadable(&problem),
        Err(_) => unreadable("the reader stopped"),
    }
}

/// `GET /runs/{key}/candidates/{candidate}`.
async fn get_candidate(State(state): State<Arc<AppState>>, Path((key, candidate)): Path<(String, String)>) -> Response {
    let Some(dir) = runs::resolve(&state.cfg.runs, &key) else { return no_run(&key) };
    let missing = || error(StatusCode::NOT_FOUND, "not_found", format!("run `{key}` has no candidate `{candidate}`"));
    let Ok(id) = candidate.parse::<usize>() else { return missing() };
    match tokio::task::spawn_blocking(move || runs::candidate_detail(&dir, id)).await {
        Ok(Ok(Some(detail))) => Json(detail).into_response(),
        Ok(Ok(None)) => missing(),
        Ok(Err(problem)) => unreadable(&problem),
        Err(_) => unreadable("the reader stopped"),
    }
}
