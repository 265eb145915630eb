//! What a span means under the two conventions: OpenTelemetry's GenAI semantic
//! conventions and OpenInference's. Each reader gives OpenAI chat messages (the form
//! `openai.rs` turns into steps) or a tool call, and reports in [`Gap`]s what the span
//! held that it could not use.
//!
//! - A model call (GenAI `chat`, `text_completion`, `generate_content`; OpenInference
//!   `LLM`) gives its input and output messages: GenAI's `gen_ai.input.messages` /
//!   `gen_ai.output.messages` (JSON text or structured), its events
//!   (`gen_ai.user.message`, `gen_ai.assistant.message`, `gen_ai.tool.message`,
//!   `gen_ai.choice`, as span events or log records; `gen_ai.client.inference.operation.details`;
//!   the older `gen_ai.content.prompt`/`completion`), or OpenInference's
//!   `llm.input_messages.N.message.*` / `llm.output_messages.N.message.*`, else its
//!   `input.value` / `output.value` holding the OpenAI request and response.
//! - A tool call (GenAI `execute_tool`; OpenInference `TOOL`) gives the tool's name, the
//!   call id, arguments and result (`gen_ai.tool.call.arguments`/`result`;
//!   `input.value`/`output.value`), and the error of a failed span.
//! - An agent (GenAI `invoke_agent`; OpenInference `AGENT`, or a root `CHAIN`) gives the
//!   user's request and the final answer, when recorded.

use serde_json::{Value, json};

use crate::import::otlp::{OtlpEvent, OtlpSpan, shorten};

/// What a span is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SpanRole {
    /// A model call.
    Llm,
    /// A tool call.
    Tool,
    /// An agent's run.
    Agent,
    /// Anything else (HTTP, a framework's chain, ...): its children count, not it.
    Other,
}

/// Something a span held that could not be used, and where in the span.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Gap {
    /// The attribute's index, when the gap is about one attribute.
    pub(super) attribute: Option<usize>,
    /// What could not be used and what that means for the trajectory.
    pub(super) reason: String,
}

/// A model call's messages in the OpenAI chat form; `None` where the span recorded none.
#[derive(Debug, Default)]
pub(super) struct SpanMessages {
    pub(super) input: Option<Vec<Value>>,
    pub(super) output: Option<Vec<Value>>,
}

/// A tool span's call.
#[derive(Debug)]
pub(super) struct ToolSpan {
    pub(super) name: String,
    pub(super) call_id: Option<String>,
    /// The arguments: an object, when recorded and readable.
    pub(super) args: Option<serde_json::Map<String, Value>>,
    pub(super) result: Option<Value>,
    pub(super) error: Option<String>,
}

fn attribute<'s>(span: &'s OtlpSpan, key: &str) -> Option<(usize, &'s Value)> {
    span.attributes.iter().enumerate().rev().find(|(_, attribute)| attribute.key == key).map(|(idx, a)| (idx, &a.value))
}

fn text_attribute<'s>(span: &'s OtlpSpan, key: &str, gaps: &mut Vec<Gap>) -> Option<&'s str> {
    let (idx, value) = attribute(span, key)?;
    match value {
        Value::String(text) => Some(text),
        Value::Null => None,
        other => {
            gaps.push(Gap {
                attribute: Some(idx),
                reason: format!("`{key}` must be a string, found {}; it is ignored", kind(other)),
            });
            None
        }
    }
}

fn kind(value: &Value) -> &'static str {
    crate::import::json::type_name(value)
}

/// The span's role under either convention.
pub(super) fn role(span: &OtlpSpan, is_root: bool) -> SpanRole {
    let mut ignored = Vec::new();
    if let Some(operation) = text_attribute(span, "gen_ai.operation.name", &mut ignored) {
        return match operation {
            "chat" | "text_completion" | "generate_content" => SpanRole::Llm,
            "execute_tool" => SpanRole::Tool,
            "invoke_agent" | "create_agent" => SpanRole::Agent,
            _ => SpanRole::Other,
        };
    }
    if let Some(kind) = text_attribute(span, "openinference.span.kind", &mut ignored) {
        return match kind.to_ascii_uppercase().as_str() {
            "LLM" => SpanRole::Llm,
            "TOOL" => SpanRole::Tool,
            "AGENT" => SpanRole::Agent,
            "CHAIN" if is_root => SpanRole::Agent,
            _ => SpanRole::Other,
        };
    }
    // Spans named by the GenAI conventions but without the attribute.
    let verb = span.name.split(' ').next().unwrap_or("");
    match verb {
        "chat" | "text_completion" | "generate_content" => SpanRole::Llm,
        "execute_tool" => SpanRole::Tool,
        "invoke_agent" => SpanRole::Agent,
        _ => SpanRole::Other,
    }
}

/// The conversation the span belongs to: `gen_ai.conversation.id`, or OpenInference's
/// `session.id`.
pub(super) fn conversation_id(span: &OtlpSpan, gaps: &mut Vec<Gap>) -> Option<String> {
    for key in ["gen_ai.conversation.id", "session.id"] {
        if let Some((idx, value)) = attribute(span, key) {
            match value {
                Value::String(id) if !id.is_empty() => return Some(id.clone()),
                Value::Number(id) => return Some(id.to_string()),
                Value::String(_) | Value::Null => {}
                other => gaps.push(Gap {
                    attribute: Some(idx),
                    reason: format!(
                        "`{key}` must be a string, found {}; the span is grouped by its trace instead",
                        kind(other)
                    ),
                }),
            }
        }
    }
    None
}

/// Reads a JSON attribute that may be JSON text or structured: `Ok(None)` when absent.
fn json_attribute(span: &OtlpSpan, key: &str, gaps: &mut Vec<Gap>) -> Option<Value> {
    let (idx, value) = attribute(span, key)?;
    match value {
        Value::Null => None,
        Value::String(text) => match serde_json::from_str(text) {
            Ok(parsed) => Some(parsed),
            Err(err) if err.is_eof() => {
                gaps.push(Gap {
                    attribute: Some(idx),
                    reason: format!(
                        "`{key}` is truncated: its JSON ends after {} characters (an attribute length limit?); it is not used",
                        text.chars().count()
                    ),
                });
                None
            }
            Err(err) => {
                gaps.push(Gap {
                    attribute: Some(idx),
                    reason: format!("`{key}` is not valid JSON ({err}); it is not used"),
                });
                None
            }
        },
        structured => Some(structured.clone()),
    }
}

/// GenAI's message list (`gen_ai.input.messages` and friends) as OpenAI messages.
fn genai_messages(span: &OtlpSpan, key: &str, gaps: &mut Vec<Gap>) -> Option<Vec<Value>> {
    let idx = attribute(span, key).map(|(idx, _)| idx);
    let value = json_attribute(span, key, gaps)?;
    let Value::Array(messages) = value else {
        gaps.push(Gap {
            attribute: idx,
            reason: format!("`{key}` must be a list of messages, found {}; it is not used", kind(&value)),
        });
        return None;
    };
    let mut res = Vec::new();
    for (n, message) in messages.iter().enumerate() {
        match genai_message(message) {
            Ok(converted) => res.extend(converted),
            Err(reason) => {
                gaps.push(Gap { attribute: idx, reason: format!("`{key}` message {n}: {reason}; it is left out") })
            }
        }
    }
    Some(res)
}

/// One GenAI message (`{role, parts: [...]}`) as OpenAI messages: the message itself,
/// and one `tool` message per tool-call response part.
fn genai_message(message: &Value) -> Result<Vec<Value>, String> {
    let Some(role) = message.get("role").and_then(Value::as_str) else {
        return Err("it has no `role`".to_owned());
    };
    let parts = match message.get("parts") {
        Some(Value::Array(parts)) => parts.as_slice(),
        // Some emitters write the OpenAI form directly.
        None if message.get("content").is_some() || message.get("tool_calls").is_some() => {
            return Ok(vec![message.clone()]);
        }
        _ => return Err("it has no `parts` list".to_owned()),
    };
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    let mut responses = Vec::new();
    for part in parts {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => texts.extend(part.get("content").and_then(Value::as_str).map(str::to_owned)),
            Some("tool_call") => calls.push(json!({
                "id": part.get("id").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {
                    "name": part.get("name").cloned().unwrap_or(Value::Null),
                    "arguments": part.get("arguments").cloned().unwrap_or(Value::Null),
                },
            })),
            Some("tool_call_response") => {
                let response = part.get("response").or_else(|| part.get("result")).cloned().unwrap_or(Value::Null);
                let content = match response {
                    Value::String(text) => text,
                    other => other.to_string(),
                };
                responses.push(json!({"role": "tool", "tool_call_id": part.get("id").cloned().unwrap_or(Value::Null), "content": content}));
            }
            Some("reasoning") => {}
            other => return Err(format!("a part of type `{}` is not text or a tool call", other.unwrap_or("?"))),
        }
    }
    let mut res = Vec::new();
    if role != "tool" || !texts.is_empty() || !calls.is_empty() {
        let mut converted = json!({"role": role});
        if !texts.is_empty() {
            converted["content"] = Value::String(texts.join("\n"));
        }
        if !calls.is_empty() {
            converted["tool_calls"] = Value::Array(calls);
        }
        res.push(converted);
    }
    res.extend(responses);
    Ok(res)
}

/// A span's model-call messages, from whichever form the span recorded them in.
pub(super) fn llm_messages(span: &OtlpSpan, gaps: &mut Vec<Gap>) -> SpanMessages {
    let mut messages = SpanMessages {
        input: genai_messages(span, "gen_ai.input.messages", gaps),
        output: genai_messages(span, "gen_ai.output.messages", gaps),
    };
    if messages.input.is_none() && messages.output.is_none() {
        messages = event_messages(&span.events, gaps);
    }
    if messages.input.is_none() && messages.output.is_none() {
        messages = openinference_messages(span, gaps);
    }
    for (key, side) in [("gen_ai.input.messages.ref", "input"), ("gen_ai.output.messages.ref", "output")] {
        if let Some(reference) = text_attribute(span, key, gaps) {
            let missing = if side == "input" { messages.input.is_none() } else { messages.output.is_none() };
            if missing {
                gaps.push(Gap {
                    attribute: attribute(span, key).map(|(idx, _)| idx),
                    reason: format!(
                        "the {side} messages were stored outside the trace, at `{}`; they are not in the trajectory",
                        shorten(reference, 200)
                    ),
                });
            }
        }
    }
    messages
}

/// The messages of GenAI events (span events, or log records joined to the span).
fn event_messages(events: &[OtlpEvent], gaps: &mut Vec<Gap>) -> SpanMessages {
    let mut input: Vec<Value> = Vec::new();
    let mut output: Vec<Value> = Vec::new();
    let mut seen_input = false;
    let mut seen_output = false;
    let mut n_empty = 0;
    for event in events {
        let body = event_body(event);
        let content_of = |body: &Value| body.get("content").cloned().filter(|content| !content.is_null());
        match event.name.as_str() {
            "gen_ai.system.message" | "gen_ai.user.message" | "gen_ai.assistant.message" | "gen_ai.tool.message" => {
                seen_input = true;
                let role = event.name.trim_start_matches("gen_ai.").trim_end_matches(".message");
                let mut message = json!({"role": role});
                let content = content_of(&body);
                let calls = body.get("tool_calls").filter(|calls| calls.is_array()).cloned();
                if content.is_none() && calls.is_none() {
                    n_empty += 1;
                }
                if let Some(content) = content {
                    message["content"] = content;
                }
                if let Some(calls) = calls {
                    message["tool_calls"] = calls;
                }
                if let Some(id) = body.get("id").filter(|_| role == "tool") {
                    message["tool_call_id"] = id.clone();
                }
                input.push(message);
            }
            "gen_ai.choice" => {
                seen_output = true;
                let index = body.get("index").and_then(|index| index.as_i64().or_else(|| index.as_str()?.parse().ok()));
                if index.unwrap_or(0) != 0 {
                    gaps.push(Gap {
                        attribute: None,
                        reason: format!(
                            "choice {} of the model's answer is not kept: a trajectory follows the first",
                            index.unwrap_or(0)
                        ),
                    });
                    continue;
                }
                let mut message = body.get("message").cloned().unwrap_or_else(|| json!({}));
                if message.get("role").is_none() {
                    message["role"] = json!("assistant");
                }
                if message.get("content").is_none() && message.get("tool_calls").is_none() {
                    n_empty += 1;
                }
                output.push(message);
            }
            "gen_ai.client.inference.operation.details" => {
                let holder = OtlpSpan::holding(&event.attributes);
                let mut found = Vec::new();
                if let Some(messages) = genai_messages(&holder, "gen_ai.input.messages", &mut found) {
                    seen_input = true;
                    input.extend(messages);
                }
                if let Some(messages) = genai_messages(&holder, "gen_ai.output.messages", &mut found) {
                    seen_output = true;
                    output.extend(messages);
                }
                // The attribute indices are the event's, not the span's.
                gaps.extend(found.into_iter().map(|gap| Gap { attribute: None, ..gap }));
            }
            "gen_ai.content.prompt" | "gen_ai.content.completion" => {
                let (key, out) = if event.name.ends_with("prompt") {
                    seen_input = true;
                    ("gen_ai.prompt", &mut input)
                } else {
                    seen_output = true;
                    ("gen_ai.completion", &mut output)
                };
                let holder = OtlpSpan::holding(&event.attributes);
                let mut found = Vec::new();
                let value = json_attribute(&holder, key, &mut found);
                gaps.extend(found.into_iter().map(|gap| Gap { attribute: None, ..gap }));
                match value {
                    Some(Value::Array(messages)) => out.extend(messages),
                    Some(Value::String(text)) => out.push(
                        json!({"role": if key == "gen_ai.prompt" { "user" } else { "assistant" }, "content": text}),
                    ),
                    _ => n_empty += 1,
                }
            }
            _ => {}
        }
    }
    if n_empty > 0 {
        gaps.push(Gap {
            attribute: None,
            reason: format!("{n_empty} GenAI event(s) carry no content: content capture was off (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT); their messages are empty in the trajectory"),
        });
    }
    SpanMessages { input: seen_input.then_some(input), output: seen_output.then_some(output) }
}

/// An event's content: a log record's body, or a span event's attributes as an object
/// (with `gen_ai.event.content` holding the body as JSON, as some emitters write).
fn event_body(event: &OtlpEvent) -> Value {
    if let Some(body) = &event.body {
        return match body {
            Value::String(text) => serde_json::from_str(text).unwrap_or_else(|_| json!({"content": text})),
            other => other.clone(),
        };
    }
    if let Some(content) = event.attributes.iter().find(|attribute| attribute.key == "gen_ai.event.content")
        && let Value::String(text) = &content.value
        && let Ok(body) = serde_json::from_str(text)
    {
        return body;
    }
    Value::Object(event.attributes.iter().map(|attribute| (attribute.key.clone(), attribute.value.clone())).collect())
}

/// OpenInference's flattened messages (`llm.input_messages.N.message.*`), else the
/// OpenAI request and response in `input.value` / `output.value`.
fn openinference_messages(span: &OtlpSpan, gaps: &mut Vec<Gap>) -> SpanMessages {
    let mut messages = SpanMessages {
        input: flattened_messages(span, "llm.input_messages.", gaps),
        output: flattened_messages(span, "llm.output_messages.", gaps),
    };
    if messages.input.is_none()
        && let Some(Value::Object(request)) = value_attribute(span, "input.value", gaps)
        && let Some(Value::Array(list)) = request.get("messages")
    {
        messages.input = Some(list.clone());
    }
    if messages.output.is_none()
        && let Some(Value::Object(response)) = value_attribute(span, "output.value", gaps)
        && let Some(message) =
            response.get("choices").and_then(|choices| choices.get(0)).and_then(|choice| choice.get("message"))
    {
        messages.output = Some(vec![message.clone()]);
    }
    messages
}

/// `input.value` / `output.value`: JSON when it parses (or its mime type says so),
/// else the text.
fn value_attribute(span: &OtlpSpan, key: &str, gaps: &mut Vec<Gap>) -> Option<Value> {
    let text = text_attribute(span, key, gaps)?;
    let mime_key = format!("{}.mime_type", key.trim_end_matches(".value"));
    let mime = attribute(span, &mime_key).and_then(|(_, value)| value.as_str());
    match serde_json::from_str::<Value>(text) {
        Ok(value) if mime != Some("text/plain") => Some(value),
        Err(err) if mime == Some("application/json") && err.is_eof() => {
            gaps.push(Gap {
                attribute: attribute(span, key).map(|(idx, _)| idx),
                reason: format!(
                    "`{key}` is truncated: its JSON ends after {} characters; it is kept as text",
                    text.chars().count()
                ),
            });
            Some(Value::String(text.to_owned()))
        }
        _ => Some(Value::String(text.to_owned())),
    }
}

/// Rebuilds `prefix` N `.message.` ... attributes into OpenAI messages, by N.
fn flattened_messages(span: &OtlpSpan, prefix: &str, gaps: &mut Vec<Gap>) -> Option<Vec<Value>> {
    let mut by_index: std::collections::BTreeMap<usize, Value> = std::collections::BTreeMap::new();
    for (idx, attribute) in span.attributes.iter().enumerate() {
        let Some(rest) = attribute.key.strip_prefix(prefix) else { continue };
        let Some((n, field)) = rest.split_once(".message.") else { continue };
        let Ok(n) = n.parse::<usize>() else { continue };
        let message = by_index.entry(n).or_insert_with(|| json!({}));
        let value = &attribute.value;
        if let Some(call) = field.strip_prefix("tool_calls.") {
            let Some((k, call_field)) = call.split_once(".tool_call.") else { continue };
            let Ok(k) = k.parse::<usize>() else { continue };
            if !message["tool_calls"].is_array() {
                message["tool_calls"] = json!([]);
            }
            let calls = message["tool_calls"].as_array_mut().expect("just made an array");
            while calls.len() <= k {
                calls.push(json!({"type": "function", "function": {}}));
            }
            match call_field {
                "id" => calls[k]["id"] = value.clone(),
                "function.name" => calls[k]["function"]["name"] = value.clone(),
                "function.arguments" => calls[k]["function"]["arguments"] = value.clone(),
                _ => {}
            }
        } else if let Some(content) = field.strip_prefix("contents.") {
            if content.ends_with(".message_content.text") {
                let text = value.as_str().unwrap_or_default();
                let joined = match message.get("content").and_then(Value::as_str) {
                    Some(before) => format!("{before}\n{text}"),
                    None => text.to_owned(),
                };
                message["content"] = Value::String(joined);
            }
        } else {
            match (field, value) {
                ("role" | "content" | "tool_call_id" | "name", Value::String(_)) => message[field] = value.clone(),
                ("role" | "content" | "tool_call_id" | "name", other) => gaps.push(Gap {
                    attribute: Some(idx),
                    reason: format!("`{}` must be a string, found {}; it is ignored", attribute.key, kind(other)),
                }),
                _ => {}
            }
        }
    }
    if by_index.is_empty() {
        return None;
    }
    Some(by_index.into_values().filter(|message| message.get("role").is_some()).collect())
}

/// An agent span's request and answer: GenAI messages, or OpenInference's
/// `input.value` / `output.value` text, or flowmem's own `flowmem.query`.
pub(super) fn agent_messages(span: &OtlpSpan, gaps: &mut Vec<Gap>) -> SpanMessages {
    let mut messages = SpanMessages {
        input: genai_messages(span, "gen_ai.input.messages", gaps),
        output: genai_messages(span, "gen_ai.output.messages", gaps),
    };
    if messages.input.is_none() {
        messages.input = match value_attribute(span, "input.value", gaps) {
            Some(Value::String(text)) => Some(vec![json!({"role": "user", "content": text})]),
            Some(Value::Object(request)) if request.get("messages").is_some_and(Value::is_array) => {
                request.get("messages").and_then(Value::as_array).cloned()
            }
            _ => {
                text_attribute(span, "flowmem.query", gaps).map(|query| vec![json!({"role": "user", "content": query})])
            }
        };
    }
    if messages.output.is_none()
        && let Some(Value::String(text)) = value_attribute(span, "output.value", gaps)
    {
        messages.output = Some(vec![json!({"role": "assistant", "content": text})]);
    }
    messages
}

/// A tool span's call.
pub(super) fn tool_call(span: &OtlpSpan, gaps: &mut Vec<Gap>) -> ToolSpan {
    let name = text_attribute(span, "gen_ai.tool.name", gaps)
        .or_else(|| text_attribute(span, "tool.name", gaps))
        .map_or_else(|| span.name.trim_start_matches("execute_tool ").to_owned(), str::to_owned);
    let call_id = text_attribute(span, "gen_ai.tool.call.id", gaps)
        .or_else(|| text_attribute(span, "tool_call.id", gaps))
        .map(str::to_owned);
    let mut args = None;
    for key in ["gen_ai.tool.call.arguments", "tool_call.function.arguments", "input.value"] {
        let Some((idx, _)) = attribute(span, key) else { continue };
        let value =
            if key == "input.value" { value_attribute(span, key, gaps) } else { json_attribute(span, key, gaps) };
        match value {
            Some(Value::Object(object)) => {
                args = Some(object);
                break;
            }
            Some(Value::Null) | None => {}
            Some(other) => gaps.push(Gap {
                attribute: Some(idx),
                reason: format!(
                    "`{key}` must be a JSON object (or text holding one), found {}; the call's arguments are not kept",
                    kind(&other)
                ),
            }),
        }
    }
    if args.is_none()
        && let Some(Value::Object(parameters)) = json_attribute(span, "tool.parameters", gaps)
        && !parameters.contains_key("properties")
    {
        // `tool.parameters` is meant to be the tool's schema; some emitters put the
        // call's arguments there instead.
        args = Some(parameters);
    }
    let result = match attribute(span, "gen_ai.tool.call.result") {
        Some((_, Value::String(text))) => {
            Some(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone())))
        }
        Some((_, Value::Null)) | None => value_attribute(span, "output.value", gaps),
        Some((_, structured)) => Some(structured.clone()),
    };
    let error = (span.status_code == 2).then(|| {
        if span.status_message.is_empty() {
            match attribute(span, "error.type") {
                Some((_, Value::String(kind))) => kind.clone(),
                _ => "the tool span ended with an error status".to_owned(),
            }
        } else {
            span.status_message.clone()
        }
    });
    ToolSpan { name, call_id, args, result, error }
}

impl OtlpSpan {
    /// A span that only holds `attributes`, to read an event's attributes with the
    /// span readers.
    fn holding(attributes: &[crate::import::otlp::OtlpAttribute]) -> OtlpSpan {
        OtlpSpan {
            trace_id: String::new(),
            span_id: String::new(),
            parent_span_id: None,
            name: String::new(),
            start_ns: 0,
            end_ns: 0,
            attributes: attributes.to_vec(),
            dropped_attributes: 0,
            events: Vec::new(),
            dropped_events: 0,
            status_code: 0,
            status_message: String::new(),
            service: None,
            location: crate::import::Location { file: std::path::PathBuf::new(), line: None, json_path: None },
        }
    }
}
