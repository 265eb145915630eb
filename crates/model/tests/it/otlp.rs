//! The OTLP importer on spans made by real instrumentation (`tests/fixtures/otlp/`,
//! written by `scripts/reference/otlp_fixtures.py`), and on broken inputs.

use std::path::{Path, PathBuf};

use flowmem_model::{
    Action, ImportFormat, Imported, Item, OtlpEncoding, OtlpSignal, Trajectory, assemble_otlp, decode_otlp,
    encode_export_response, import,
};
use serde_json::{Value, json};

use crate::support::write_temp;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/otlp").join(name)
}

/// What the reference script did, per variant: its runs.
fn expected(variant: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(fixture("expected.json")).expect("expected.json");
    let all: Value = serde_json::from_str(&text).expect("expected.json is JSON");
    all[variant].as_array().expect("runs of the variant").clone()
}

fn trajectories(imported: &Imported) -> Vec<&Trajectory> {
    imported
        .items
        .iter()
        .map(|item| match item {
            Item::Trajectory(trajectory) => trajectory,
            Item::Record(record) => panic!("a record {}", record.id),
        })
        .collect()
}

fn import_file(path: &Path) -> Imported {
    import(ImportFormat::Otlp, path).unwrap_or_else(|err| panic!("importing {}: {err}", path.display()))
}

/// A tool result as JSON: tool messages carry the tool's output as text, tool spans as
/// the value itself.
fn as_json(value: &Value) -> Value {
    match value {
        Value::String(text) => serde_json::from_str(text).unwrap_or_else(|_| value.clone()),
        other => other.clone(),
    }
}

/// Checks that the trajectories are the script's runs: query, each call's tool, id,
/// arguments and result in order, and the final answer.
fn check_runs(imported: &Imported, runs: &[Value], what: &str) {
    let trajectories = trajectories(imported);
    assert_eq!(trajectories.len(), runs.len(), "{what}: {:#?}", imported.skipped);
    for (trajectory, run) in trajectories.iter().zip(runs) {
        assert_eq!(trajectory.query, run["query"].as_str().unwrap(), "{what}");
        if let Some(conversation) = run["conversation_id"].as_str() {
            assert_eq!(trajectory.id, conversation, "{what}: a conversation's spans are one trajectory");
        } else {
            assert_eq!(trajectory.id.len(), 32, "{what}: a run without a conversation is its trace");
        }
        let calls: Vec<_> = trajectory.tool_calls().collect();
        let steps = run["steps"].as_array().unwrap();
        assert_eq!(calls.len(), steps.len(), "{what}: {trajectory:#?}");
        for (call, step) in calls.iter().zip(steps) {
            assert_eq!(call.tool, step["tool"].as_str().unwrap(), "{what}");
            assert_eq!(Value::Object(call.args.clone()), step["arguments"], "{what}: arguments of {}", call.tool);
            assert_eq!(
                call.result.as_ref().map(as_json),
                Some(step["result"].clone()),
                "{what}: result of {}",
                call.tool
            );
            assert_eq!(call.error, None, "{what}");
        }
        assert_eq!(trajectory.final_answer.as_deref(), run["final_answer"].as_str(), "{what}");
        // The last step is the answer, after every call.
        assert!(matches!(trajectory.steps.last().map(|step| &step.action), Some(Action::Message { .. })), "{what}");
        assert_eq!(trajectory.meta.source.as_deref().map(|source| source.starts_with("otlp:")), Some(true));
    }
}

#[test]
fn genai_spans_in_every_encoding_import_to_what_the_script_did() {
    let runs = expected("genai-spans");
    for file in ["genai-spans.otlp.json", "genai-spans.otlp.jsonl", "genai-spans.otlp.pb"] {
        let imported = import_file(&fixture(file));
        assert!(imported.skipped.is_empty(), "{file}: {:#?}", imported.skipped);
        assert!(imported.gaps.is_empty(), "{file}: {:#?}", imported.gaps);
        check_runs(&imported, &runs, file);
    }
    // The tool spans' call ids are the model's.
    let imported = import_file(&fixture("genai-spans.otlp.pb"));
    let ids: Vec<_> = trajectories(&imported)[0].tool_calls().map(|call| call.call_id.clone().unwrap()).collect();
    assert_eq!(ids, ["call_0_0", "call_1_0"]);
}

#[test]
fn genai_events_in_logs_import_with_their_spans() {
    let runs = expected("genai-events");
    // The file exporter wrote spans and log records into one file.
    let imported = import_file(&fixture("genai-events.otlp.jsonl"));
    assert!(imported.skipped.is_empty(), "{:#?}", imported.skipped);
    assert!(imported.gaps.is_empty(), "{:#?}", imported.gaps);
    check_runs(&imported, &runs, "genai-events.otlp.jsonl");
    // In protobuf, traces and logs are two files: a directory import reads them together.
    let dir = tempfile::tempdir().unwrap();
    for name in ["genai-events.otlp.pb", "genai-events.logs.otlp.pb"] {
        std::fs::copy(fixture(name), dir.path().join(name)).unwrap();
    }
    let imported = import_file(dir.path());
    assert!(imported.gaps.is_empty(), "{:#?}", imported.gaps);
    check_runs(&imported, &runs, "genai-events protobuf");
    // Without the logs, the spans hold no content: each model call is a gap.
    let imported = import_file(&fixture("genai-events.otlp.pb"));
    let n_chat = imported.gaps.iter().filter(|gap| gap.reason.contains("recorded no messages")).count();
    assert_eq!(n_chat, 3, "{:#?}", imported.gaps);
}

#[test]
fn openinference_spans_import_to_what_the_script_did() {
    let runs = expected("openinference");
    for file in ["openinference.otlp.json", "openinference.otlp.jsonl", "openinference.otlp.pb"] {
        let imported = import_file(&fixture(file));
        assert!(imported.skipped.is_empty(), "{file}: {:#?}", imported.skipped);
        assert!(imported.gaps.is_empty(), "{file}: {:#?}", imported.gaps);
        check_runs(&imported, &runs, file);
    }
}

#[test]
fn spans_without_captured_content_import_their_tool_sequence_and_say_what_is_missing() {
    let runs = expected("genai-no-content");
    let imported = import_file(&fixture("genai-no-content.otlp.pb"));
    let trajectories = trajectories(&imported);
    assert_eq!(trajectories.len(), 1, "{:#?}", imported.skipped);
    let tools: Vec<_> = trajectories[0].tool_calls().map(|call| call.tool.as_str()).collect();
    let script: Vec<_> =
        runs[0]["steps"].as_array().unwrap().iter().map(|step| step["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, script, "the order of the calls survives");
    assert_eq!(trajectories[0].query, "");
    let reasons: Vec<&str> = imported.gaps.iter().map(|gap| gap.reason.as_str()).collect();
    assert_eq!(reasons.iter().filter(|reason| reason.contains("recorded no messages")).count(), 3, "{reasons:#?}");
    assert_eq!(reasons.iter().filter(|reason| reason.contains("no recorded result")).count(), 2, "{reasons:#?}");
    assert!(reasons.iter().any(|reason| reason.contains("query is empty")), "{reasons:#?}");
    // Every gap names the span's place.
    assert!(
        imported.gaps.iter().all(|gap| gap.location.json_path.as_deref().is_some_and(|path| path.contains(".spans[")))
    );
}

/// A span of the GenAI conventions in OTLP JSON.
fn span_json(span_id: &str, parent: Option<&str>, start: u64, attributes: Value) -> Value {
    let mut span = json!({
        "traceId": "5b8efff798038103d269b633813fc60c", "spanId": span_id, "name": "span",
        "startTimeUnixNano": start.to_string(), "endTimeUnixNano": (start + 1).to_string(),
        "attributes": attributes,
    });
    if let Some(parent) = parent {
        span["parentSpanId"] = json!(parent);
    }
    span
}

fn request(spans: Vec<Value>) -> String {
    json!({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).to_string()
}

fn text(value: &str) -> Value {
    json!({"stringValue": value})
}

fn chat(input: &str, output: &str) -> Value {
    json!([
        {"key": "gen_ai.operation.name", "value": text("chat")},
        {"key": "gen_ai.input.messages", "value": text(input)},
        {"key": "gen_ai.output.messages", "value": text(output)},
    ])
}

const ASK: &str = r#"[{"role":"user","parts":[{"type":"text","content":"Where is order 7?"}]}]"#;
const ANSWER: &str = r#"[{"role":"assistant","parts":[{"type":"text","content":"It shipped."}]}]"#;

#[test]
fn a_span_with_an_unknown_parent_imports_and_is_reported() {
    let text = request(vec![span_json("00000000000000a1", Some("00000000000000ff"), 10, chat(ASK, ANSWER))]);
    let (_dir, path) = write_temp("orphan.json", &text);
    let imported = import_file(&path);
    let trajectories = trajectories(&imported);
    assert_eq!(trajectories[0].final_answer.as_deref(), Some("It shipped."));
    assert_eq!(imported.gaps.len(), 1, "{:#?}", imported.gaps);
    let gap = imported.gaps[0].to_string();
    assert!(gap.contains("parent span `00000000000000ff` is not in the input"), "{gap}");
    assert!(gap.contains("orphan.json:1` at `$.resourceSpans[0].scopeSpans[0].spans[0]`"), "{gap}");
}

#[test]
fn content_cut_by_an_attribute_length_limit_is_reported_and_the_rest_imports() {
    // OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT cuts the JSON text of the answer.
    let cut = &ANSWER[..ANSWER.len() - 10];
    let text = request(vec![span_json("00000000000000a1", None, 10, chat(ASK, cut))]);
    let (_dir, path) = write_temp("cut.json", &text);
    let imported = import_file(&path);
    let trajectories = trajectories(&imported);
    assert_eq!(trajectories[0].query, "Where is order 7?");
    assert_eq!(trajectories[0].final_answer, None);
    let gaps: Vec<String> = imported.gaps.iter().map(ToString::to_string).collect();
    assert!(
        gaps.iter().any(|gap| gap.contains(
            "spans[0].attributes[2].value`: span `00000000000000a1` (span): `gen_ai.output.messages` is truncated"
        )),
        "{gaps:#?}"
    );
}

#[test]
fn a_fifty_megabyte_span_is_skipped_and_the_others_import() {
    let huge = "x".repeat(50_000_000);
    let big = span_json("00000000000000b2", None, 5, json!([{"key": "gen_ai.tool.call.result", "value": text(&huge)}]));
    let text = request(vec![big, span_json("00000000000000a1", None, 10, chat(ASK, ANSWER))]);
    let (_dir, path) = write_temp("big.json", &text);
    let imported = import_file(&path);
    assert_eq!(trajectories(&imported).len(), 1);
    assert_eq!(imported.skipped.len(), 1, "{:#?}", imported.skipped);
    let skipped = imported.skipped[0].to_string();
    assert!(skipped.contains("spans[0]`: the span is 50.0 MB, over the 16.8 MB one may take"), "{skipped}");
    // The same in protobuf, skipped by its length before it is decoded.
    let bytes = protobuf_request(vec![proto_span(&[0xb2; 8], &huge), proto_span(&[0xa1; 8], "ok")]);
    let batch = decode_otlp("big.pb".as_ref(), &bytes, OtlpEncoding::Protobuf(OtlpSignal::Traces));
    assert_eq!(batch.spans.len(), 1);
    assert_eq!(batch.n_rejected, 1);
    assert!(batch.skipped[0].reason.contains("50.0 MB"), "{:?}", batch.skipped);
}

#[test]
fn attributes_of_the_wrong_type_are_reported_and_the_rest_imports() {
    let spans = vec![
        span_json(
            "00000000000000a0",
            None,
            1,
            json!([
                {"key": "gen_ai.operation.name", "value": text("invoke_agent")},
                {"key": "gen_ai.conversation.id", "value": {"arrayValue": {"values": [text("c")]}}},
            ]),
        ),
        span_json(
            "00000000000000a1",
            Some("00000000000000a0"),
            10,
            json!([
                {"key": "gen_ai.operation.name", "value": text("chat")},
                {"key": "gen_ai.input.messages", "value": {"intValue": "7"}},
                {"key": "gen_ai.output.messages", "value": text(ANSWER)},
            ]),
        ),
        span_json(
            "00000000000000a2",
            Some("00000000000000a0"),
            20,
            json!([
                {"key": "gen_ai.operation.name", "value": text("execute_tool")},
                {"key": "gen_ai.tool.name", "value": text("track")},
                {"key": "gen_ai.tool.call.arguments", "value": {"boolValue": true}},
                {"key": "gen_ai.tool.call.result", "value": text("{\"status\": \"shipped\"}")},
            ]),
        ),
        // Not even a span: an id of the wrong type.
        json!({"traceId": 7, "spanId": "00000000000000a3"}),
    ];
    let (_dir, path) = write_temp("types.json", &request(spans));
    let imported = import_file(&path);
    let trajectories = trajectories(&imported);
    assert_eq!(trajectories.len(), 1);
    let call = trajectories[0].tool_calls().next().expect("the tool call imports");
    assert_eq!((call.tool.as_str(), call.args.len()), ("track", 0));
    assert_eq!(call.result, Some(json!({"status": "shipped"})));
    let gaps: Vec<String> = imported.gaps.iter().map(ToString::to_string).collect();
    let has = |needle: &str| gaps.iter().any(|gap| gap.contains(needle));
    assert!(
        has(
            "spans[0].attributes[1].value`: span `00000000000000a0` (span): `gen_ai.conversation.id` must be a string, found an array"
        ),
        "{gaps:#?}"
    );
    assert!(
        has(
            "spans[1].attributes[1].value`: span `00000000000000a1` (span): `gen_ai.input.messages` must be a list of messages, found a number"
        ),
        "{gaps:#?}"
    );
    assert!(
        has(
            "spans[2].attributes[2].value`: span `00000000000000a2` (span): `gen_ai.tool.call.arguments` must be a JSON object"
        ),
        "{gaps:#?}"
    );
    assert_eq!(imported.skipped.len(), 1, "{:#?}", imported.skipped);
    let skipped = imported.skipped[0].to_string();
    assert!(
        skipped.contains("spans[3].traceId`: the span cannot be read: expected a string, found a number"),
        "{skipped}"
    );
}

#[test]
fn truncated_protobuf_keeps_the_spans_before_the_cut_and_never_panics() {
    let bytes = std::fs::read(fixture("genai-spans.otlp.pb")).unwrap();
    let whole = decode_otlp("whole.pb".as_ref(), &bytes, OtlpEncoding::Protobuf(OtlpSignal::Traces));
    assert_eq!(whole.spans.len(), 12);
    let cut = &bytes[..bytes.len() * 2 / 3];
    let (_dir, path) = write_temp("cut.pb", "");
    std::fs::write(&path, cut).unwrap();
    let imported = import_file(&path);
    assert!(!imported.skipped.is_empty());
    let reasons: Vec<String> = imported.skipped.iter().map(ToString::to_string).collect();
    assert!(reasons.iter().any(|reason| reason.contains("end early: cut short at byte")), "{reasons:#?}");
    assert!(reasons.iter().all(|reason| reason.contains("cut.pb`")), "{reasons:#?}");
    // Some of the conversation's spans came before the cut.
    assert!(!imported.items.is_empty());
    // Every cut point gives spans and reasons, never a panic.
    for end in (0..bytes.len()).step_by(37) {
        let batch = decode_otlp("cut.pb".as_ref(), &bytes[..end], OtlpEncoding::Protobuf(OtlpSignal::Traces));
        assert!(batch.spans.len() <= whole.spans.len());
        let _ = assemble_otlp(batch.spans, batch.events, "otlp:cut.pb");
    }
    // Bytes that are not protobuf at all.
    let batch = decode_otlp("junk.pb".as_ref(), b"\xff\xff\xff\xff", OtlpEncoding::Protobuf(OtlpSignal::Traces));
    assert_eq!((batch.spans.len(), batch.n_envelope_errors), (0, 1));
}

#[test]
fn a_broken_line_of_the_collectors_file_is_skipped_and_the_other_lines_import() {
    let good = std::fs::read_to_string(fixture("genai-spans.otlp.jsonl")).unwrap();
    let text = format!("{{\"resourceSpans\": [{{\"scopeSpans\": \n{}", good.trim_end());
    let (_dir, path) = write_temp("collector.jsonl", &text);
    let imported = import_file(&path);
    check_runs(&imported, &expected("genai-spans"), "collector.jsonl after a broken line");
    assert_eq!(imported.skipped.len(), 1, "{:#?}", imported.skipped);
    let skipped = imported.skipped[0].to_string();
    assert!(skipped.contains("collector.jsonl:1`"), "{skipped}");
    assert!(skipped.contains("cut short?"), "{skipped}");
}

#[test]
fn the_wire_types_agree_with_opentelemetry_proto() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
    use prost::Message;
    let bytes = protobuf_request(vec![proto_span(&[0xa1; 8], "hello")]);
    let batch = decode_otlp("one.pb".as_ref(), &bytes, OtlpEncoding::Protobuf(OtlpSignal::Traces));
    assert!(batch.skipped.is_empty(), "{:?}", batch.skipped);
    let span = &batch.spans[0];
    assert_eq!(span.trace_id, "0102030405060708090a0b0c0d0e0f10");
    assert_eq!(span.span_id, "a1a1a1a1a1a1a1a1");
    assert_eq!(span.parent_span_id.as_deref(), Some("0909090909090909"));
    assert_eq!((span.start_ns, span.end_ns, span.status_code), (1_000, 2_000, 2));
    assert_eq!(span.status_message, "boom");
    assert_eq!(span.service.as_deref(), Some("svc"));
    let attributes: Vec<(&str, &Value)> = span.attributes.iter().map(|a| (a.key.as_str(), &a.value)).collect();
    assert_eq!(
        attributes,
        [("gen_ai.tool.call.result", &json!("hello")), ("n", &json!(-3)), ("list", &json!([true, 1.5]))]
    );
    assert_eq!(span.events[0].name, "gen_ai.choice");
    let response = encode_export_response(OtlpSignal::Traces, 3, "three spans had no id", true);
    let decoded = ExportTraceServiceResponse::decode(response.as_slice()).unwrap();
    let partial = decoded.partial_success.unwrap();
    assert_eq!((partial.rejected_spans, partial.error_message.as_str()), (3, "three spans had no id"));
}

/// A span built with opentelemetry-proto's own types, holding `result`.
fn proto_span(span_id: &[u8], result: &str) -> opentelemetry_proto::tonic::trace::v1::Span {
    use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::trace::v1::{Span, Status, span};
    let value = |value| Some(AnyValue { value: Some(value) });
    Span {
        trace_id: (1..=16).collect(),
        span_id: span_id.to_vec(),
        parent_span_id: vec![9; 8],
        name: "execute_tool track".to_owned(),
        start_time_unix_nano: 1_000,
        end_time_unix_nano: 2_000,
        attributes: vec![
            KeyValue {
                key: "gen_ai.tool.call.result".into(),
                value: value(any_value::Value::StringValue(result.into())),
                ..Default::default()
            },
            KeyValue { key: "n".into(), value: value(any_value::Value::IntValue(-3)), ..Default::default() },
            KeyValue {
                key: "list".into(),
                value: value(any_value::Value::ArrayValue(ArrayValue {
                    values: vec![
                        AnyValue { value: Some(any_value::Value::BoolValue(true)) },
                        AnyValue { value: Some(any_value::Value::DoubleValue(1.5)) },
                    ],
                })),
                ..Default::default()
            },
        ],
        events: vec![span::Event { time_unix_nano: 1_500, name: "gen_ai.choice".into(), ..Default::default() }],
        status: Some(Status { message: "boom".into(), code: 2 }),
        ..Default::default()
    }
}

fn protobuf_request(spans: Vec<opentelemetry_proto::tonic::trace::v1::Span>) -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
    use prost::Message;
    let service = KeyValue {
        key: "service.name".into(),
        value: Some(AnyValue { value: Some(any_value::Value::StringValue("svc".into())) }),
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource { attributes: vec![service], ..Default::default() }),
            scope_spans: vec![ScopeSpans { spans, ..Default::default() }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}
