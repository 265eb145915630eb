//! OpenTelemetry export of runs as spans over OTLP/HTTP (protobuf), following the GenAI
//! semantic conventions.
//!
//! Each finished run becomes one trace: a root `invoke_agent {runner}` span; under it, a
//! `chat {model}` span per LLM node or agent step, an `execute_tool {tool}` span per tool
//! node (and per agent tool call), and a short span per control node. Spans carry their
//! real start and end times from the observations, token usage as
//! `gen_ai.usage.input_tokens`/`output_tokens`, tool names, arguments and results, and an
//! error status for failed nodes. The root span records the run's query and final
//! result as GenAI messages (`gen_ai.input.messages`, `gen_ai.output.messages`), so
//! `flowmem import --format otlp` reads the run back as the same trajectory: query, tool
//! calls with arguments, results and errors in order, and answer.
//! Calls the run-time guard flagged are events
//! `flowmem.guard.deviation` on the root span (tool, expected tools, blocked), counted in
//! its `flowmem.guard.deviations` attribute.
//!
//! The exporter uses the blocking reqwest client on the batch processor's own thread:
//! the async client was seen to panic at shutdown ("no reactor running").

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flowmem_model::{NodeObservation, ToolCall};
use opentelemetry::trace::{Span, SpanKind, Status, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use crate::event::{ExecEvent, ExecObserver};

/// An OpenTelemetry exporter could not be built or flushed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// The OTLP exporter could not be built (for example, a malformed endpoint).
    #[error("cannot build the OTLP exporter for `{endpoint}`: {message}")]
    Build {
        /// The endpoint.
        endpoint: String,
        /// The exporter's message.
        message: String,
    },
    /// Spans could not be flushed at shutdown.
    #[error("cannot flush spans to the OTLP endpoint: {message}")]
    Flush {
        /// The SDK's message.
        message: String,
    },
}

/// Exports every finished run as OpenTelemetry spans to an OTLP/HTTP endpoint.
pub struct OtelExporter {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    runs: Mutex<HashMap<String, RunSpans>>,
}

#[derive(Default)]
struct RunSpans {
    runner: String,
    started_at_ms: f64,
    // The model of each finished node, in observation order.
    models: Vec<Option<String>>,
    // Tool calls not made by a workflow tool node (the agent's), with their start times.
    calls: Vec<(String, f64, ToolCall)>,
}

impl OtelExporter {
    /// Connects an exporter to `endpoint`: a collector base URL such as
    /// `http://localhost:4318` (`/v1/traces` is appended) or a full traces URL.
    ///
    /// # Errors
    ///
    /// [`OtelError::Build`] when the exporter cannot be built from the endpoint.
    pub fn new(endpoint: &str, service_name: &str) -> Result<OtelExporter, OtelError> {
        let url = if endpoint.trim_end_matches('/').ends_with("/v1/traces") {
            endpoint.to_owned()
        } else {
            format!("{}/v1/traces", endpoint.trim_end_matches('/'))
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|err| OtelError::Build { endpoint: endpoint.to_owned(), message: err.to_string() })?;
        let resource = Resource::builder().with_service_name(service_name.to_owned()).build();
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
        let tracer = provider.tracer("flowmem-exec");
        Ok(OtelExporter { provider, tracer, runs: Mutex::new(HashMap::new()) })
    }

    /// Exports every span still buffered and stops the exporter. Blocks until done, so
    /// call it from a blocking context (such as `spawn_blocking`) in async code.
    ///
    /// # Errors
    ///
    /// [`OtelError::Flush`] when the endpoint does not accept the last batch.
    pub fn shutdown(&self) -> Result<(), OtelError> {
        self.provider.force_flush().map_err(|err| OtelError::Flush { message: err.to_string() })?;
        self.provider.shutdown().map_err(|err| OtelError::Flush { message: err.to_string() })
    }

    fn export_run(&self, query_id: &str, run: RunSpans, trace: &flowmem_model::Trace, ended_at_ms: f64) {
        let mut root = self
            .tracer
            .span_builder(format!("invoke_agent {}", run.runner))
            .with_kind(SpanKind::Internal)
            .with_start_time(at(run.started_at_ms))
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                KeyValue::new("gen_ai.agent.name", run.runner.clone()),
                KeyValue::new("flowmem.query.id", query_id.to_owned()),
                KeyValue::new("flowmem.query", trace.query.clone()),
                KeyValue::new("flowmem.tool_calls", trace.tool_calls.len() as i64),
            ])
            .start(&self.tracer);
        for (key, value) in run_messages(trace) {
            root.set_attribute(KeyValue::new(key, value));
        }
        if let Some(error) = &trace.error {
            root.set_status(Status::error(error.clone()));
            root.set_attribute(KeyValue::new("error.type", "run_failed"));
        }
        if !trace.deviations.is_empty() {
            root.set_attribute(KeyValue::new("flowmem.guard.deviations", trace.deviations.len() as i64));
        }
        for deviation in &trace.deviations {
            root.add_event(
                "flowmem.guard.deviation",
                vec![
                    KeyValue::new("flowmem.guard.index", deviation.index as i64),
                    KeyValue::new("gen_ai.tool.name", deviation.tool.clone().unwrap_or_default()),
                    KeyValue::new("flowmem.guard.expected", deviation.expected.join(",")),
                    KeyValue::new("flowmem.guard.blocked", deviation.blocked),
                ],
            );
        }
        let parent = Context::current_with_span(root);
        for (observation, model) in trace.observations.iter().zip(run.models.iter().chain(std::iter::repeat(&None))) {
            self.node_span(&parent, observation, model.as_deref());
        }
        for (node_id, started_at_ms, call) in &run.calls {
            self.tool_span(&parent, node_id, *started_at_ms, call);
        }
        parent.span().end_with_timestamp(at(ended_at_ms));
    }

    fn node_span(&self, parent: &Context, observation: &NodeObservation, model: Option<&str>) {
        let mut attributes = vec![
            KeyValue::new("flowmem.node.id", observation.node_id.clone()),
            KeyValue::new("flowmem.node.kind", observation.node_kind.clone()),
            KeyValue::new("flowmem.iteration", i64::from(observation.iteration)),
        ];
        let is_llm = observation.node_kind.starts_with("llm:") || observation.node_kind.starts_with("agent:");
        let (name, kind) =
            if let Some(call) = observation.tool_call.as_ref().filter(|_| observation.node_kind == "tool") {
                attributes.extend(tool_attributes(call));
                (format!("execute_tool {}", call.tool), SpanKind::Internal)
            } else if is_llm {
                attributes.push(KeyValue::new("gen_ai.operation.name", "chat"));
                (format!("chat {}", model.unwrap_or("unknown")), SpanKind::Client)
            } else {
                (format!("{} {}", observation.node_kind, observation.node_id), SpanKind::Internal)
            };
        if let Some(model) = model {
            attributes.push(KeyValue::new("gen_ai.request.model", model.to_owned()));
        }
        if observation.prompt_tokens > 0 || observation.completion_tokens > 0 || is_llm {
            attributes.push(KeyValue::new("gen_ai.usage.input_tokens", observation.prompt_tokens as i64));
            attributes.push(KeyValue::new("gen_ai.usage.output_tokens", observation.completion_tokens as i64));
        }
        let mut span = self
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_start_time(at(observation.started_at_ms))
            .with_attributes(attributes)
            .start_with_context(&self.tracer, parent);
        if let Some(error) = &observation.error {
            span.set_status(Status::error(error.clone()));
            span.set_attribute(KeyValue::new("error.type", "node_error"));
        }
        span.end_with_timestamp(at(observation.started_at_ms + observation.latency_ms));
    }

    fn tool_span(&self, parent: &Context, node_id: &str, started_at_ms: f64, call: &ToolCall) {
        let mut attributes = tool_attributes(call);
        attributes.push(KeyValue::new("flowmem.node.id", node_id.to_owned()));
        let mut span = self
            .tracer
            .span_builder(format!("execute_tool {}", call.tool))
            .with_kind(SpanKind::Internal)
            .with_start_time(at(started_at_ms))
            .with_attributes(attributes)
            .start_with_context(&self.tracer, parent);
        if let Some(error) = &call.error {
            span.set_status(Status::error(error.clone()));
            span.set_attribute(KeyValue::new("error.type", "tool_error"));
        }
        span.end_with_timestamp(at(started_at_ms + call.latency_ms.unwrap_or(0.0)));
    }
}

impl ExecObserver for OtelExporter {
    fn on_event(&self, event: &ExecEvent) {
        let mut runs = self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match event {
            ExecEvent::RunStarted { query_id, runner, at_ms, .. } => {
                runs.insert(
                    query_id.clone(),
                    RunSpans { runner: runner.clone(), started_at_ms: *at_ms, ..RunSpans::default() },
                );
            }
            ExecEvent::NodeFinished { query_id, model, .. } => {
                runs.entry(query_id.clone()).or_default().models.push(model.clone());
            }
            // Workflow tool nodes get their span from the observation; agent steps do not.
            ExecEvent::ToolCalled { query_id, node_id, started_at_ms, call } if node_id.starts_with("step-") => {
                runs.entry(query_id.clone()).or_default().calls.push((node_id.clone(), *started_at_ms, call.clone()));
            }
            ExecEvent::RunFinished { query_id, at_ms, trace } => {
                let run = runs.remove(query_id).unwrap_or_default();
                drop(runs);
                self.export_run(query_id, run, trace, *at_ms);
            }
            _ => {}
        }
    }
}

fn tool_attributes(call: &ToolCall) -> Vec<KeyValue> {
    let mut res = vec![
        KeyValue::new("gen_ai.operation.name", "execute_tool"),
        KeyValue::new("gen_ai.tool.name", call.tool.clone()),
        KeyValue::new("gen_ai.tool.type", "function"),
        KeyValue::new("gen_ai.tool.call.arguments", serde_json::Value::Object(call.args.clone()).to_string()),
    ];
    if let Some(id) = &call.call_id {
        res.push(KeyValue::new("gen_ai.tool.call.id", id.clone()));
    }
    if let Some(result) = &call.result {
        res.push(KeyValue::new("gen_ai.tool.call.result", result.to_string()));
    }
    res
}

/// The run's query and result as GenAI messages (JSON text, as the conventions record
/// them on spans).
fn run_messages(trace: &flowmem_model::Trace) -> Vec<(&'static str, String)> {
    let text = |role: &str, content: &str| serde_json::json!([{"role": role, "parts": [{"type": "text", "content": content}]}]);
    let mut res = vec![("gen_ai.input.messages", text("user", &trace.query).to_string())];
    if let Some(result) = &trace.result {
        res.push(("gen_ai.output.messages", text("assistant", result).to_string()));
    }
    res
}

fn at(ms: f64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs_f64(ms.max(0.0) / 1000.0)
}
