//! OpenTelemetry export: spans reach a loopback OTLP/HTTP receiver with GenAI attributes,
//! and model's OTLP importer reads them back as the run's trajectory.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use flowmem_exec::{ExecEvent, ExecObserver, OtelExporter};
use flowmem_model::{
    Action, NodeObservation, OtlpBatch, OtlpEncoding, OtlpSignal, ToolCall, Trace, assemble_otlp, decode_otlp,
};
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

/// Request bodies as received.
type Bodies = Arc<Mutex<Vec<Vec<u8>>>>;

/// A tiny OTLP/HTTP receiver on loopback that decodes and keeps every span, and every
/// request body as it came.
fn start_receiver() -> (String, Arc<Mutex<Vec<ReceivedSpan>>>, Bodies) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let spans = Arc::new(Mutex::new(Vec::new()));
    let bodies: Bodies = Arc::new(Mutex::new(Vec::new()));
    let (kept, kept_bodies) = (spans.clone(), bodies.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (kept, kept_bodies) = (kept.clone(), kept_bodies.clone());
            std::thread::spawn(move || serve(stream, &kept, &kept_bodies));
        }
    });
    (url, spans, bodies)
}

fn serve(stream: TcpStream, spans: &Mutex<Vec<ReceivedSpan>>, bodies: &Mutex<Vec<Vec<u8>>>) {
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
        bodies.lock().unwrap().push(body.clone());
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
    let (url, spans, _bodies) = start_receiver();
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

fn tool_call(tool: &str, args: serde_json::Value, result: Option<serde_json::Value>, error: Option<&str>) -> ToolCall {
    let mut call = ToolCall::new(tool, args).unwrap();
    call.result = result;
    call.error = error.map(str::to_owned);
    call.latency_ms = Some(4.0);
    call
}

#[test]
fn an_exported_run_imports_back_as_the_same_trajectory() {
    let (url, _spans, bodies) = start_receiver();
    let exporter = OtelExporter::new(&url, "flowmem-test").unwrap();
    let t0 = 1_700_000_000_000.0;
    // A workflow: plan, two tool nodes (the second fails), then an agent step's own call
    // and the answer.
    let lookup_call = tool_call(
        "get_order_details",
        serde_json::json!({"order_id": "#W1"}),
        Some(serde_json::json!({"status": "pending", "items": [{"id": "7", "price": 9.5}]})),
        None,
    );
    let cancel_call = tool_call(
        "cancel_pending_order",
        serde_json::json!({"order_id": "#W1", "reason": "no longer needed"}),
        None,
        Some("order #W1 is locked"),
    );
    let agent_call =
        tool_call("get_user", serde_json::json!({"user_id": "u1"}), Some(serde_json::json!("u1: Ada")), None);
    let plan = observation("plan", "llm:plan", t0 + 1.0, 10.0);
    let mut lookup = observation("lookup", "tool", t0 + 12.0, 5.0);
    lookup.tool_call = Some(lookup_call.clone());
    let mut cancel = observation("cancel", "tool", t0 + 18.0, 5.0);
    cancel.tool_call = Some(cancel_call.clone());
    cancel.error = cancel_call.error.clone();
    let step = observation("step-1", "agent:react", t0 + 24.0, 10.0);
    let trace = Trace {
        query_id: "q7".into(),
        query: "Cancel my order #W1 please".into(),
        tool_calls: vec![lookup_call.clone(), cancel_call.clone(), agent_call.clone()],
        result: Some("Order #W1 could not be cancelled: it is locked.".into()),
        observations: vec![plan.clone(), lookup.clone(), cancel.clone(), step.clone()],
        ..Trace::default()
    };
    let query_id = || "q7".to_owned();
    let events = [
        ExecEvent::RunStarted {
            query_id: query_id(),
            query: trace.query.clone(),
            runner: "workflow".into(),
            at_ms: t0,
        },
        ExecEvent::NodeFinished { query_id: query_id(), model: Some("m".into()), observation: plan },
        ExecEvent::NodeFinished { query_id: query_id(), model: None, observation: lookup },
        ExecEvent::NodeFinished { query_id: query_id(), model: None, observation: cancel },
        ExecEvent::ToolCalled {
            query_id: query_id(),
            node_id: "step-1".into(),
            started_at_ms: t0 + 30.0,
            call: agent_call,
        },
        ExecEvent::NodeFinished { query_id: query_id(), model: Some("m".into()), observation: step },
        ExecEvent::RunFinished { query_id: query_id(), at_ms: t0 + 40.0, trace: Arc::new(trace.clone()) },
    ];
    for event in &events {
        exporter.on_event(event);
    }
    exporter.shutdown().unwrap();

    let mut batch = OtlpBatch::default();
    for body in bodies.lock().unwrap().iter() {
        batch.append(decode_otlp("export.pb".as_ref(), body, OtlpEncoding::Protobuf(OtlpSignal::Traces)));
    }
    assert!(batch.skipped.is_empty(), "{:#?}", batch.skipped);
    let imported = assemble_otlp(batch.spans, batch.events, "otlp:export.pb");
    assert!(imported.skipped.is_empty(), "{:#?}", imported.skipped);
    assert_eq!(imported.items.len(), 1, "one run, one trajectory");
    let flowmem_model::Item::Trajectory(trajectory) = &imported.items[0] else { panic!("a trajectory") };
    assert_eq!(trajectory.query, trace.query);
    assert_eq!(trajectory.final_answer, trace.result);
    let calls: Vec<_> = trajectory
        .tool_calls()
        .map(|call| (call.tool.clone(), call.args.clone(), call.result.clone(), call.error.clone()))
        .collect();
    let expected: Vec<_> = trace
        .tool_calls
        .iter()
        .map(|call| (call.tool.clone(), call.args.clone(), call.result.clone(), call.error.clone()))
        .collect();
    assert_eq!(calls, expected, "tools, arguments, results and errors, in order");
    assert!(matches!(trajectory.steps.last().map(|step| &step.action), Some(Action::Message { .. })));
    // exec records no chat content: each model call is a gap, and nothing else is.
    let reasons: Vec<&str> = imported.gaps.iter().map(|gap| gap.reason.as_str()).collect();
    assert_eq!(reasons.len(), 2, "{reasons:#?}");
    assert!(reasons.iter().all(|reason| reason.contains("the model call recorded no messages")), "{reasons:#?}");
}
