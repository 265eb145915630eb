//! The sign-in and sign-out pages and forms.

use std::sync::Arc;

use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::{Deserialize, Serialize};

use super::{SIGNIN, message, render, set_cookie};
use crate::state::AppState;

#[derive(Debug, Default, Deserialize)]
pub(super) struct SigninQuery {
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

pub(super) async fn signin_page(State(state): State<Arc<AppState>>, Query(query): Query<SigninQuery>) -> Response {
    let next = local_path(query.next);
    if state.open_access() {
        return Redirect::to(&next).into_response();
    }
    let body = SigninBody { next, error: None };
    render(&state, StatusCode::OK, None, ("signin.html.j2", SIGNIN), ("signin", "Sign in".to_owned(), body))
}

#[derive(Debug, Deserialize)]
pub(super) struct SigninForm {
    token: String,
    next: Option<String>,
}

pub(super) async fn sign_in(
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
pub(super) struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

pub(super) async fn sign_out(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Some(session) = state.ui.of_request(&headers)
        && session.csrf_matches(&form.csrf)
    {
        state.ui.end(&headers);
    }
    let mut response = Redirect::to("/signin").into_response();
    response.headers_mut().insert(header::SET_COOKIE, set_cookie(None));
    response
}
