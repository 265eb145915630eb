#!/usr/bin/env bash
# Fuzzes `flowmem serve`'s REST API (/api/v1) with schemathesis from its own OpenAPI
# document (issue 21): every route, with valid and invalid requests, under a write token
# and then a read token, against a memory induced from τ-bench retail's train split.
# Passes when no reply is a 5xx and every reply matches its documented status and
# schema; prints the number of cases run. Not part of CI (the API test runs a smaller
# version of it). The server records runs (`--otlp`), so the conversation and learning
# routes answer from a real queue; with RUNS=DIR it also shows the scout runs in DIR.
# Usage: [RUNS=DIR] scripts/fuzz-api.sh [MAX_EXAMPLES]   (default 500 per route)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
examples="${1:-500}"
bash scripts/setup/00-rust.sh
bash scripts/setup/45-schemathesis.sh
cargo build -p flowmem
flowmem="$repo/target/debug/flowmem"
work="$(mktemp -d)"
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"

"$flowmem" import --format tau-bench "$repo/../shared/data/tau-bench/retail/tasks_train.jsonl" -o records.jsonl
python3 - <<'PY'
import json
with open("records.jsonl") as records, open("runs.jsonl", "w") as runs:
    for line in records:
        record = json.loads(line)
        steps = [{"action": {"kind": "tool_call", "tool": c["tool"], "args": c["args"]}} for c in record["orchestration"]]
        runs.write(json.dumps({"id": record["id"], "query": record["query"], "success": True,
                               "meta": {"domain": "retail"}, "steps": steps}) + "\n")
PY
"$flowmem" induce --mode rule runs.jsonl --memory memory.db
token() { "$flowmem" --json serve token create --memory memory.db --scope "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])'; }
write="$(token write)"
read="$(token read)"
runs=()
[ -n "${RUNS:-}" ] && runs=(--runs "$RUNS")
"$flowmem" serve --memory memory.db --listen 127.0.0.1:0 --otlp "${runs[@]}" 2> serve.log &
server=$!
for _ in $(seq 100); do grep -q "listening on " serve.log && break; sleep 0.2; done
base="$(grep -o 'http://127.0.0.1:[0-9]*' serve.log | head -n 1)"
[ -n "$base" ] || { cat serve.log >&2; exit 1; }

status=0
for scope in write read; do
  token="$write"; [ "$scope" = read ] && token="$read"
  echo "==> schemathesis, $scope token, up to $examples examples per route" >&2
  NO_COLOR=1 "$repo/.deps/schemathesis-venv/bin/schemathesis" run "$base/api/v1/openapi.json" --url "$base" \
    --checks all --max-examples "$examples" --seed 21 --header "Authorization: Bearer $token" | tee "$scope.txt" || status=$?
  echo "$scope token: $(grep -E '[0-9]+ generated' "$scope.txt" | tr -s ' ')" >> summary.txt
done
if grep -q " 5[0-9][0-9] " serve.log; then
  echo "the server logged a 5xx" >&2
  status=1
fi
cat summary.txt
exit "$status"
