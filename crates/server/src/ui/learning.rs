//! The learning page: the queue, the online learning curves, memory's growth.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Serialize;
use serde_json::Value;

use flowmem_model::{Scope, Workflow};
use flowmem_report::{ChartSpec, Margins, Markup, Point, Series, SeriesStyle, line_chart};

use super::{LEARNING, render, storage_error, to_signin, viewer};
use crate::runs;
use crate::state::AppState;

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

pub(super) async fn learning_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Response {
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
