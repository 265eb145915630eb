//! One workflow's page, and the forms that edit, retire, restore and delete it.

use std::sync::Arc;

use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use flowmem_memory::{UsageDay, success_rate};
use flowmem_model::{Provenance, StepSource, Workflow};
use flowmem_report::{ChartSpec, Margins, Markup, Point, Series, SeriesStyle, escape, line_chart};

use super::{WORKFLOW, message, render, scope_text, storage_error, to_signin, urlencode, viewer};
use crate::api::MAX_TEXT;
use crate::error::ServerError;
use crate::state::AppState;

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
pub(super) struct NoticeQuery {
    done: Option<String>,
}

pub(super) async fn workflow_page(
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
        Some(queue) => queue.on_store(move |store| store.known(&ids)).await?,
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
pub(super) struct ChangeForm {
    #[serde(default)]
    csrf: String,
    description: Option<String>,
    reason: Option<String>,
}

/// `POST /workflows/{id}/{edit|retire|restore|delete}` from the workflow page's forms.
pub(super) async fn change_workflow(
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
