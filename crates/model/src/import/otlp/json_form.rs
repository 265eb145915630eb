//! OTLP JSON: one request, or one request a line.
//!
//! The envelopes (`resourceSpans[i].scopeSpans[j].spans[k]`, and `resourceLogs`,
//! `scopeLogs`, `logRecords` for logs) are walked as raw slices of the text, so each
//! span's line is found in one pass and a span too large to keep is skipped before it is
//! parsed. Each span or record is then parsed and read through [`Node`], so a problem
//! names its JSON path. Ids are hex, 64-bit integers strings or numbers, as the OTLP
//! JSON encoding says.

use std::path::Path;

use serde_json::Value;

use crate::import::Location;
use crate::import::json::{LineCounter, Node, Problem, Segment, offset_in, render_path, top_level_children, type_name};
use crate::import::otlp::{
    MAX_SPAN_BYTES, OtlpAttribute, OtlpBatch, OtlpEvent, OtlpLogEvent, OtlpSpan, check_hex_id, too_large,
};

/// The envelope keys of each signal: resource level, scope level, item level.
const TRACES: [&str; 3] = ["resourceSpans", "scopeSpans", "spans"];
const LOGS: [&str; 3] = ["resourceLogs", "scopeLogs", "logRecords"];

/// Where the requests of one file are: the file, and how to find a line.
struct Place<'a> {
    file: &'a Path,
    /// The whole file's text, which every raw slice is part of.
    text: &'a str,
    /// The line of every slice, for a JSONL line; `None` to count lines in `text`.
    fixed_line: Option<usize>,
    lines: LineCounter<'a>,
}

impl Place<'_> {
    fn line_of(&mut self, raw: &str) -> usize {
        match self.fixed_line {
            Some(line) => line,
            None => self.lines.line_at(offset_in(self.text, raw)),
        }
    }
}

/// Reads a file holding one OTLP JSON request.
pub(super) fn read_document(file: &Path, text: &str, out: &mut OtlpBatch) {
    let mut place = Place { file, text, fixed_line: None, lines: LineCounter::new(text) };
    read_request(&mut place, text, out);
}

/// Reads a file of one OTLP JSON request a line.
pub(super) fn read_lines(file: &Path, text: &str, out: &mut OtlpBatch) {
    for (idx, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut place = Place { file, text, fixed_line: Some(idx + 1), lines: LineCounter::new(text) };
        read_request(&mut place, line, out);
    }
}

/// The members of an object as raw slices, or why the slice is not an object.
fn object_members(raw: &str) -> Result<Vec<(String, &str)>, String> {
    match top_level_children(raw) {
        Ok(children) if raw.trim_start().starts_with('{') => {
            Ok(children.into_iter().map(|(key, raw)| (key.unwrap_or_default(), raw)).collect())
        }
        Ok(_) => Err("expected an object, found an array".to_owned()),
        Err(err) => Err(syntax(&err)),
    }
}

/// The elements of an array as raw slices, or why the slice is not an array.
fn array_elements(raw: &str) -> Result<Vec<&str>, String> {
    match top_level_children(raw) {
        Ok(children) if raw.trim_start().starts_with('[') => Ok(children.into_iter().map(|(_, raw)| raw).collect()),
        Ok(_) => Err("expected an array, found an object".to_owned()),
        Err(err) => Err(syntax(&err)),
    }
}

fn syntax(err: &serde_json::Error) -> String {
    if err.is_eof() {
        format!("not valid JSON, it ends early (cut short?): {err}")
    } else {
        format!("not valid JSON: {err}")
    }
}

fn member<'r>(members: &[(String, &'r str)], key: &str) -> Option<&'r str> {
    members.iter().find(|(name, raw)| name == key && raw.trim() != "null").map(|(_, raw)| *raw)
}

fn read_request(place: &mut Place<'_>, raw: &str, out: &mut OtlpBatch) {
    let line = place.fixed_line;
    let members = match object_members(raw) {
        Ok(members) => members,
        Err(reason) => {
            let line = Some(line.unwrap_or_else(|| place.line_of(raw)));
            out.envelope_error(place.file, line, "$".to_owned(), format!("not an OTLP request: {reason}"));
            return;
        }
    };
    let spans = member(&members, TRACES[0]);
    let logs = member(&members, LOGS[0]);
    if spans.is_none() && logs.is_none() {
        let line = Some(line.unwrap_or_else(|| place.line_of(raw)));
        let reason = "not an OTLP request: it has neither `resourceSpans` nor `resourceLogs`".to_owned();
        out.envelope_error(place.file, line, "$".to_owned(), reason);
        return;
    }
    if let Some(raw) = spans {
        read_envelope(place, raw, TRACES, out);
    }
    if let Some(raw) = logs {
        read_envelope(place, raw, LOGS, out);
    }
}

/// Walks `resource*[i].scope*[j].items[k]` and reads each item.
fn read_envelope(place: &mut Place<'_>, raw: &str, keys: [&str; 3], out: &mut OtlpBatch) {
    let mut path = vec![Segment::Key(keys[0].to_owned())];
    let resources = match array_elements(raw) {
        Ok(elements) => elements,
        Err(reason) => return envelope(place, raw, &path, reason, out),
    };
    for (i, resource_raw) in resources.into_iter().enumerate() {
        path.truncate(1);
        path.push(Segment::Index(i));
        let members = match object_members(resource_raw) {
            Ok(members) => members,
            Err(reason) => {
                envelope(place, resource_raw, &path, reason, out);
                continue;
            }
        };
        let service = member(&members, "resource").and_then(service_name);
        let Some(scopes_raw) = member(&members, keys[1]) else { continue };
        path.push(Segment::Key(keys[1].to_owned()));
        let scopes = match array_elements(scopes_raw) {
            Ok(elements) => elements,
            Err(reason) => {
                envelope(place, scopes_raw, &path, reason, out);
                continue;
            }
        };
        for (j, scope_raw) in scopes.into_iter().enumerate() {
            path.truncate(3);
            path.push(Segment::Index(j));
            let members = match object_members(scope_raw) {
                Ok(members) => members,
                Err(reason) => {
                    envelope(place, scope_raw, &path, reason, out);
                    continue;
                }
            };
            let Some(items_raw) = member(&members, keys[2]) else { continue };
            path.push(Segment::Key(keys[2].to_owned()));
            let items = match array_elements(items_raw) {
                Ok(elements) => elements,
                Err(reason) => {
                    envelope(place, items_raw, &path, reason, out);
                    continue;
                }
            };
            for (k, item_raw) in items.into_iter().enumerate() {
                path.truncate(5);
                path.push(Segment::Index(k));
                read_item(place, item_raw, &path, keys == TRACES, service.as_deref(), out);
            }
        }
    }
}

fn envelope(place: &mut Place<'_>, raw: &str, path: &[Segment], reason: String, out: &mut OtlpBatch) {
    let line = Some(place.line_of(raw));
    out.envelope_error(place.file, line, render_path(path, &[]), reason);
}

/// `resource.attributes[service.name]`, when it is a string.
fn service_name(raw: &str) -> Option<String> {
    let resource: Value = serde_json::from_str(raw).ok()?;
    let attributes = resource.get("attributes")?.as_array()?;
    let service = attributes.iter().find(|kv| kv.get("key").and_then(Value::as_str) == Some("service.name"))?;
    service.pointer("/value/stringValue")?.as_str().map(str::to_owned)
}

fn read_item(
    place: &mut Place<'_>,
    raw: &str,
    path: &[Segment],
    is_span: bool,
    service: Option<&str>,
    out: &mut OtlpBatch,
) {
    let line = place.line_of(raw);
    let location = Location { file: place.file.to_owned(), line: Some(line), json_path: Some(render_path(path, &[])) };
    let what = if is_span { "span" } else { "log record" };
    if raw.len() > MAX_SPAN_BYTES {
        out.reject(location, too_large(what, raw.len()));
        return;
    }
    let value: Value = match serde_json::from_str(raw) {
        Ok(value) => value,
        Err(err) => return out.reject(location, syntax(&err)),
    };
    let node = Node::root(&value);
    let problem_at = |problem: Problem| {
        let location = Location { json_path: Some(render_path(path, &problem.segments)), ..location.clone() };
        (location, problem.message)
    };
    if is_span {
        match span(&node, service, &location) {
            Ok(span) => out.spans.push(span),
            Err(problem) => {
                let (location, reason) = problem_at(problem);
                out.reject(location, format!("the span cannot be read: {reason}"));
            }
        }
        return;
    }
    match log_event(&node, &location) {
        Ok(Some(event)) => out.events.push(event),
        Ok(None) => out.n_unlinked_records += 1,
        Err(problem) => {
            let (location, reason) = problem_at(problem);
            out.reject(location, format!("the log record cannot be read: {reason}"));
        }
    }
}

fn span(node: &Node<'_, '_>, service: Option<&str>, location: &Location) -> Result<OtlpSpan, Problem> {
    let trace_id = id(node, "traceId", 16)?;
    let span_id = id(node, "spanId", 8)?;
    let parent_span_id = match node.opt_field("parentSpanId")? {
        Some(parent) if parent.value.as_str().is_some_and(str::is_empty) => None,
        Some(_) => Some(id(node, "parentSpanId", 8)?),
        None => None,
    };
    let name = match node.opt_field("name")? {
        Some(name) => name.as_str()?.to_owned(),
        None => String::new(),
    };
    let status = node.opt_field("status")?;
    let (status_code, status_message) = match status {
        Some(status) => (
            opt_u64(&status, "code")?.unwrap_or(0).try_into().unwrap_or(0),
            match status.opt_field("message")? {
                Some(message) => message.as_str()?.to_owned(),
                None => String::new(),
            },
        ),
        None => (0, String::new()),
    };
    let mut events = Vec::new();
    if let Some(list) = node.opt_field("events")? {
        for (idx, value) in list.as_array()?.iter().enumerate() {
            let event = list.child(idx, value);
            events.push(OtlpEvent {
                name: match event.opt_field("name")? {
                    Some(name) => name.as_str()?.to_owned(),
                    None => String::new(),
                },
                time_ns: opt_u64(&event, "timeUnixNano")?.unwrap_or(0),
                attributes: attributes(&event)?,
                body: None,
            });
        }
    }
    Ok(OtlpSpan {
        trace_id,
        span_id,
        parent_span_id,
        name,
        start_ns: opt_u64(node, "startTimeUnixNano")?.unwrap_or(0),
        end_ns: opt_u64(node, "endTimeUnixNano")?.unwrap_or(0),
        attributes: attributes(node)?,
        dropped_attributes: opt_u64(node, "droppedAttributesCount")?.unwrap_or(0).try_into().unwrap_or(u32::MAX),
        events,
        dropped_events: opt_u64(node, "droppedEventsCount")?.unwrap_or(0).try_into().unwrap_or(u32::MAX),
        status_code,
        status_message,
        service: service.map(str::to_owned),
        location: location.clone(),
    })
}

/// A log record as an event of its span; `None` when it names no span.
fn log_event(node: &Node<'_, '_>, location: &Location) -> Result<Option<OtlpLogEvent>, Problem> {
    let named = |key: &str| -> Result<bool, Problem> {
        Ok(node.opt_field(key)?.is_some_and(|id| id.value.as_str().is_some_and(|text| !text.is_empty())))
    };
    if !named("traceId")? || !named("spanId")? {
        return Ok(None);
    }
    let attributes = attributes(node)?;
    let name = match node.opt_field("eventName")? {
        Some(name) if name.value.as_str().is_some_and(|text| !text.is_empty()) => name.as_str()?.to_owned(),
        _ => match attributes.iter().find(|attribute| attribute.key == "event.name") {
            Some(OtlpAttribute { value: Value::String(name), .. }) => name.clone(),
            _ => String::new(),
        },
    };
    let time_ns = match opt_u64(node, "timeUnixNano")? {
        Some(time) if time > 0 => time,
        _ => opt_u64(node, "observedTimeUnixNano")?.unwrap_or(0),
    };
    let body = match node.opt_field("body")? {
        Some(body) => Some(any_value(&body)?),
        None => None,
    };
    Ok(Some(OtlpLogEvent {
        trace_id: id(node, "traceId", 16)?,
        span_id: id(node, "spanId", 8)?,
        event: OtlpEvent { name, time_ns, attributes, body },
        location: location.clone(),
    }))
}

fn id(node: &Node<'_, '_>, key: &str, n_bytes: usize) -> Result<String, Problem> {
    let field = node.field(key)?;
    check_hex_id(field.as_str()?, n_bytes, key).map_err(|message| field.problem(message))
}

/// A 64-bit unsigned integer, as a string or a number.
fn opt_u64(node: &Node<'_, '_>, key: &str) -> Result<Option<u64>, Problem> {
    let Some(field) = node.opt_field(key)? else { return Ok(None) };
    let parsed = match field.value {
        Value::String(text) => text.parse().ok(),
        Value::Number(number) => number.as_u64(),
        _ => None,
    };
    match parsed {
        Some(n) => Ok(Some(n)),
        None => Err(field
            .problem(format!("expected an unsigned integer (a string or a number), found {}", type_name(field.value)))),
    }
}

fn attributes(node: &Node<'_, '_>) -> Result<Vec<OtlpAttribute>, Problem> {
    let Some(list) = node.opt_field("attributes")? else { return Ok(Vec::new()) };
    key_values(&list)
}

fn key_values(list: &Node<'_, '_>) -> Result<Vec<OtlpAttribute>, Problem> {
    let items = list.as_array()?;
    let mut res = Vec::with_capacity(items.len());
    for (idx, value) in items.iter().enumerate() {
        let kv = list.child(idx, value);
        let key = kv.field("key")?.as_str()?.to_owned();
        let value = match kv.opt_field("value")? {
            Some(value) => any_value(&value)?,
            None => Value::Null,
        };
        res.push(OtlpAttribute { key, value });
    }
    Ok(res)
}

/// An `AnyValue` as JSON: see [`OtlpAttribute`].
fn any_value(node: &Node<'_, '_>) -> Result<Value, Problem> {
    let Value::Object(members) = node.value else {
        return Err(node.problem(format!("expected an AnyValue object, found {}", type_name(node.value))));
    };
    let Some((kind, _)) = members.iter().find(|(_, value)| !value.is_null()) else { return Ok(Value::Null) };
    let field = node.field(kind)?;
    match kind.as_str() {
        "stringValue" | "bytesValue" => Ok(Value::String(field.as_str()?.to_owned())),
        "boolValue" => match field.value {
            Value::Bool(flag) => Ok(Value::Bool(*flag)),
            other => Err(field.problem(format!("expected a boolean, found {}", type_name(other)))),
        },
        "intValue" => match field.value {
            Value::Number(number) if number.is_i64() || number.is_u64() => Ok(Value::Number(number.clone())),
            Value::String(text) => text
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| field.problem(format!("expected a 64-bit integer, found {text:?}"))),
            other => Err(field.problem(format!("expected an integer, found {}", type_name(other)))),
        },
        "doubleValue" => match field.value {
            Value::Number(number) => Ok(Value::Number(number.clone())),
            // Proto3 JSON writes these three as strings; JSON has no place for them.
            Value::String(text) if matches!(text.as_str(), "NaN" | "Infinity" | "-Infinity") => Ok(Value::Null),
            other => Err(field.problem(format!("expected a number, found {}", type_name(other)))),
        },
        "arrayValue" => {
            let Some(values) = field.opt_field("values")? else { return Ok(Value::Array(Vec::new())) };
            let items = values.as_array()?;
            let mut res = Vec::with_capacity(items.len());
            for (idx, item) in items.iter().enumerate() {
                res.push(any_value(&values.child(idx, item))?);
            }
            Ok(Value::Array(res))
        }
        "kvlistValue" => {
            let Some(values) = field.opt_field("values")? else { return Ok(Value::Object(serde_json::Map::new())) };
            Ok(Value::Object(key_values(&values)?.into_iter().map(|kv| (kv.key, kv.value)).collect()))
        }
        other => Err(field.problem(format!(
            "unknown AnyValue kind `{other}`: expected stringValue, boolValue, intValue, doubleValue, arrayValue, kvlistValue or bytesValue"
        ))),
    }
}
