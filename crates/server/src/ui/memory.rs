//! The memory page: search as you type, filters, sort, paging.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};

use flowmem_memory::{PageQuery, PageSort, PageStatus, success_rate};
use flowmem_model::Scope;
use flowmem_report::render_page_with;

use super::{
    MEMORY, MEMORY_ROWS, PAGE_ROWS, html, message, render, scope_text, storage_error, to_signin, urlencode, viewer,
};
use crate::state::AppState;

#[derive(Debug, Default, Deserialize)]
pub(super) struct MemoryQuery {
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

pub(super) async fn memory_page(
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
