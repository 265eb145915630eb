//! The scout runs under `--runs`: the list, and one run with a candidate open.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};

use super::{RUN, RUNS, message, render, to_signin, urlencode, viewer};
use crate::runs;
use crate::state::AppState;

#[derive(Debug, Serialize)]
struct RunsBody {
    roots: Vec<String>,
    rows: Vec<runs::RunRow>,
}

pub(super) async fn runs_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Response {
    let viewer = viewer_or_signin!(state, headers, uri);
    let roots = state.cfg.runs.clone();
    let listed = tokio::task::spawn_blocking(move || runs::list(&roots)).await.unwrap_or_default();
    let body = RunsBody { roots: state.cfg.runs.iter().map(|root| root.display().to_string()).collect(), rows: listed };
    render(&state, StatusCode::OK, Some(&viewer), ("runs.html.j2", RUNS), ("runs", "Scout runs".to_owned(), body))
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct RunQuery {
    node: Option<usize>,
}

#[derive(Debug, Serialize)]
struct RunBody {
    key: String,
    path: String,
    #[serde(flatten)]
    run: runs::RunView,
}

pub(super) async fn run_page(
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
