//! OpenTelemetry traces of agents (OTLP), read as [`Trajectory`]s: the GenAI semantic
//! conventions and OpenInference's.
//!
//! Three encodings are read: OTLP protobuf (`*.pb`, `*.binpb`, `*.protobuf`; a file
//! whose name holds `logs` is an `ExportLogsServiceRequest`, any other an
//! `ExportTraceServiceRequest`), OTLP JSON (`*.json`, one request), and JSON lines as the
//! Collector's file exporter writes them (`*.jsonl`, `*.ndjson`, or a `*.json` file of
//! one request a line, spans and logs mixed). Every file of one import is read first, so
//! spans and the log events that belong to them may come from different files.
//!
//! Reading ([`decode_otlp`]) gives [`OtlpSpan`]s and [`OtlpLogEvent`]s, each with the
//! place it was read from; a span that cannot be read is a [`Skipped`] naming its file,
//! line and JSON path (`$.resourceSpans[0].scopeSpans[1].spans[3]`, the same path in
//! protobuf), and the others still import. [`assemble_otlp`] then turns them into
//! trajectories (see `assemble.rs`), and reports in [`Imported::gaps`] what a span held
//! that could not be reconstructed.
//!
//! [`Trajectory`]: crate::Trajectory
//! [`Skipped`]: crate::Skipped
//! [`Imported::gaps`]: crate::Imported::gaps

mod assemble;
mod conventions;
mod json_form;
mod protobuf;
mod wire;

use std::path::{Path, PathBuf};

use prost::Message as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::import::{ImportError, Imported, Location, Skipped};

pub use self::assemble::assemble_otlp;

/// The most bytes one span (or log record) may take in its encoding; a larger one is
/// skipped, naming its size. Tool results of a few megabytes fit; a span of 50 MB is a
/// mistake or an attack, and would be held in memory several times over.
pub const MAX_SPAN_BYTES: usize = 16 << 20;

/// Which OTLP signal a protobuf payload carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OtlpSignal {
    /// An `ExportTraceServiceRequest` (`/v1/traces`).
    Traces,
    /// An `ExportLogsServiceRequest` (`/v1/logs`), whose records may be GenAI events.
    Logs,
}

/// How an OTLP payload is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OtlpEncoding {
    /// Binary protobuf, of one signal.
    Protobuf(OtlpSignal),
    /// One OTLP JSON request (traces or logs, told apart by their members).
    Json,
    /// One OTLP JSON request a line, as the Collector's file exporter writes.
    JsonLines,
}

/// One attribute: its key and its value as JSON (an OTLP int or double is a number, an
/// array an array, a key-value list an object, bytes a base64 string, an empty value
/// null).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtlpAttribute {
    /// The key, such as `gen_ai.operation.name`.
    pub key: String,
    /// The value.
    pub value: Value,
}

/// A span event, or a log record read as an event of its span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtlpEvent {
    /// The event's name (a log record's `event_name`, or its `event.name` attribute).
    pub name: String,
    /// When it happened, in nanoseconds since the Unix epoch (0 when unknown).
    pub time_ns: u64,
    /// Its attributes.
    #[serde(default)]
    pub attributes: Vec<OtlpAttribute>,
    /// A log record's body; span events have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
}

/// One span, as read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtlpSpan {
    /// The trace id, 32 lowercase hex digits.
    pub trace_id: String,
    /// The span id, 16 lowercase hex digits.
    pub span_id: String,
    /// The parent's span id; `None` for a root span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
    /// The span's name, such as `chat gpt-4o` or `execute_tool get_weather`.
    pub name: String,
    /// Start time in nanoseconds since the Unix epoch.
    pub start_ns: u64,
    /// End time in nanoseconds since the Unix epoch.
    pub end_ns: u64,
    /// The attributes, in the order they came.
    #[serde(default)]
    pub attributes: Vec<OtlpAttribute>,
    /// How many attributes the SDK dropped (its limits).
    #[serde(default)]
    pub dropped_attributes: u32,
    /// The span's events, in the order they came; GenAI log events of the span are
    /// added here when spans are assembled.
    #[serde(default)]
    pub events: Vec<OtlpEvent>,
    /// How many events the SDK dropped.
    #[serde(default)]
    pub dropped_events: u32,
    /// The status code: 0 unset, 1 ok, 2 error.
    #[serde(default)]
    pub status_code: i32,
    /// The status message, for an error.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status_message: String,
    /// The resource's `service.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Where the span was read from.
    pub location: Location,
}

/// A log record that belongs to a span: a GenAI event in the events form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtlpLogEvent {
    /// The trace id of its span.
    pub trace_id: String,
    /// The id of its span.
    pub span_id: String,
    /// The event.
    pub event: OtlpEvent,
    /// Where the record was read from.
    pub location: Location,
}

/// What OTLP payloads held: the spans and log events read, and what could not be read.
#[derive(Debug, Clone, Default, PartialEq)]
#[must_use]
pub struct OtlpBatch {
    /// The spans read, in input order.
    pub spans: Vec<OtlpSpan>,
    /// The log records read that name a span, in input order.
    pub events: Vec<OtlpLogEvent>,
    /// Spans, records and parts of the payload that could not be read, with why.
    pub skipped: Vec<Skipped>,
    /// How many of `skipped` are about the payload itself (not valid JSON or protobuf,
    /// cut short, a malformed envelope), not about one span or record.
    pub n_envelope_errors: usize,
    /// How many spans (or log records) were skipped one by one.
    pub n_rejected: usize,
    /// How many log records were read past because they name no span (plain logs, not
    /// GenAI events).
    pub n_unlinked_records: usize,
}

impl OtlpBatch {
    /// Appends everything `other` holds.
    pub fn append(&mut self, mut other: OtlpBatch) {
        self.spans.append(&mut other.spans);
        self.events.append(&mut other.events);
        self.skipped.append(&mut other.skipped);
        self.n_envelope_errors += other.n_envelope_errors;
        self.n_rejected += other.n_rejected;
        self.n_unlinked_records += other.n_unlinked_records;
    }

    /// Records that the payload itself is broken at `json_path`.
    fn envelope_error(&mut self, file: &Path, line: Option<usize>, json_path: String, reason: String) {
        self.n_envelope_errors += 1;
        let location = Location { file: file.to_owned(), line, json_path: Some(json_path) };
        self.skipped.push(Skipped { location, reason });
    }

    /// Records that one span or record at `location` was skipped.
    fn reject(&mut self, location: Location, reason: String) {
        self.n_rejected += 1;
        self.skipped.push(Skipped { location, reason });
    }
}

/// Reads one OTLP payload, `bytes`, in `encoding`; `file` labels the locations.
///
/// Nothing fails as a whole: what cannot be read is in [`OtlpBatch::skipped`], and
/// whatever came before a cut or a bad span is kept.
///
/// # Example
///
/// ```
/// use flowmem_model::{OtlpEncoding, decode_otlp};
///
/// let json = r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{
///     "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
///     "name": "execute_tool get_weather", "startTimeUnixNano": "1", "endTimeUnixNano": "2",
///     "attributes": [{"key": "gen_ai.tool.name", "value": {"stringValue": "get_weather"}}]}]}]}]}"#;
/// let batch = decode_otlp("spans.json".as_ref(), json.as_bytes(), OtlpEncoding::Json);
/// assert_eq!(batch.spans[0].name, "execute_tool get_weather");
/// assert!(batch.skipped.is_empty());
/// ```
pub fn decode_otlp(file: &Path, bytes: &[u8], encoding: OtlpEncoding) -> OtlpBatch {
    let mut batch = OtlpBatch::default();
    match encoding {
        OtlpEncoding::Protobuf(signal) => protobuf::read(file, bytes, signal, &mut batch),
        OtlpEncoding::Json | OtlpEncoding::JsonLines => match std::str::from_utf8(bytes) {
            Ok(text) if encoding == OtlpEncoding::Json => json_form::read_document(file, text, &mut batch),
            Ok(text) => json_form::read_lines(file, text, &mut batch),
            Err(err) => batch.envelope_error(
                file,
                None,
                "$".to_owned(),
                format!("not OTLP JSON: the bytes are not UTF-8 text ({err})"),
            ),
        },
    }
    batch
}

/// The encoding of an OTLP file, by its name: see the module docs.
#[must_use]
pub fn otlp_file_encoding(file: &Path, bytes: &[u8]) -> OtlpEncoding {
    let name = file.file_name().map(|name| name.to_string_lossy().to_lowercase()).unwrap_or_default();
    if [".pb", ".binpb", ".protobuf"].iter().any(|ext| name.ends_with(ext)) {
        let signal = if name.contains("logs") { OtlpSignal::Logs } else { OtlpSignal::Traces };
        return OtlpEncoding::Protobuf(signal);
    }
    if name.ends_with(".jsonl") || name.ends_with(".ndjson") {
        return OtlpEncoding::JsonLines;
    }
    // A `.json` file is one request, unless it is the file exporter's lines.
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.lines().filter(|line| !line.trim().is_empty());
    let first = lines.next();
    let more = lines.next().is_some();
    let first_is_whole = first.is_some_and(|line| serde_json::from_str::<serde::de::IgnoredAny>(line).is_ok());
    if more && first_is_whole { OtlpEncoding::JsonLines } else { OtlpEncoding::Json }
}

/// Whether `name` is a file an OTLP import of a directory reads.
pub(crate) fn is_otlp_file(name: &str) -> bool {
    let name = name.to_lowercase();
    [".json", ".jsonl", ".ndjson", ".pb", ".binpb", ".protobuf"].iter().any(|ext| name.ends_with(ext))
}

/// Reads every file, then assembles their spans together (see the module docs).
pub(crate) fn import_files(files: Vec<PathBuf>) -> Result<Imported, ImportError> {
    let mut batch = OtlpBatch::default();
    let mut imported = Imported::default();
    let mut sources = Vec::new();
    for file in files {
        let bytes = std::fs::read(&file).map_err(|source| ImportError::Read { path: file.clone(), source })?;
        batch.append(decode_otlp(&file, &bytes, otlp_file_encoding(&file, &bytes)));
        sources.push(file.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default());
        imported.files.push(file);
    }
    let source = format!("otlp:{}", sources.join(","));
    if batch.n_unlinked_records > 0 {
        imported.notes.push(format!(
            "{} log record(s) name no span and are not GenAI events of one; they were read past",
            batch.n_unlinked_records
        ));
    }
    imported.skipped = batch.skipped;
    imported.append(assemble_otlp(batch.spans, batch.events, &source));
    Ok(imported)
}

/// The body of an OTLP/HTTP export response: success, or partial success with the
/// number of spans (or log records) rejected and why.
///
/// # Example
///
/// ```
/// use flowmem_model::{OtlpSignal, encode_export_response};
///
/// let body = encode_export_response(OtlpSignal::Traces, 2, "2 spans have no trace id", false);
/// let json: serde_json::Value = serde_json::from_slice(&body)?;
/// assert_eq!(json["partialSuccess"]["rejectedSpans"], "2");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[must_use]
pub fn encode_export_response(signal: OtlpSignal, rejected: u64, message: &str, protobuf: bool) -> Vec<u8> {
    let partial = (rejected > 0 || !message.is_empty()).then(|| wire::PartialSuccess {
        rejected: i64::try_from(rejected).unwrap_or(i64::MAX),
        error_message: message.to_owned(),
    });
    if protobuf {
        return wire::ExportResponse { partial_success: partial }.encode_to_vec();
    }
    let key = match signal {
        OtlpSignal::Traces => "rejectedSpans",
        OtlpSignal::Logs => "rejectedLogRecords",
    };
    let body = match partial {
        // Proto3's JSON mapping writes int64 as a string.
        Some(partial) => {
            serde_json::json!({"partialSuccess": {key: partial.rejected.to_string(), "errorMessage": partial.error_message}})
        }
        None => serde_json::json!({}),
    };
    body.to_string().into_bytes()
}

/// The body of an OTLP/HTTP error response: a `google.rpc.Status` with `code` (a
/// `google.rpc.Code`, such as 3 for an invalid argument) and `message`.
#[must_use]
pub fn encode_rpc_status(code: i32, message: &str, protobuf: bool) -> Vec<u8> {
    if protobuf {
        return wire::RpcStatus { code, message: message.to_owned() }.encode_to_vec();
    }
    serde_json::json!({"code": code, "message": message}).to_string().into_bytes()
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
    }
    out
}

/// Checks an id of `n_bytes` bytes given as hex (OTLP JSON), and returns it lowercased.
fn check_hex_id(text: &str, n_bytes: usize, what: &str) -> Result<String, String> {
    let valid = text.len() == n_bytes * 2 && text.bytes().all(|b| b.is_ascii_hexdigit());
    if !valid {
        return Err(format!("`{what}` must be {} hex digits, found {:?}", n_bytes * 2, shorten(text, 40)));
    }
    if text.bytes().all(|b| b == b'0') {
        return Err(format!("`{what}` is all zeros, which OTLP calls invalid"));
    }
    Ok(text.to_ascii_lowercase())
}

/// Checks an id of `n_bytes` raw bytes (protobuf), and returns it as hex.
fn check_bytes_id(bytes: &[u8], n_bytes: usize, what: &str) -> Result<String, String> {
    if bytes.len() != n_bytes {
        return Err(format!("`{what}` must be {n_bytes} bytes, found {}", bytes.len()));
    }
    check_hex_id(&hex(bytes), n_bytes, what)
}

/// At most `max` characters of `text`, with `…` when cut.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((idx, _)) => format!("{}…", &text[..idx]),
        None => text.to_owned(),
    }
}

/// "12.3 MB".
fn megabytes(n_bytes: usize) -> String {
    format!("{:.1} MB", n_bytes as f64 / 1e6)
}

/// The reason a span or record of `n_bytes` is skipped.
fn too_large(what: &str, n_bytes: usize) -> String {
    format!(
        "the {what} is {}, over the {} one may take; it is skipped (hint: lower the instrumentation's attribute length limit, OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT)",
        megabytes(n_bytes),
        megabytes(MAX_SPAN_BYTES)
    )
}

#[cfg(test)]
mod tests {
    use crate::import::otlp::{check_hex_id, hex, shorten};

    #[test]
    fn ids_are_checked_hex() {
        assert_eq!(hex(&[0x0a, 0xff]), "0aff");
        assert_eq!(check_hex_id("00F1000000000000", 8, "spanId").unwrap(), "00f1000000000000");
        assert!(check_hex_id("0000000000000000", 8, "spanId").unwrap_err().contains("all zeros"));
        assert!(check_hex_id("xyz", 8, "spanId").unwrap_err().contains("16 hex digits"));
        assert_eq!(shorten("abcdef", 3), "abc…");
    }
}
