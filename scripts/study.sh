#!/usr/bin/env bash
# FlowScout's evaluation protocol (`flowmem study`) on τ²-bench retail with both embedded
# models, at a small budget: no API key, no network service.
#
# Sets up SmolLM2-135M-Instruct (the executor, optimizer and judge), Gemma 3 270M (the
# backbone swap) and the τ²-bench retail MCP server, imports τ²-bench retail's records,
# and runs `flowmem study` on the first RECORDS records (default 7) logged with at most
# MAX_CALLS tool calls (default 2): four searches of
# ITERATIONS candidates each (default 1), every system on the same test queries, REPEATS
# runs (default 2) on STABILITY test queries (default 1), the scouted workflow on the
# curated equivalent tool set (crates/tools/aliases/tau2-retail.toml) and under Gemma.
# Everything lands in ./study-run/ (override with STUDY_DIR); a second run resumes the
# study it finds there. The tables are in study-run/study/study.md and study.html.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
out="${STUDY_DIR:-$repo/study-run}"
records="${RECORDS:-7}"
iterations="${ITERATIONS:-1}"
repeats="${REPEATS:-2}"
stability="${STABILITY:-1}"
max_calls="${MAX_CALLS:-2}"
mkdir -p "$out"

source scripts/retail.bash
retail_setup "$out" scripts/setup/32-gemma-model.sh
retail_records "$out" "$records" "$max_calls"

state=(--state-key-arg state_key --reset-tool reset_state --task-check)
if [ -f "$out/study/study.settings.json" ]; then
  echo "==> resuming the study in $out/study" >&2
  "$flowmem" study --resume "$out/study" "${state[@]}"
else
  echo "==> flowmem study: $records records, $iterations candidates per search, $repeats repeats on $stability queries" >&2
  "$flowmem" study --records "$out/records.jsonl" --out "$out/study" --iterations "$iterations" \
    --repeats "$repeats" --stability-queries "$stability" --max-steps 6 --concurrency 2 \
    --swap-tools "$repo/crates/tools/aliases/tau2-retail.toml" --swap-model gemma3-270m "${state[@]}"
fi
echo "==> done: $out/study/study.md, study.json and study.html" >&2
