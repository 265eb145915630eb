//! The web UI at `/`: server-rendered pages over the same state as every other surface.
//!
//! - `/`: memory, searched as you type (`ui.js` refetches the results part), filtered
//!   by scope and status, sorted by use or success, paged;
//! - `/workflows/{id}`: one workflow's steps, data bindings, graph, provenance and
//!   usage, with the forms that edit, retire, restore and delete it;
//! - `/conversations` and `/conversations/{id}`: the runs the gateway and the OTLP
//!   receiver recorded, step by step, with the workflows injected and the verdict;
//! - `/runs` and `/runs/{key}`: the scout runs under `--runs`, with the validation
//!   curve, the search tree (each node a link to its graph, plan and diff against its
//!   parent) and the test table;
//! - `/learning`: the learning queue's counts and memory's growth.
//!
//! Sign-in ([`session`]) trades a token for a cookie once. Every page is rendered by
//! `flowmem-report`'s engine, which escapes every value; scripts are limited to our own
//! file by the Content-Security-Policy, and every form that changes memory carries the
//! session's CSRF token and needs a `write` token's session.

mod session;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use flowmem_memory::{MemoryError, PageQuery, PageSort, PageStatus, UsageDay, success_rate};
use flowmem_model::{Provenance, Scope, StepSource, Workflow};
use flowmem_report::{ChartSpec, Margins, Markup, Point, Series, SeriesStyle, escape, line_chart, render_page_with};

use crate::error::ServerError;
use crate::runs;
use crate::state::AppState;

pub(crate) use self::session::Sessions;
use self::session::{Session, set_cookie};

const LAYOUT: (&str, &str) = ("layout.html.j2", include_str!("../../templates/ui/layout.html.j2"));
const MEMORY_ROWS: (&str, &str) = ("memory_rows.html.j2", include_str!("../../templates/ui/memory_rows.html.j2"));
const SIGNIN: &str = include_str!("../../templates/ui/signin.html.j2");
const MEMORY: &str = include_str!("../../templates/ui/memory.html.j2");
const WORKFLOW: &str = include_str!("../../templates/ui/workflow.html.j2");
const CONVERSATIONS: &str = include_str!("../../templates/ui/conversations.html.j2");
const CONVERSATION: &str = include_str!("../../templates/ui/conversation.html.j2");
const RUNS: &str = include_str!("../../templates/ui/runs.html.j2");
const RUN: &str = include_str!("../../templates/ui/run.html.j2");
const LEARNING: &str = include_str!("../../templates/ui/learning.html.j2");
const MESSAGE: &str = include_str!("../../templates/ui/message.html.j2");
const SCRIPT: &str = include_str!("../../assets/ui.js");

/// Rows on a page of memory or conversations.
const PAGE_ROWS: u64 = 50;
/// The longest description or retirement reason a form may send, in characters.
const MAX_TEXT: usize = 2000;
/// Characters of a tool result or message shown before it is cut.
const MAX_SHOWN: usize = 4000;

/// Scripts only from this server, nothing from elsewhere, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; \
                   img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The UI's routes, outside the bearer-token layer: pages check the session cookie.
pub(crate) fn routes(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(memory_page))
        .route("/signin", get(signin_page).post(sign_in))
        .route("/signout", post(sign_out))
        .route("/workflows/{id}", get(workflow_page))
        .route("/workflows/{id}/{action}", post(change_workflow))
        .route("/conversations", get(conversations_page))
        .route("/conversations/{id}", get(conversation_page))
        .route("/runs", get(runs_page))
        .route("/runs/{key}", get(run_page))
        .route("/learning", get(learning_page))
        .route("/ui/app.js", get(script))
        .layer(axum::middleware::map_response(harden))
        .with_state(state)
}

/// Security headers on every UI response.
async fn harden(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

async fn script() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8"), (header::CACHE_CONTROL, "max-age=300")], SCRIPT)
        .into_response()
}

/// Who is looking: the session of the request's cookie, or under open access (no token
/// exists, loopback only) the local viewer.
fn viewer(state: &AppState, headers: &HeaderMap) -> Option<Session> {
    if state.open_access() { Some(state.ui.open_access()) } else { state.ui.of_request(headers) }
}

/// What every page's layout shows of the viewer.
#[derive(Debug, Serialize)]
struct ViewerView {
    scope: &'static str,
    can_write: bool,
    csrf: String,
    /// Whether there is a session to sign out of.
    signed_in: bool,
}

/// A page: the layout's fields and the page's own.
#[derive(Debug, Serialize)]
struct Page<'a, T: Serialize> {
    title: String,
    active: &'a str,
    viewer: Option<ViewerView>,
    gateway: bool,
    #[serde(flatten)]
    body: T,
}

fn render<T: Serialize>(
    state: &AppState,
    status: StatusCode,
    viewer: Option<&Session>,
    (name, source): (&str, &str),
    page: (&str, String, T),
) -> Response {
    let (active, title, body) = page;
    let ctx = Page {
        title,
        active,
        viewer: viewer.map(|session| ViewerView {
            scope: session.scope.name(),
            can_write: session.can_write(),
            csrf: session.csrf.clone(),
            signed_in: session.token_id.is_some(),
        }),
        gateway: state.queue.is_some(),
        body,
    };
    html(status, render_page_with(name, source, &[LAYOUT, MEMORY_ROWS], &ctx))
}

fn html(status: StatusCode, rendered: Result<String, flowmem_report::ReportError>) -> Response {
    match rendered {
        Ok(page) => (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response(),
        Err(err) => {
            tracing::error!(error = %err, source = %err.source, "a UI page did not render");
            let page = flowmem_report::error_page(&err);
            (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], page)
                .into_response()
        }
    }
}

#[derive(Debug, Serialize)]
struct MessageBody {
    message: String,
}

/// A page that only says `message`.
fn message(state: &AppState, status: StatusCode, viewer: Option<&Session>, message: impl Into<String>) -> Response {
    let title = status.canonical_reason().unwrap_or("Error").to_owned();
    render(state, status, viewer, ("message.html.j2", MESSAGE), ("", title, MessageBody { message: message.into() }))
}

fn storage_error(state: &AppState, viewer: &Session, err: &ServerError) -> Response {
    if let ServerError::Memory(MemoryError::NotFound { id, .. }) = err {
        return message(state, StatusCode::NOT_FOUND, Some(viewer), format!("No workflow `{id}`."));
    }
    tracing::error!(error = %err, "a UI page could not read or write memory");
    message(state, StatusCode::INTERNAL_SERVER_ERROR, Some(viewer), "The memory could not be read or written.")
}

/// The redirect to the sign-in page that comes back to `uri` after.
fn to_signin(uri: &axum::http::Uri) -> Response {
    let back = uri.path_and_query().map_or("/", |pq| pq.as_str());
    Redirect::to(&format!("/signin?next={}", urlencode(back))).into_response()
}

/// Resolves the viewer of a page or sends the browser to sign in.
macro_rules! viewer_or_signin {
    ($state:expr, $headers:expr, $uri:expr) => {
        match viewer(&$state, &$headers) {
            Some(session) => session,
            None => return to_signin(&$uri),
        }
    };
}

// ---------------------------------------------------------------------------------------
// Sign-in

#[derive(Debug, Default, Deserialize)]
struct SigninQuery {
    next: Option<String>,
}

#[derive(Debug, Serialize)]
struct SigninBody {
    next: String,
    error: Option<String>,
}

/// Only a path on this server: never another origin (`//host`, `/\host`, or either with
/// a tab or newline a browser would drop), and only printable ASCII, so that it is
/// always a valid `Location` header.
fn local_path(next: Option<String>) -> String {
    next.filter(|next| {
        next.starts_with('/')
            && !next[1..].starts_with('/')
            && next.bytes().all(|byte| byte.is_ascii_graphic() && byte != b'\\')
    })
    .unwrap_or_else(|| "/".to_owned())
}

async fn signin_page(State(state): State<Arc<AppState>>, Query(query): Query<SigninQuery>) -> Response {
    let next = local_path(query.next);
    if state.open_access() {
        return Redirect::to(&next).into_response();
    }
    let body = SigninBody { next, error: None };
    render(&state, StatusCode::OK, None, ("signin.html.j2", SIGNIN), ("signin", "Sign in".to_owned(), body))
}

#[derive(Debug, Deserialize)]
struct SigninForm {
    token: String,
    next: Option<String>,
}

async fn sign_in(
    State(state): State<Arc<AppState>>,
    form: Result<Form<SigninForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(form)) = form else {
        return message(&state, StatusCode::BAD_REQUEST, None, "The sign-in form needs a `token` field.");
    };
    let next = local_path(form.next);
    let tokens = state.clone();
    let secret = form.token.trim().to_owned();
    let grant = tokio::task::spawn_blocking(move || tokens.tokens.grant(&secret)).await;
    match grant {
        Ok(Ok(Some((id, scope)))) => {
            let session = state.ui.create(scope, Some(id));
            tracing::info!(token_id = id, scope = scope.name(), "signed in to the web UI");
            let mut response = Redirect::to(&next).into_response();
            response.headers_mut().insert(header::SET_COOKIE, set_cookie(Some(&session)));
            response
        }
        Ok(Ok(None)) => {
            tracing::info!("web UI sign-in refused: unknown token");
            let body = SigninBody { next, error: Some("That token is not a token of this memory.".to_owned()) };
            render(
                &state,
                StatusCode::UNAUTHORIZED,
                None,
                ("signin.html.j2", SIGNIN),
                ("signin", "Sign in".to_owned(), body),
            )
        }
        Ok(Err(err)) => {
            tracing::error!(error = %err, "token lookup failed");
            message(&state, StatusCode::INTERNAL_SERVER_ERROR, None, "The token could not be checked.")
        }
        Err(_) => message(&state, StatusCode::INTERNAL_SERVER_ERROR, None, "The token could not be checked."),
    }
}

#[derive(Debug, Default, Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

async fn sign_out(State(state): State<Arc<AppState>>, headers: HeaderMap, Form(form): Form<CsrfForm>) -> Response {
    if let Some(session) = state.ui.of_request(&headers)
        && session.csrf_matches(&form.csrf)
    {
        state.ui.end(&headers);
    }
    let mut response = Redirect::to("/signin").into_response();
    response.headers_mut().insert(header::SET_COOKIE, set_cookie(None));
    response
}

// ---------------------------------------------------------------------------------------
// Memory

#[derive(Debug, Default, Deserialize)]
struct MemoryQuery {
    q: Option<String>,
    domain: Option<String>,
    site: Option<String>,
    status: Option<String>,
    sort: Option<String>,
    page: Option<u64>,
    /// `1`: only the results part, for search as you type.
    fragment: Option<u8>,
}

#[derive(Debug, Serialize)]
struct MemoryBody {
    q: String,
    domain: String,
    site: String,
    status: &'static str,
    sort: &'static str,
    total: u64,
    page: u64,
    pages: u64,
    first_row: u64,
    rows: Vec<WorkflowRow>,
    prev: Option<String>,
    next: Option<String>,
}

#[derive(Debug, Serialize)]
struct WorkflowRow {
    id: String,
    description: String,
    scope: String,
    tools: String,
    retrieved: u64,
    used: u64,
    success: String,
    created: String,
    retired: bool,
}

fn scope_text(scope: &Scope) -> String {
    match (&scope.site, &scope.domain) {
        (Some(site), Some(domain)) => format!("{site}/{domain}"),
        (None, Some(domain)) => domain.clone(),
        (Some(site), None) => format!("{site}/"),
        (None, None) => "–".to_owned(),
    }
}

const STATUSES: [(&str, PageStatus); 3] =
    [("active", PageStatus::Active), ("retired", PageStatus::Retired), ("all", PageStatus::All)];
const SORTS: [(&str, PageSort); 5] = [
    ("oldest", PageSort::Oldest),
    ("newest", PageSort::Newest),
    ("most_used", PageSort::MostUsed),
    ("best_success", PageSort::BestSuccess),
    ("most_retrieved", PageSort::MostRetrieved),
];

fn pick<T: Copy>(table: &[(&'static str, T)], name: Option<&str>) -> (&'static str, T) {
    name.and_then(|name| table.iter().find(|(key, _)| *key == name)).copied().unwrap_or(table[0])
}

async fn memory_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    query: Result<Query<MemoryQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let viewer = viewer_or_signin!(state, headers, uri);
    let Ok(Query(query)) = query else {
        return message(&state, StatusCode::BAD_REQUEST, Some(&viewer), "The search's parameters are not valid.");
    };
    let blank = |text: Option<String>| text.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
    let (q, domain, site) = (blank(query.q), blank(query.domain), blank(query.site));
    let (status_name, status) = pick(&STATUSES, query.status.as_deref());
    let (sort_name, sort) = pick(&SORTS, query.sort.as_deref());
    let page = query.page.unwrap_or(1).clamp(1, 1_000_000);
    let page_query = PageQuery {
        text: q.clone(),
        scope: Scope { site: site.clone(), domain: domain.clone() },
        status,
        sort,
        offset: (page - 1) * PAGE_ROWS,
        limit: PAGE_ROWS,
    };
    let found = match state.read(move |store| store.page(&page_query)).await {
        Ok(found) => found,
        Err(err) => return storage_error(&state, &viewer, &err),
    };
    let pages = found.total.div_ceil(PAGE_ROWS).max(1);
    let link = |page: u64| {
        let mut params = String::new();
        for (key, value) in [("q", &q), ("domain", &domain), ("site", &site)] {
            if let Some(value) = value {
                params.push_str(&format!("{key}={}&", urlencode(value)));
            }
        }
        format!("/?{params}status={status_name}&sort={sort_name}&page={page}")
    };
    let body = MemoryBody {
        total: found.total,
        page,
        pages,
        first_row: (page - 1) * PAGE_ROWS + 1,
        prev: (page > 1).then(|| link(page - 1)),
        next: (page < pages).then(|| link(page + 1)),
        rows: found
            .workflows
            .into_iter()
            .map(|workflow| WorkflowRow {
                tools: workflow.tool_sequence().collect::<Vec<_>>().join(" → "),
                scope: scope_text(&workflow.scope),
                retrieved: workflow.stats.retrieved,
                used: workflow.stats.used_success + workflow.stats.used_failure,
                success: format!("{:.0}%", success_rate(&workflow.stats) * 100.0),
                created: workflow.provenance.created_at.clone().unwrap_or_default(),
                retired: workflow.retired.is_some(),
                id: workflow.id,
                description: workflow.description,
            })
            .collect(),
        q: q.unwrap_or_default(),
        domain: domain.unwrap_or_default(),
        site: site.unwrap_or_default(),
        status: status_name,
        sort: sort_name,
    };
    if query.fragment == Some(1) {
        return html(StatusCode::OK, render_page_with(MEMORY_ROWS.0, MEMORY_ROWS.1, &[], &body));
    }
    render(&state, StatusCode::OK, Some(&viewer), ("memory.html.j2", MEMORY), ("memory", "Memory".to_owned(), body))
}

// ---------------------------------------------------------------------------------------
// One workflow

#[derive(Debug, Serialize)]
struct WorkflowBody {
    id: String,
    description: String,
    scope: String,
    retired: Option<flowmem_model::Retirement>,
    created: String,
    retrieved: u64,
    used_success: u64,
    used_failure: u64,
    success: String,
    steps: Vec<StepView>,
    graph: Markup,
    usage_chart: Option<Markup>,
    usage: Vec<UsageDay>,
    provenances: Vec<ProvenanceView>,
    composed_of: Vec<String>,
    notice: Option<String>,
}

#[derive(Debug, Serialize)]
struct StepView {
    n: usize,
    tool: String,
    /// The arguments, `{variables}` marked.
    args: Markup,
    reasoning: String,
    state: String,
    sources: Vec<String>,
}

#[derive(Debug, Serialize)]
struct ProvenanceView {
    inducer: String,
    model: Option<String>,
    created: String,
    /// Each trajectory, and whether a recorded conversation has its id.
    trajectories: Vec<(String, bool)>,
}

/// A JSON argument object with each `{variable}` wrapped in `<var>`, escaped.
fn marked_args(args: &serde_json::Map<String, Value>) -> Markup {
    let text = serde_json::to_string(args).unwrap_or_default();
    let escaped = escape(&text);
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped.as_str();
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) if close > 0 && after[..close].chars().all(|c| c.is_alphanumeric() || c == '_') => {
                out.push_str(&rest[..open]);
                out.push_str("<var>{");
                out.push_str(&after[..close]);
                out.push_str("}</var>");
                rest = &after[close + 1..];
            }
            _ => {
                out.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Markup::new(out)
}

fn source_text(argument: &str, source: &StepSource) -> String {
    match source {
        StepSource::Query { .. } => format!("{argument} ← the task's query"),
        StepSource::Result { step, path } => format!("{argument} ← step {} result at {path}", step + 1),
    }
}

fn usage_chart(days: &[UsageDay]) -> Option<Markup> {
    if days.is_empty() {
        return None;
    }
    let count = |f: fn(&UsageDay) -> u64| -> Vec<Point> {
        days.iter().enumerate().map(|(i, day)| Point::new(i as f64, f(day) as f64)).collect()
    };
    let y_max = days
        .iter()
        .map(|d| d.stats.retrieved.max(d.stats.used_success).max(d.stats.used_failure))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let spec = ChartSpec {
        name: "usage",
        title: "Use per day",
        width: 640.0,
        height: 240.0,
        margins: Margins { left: 50.0, right: 20.0, top: 30.0, bottom: 40.0 },
        x_range: (0.0, (days.len().max(2) - 1) as f64),
        y_max,
        x_label: "day (first to last with use)",
        y_label: "count",
    };
    let series = [
        Series {
            label: "retrieved",
            class: "retrieved",
            colour: "#1f77b4",
            style: SeriesStyle::Line,
            points: count(|d| d.stats.retrieved),
        },
        Series {
            label: "succeeded",
            class: "succeeded",
            colour: "#2ca02c",
            style: SeriesStyle::Line,
            points: count(|d| d.stats.used_success),
        },
        Series {
            label: "failed",
            class: "failed",
            colour: "#d62728",
            style: SeriesStyle::Line,
            points: count(|d| d.stats.used_failure),
        },
    ];
    Some(Markup::new(line_chart(&spec, &series, true)))
}

#[derive(Debug, Default, Deserialize)]
struct NoticeQuery {
    done: Option<String>,
}

async fn workflow_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    Path(id): Path<String>,
    Query(notice): Query<NoticeQuery>,
) -> Response {
    let viewer = viewer_or_signin!(state, headers, uri);
    let read = state.read(move |store| Ok((store.get(&id)?, store.provenances(&id)?, store.usage(&id)?))).await;
    let (workflow, provenances, usage) = match read {
        Ok(found) => found,
        Err(err) => return storage_error(&state, &viewer, &err),
    };
    let provenances = match conversation_links(&state, provenances).await {
        Ok(provenances) => provenances,
        Err(err) => return storage_error(&state, &viewer, &err),
    };
    let body = workflow_body(workflow, provenances, usage, notice.done);
    let title = format!("Workflow {}", body.id);
    render(&state, StatusCode::OK, Some(&viewer), ("workflow.html.j2", WORKFLOW), ("memory", title, body))
}

/// Each provenance's trajectories, marked when the learning queue recorded a
/// conversation of that id (the gateway's and the OTLP receiver's runs).
async fn conversation_links(
    state: &Arc<AppState>,
    provenances: Vec<Provenance>,
) -> Result<Vec<ProvenanceView>, ServerError> {
    let ids: Vec<String> = provenances.iter().flat_map(|p| p.trajectory_ids.iter().cloned()).collect();
    let recorded: std::collections::HashSet<String> = match state.queue.as_deref() {
        Some(queue) => {
            queue
                .on_store(move |store| {
                    let mut found = std::collections::HashSet::new();
                    for id in ids {
                        if store.get(&id)?.is_some() {
                            found.insert(id);
                        }
                    }
                    Ok(found)
                })
                .await?
        }
        None => std::collections::HashSet::new(),
    };
    Ok(provenances
        .into_iter()
        .map(|p| ProvenanceView {
            trajectories: p.trajectory_ids.iter().map(|id| (id.clone(), recorded.contains(id))).collect(),
            inducer: p.inducer,
            model: p.model,
            created: p.created_at.unwrap_or_default(),
        })
        .collect())
}

fn workflow_body(
    workflow: Workflow,
    provenances: Vec<ProvenanceView>,
    usage: Vec<UsageDay>,
    done: Option<String>,
) -> WorkflowBody {
    let graph = Markup::new(flowmem_optimize::workflow_graph_svg(&flowmem_memory::render::to_graph(&workflow)));
    let steps = workflow
        .steps
        .iter()
        .enumerate()
        .map(|(i, step)| StepView {
            n: i + 1,
            tool: step.action.tool.clone(),
            args: marked_args(&step.action.args),
            reasoning: step.reasoning.clone(),
            state: step.state.clone(),
            sources: step.action.sources.iter().map(|(argument, source)| source_text(argument, source)).collect(),
        })
        .collect();
    let notice = done.and_then(|done| match done.as_str() {
        "edited" => Some("The description was saved.".to_owned()),
        "retired" => Some("Retired: agents no longer see this workflow.".to_owned()),
        "restored" => Some("Restored: agents see this workflow again.".to_owned()),
        _ => None,
    });
    WorkflowBody {
        scope: scope_text(&workflow.scope),
        created: workflow.provenance.created_at.clone().unwrap_or_default(),
        retrieved: workflow.stats.retrieved,
        used_success: workflow.stats.used_success,
        used_failure: workflow.stats.used_failure,
        success: format!("{:.0}%", success_rate(&workflow.stats) * 100.0),
        usage_chart: usage_chart(&usage),
        usage,
        steps,
        graph,
        provenances,
        composed_of: workflow.composed_of,
        retired: workflow.retired,
        id: workflow.id,
        description: workflow.description,
        notice,
    }
}

#[derive(Debug, Default, Deserialize)]
struct ChangeForm {
    #[serde(default)]
    csrf: String,
    description: Option<String>,
    reason: Option<String>,
}

/// `POST /workflows/{id}/{edit|retire|restore|delete}` from the workflow page's forms.
async fn change_workflow(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    form: Result<Form<ChangeForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Some(viewer) = viewer(&state, &headers) else {
        return message(&state, StatusCode::FORBIDDEN, None, "Sign in before changing memory.");
    };
    let form = form.map(|Form(form)| form).unwrap_or_default();
    if !viewer.csrf_matches(&form.csrf) {
        tracing::info!(action = %action, "web UI change refused: missing or wrong CSRF token");
        return message(
            &state,
            StatusCode::FORBIDDEN,
            Some(&viewer),
            "This form is stale or was not sent by this site; reload the page and try again.",
        );
    }
    if !viewer.can_write() {
        return message(
            &state,
            StatusCode::FORBIDDEN,
            Some(&viewer),
            "Changing memory needs a write token; you signed in with a read token.",
        );
    }
    let too_long = |field: &str, text: &str| {
        (text.chars().count() > MAX_TEXT).then(|| format!("The {field} may have at most {MAX_TEXT} characters."))
    };
    let target = id.clone();
    let done = match action.as_str() {
        "edit" => {
            let description = form.description.unwrap_or_default().trim().to_owned();
            if description.is_empty() {
                return message(
                    &state,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    Some(&viewer),
                    "The description may not be empty.",
                );
            }
            if let Some(problem) = too_long("description", &description) {
                return message(&state, StatusCode::UNPROCESSABLE_ENTITY, Some(&viewer), problem);
            }
            state.write(move |store| Ok(store.set_description(&target, &description)?)).await
        }
        "retire" => {
            let reason = form.reason.unwrap_or_default().trim().to_owned();
            if let Some(problem) = too_long("reason", &reason) {
                return message(&state, StatusCode::UNPROCESSABLE_ENTITY, Some(&viewer), problem);
            }
            state.write(move |store| Ok(store.retire(&target, &reason)?)).await
        }
        "restore" => state.write(move |store| Ok(store.restore(&target)?)).await,
        "delete" => state.write(move |store| Ok(store.delete(&target)?)).await,
        _ => return message(&state, StatusCode::NOT_FOUND, Some(&viewer), format!("There is no action `{action}`.")),
    };
    if let Err(err) = done {
        return storage_error(&state, &viewer, &err);
    }
    tracing::info!(workflow = %id, action = %action, token_id = ?viewer.token_id, "workflow changed from the web UI");
    if action == "edit" {
        crate::api::reembed(&state, &id).await;
    }
    if action == "delete" {
        return Redirect::to("/").into_response();
    }
    let past = match action.as_str() {
        "edit" => "edited",
        "retire" => "retired",
        _ => "restored",
    };
    let path = format!("/workflows/{}?done={past}", urlencode(&id));
    Redirect::to(&path).into_response()
}

/// `text` percent-encoded for a URL's path segment or query value: everything but
/// RFC 3986's unreserved characters.
fn urlencode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Conversations

#[derive(Debug, Default, Deserialize)]
struct ListQuery {
    page: Option<u64>,
}

#[derive(Debug, Serialize)]
struct ConversationsBody {
    rows: Vec<Value>,
    page: u64,
    prev: Option<String>,
    next: Option<String>,
    recording: bool,
}

async fn conversations_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    Query(query): Query<ListQuery>,
) -> Response {
    let viewer = viewer_or_signin!(state, headers, uri);
    let page = query.page.unwrap_or(1).clamp(1, 1_000_000);
    let rows = match state.queue.as_deref() {
        Some(queue) => {
            let token = viewer.token_id;
            let offset = usize::try_from((page - 1) * PAGE_ROWS).unwrap_or(usize::MAX);
            // One more than a page says whether there is a next one.
            match queue.on_store(move |store| store.recent(PAGE_ROWS as usize + 1, offset, token)).await {
                Ok(rows) => rows,
                Err(err) => return storage_error(&state, &viewer, &err),
            }
        }
        None => Vec::new(),
    };
    let more = rows.len() > PAGE_ROWS as usize;
    let body = ConversationsBody {
        rows: rows
            .into_iter()
            .take(PAGE_ROWS as usize)
            .map(|mut row| {
                if let Some(Value::String(text)) = row.get_mut("first_user") {
                    *text = cut(text, 160);
                }
                row
            })
            .collect(),
        page,
        prev: (page > 1).then(|| format!("/conversations?page={}", page - 1)),
        next: more.then(|| format!("/conversations?page={}", page + 1)),
        recording: state.queue.is_some(),
    };
    render(
        &state,
        StatusCode::OK,
        Some(&viewer),
        ("conversations.html.j2", CONVERSATIONS),
        ("conversations", "Conversations".to_owned(), body),
    )
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{kept}… ({} characters in all)", text.chars().count())
}

#[derive(Debug, Serialize)]
struct ConversationBody {
    id: String,
    state: String,
    attempts: u64,
    outcome: Option<bool>,
    model: String,
    scope: String,
    source: String,
    recorded_at: String,
    messages: Vec<MessageView>,
    shown: Vec<String>,
    shadow: Vec<String>,
    deviations: Vec<String>,
    judgement: Option<JudgementView>,
    stored: Vec<String>,
    merged: Vec<String>,
    rejected: Vec<String>,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct MessageView {
    role: String,
    content: String,
    tool_calls: Vec<(String, String)>,
    tool_call_id: String,
}

#[derive(Debug, Serialize)]
struct JudgementView {
    success: Option<bool>,
    reason: String,
    by: String,
}

fn text_of(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        // Content parts: their texts, in order.
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|part| part.get("text").and_then(Value::as_str).map_or_else(|| part.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
    }
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value.and_then(Value::as_array).map_or_else(Vec::new, |items| {
        items.iter().map(|item| item.as_str().map_or_else(|| item.to_string(), str::to_owned)).collect()
    })
}

fn conversation_body(row: &Value) -> ConversationBody {
    let record = row.get("record").cloned().unwrap_or(Value::Null);
    let result = row.get("result").cloned().unwrap_or(Value::Null);
    let messages = record.get("messages").and_then(Value::as_array).map_or_else(Vec::new, |messages| {
        messages
            .iter()
            .map(|message| MessageView {
                role: text_of(message.get("role")),
                content: cut(&text_of(message.get("content")), MAX_SHOWN),
                tool_calls: message.get("tool_calls").and_then(Value::as_array).map_or_else(Vec::new, |calls| {
                    calls
                        .iter()
                        .map(|call| {
                            (
                                text_of(call.pointer("/function/name")),
                                cut(&text_of(call.pointer("/function/arguments")), MAX_SHOWN),
                            )
                        })
                        .collect()
                }),
                tool_call_id: text_of(message.get("tool_call_id")),
            })
            .collect()
    });
    let judgement = result.get("judgement").filter(|j| !j.is_null()).map(|j| JudgementView {
        success: j.get("success").and_then(Value::as_bool),
        reason: text_of(j.get("reason")),
        by: text_of(j.get("by")),
    });
    let ids = |key: &str| -> Vec<String> {
        result.get(key).and_then(Value::as_array).map_or_else(Vec::new, |items| {
            items
                .iter()
                .map(|item| item.get("id").map_or_else(|| text_of(item.get("message")), |id| text_of(Some(id))))
                .collect()
        })
    };
    let scope: Scope = record.get("scope").cloned().and_then(|s| serde_json::from_value(s).ok()).unwrap_or_default();
    ConversationBody {
        id: text_of(row.get("id")),
        state: text_of(row.get("state")),
        attempts: row.get("attempts").and_then(Value::as_u64).unwrap_or(0),
        outcome: row.get("outcome").and_then(Value::as_bool),
        model: text_of(record.get("model")),
        scope: scope_text(&scope),
        source: text_of(record.get("source")),
        recorded_at: text_of(record.get("recorded_at")),
        messages,
        shown: strings(record.get("shown")),
        shadow: strings(record.get("shadow")),
        deviations: record
            .get("deviations")
            .and_then(Value::as_array)
            .map_or_else(Vec::new, |items| items.iter().map(|item| cut(&item.to_string(), 400)).collect()),
        judgement,
        stored: ids("stored"),
        merged: ids("merged"),
        rejected: ids("rejected"),
        error: result.get("error").map(|e| text_of(Some(e))),
    }
}

async fn conversation_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    Path(id): Path<String>,
) -> Response {
    let viewer = viewer_or_signin!(state, headers, uri);
    let Some(queue) = state.queue.as_deref() else {
        return message(
            &state,
            StatusCode::NOT_FOUND,
            Some(&viewer),
            "This server records no conversations (start it with --gateway or --otlp).",
        );
    };
    let looked_up = id.clone();
    let row = match queue.on_store(move |store| store.get(&looked_up)).await {
        Ok(row) => row,
        Err(err) => return storage_error(&state, &viewer, &err),
    };
    // A token sees only its own conversations, as on the API.
    let owned =
        |row: &Value| viewer.token_id.is_none_or(|token| row.pointer("/record/token_id") == Some(&Value::from(token)));
    match row {
        Some(row) if owned(&row) => {
            let body = conversation_body(&row);
            let title = format!("Conversation {}", body.id);
            render(
                &state,
                StatusCode::OK,
                Some(&viewer),
                ("conversation.html.j2", CONVERSATION),
                ("conversations", title, body),
            )
        }
        _ => message(&state, StatusCode::NOT_FOUND, Some(&viewer), format!("No recorded conversation `{id}`.")),
    }
}

// ---------------------------------------------------------------------------------------
// Scout runs

#[derive(Debug, Serialize)]
struct RunsBody {
    roots: Vec<String>,
    rows: Vec<runs::RunRow>,
}

async fn runs_page(State(state): State<Arc<AppState>>, headers: HeaderMap, uri: axum::http::Uri) -> Response {
    let viewer = viewer_or_signin!(state, headers, uri);
    let roots = state.cfg.runs.clone();
    let listed = tokio::task::spawn_blocking(move || runs::list(&roots)).await.unwrap_or_default();
    let body = RunsBody { roots: state.cfg.runs.iter().map(|root| root.display().to_string()).collect(), rows: listed };
    render(&state, StatusCode::OK, Some(&viewer), ("runs.html.j2", RUNS), ("runs", "Scout runs".to_owned(), body))
}

#[derive(Debug, Default, Deserialize)]
struct RunQuery {
    node: Option<usize>,
}

#[derive(Debug, Serialize)]
struct RunBody {
    key: String,
    path: String,
    #[serde(flatten)]
    run: runs::RunView,
}

async fn run_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    Path(key): Path<String>,
    query: Result<Query<RunQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let viewer = viewer_or_signin!(state, headers, uri);
    let node = query.ok().and_then(|Query(query)| query.node);
    let Some(dir) = runs::resolve(&state.cfg.runs, &key) else {
        return message(
            &state,
            StatusCode::NOT_FOUND,
            Some(&viewer),
            format!("No scout run `{key}` under the run directories."),
        );
    };
    let href_key = urlencode(&key);
    let path = dir.display().to_string();
    let read = tokio::task::spawn_blocking(move || {
        runs::view(&dir, node, &|id| format!("/runs/{href_key}?node={id}#candidate"))
    })
    .await;
    match read {
        Ok(Ok(run)) => {
            let title = format!("Scout run {key}");
            let body = RunBody { key, path, run };
            render(&state, StatusCode::OK, Some(&viewer), ("run.html.j2", RUN), ("runs", title, body))
        }
        Ok(Err(problem)) => message(
            &state,
            StatusCode::INTERNAL_SERVER_ERROR,
            Some(&viewer),
            format!("The run could not be read: {problem}"),
        ),
        Err(_) => message(&state, StatusCode::INTERNAL_SERVER_ERROR, Some(&viewer), "The run could not be read."),
    }
}

// ---------------------------------------------------------------------------------------
// Learning

#[derive(Debug, Serialize)]
struct LearningBody {
    online: Vec<runs::OnlineRun>,
    problems: Vec<String>,
    counts: BTreeMap<String, Value>,
    recording: bool,
    growth: Option<Markup>,
    total: usize,
    retired: usize,
}

async fn learning_page(State(state): State<Arc<AppState>>, headers: HeaderMap, uri: axum::http::Uri) -> Response {
    let viewer = viewer_or_signin!(state, headers, uri);
    let counts = match state.queue.as_deref() {
        Some(queue) => match queue.on_store(crate::queue::store::QueueStore::counts).await {
            Ok(Value::Object(counts)) => counts.into_iter().collect(),
            Ok(_) => BTreeMap::new(),
            Err(err) => return storage_error(&state, &viewer, &err),
        },
        None => BTreeMap::new(),
    };
    let workflows = match state.read(|store| store.list_all(&Scope::default())).await {
        Ok(workflows) => workflows,
        Err(err) => return storage_error(&state, &viewer, &err),
    };
    let roots = state.cfg.runs.clone();
    let (online, problems) = tokio::task::spawn_blocking(move || runs::online(&roots)).await.unwrap_or_default();
    let body = LearningBody {
        online,
        problems,
        counts,
        recording: state.queue.is_some(),
        growth: growth_chart(&workflows),
        total: workflows.len(),
        retired: workflows.iter().filter(|w| w.retired.is_some()).count(),
    };
    render(
        &state,
        StatusCode::OK,
        Some(&viewer),
        ("learning.html.j2", LEARNING),
        ("learning", "Learning".to_owned(), body),
    )
}

/// Workflows in memory per day they were stored, cumulative: how memory grew.
fn growth_chart(workflows: &[Workflow]) -> Option<Markup> {
    let mut per_day: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for workflow in workflows {
        let Some(created) = workflow.provenance.created_at.as_deref() else { continue };
        let day = created.get(..10).unwrap_or(created);
        let slot = per_day.entry(day).or_default();
        slot.0 += 1;
        if workflow.retired.is_some() {
            slot.1 += 1;
        }
    }
    if per_day.is_empty() {
        return None;
    }
    let (mut stored, mut retired) = (0u64, 0u64);
    let mut stored_points = Vec::new();
    let mut active_points = Vec::new();
    for (i, (added, gone)) in per_day.values().enumerate() {
        stored += added;
        retired += gone;
        stored_points.push(Point::new(i as f64, stored as f64));
        active_points.push(Point::new(i as f64, (stored - retired) as f64));
    }
    let x_label = format!(
        "day ({} to {})",
        per_day.keys().next().copied().unwrap_or_default(),
        per_day.keys().next_back().copied().unwrap_or_default()
    );
    let spec = ChartSpec {
        name: "growth",
        title: "Workflows stored (by the day they were learned)",
        width: 640.0,
        height: 260.0,
        margins: Margins { left: 60.0, right: 20.0, top: 30.0, bottom: 40.0 },
        x_range: (0.0, (per_day.len().max(2) - 1) as f64),
        y_max: (stored as f64).max(1.0),
        x_label: &x_label,
        y_label: "workflows",
    };
    let series = [
        Series {
            label: "learned",
            class: "learned",
            colour: "#1f77b4",
            style: SeriesStyle::Line,
            points: stored_points,
        },
        Series {
            label: "in use (not retired now)",
            class: "in-use",
            colour: "#2ca02c",
            style: SeriesStyle::Line,
            points: active_points,
        },
    ];
    Some(Markup::new(line_chart(&spec, &series, true)))
}
