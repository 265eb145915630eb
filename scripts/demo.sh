#!/usr/bin/env bash
# The main job on the embedded default: FlowScout on τ²-bench retail, with no API key and
# no network service.
#
# Sets up the embedded model (SmolLM2-135M-Instruct) and the τ²-bench retail MCP server,
# imports τ²-bench retail's records, shows the mined tool-coordination skeleton, then runs
# `flowmem scout` on the first RECORDS records (default 5) logged with at most MAX_CALLS
# tool calls (default 2), with a budget of ITERATIONS search iterations (default 2) of
# at most MAX_EDITS edits each (default 2), which keeps it near 7 minutes on 2 cores
# after the build: split 5:2:3, mine G⁰,
# search by MCTS over LLM-proposed edits with execution feedback, test the best
# workflow against the ReAct baseline with the deterministic task check, and write
# the run directory with its report. Finally it
# runs the chosen workflow on one query with `flowmem run`.
# Everything lands in ./demo-run/ (override with DEMO_DIR); a second run resumes the scout
# run it finds there.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
out="${DEMO_DIR:-$repo/demo-run}"
records="${RECORDS:-5}"
iterations="${ITERATIONS:-2}"
max_calls="${MAX_CALLS:-2}"
max_edits="${MAX_EDITS:-2}"
mkdir -p "$out"

source scripts/retail.bash
retail_setup "$out"
retail_records "$out" "$records" "$max_calls"
"$flowmem" stats "$out/records.jsonl" --top 5

echo "==> the tool-coordination skeleton mined from all records (IMf, noise 0.2)" >&2
"$flowmem" mine "$out/retail.jsonl" --miner imf --noise 0.2 --output tree

echo "==> flowmem scout: $records records, $iterations iterations, embedded model" >&2
if [ -f "$out/scout/run.json" ]; then
  "$flowmem" scout --resume "$out/scout" --task-check --state-key-arg state_key --reset-tool reset_state
else
  "$flowmem" scout --records "$out/records.jsonl" --out "$out/scout" --iterations "$iterations" \
    --max-edits "$max_edits" --max-steps 6 --state-key-arg state_key --reset-tool reset_state --task-check
fi

echo "==> flowmem run: the best workflow on the first record's query" >&2
query="$(head -n 1 "$out/records.jsonl" | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["query"])')"
"$flowmem" run "$out/scout/best.workflow.json" --query "$query" --trace "$out/best.trace.jsonl"

echo "==> done: open $out/scout/report.html (search curve, tree, best workflow, test table)" >&2
