//! OTLP protobuf: an `ExportTraceServiceRequest` or an `ExportLogsServiceRequest`.
//!
//! The three envelope levels (request, resource, scope) are walked field by field, so a
//! payload cut short keeps every span before the cut and the cut is reported at the
//! envelope it fell in, and a span larger than [`MAX_SPAN_BYTES`] is skipped by its
//! length before it is decoded. Each span or log record is decoded with the `prost`
//! messages of `wire.rs` and checked like the JSON form; locations use the JSON form's
//! paths (`$.resourceSpans[0].scopeSpans[0].spans[3]`).

use std::path::Path;

use base64::Engine as _;
use prost::Message as _;
use prost::encoding::{WireType, decode_key, decode_varint};
use serde_json::Value;

use crate::import::Location;
use crate::import::otlp::wire::{self, any_value};
use crate::import::otlp::{
    MAX_SPAN_BYTES, OtlpAttribute, OtlpBatch, OtlpEvent, OtlpLogEvent, OtlpSignal, OtlpSpan, check_bytes_id, too_large,
};

/// One field of a message: its number and, for the length-delimited ones flowmem reads,
/// its bytes.
struct Field<'a> {
    number: u32,
    bytes: Option<&'a [u8]>,
    /// Whether the payload ends inside this field: `bytes` are the ones that remain, and
    /// a message there may still hold whole spans before the cut.
    cut: bool,
}

/// The fields of `buf` in order, or why the message is malformed after the last one.
///
/// A length-delimited field longer than what remains is the last field, marked `cut`.
fn fields(mut buf: &[u8]) -> (Vec<Field<'_>>, Option<String>) {
    let total = buf.len();
    let mut res = Vec::new();
    while !buf.is_empty() {
        let at = total - buf.len();
        let (number, wire_type) = match decode_key(&mut buf) {
            Ok(key) => key,
            Err(err) => return (res, Some(format!("malformed field key at byte {at}: {err}"))),
        };
        let skipped = match wire_type {
            WireType::Varint => decode_varint(&mut buf).map(|_| None).map_err(|err| err.to_string()),
            WireType::SixtyFourBit | WireType::ThirtyTwoBit => {
                let width = if wire_type == WireType::SixtyFourBit { 8 } else { 4 };
                if buf.len() < width {
                    Err(format!("field {number} needs {width} bytes, {} remain", buf.len()))
                } else {
                    buf = &buf[width..];
                    Ok(None)
                }
            }
            WireType::LengthDelimited => match decode_varint(&mut buf) {
                Ok(len) => match usize::try_from(len).ok().filter(|len| *len <= buf.len()) {
                    Some(len) => {
                        let (bytes, rest) = buf.split_at(len);
                        buf = rest;
                        Ok(Some(bytes))
                    }
                    None => {
                        let reason = format!("field {number} needs {len} bytes, {} remain", buf.len());
                        res.push(Field { number, bytes: Some(buf), cut: true });
                        return (res, Some(format!("cut short at byte {at} of {total}: {reason}")));
                    }
                },
                Err(err) => Err(err.to_string()),
            },
            WireType::StartGroup | WireType::EndGroup => Err(format!("field {number} uses deprecated groups")),
        };
        match skipped {
            Ok(bytes) => res.push(Field { number, bytes, cut: false }),
            Err(reason) => {
                return (res, Some(format!("cut short or malformed at byte {at} of {total}: {reason}")));
            }
        }
    }
    (res, None)
}

/// The JSON form's names of a signal's envelope levels.
fn keys(signal: OtlpSignal) -> [&'static str; 3] {
    match signal {
        OtlpSignal::Traces => ["resourceSpans", "scopeSpans", "spans"],
        OtlpSignal::Logs => ["resourceLogs", "scopeLogs", "logRecords"],
    }
}

/// Reads one protobuf payload of `signal` into `out`.
///
/// A cut is reported once, at the deepest level it fell in: a resource or scope the
/// payload ends inside is still read up to the cut.
pub(super) fn read(file: &Path, bytes: &[u8], signal: OtlpSignal, out: &mut OtlpBatch) {
    let [resource_key, scope_key, item_key] = keys(signal);
    let what = match signal {
        OtlpSignal::Traces => "ExportTraceServiceRequest",
        OtlpSignal::Logs => "ExportLogsServiceRequest",
    };
    let (resources, broken) = fields(bytes);
    let resources: Vec<&Field<'_>> =
        resources.iter().filter(|field| field.number == 1 && field.bytes.is_some()).collect();
    if let Some(reason) = broken
        && !resources.last().is_some_and(|field| field.cut)
    {
        let path = format!("$.{resource_key}[{}]", resources.len());
        out.envelope_error(file, None, path, format!("not a valid OTLP protobuf {what}: {reason}"));
    }
    for (i, resource) in resources.iter().filter_map(|field| field.bytes).enumerate() {
        let resource_path = format!("$.{resource_key}[{i}]");
        let (members, broken) = fields(resource);
        let service = members
            .iter()
            .filter(|field| field.number == 1 && !field.cut)
            .filter_map(|field| field.bytes)
            .find_map(|bytes| wire::Resource::decode(bytes).ok())
            .and_then(|resource| {
                resource.attributes.into_iter().find(|kv| kv.key == "service.name").and_then(|kv| match kv.value {
                    Some(wire::AnyValue { value: Some(any_value::Value::String(name)) }) => Some(name),
                    _ => None,
                })
            });
        let scopes: Vec<&Field<'_>> =
            members.iter().filter(|field| field.number == 2 && field.bytes.is_some()).collect();
        if let Some(reason) = broken
            && !scopes.last().is_some_and(|field| field.cut)
        {
            let path = format!("{resource_path}.{scope_key}[{}]", scopes.len());
            out.envelope_error(file, None, path, format!("the resource's scopes end early: {reason}"));
        }
        for (j, scope) in scopes.iter().filter_map(|field| field.bytes).enumerate() {
            let scope_path = format!("{resource_path}.{scope_key}[{j}]");
            let (members, broken) = fields(scope);
            // An item the payload ends inside is not read: it is the cut reported below.
            let items = members.iter().filter(|field| field.number == 2 && !field.cut).filter_map(|field| field.bytes);
            let mut n_items = 0;
            for (k, item) in items.enumerate() {
                n_items += 1;
                let location = Location {
                    file: file.to_owned(),
                    line: None,
                    json_path: Some(format!("{scope_path}.{item_key}[{k}]")),
                };
                read_item(item, signal, service.as_deref(), location, out);
            }
            if let Some(reason) = broken {
                let path = format!("{scope_path}.{item_key}[{n_items}]");
                out.envelope_error(file, None, path, format!("the scope's records end early: {reason}"));
            }
        }
    }
}

fn read_item(bytes: &[u8], signal: OtlpSignal, service: Option<&str>, location: Location, out: &mut OtlpBatch) {
    let what = match signal {
        OtlpSignal::Traces => "span",
        OtlpSignal::Logs => "log record",
    };
    if bytes.len() > MAX_SPAN_BYTES {
        out.reject(location, too_large(what, bytes.len()));
        return;
    }
    match signal {
        OtlpSignal::Traces => match wire::Span::decode(bytes) {
            Ok(span) => match span_of(span, service, &location) {
                Ok(span) => out.spans.push(span),
                Err(reason) => out.reject(location, format!("the span cannot be read: {reason}")),
            },
            Err(err) => out.reject(location, format!("the span is not valid protobuf: {err}")),
        },
        OtlpSignal::Logs => match wire::LogRecord::decode(bytes) {
            Ok(record) if record.trace_id.is_empty() || record.span_id.is_empty() => out.n_unlinked_records += 1,
            Ok(record) => match log_event_of(record, &location) {
                Ok(event) => out.events.push(event),
                Err(reason) => out.reject(location, format!("the log record cannot be read: {reason}")),
            },
            Err(err) => out.reject(location, format!("the log record is not valid protobuf: {err}")),
        },
    }
}

fn span_of(span: wire::Span, service: Option<&str>, location: &Location) -> Result<OtlpSpan, String> {
    let parent_span_id = if span.parent_span_id.is_empty() {
        None
    } else {
        Some(check_bytes_id(&span.parent_span_id, 8, "parentSpanId")?)
    };
    let status = span.status.unwrap_or_default();
    Ok(OtlpSpan {
        trace_id: check_bytes_id(&span.trace_id, 16, "traceId")?,
        span_id: check_bytes_id(&span.span_id, 8, "spanId")?,
        parent_span_id,
        name: span.name,
        start_ns: span.start_time_unix_nano,
        end_ns: span.end_time_unix_nano,
        attributes: attributes(span.attributes),
        dropped_attributes: span.dropped_attributes_count,
        events: span
            .events
            .into_iter()
            .map(|event| OtlpEvent {
                name: event.name,
                time_ns: event.time_unix_nano,
                attributes: attributes(event.attributes),
                body: None,
            })
            .collect(),
        dropped_events: span.dropped_events_count,
        status_code: status.code,
        status_message: status.message,
        service: service.map(str::to_owned),
        location: location.clone(),
    })
}

fn log_event_of(record: wire::LogRecord, location: &Location) -> Result<OtlpLogEvent, String> {
    let attributes = attributes(record.attributes);
    let name = if record.event_name.is_empty() {
        match attributes.iter().find(|attribute| attribute.key == "event.name") {
            Some(OtlpAttribute { value: Value::String(name), .. }) => name.clone(),
            _ => String::new(),
        }
    } else {
        record.event_name
    };
    let time_ns = if record.time_unix_nano > 0 { record.time_unix_nano } else { record.observed_time_unix_nano };
    Ok(OtlpLogEvent {
        trace_id: check_bytes_id(&record.trace_id, 16, "traceId")?,
        span_id: check_bytes_id(&record.span_id, 8, "spanId")?,
        event: OtlpEvent { name, time_ns, attributes, body: record.body.map(json_of) },
        location: location.clone(),
    })
}

fn attributes(key_values: Vec<wire::KeyValue>) -> Vec<OtlpAttribute> {
    key_values
        .into_iter()
        .map(|kv| OtlpAttribute { key: kv.key, value: kv.value.map_or(Value::Null, json_of) })
        .collect()
}

/// An `AnyValue` as JSON: see [`OtlpAttribute`].
fn json_of(value: wire::AnyValue) -> Value {
    match value.value {
        None => Value::Null,
        Some(any_value::Value::String(text)) => Value::String(text),
        Some(any_value::Value::Bool(flag)) => Value::Bool(flag),
        Some(any_value::Value::Int(n)) => Value::from(n),
        // NaN and infinities have no JSON form.
        Some(any_value::Value::Double(x)) => serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number),
        Some(any_value::Value::Array(array)) => Value::Array(array.values.into_iter().map(json_of).collect()),
        Some(any_value::Value::Kvlist(list)) => {
            Value::Object(list.values.into_iter().map(|kv| (kv.key, kv.value.map_or(Value::Null, json_of))).collect())
        }
        Some(any_value::Value::Bytes(bytes)) => Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
    }
}
