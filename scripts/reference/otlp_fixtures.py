#!/usr/bin/env python3
"""Writes the OTLP fixtures of flowmem's `--format otlp` importer with real instrumentation.

The official `openai` Python SDK runs a small order-cancellation tool loop against
flowmem's scripted OpenAI-compatible server (`cargo run -p flowmem-testsupport --example
tool_loop_server`, started by this script). The spans and events are made by the
instrumentations from PyPI and written by the OpenTelemetry SDK's own exporters; nothing
in the fixtures is written by hand. One variant per convention, each in its own process
(the instrumentations patch the SDK globally):

- `genai-spans`: OpenTelemetry's GenAI instrumentation (`opentelemetry-instrumentation-openai-v2`)
  on the latest experimental conventions with content on the spans
  (`gen_ai.input.messages` / `gen_ai.output.messages`); the agent and its tools are
  instrumented with `opentelemetry-util-genai`'s `invoke_agent` and `execute_tool` spans
  (the agent adds `gen_ai.tool.call.arguments` and `.result`, which util-genai 0.4b0 does
  not record itself), the first run inside a conversation (`gen_ai.conversation.id`, on
  the agent span), the second without one.
- `genai-events`: the same instrumentation on its default conventions (v1.30), where
  content is recorded as events (`gen_ai.user.message`, `gen_ai.choice`, ...) in OTLP logs.
- `genai-no-content`: latest conventions with content capture off, so the spans hold no
  messages, arguments or results.
- `openinference`: `openinference-instrumentation-openai` for the model calls, and
  OpenInference's own tracer for the agent (`AGENT`) and tool (`TOOL`) spans, in a
  session (`session.id`).

Each variant writes, into the output directory:
- `<variant>.otlp.pb`: the body the OTLP/HTTP protobuf exporter
  (`opentelemetry-exporter-otlp-proto-http`) posted, caught by a local HTTP sink;
  `<variant>.logs.otlp.pb` likewise for its logs, when it has any;
- `<variant>.otlp.jsonl`: the OTLP JSON file exporter's lines
  (`opentelemetry-exporter-otlp-json-file`, one export request a line, as the
  Collector's file exporter writes them), spans and logs in one file;
- `<variant>.otlp.json`: one OTLP JSON document with every span, from the same
  exporter's encoder, indented (traces only);
- and `expected.json`, what the loop did: every run's query, tool calls with arguments
  and results, and final answer.

With OTEL_EXPORTER_OTLP_ENDPOINT set, `--variant` sends its spans and logs to that
OTLP/HTTP endpoint instead, as any instrumented app would (the tests of `flowmem serve
--otlp` run it so), and writes no protobuf files.

Set up (once) and run, from the repository root:

    python3 -m venv /tmp/otlp-venv
    /tmp/otlp-venv/bin/pip install openai==3.51.0 opentelemetry-sdk==1.45.1 \
        opentelemetry-exporter-otlp-proto-http==1.45.1 opentelemetry-exporter-otlp-json-file==0.66b1 \
        opentelemetry-instrumentation-openai-v2==2.4b0 opentelemetry-util-genai==0.4b0 \
        openinference-instrumentation-openai==0.1.66 httpx==0.28.1
    /tmp/otlp-venv/bin/python scripts/reference/otlp_fixtures.py crates/model/tests/fixtures/otlp

(openai-v2 2.4b0 imports `httpx` and util-genai's `instruments` module, which 1.2b0 renamed;
pip then resolves opentelemetry-api/sdk 1.45.2,
opentelemetry-semantic-conventions 0.66b2, openinference-instrumentation 0.1.72,
openinference-semantic-conventions 0.1.42 and protobuf 7.36.2.)
"""

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

VARIANTS = ["genai-spans", "genai-events", "genai-no-content", "openinference"]
SYSTEM = "You are a retail support agent. Use the tools to look orders up and cancel them."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order_details",
            "description": "Look an order up by its id.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "cancel_pending_order",
            "description": "Cancel a pending order, giving the customer's reason.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}},
                "required": ["order_id", "reason"],
            },
        },
    },
]
# The runs of each variant: (conversation id or None, user message). The scripted server
# knows these orders.
RUNS = {
    "genai-spans": [
        ("support-7f3a", "Please cancel my pending order #W5918442, I no longer need it."),
        (None, "Cancel order #W2974929 please, I ordered it by mistake."),
    ],
    "genai-events": [(None, "Please cancel my pending order #W5918442, I no longer need it.")],
    "genai-no-content": [(None, "Cancel order #W7731004, I found it cheaper elsewhere.")],
    "openinference": [("session-42", "Cancel order #W2974929 please, I ordered it by mistake.")],
}


def get_order_details(order_id):
    return {"order_id": order_id, "status": "pending", "items": [{"name": "Mechanical Keyboard", "price": 89.5}]}


def cancel_pending_order(order_id, reason):
    return {"order_id": order_id, "status": "cancelled", "reason": reason}


IMPLEMENTATIONS = {"get_order_details": get_order_details, "cancel_pending_order": cancel_pending_order}


class Sink(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that keeps every body it is sent, by path."""

    bodies = {}

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Sink.bodies.setdefault(self.path, []).append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def tool_loop(client, query, run_tool):
    """The agent: asks the model until it answers without tool calls. Returns what it did."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": query}]
    steps = []
    while True:
        reply = client.chat.completions.create(model="scripted-model", messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        if not message.tool_calls:
            messages.append({"role": "assistant", "content": message.content})
            return {"query": query, "steps": steps, "final_answer": message.content}
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}
                    for call in message.tool_calls
                ],
            }
        )
        for call in message.tool_calls:
            arguments = json.loads(call.function.arguments)
            result = run_tool(call, arguments)
            steps.append({"tool": call.function.name, "call_id": call.id, "arguments": arguments, "result": result})
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})


def run_variant(variant, base_url, out):
    """Runs one variant's loops in this process and writes its files."""
    os.environ["OPENAI_API_KEY"] = "sk-unused"
    if variant == "genai-spans":
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    elif variant == "genai-no-content":
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        os.environ.pop("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", None)
    elif variant == "genai-events":
        os.environ.pop("OTEL_SEMCONV_STABILITY_OPT_IN", None)
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"

    from openai import OpenAI
    from opentelemetry import trace, _logs
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.exporter.otlp.json.file._log_exporter import FileLogExporter
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    # With OTEL_EXPORTER_OTLP_ENDPOINT set, the exporters send to that live receiver as
    # any instrumented app's would (they read it, and OTEL_EXPORTER_OTLP_HEADERS,
    # themselves); otherwise to a local sink that keeps the bodies for the fixtures.
    sink = None
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        trace_exporter, log_exporter = OTLPSpanExporter(), OTLPLogExporter()
    else:
        sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
        threading.Thread(target=sink.serve_forever, daemon=True).start()
        endpoint = f"http://127.0.0.1:{sink.server_address[1]}"
        trace_exporter = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")
        log_exporter = OTLPLogExporter(endpoint=f"{endpoint}/v1/logs")
    resource = Resource.create({"service.name": f"support-agent-{variant}"})
    jsonl = out / f"{variant}.otlp.jsonl"
    jsonl.unlink(missing_ok=True)
    memory = InMemorySpanExporter()
    if variant == "openinference":
        from openinference.instrumentation import TracerProvider as OITracerProvider
        provider = OITracerProvider(resource=resource)
    else:
        provider = TracerProvider(resource=resource)
    # Long delays: the batch processors export once, at the final flush, so each
    # protobuf file is one request.
    provider.add_span_processor(BatchSpanProcessor(trace_exporter, schedule_delay_millis=600_000))
    provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(jsonl), schedule_delay_millis=600_000))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace.set_tracer_provider(provider)
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter, schedule_delay_millis=600_000))
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(FileLogExporter(jsonl), schedule_delay_millis=600_000))
    _logs.set_logger_provider(logger_provider)

    client = OpenAI(base_url=base_url)
    done = []
    if variant == "openinference":
        from openinference.instrumentation import using_session
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
        tracer = provider.get_tracer("support-agent")
        tools = {name: tracer.tool(name=name)(function) for name, function in IMPLEMENTATIONS.items()}

        def run_tool(call, arguments):
            return tools[call.function.name](**arguments)

        for session, query in RUNS[variant]:
            with using_session(session):
                with tracer.start_as_current_span("support-agent", openinference_span_kind="agent") as agent:
                    agent.set_input(query)
                    run = tool_loop(client, query, run_tool)
                    agent.set_output(run["final_answer"])
            done.append({"conversation_id": session, **run})
    else:
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
        from opentelemetry.util.genai.handler import get_telemetry_handler

        OpenAIInstrumentor().instrument(tracer_provider=provider, logger_provider=logger_provider)
        handler = get_telemetry_handler(tracer_provider=provider, logger_provider=logger_provider)

        capture = variant == "genai-spans"

        def run_tool(call, arguments):
            with handler.tool(call.function.name, tool_call_id=call.id, tool_type="function") as tool:
                result = IMPLEMENTATIONS[call.function.name](**arguments)
                if capture:
                    # util-genai 0.4b0 records no arguments or result itself: the
                    # agent adds the opt-in attributes of the convention, as frameworks do.
                    tool.attributes["gen_ai.tool.call.arguments"] = json.dumps(arguments)
                    tool.attributes["gen_ai.tool.call.result"] = json.dumps(result)
                return result

        for conversation, query in RUNS[variant]:
            with handler.invoke_local_agent("openai", request_model="scripted-model") as agent:
                agent.agent_name = "support-agent"
                # util-genai puts the id on the agent span only.
                agent.conversation_id = conversation
                run = tool_loop(client, query, run_tool)
            done.append({"conversation_id": conversation, **run})

    provider.force_flush()
    logger_provider.force_flush()
    provider.shutdown()
    logger_provider.shutdown()
    if sink is None:
        return done
    sink.shutdown()
    for path, name in [("/v1/traces", f"{variant}.otlp.pb"), ("/v1/logs", f"{variant}.logs.otlp.pb")]:
        bodies = Sink.bodies.get(path, [])
        assert len(bodies) <= 1, f"{variant}: {len(bodies)} exports to {path}, expected one"
        if bodies:
            (out / name).write_bytes(bodies[0])
    document = encode_spans(memory.get_finished_spans()).to_dict()
    (out / f"{variant}.otlp.json").write_text(json.dumps(document, indent=2) + "\n")
    return done


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--variant":
        variant, base_url = sys.argv[2], os.environ["SCRIPTED_BASE_URL"]
        print(json.dumps(run_variant(variant, base_url, Path(sys.argv[3]))))
        return
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "crates/model/tests/fixtures/otlp")
    out.mkdir(parents=True, exist_ok=True)
    server = subprocess.Popen(
        ["cargo", "run", "--quiet", "-p", "flowmem-testsupport", "--example", "tool_loop_server"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in server.stderr:
            if line.startswith("listening on "):
                base_url = line.removeprefix("listening on ").strip()
                break
        else:
            raise SystemExit("the scripted server did not start")
        expected = {}
        for variant in VARIANTS:
            env = dict(os.environ, SCRIPTED_BASE_URL=base_url)
            output = subprocess.run(
                [sys.executable, __file__, "--variant", variant, str(out)], env=env, capture_output=True, text=True
            )
            if output.returncode != 0:
                raise SystemExit(f"variant {variant} failed:\n{output.stderr}")
            expected[variant] = json.loads(output.stdout.strip().splitlines()[-1])
        (out / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    finally:
        server.stdin.close()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
