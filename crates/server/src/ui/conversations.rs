//! The runs the server learned from: the list, and one run step by step.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use flowmem_model::Scope;

use super::{
    CONVERSATION, CONVERSATIONS, MAX_SHOWN, PAGE_ROWS, cut, message, render, scope_text, storage_error, to_signin,
    viewer,
};
use crate::state::AppState;

#[derive(Debug, Default, Deserialize)]
pub(super) struct ListQuery {
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

pub(super) async fn conversations_page(
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

pub(super) async fn conversation_page(
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
    // A token sees only its own conversations, as on the API.
    let token = viewer.token_id;
    let row = match queue.on_store(move |store| store.get(&looked_up, token)).await {
        Ok(row) => row,
        Err(err) => return storage_error(&state, &viewer, &err),
    };
    match row {
        Some(row) => {
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
