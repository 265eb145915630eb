//! OpenTelemetry export: spans reach a loopback OTLP/HTTP receiver with GenAI attributes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use flowmem_exec::{ExecEvent, ExecObserver, OtelExporter};
use flowmem_model::{NodeObservation, ToolCall, Trace};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;

/// A received span: its name, parent presence, attributes and status code.
#[derive(Debug, Clone)]
struct ReceivedSpan {
    name: String,
    trace_id: Vec<u8>,
    has_parent: bool,
    attributes: Vec<(String, String)>,
    status_code: i32,
    start_ns: u64,
    end_ns: u64,
}

impl ReceivedSpan {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.iter().find(|(name, _)| name == key).map(|(_, value)| value.as_str())
    }
}

/// A tiny OTLP/HTTP receiver on loopback that decodes and keeps every span.
fn start_receiver() -> (String, Arc<Mutex<Vec<ReceivedSpan>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let spans = Arc::new(Mutex::new(Vec::new()));
    let kept = spans.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let kept = kept.clone();
            std::thread::spawn(move || serve(stream, &kept));
        }
    });
    (url, spans)
}

fn serve(stream: TcpStream, spans: &Mutex<Vec<ReceivedSpan>>) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut content_length = 0usize;
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                content_length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; content_length];
        reader.read_exact(&mut body).unwrap();
        assert!(request_line.starts_with("POST /v1/traces"), "{request_line}");
        let request = ExportTraceServiceRequest::decode(body.as_slice()).expect("OTLP protobuf");
        let mut received = spans.lock().unwrap();
        for resource in request.resource_spans {
            for scope in resource.scope_spans {
                for span in scope.spans {
                    let attributes = span
                        .attributes
                        .iter()
                        .map(|kv| {
                            let value = match kv.value.as_ref().and_then(|v| v.value.clone()) {
                                Some(AnyValue::StringValue(text)) => text,
                                Some(AnyValue::IntValue(n)) => n.to_string(),
                                other => format!("{other:?}"),
                            };
                            (kv.key.clone(), value)
                        })
                        .collect();
                    received.push(ReceivedSpan {
                        name: span.name,
                        trace_id: span.trace_id,
                        has_parent: !span.parent_span_id.is_empty(),
                        attributes,
                        status_code: span.status.map_or(0, |status| status.code),
                        start_ns: span.start_time_unix_nano,
                        end_ns: span.end_time_unix_nano,
                    });
                }
            }
        }
        drop(received);
        writer
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
    }
}

fn observation(node_id: &str, kind: &str, start: f64, latency: f64) -> NodeObservation {
    NodeObservation {
        node_id: node_id.to_owned(),
        node_kind: kind.to_owned(),
        started_at_ms: start,
        latency_ms: latency,
        ..NodeObservation::default()
    }
}

/// Millisecond floats at epoch scale round to about 100 ns.
fn assert_close(ns: u64, expected: u64) {
    assert!(ns.abs_diff(expected) < 1_000, "{ns} ns, expected {expected} ns");
}

#[test]
fn a_run_becomes_one_trace_of_genai_spans() {
    let (url, spans) = start_receiver();
    let exporter = OtelExporter::new(&url, "flowmem-test").unwrap();
    let t0 = 1_700_000_000_000.0;
    let mut plan = observation("plan", "llm:plan", t0 + 1.0, 20.0);
    plan.prompt_tokens = 30;
    plan.completion_tokens = 7;
    let mut call = ToolCall::new("get_order_details", serde_json::json!({"order_id": "#W1"})).unwrap();
    call.result = Some(serde_json::json!({"status": "pending"}));
    call.latency_ms = Some(5.0);
    let mut lookup = observation("lookup", "tool", t0 + 22.0, 10.0);
    lookup.tool_call = Some(call.clone());
    let mut answer = observation("answer", "llm:synthesize", t0 + 33.0, 15.0);
    answer.error = Some("model `m` did not answer".to_owned());
    let trace = Trace {
        query_id: "q1".into(),
        query: "where is my order".into(),
        tool_calls: vec![call.clone()],
        observations: vec![plan.clone(), lookup.clone(), answer.clone()],
        error: Some("node `answer` failed".into()),
        ..Trace::default()
    };
    let events = [
        ExecEvent::RunStarted { query_id: "q1".into(), query: trace.query.clone(), runner: "demo".into(), at_ms: t0 },
        ExecEvent::NodeFinished { query_id: "q1".into(), model: Some("m".into()), observation: plan },
        ExecEvent::ToolCalled { query_id: "q1".into(), node_id: "lookup".into(), started_at_ms: t0 + 25.0, call },
        ExecEvent::NodeFinished { query_id: "q1".into(), model: Some("m".into()), observation: lookup },
        ExecEvent::NodeFinished { query_id: "q1".into(), model: Some("m".into()), observation: answer },
        ExecEvent::RunFinished { query_id: "q1".into(), at_ms: t0 + 50.0, trace: Arc::new(trace) },
    ];
    for event in &events {
        exporter.on_event(event);
    }
    exporter.shutdown().unwrap();
    let spans = spans.lock().unwrap().clone();
    assert_eq!(spans.len(), 4, "{spans:#?}");
    assert!(spans.iter().all(|span| span.trace_id == spans[0].trace_id), "one trace per run");
    let root = spans.iter().find(|span| span.name == "invoke_agent demo").expect("root span");
    assert!(!root.has_parent);
    assert_eq!(root.attribute("gen_ai.operation.name"), Some("invoke_agent"));
    assert_eq!(root.status_code, 2, "the failed run has an error status");
    assert_close(root.end_ns - root.start_ns, 50_000_000);
    let chat = spans.iter().find(|span| span.attribute("flowmem.node.id") == Some("plan")).unwrap();
    assert_eq!(chat.name, "chat m");
    assert!(chat.has_parent);
    assert_eq!(chat.attribute("gen_ai.request.model"), Some("m"));
    assert_eq!(chat.attribute("gen_ai.usage.input_tokens"), Some("30"));
    assert_eq!(chat.attribute("gen_ai.usage.output_tokens"), Some("7"));
    let tool = spans.iter().find(|span| span.name == "execute_tool get_order_details").unwrap();
    assert_eq!(tool.attribute("gen_ai.tool.name"), Some("get_order_details"));
    assert_eq!(tool.attribute("gen_ai.tool.call.arguments"), Some("{\"order_id\":\"#W1\"}"));
    assert_close(tool.end_ns - tool.start_ns, 10_000_000);
    let failed = spans.iter().find(|span| span.attribute("flowmem.node.id") == Some("answer")).unwrap();
    assert_eq!(failed.status_code, 2);
    assert_eq!(failed.attribute("error.type"), Some("node_error"));
}
