#!/usr/bin/env bash
# Installs the OpenTelemetry Python SDK and the GenAI instrumentations into
# <repo>/.deps/otel-venv/ (git-ignored), for the tests that send an instrumented agent's
# spans to `flowmem serve --otlp` with the SDK's own OTLP/HTTP exporter, through
# scripts/reference/otlp_fixtures.py (the script that made the committed OTLP fixtures).
# A venv of its own: the instrumentations patch the `openai` SDK, and pin versions the
# MCP servers' venv need not share.
# Safe to run again: skipped when the pinned versions are already installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"

# The pins of scripts/reference/otlp_fixtures.py's docstring.
venv_want="openai==3.51.0 opentelemetry-sdk==1.45.1 opentelemetry-exporter-otlp-proto-http==1.45.1 \
opentelemetry-exporter-otlp-json-file==0.66b1 opentelemetry-instrumentation-openai-v2==2.4b0 \
opentelemetry-util-genai==0.4b0 openinference-instrumentation-openai==0.1.66 httpx==0.28.1"
# shellcheck source=scripts/setup/venv.bash
source "$root/scripts/setup/venv.bash"
pip_venv "OpenTelemetry SDK and instrumentations" "$root/.deps/otel-venv" "$venv_want"
