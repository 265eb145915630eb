//! The OTLP messages flowmem reads and writes, declared with `prost`'s derive from the
//! stable v1 `.proto` files of opentelemetry-proto (trace, logs, common, resource, and
//! the collector services' responses), with the same field numbers.
//!
//! Only the fields flowmem uses are declared: protobuf skips the others, so links,
//! trace state and schema URLs are read past, not kept. The envelopes
//! (`ExportTraceServiceRequest`, `ResourceSpans`, `ScopeSpans` and their log
//! counterparts) are walked field by field in `protobuf.rs` instead, so a request cut
//! short keeps the spans before the cut.
//!
//! `opentelemetry-proto` has these types too, but it depends on the OpenTelemetry SDK,
//! which `model` (no async, at the bottom of every crate's build) does not take; the
//! tests check these declarations against it.

/// `opentelemetry.proto.common.v1.AnyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AnyValue {
    /// The value, one of seven kinds; `None` is an empty value.
    #[prost(oneof = "any_value::Value", tags = "1, 2, 3, 4, 5, 6, 7")]
    pub(crate) value: Option<any_value::Value>,
}

/// The kinds of [`AnyValue`].
pub(crate) mod any_value {
    /// `AnyValue.value`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub(crate) enum Value {
        /// `string_value`.
        #[prost(string, tag = "1")]
        String(String),
        /// `bool_value`.
        #[prost(bool, tag = "2")]
        Bool(bool),
        /// `int_value`.
        #[prost(int64, tag = "3")]
        Int(i64),
        /// `double_value`.
        #[prost(double, tag = "4")]
        Double(f64),
        /// `array_value`.
        #[prost(message, tag = "5")]
        Array(super::ArrayValue),
        /// `kvlist_value`.
        #[prost(message, tag = "6")]
        Kvlist(super::KeyValueList),
        /// `bytes_value`.
        #[prost(bytes, tag = "7")]
        Bytes(Vec<u8>),
    }
}

/// `opentelemetry.proto.common.v1.ArrayValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ArrayValue {
    /// `values`.
    #[prost(message, repeated, tag = "1")]
    pub(crate) values: Vec<AnyValue>,
}

/// `opentelemetry.proto.common.v1.KeyValueList`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct KeyValueList {
    /// `values`.
    #[prost(message, repeated, tag = "1")]
    pub(crate) values: Vec<KeyValue>,
}

/// `opentelemetry.proto.common.v1.KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct KeyValue {
    /// `key`.
    #[prost(string, tag = "1")]
    pub(crate) key: String,
    /// `value`.
    #[prost(message, optional, tag = "2")]
    pub(crate) value: Option<AnyValue>,
}

/// `opentelemetry.proto.resource.v1.Resource`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Resource {
    /// `attributes`.
    #[prost(message, repeated, tag = "1")]
    pub(crate) attributes: Vec<KeyValue>,
}

/// `opentelemetry.proto.trace.v1.Span`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Span {
    /// `trace_id`: 16 bytes.
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) trace_id: Vec<u8>,
    /// `span_id`: 8 bytes.
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) span_id: Vec<u8>,
    /// `parent_span_id`: 8 bytes, or empty for a root span.
    #[prost(bytes = "vec", tag = "4")]
    pub(crate) parent_span_id: Vec<u8>,
    /// `name`.
    #[prost(string, tag = "5")]
    pub(crate) name: String,
    /// `kind` (`SpanKind`).
    #[prost(int32, tag = "6")]
    pub(crate) kind: i32,
    /// `start_time_unix_nano`.
    #[prost(fixed64, tag = "7")]
    pub(crate) start_time_unix_nano: u64,
    /// `end_time_unix_nano`.
    #[prost(fixed64, tag = "8")]
    pub(crate) end_time_unix_nano: u64,
    /// `attributes`.
    #[prost(message, repeated, tag = "9")]
    pub(crate) attributes: Vec<KeyValue>,
    /// `dropped_attributes_count`.
    #[prost(uint32, tag = "10")]
    pub(crate) dropped_attributes_count: u32,
    /// `events`.
    #[prost(message, repeated, tag = "11")]
    pub(crate) events: Vec<SpanEvent>,
    /// `dropped_events_count`.
    #[prost(uint32, tag = "12")]
    pub(crate) dropped_events_count: u32,
    /// `status`.
    #[prost(message, optional, tag = "15")]
    pub(crate) status: Option<Status>,
}

/// `opentelemetry.proto.trace.v1.Span.Event`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SpanEvent {
    /// `time_unix_nano`.
    #[prost(fixed64, tag = "1")]
    pub(crate) time_unix_nano: u64,
    /// `name`.
    #[prost(string, tag = "2")]
    pub(crate) name: String,
    /// `attributes`.
    #[prost(message, repeated, tag = "3")]
    pub(crate) attributes: Vec<KeyValue>,
}

/// `opentelemetry.proto.trace.v1.Status`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Status {
    /// `message`.
    #[prost(string, tag = "2")]
    pub(crate) message: String,
    /// `code`: 0 unset, 1 ok, 2 error.
    #[prost(int32, tag = "3")]
    pub(crate) code: i32,
}

/// `opentelemetry.proto.logs.v1.LogRecord`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct LogRecord {
    /// `time_unix_nano`.
    #[prost(fixed64, tag = "1")]
    pub(crate) time_unix_nano: u64,
    /// `body`.
    #[prost(message, optional, tag = "5")]
    pub(crate) body: Option<AnyValue>,
    /// `attributes`.
    #[prost(message, repeated, tag = "6")]
    pub(crate) attributes: Vec<KeyValue>,
    /// `trace_id`: 16 bytes, or empty.
    #[prost(bytes = "vec", tag = "9")]
    pub(crate) trace_id: Vec<u8>,
    /// `span_id`: 8 bytes, or empty.
    #[prost(bytes = "vec", tag = "10")]
    pub(crate) span_id: Vec<u8>,
    /// `observed_time_unix_nano`.
    #[prost(fixed64, tag = "11")]
    pub(crate) observed_time_unix_nano: u64,
    /// `event_name`.
    #[prost(string, tag = "12")]
    pub(crate) event_name: String,
}

/// `opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse`, and the logs
/// service's response, which has the same shape.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExportResponse {
    /// `partial_success`.
    #[prost(message, optional, tag = "1")]
    pub(crate) partial_success: Option<PartialSuccess>,
}

/// `ExportTracePartialSuccess` (`rejected_spans`) or `ExportLogsPartialSuccess`
/// (`rejected_log_records`).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PartialSuccess {
    /// The number of rejected spans or log records.
    #[prost(int64, tag = "1")]
    pub(crate) rejected: i64,
    /// `error_message`.
    #[prost(string, tag = "2")]
    pub(crate) error_message: String,
}

/// `google.rpc.Status`, the body of an OTLP/HTTP error response.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RpcStatus {
    /// `code`: a `google.rpc.Code`.
    #[prost(int32, tag = "1")]
    pub(crate) code: i32,
    /// `message`.
    #[prost(string, tag = "2")]
    pub(crate) message: String,
}
