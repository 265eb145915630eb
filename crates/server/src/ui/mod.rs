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
//! One module per page (`memory.rs`, `workflow.rs`, `conversations.rs`, `scout.rs`,
//! `learning.rs`, `signin.rs`); this one holds what they share: the layout, the viewer,
//! the security headers, the message page.
//!
//! Sign-in ([`session`]) trades a token for a cookie once. Every page is rendered by
//! `flowmem-report`'s engine, which escapes every value; scripts are limited to our own
//! file by the Content-Security-Policy, and every form that changes memory carries the
//! session's CSRF token and needs a `write` token's session.

mod session;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Serialize;

use flowmem_memory::MemoryError;
use flowmem_model::Scope;
use flowmem_report::render_page_with;

use crate::error::ServerError;
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

fn scope_text(scope: &Scope) -> String {
    match (&scope.site, &scope.domain) {
        (Some(site), Some(domain)) => format!("{site}/{domain}"),
        (None, Some(domain)) => domain.clone(),
        (Some(site), None) => format!("{site}/"),
        (None, None) => "–".to_owned(),
    }
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

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{kept}… ({} characters in all)", text.chars().count())
}

// The pages, declared after `viewer_or_signin!` so that they can use it.
mod conversations;
mod learning;
mod memory;
mod scout;
mod signin;
mod workflow;

use self::conversations::{conversation_page, conversations_page};
use self::learning::learning_page;
use self::memory::memory_page;
use self::scout::{run_page, runs_page};
use self::signin::{sign_in, sign_out, signin_page};
use self::workflow::{change_workflow, workflow_page};
