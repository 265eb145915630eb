#!/usr/bin/env bash
# Times the web UI's and the REST API's pages on a memory of N workflows (default
# 5,000): the first, a middle and the last page of memory, a text search, a filtered and
# sorted page, the search-as-you-type fragment, the learning page, and the API's last
# page. Each URL is fetched 5 times; the median and the slowest are printed with the
# machine's load. Workflows come from N generated runs of 2 to 4 distinct tool calls
# (rule induction stores one workflow per run). Usage: scripts/bench-ui.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
n="${1:-5000}"
cargo build -q -p flowmem
flowmem="$repo/target/debug/flowmem"
work="$(mktemp -d)"
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
python3 - "$n" <<'PY'
import json, random, sys
random.seed(5)
verbs = ["find", "get", "update", "cancel", "list", "create", "check", "book", "refund", "modify"]
nouns = ["order", "user", "flight", "item", "payment", "address", "reservation", "ticket", "account", "product"]
with open("runs.jsonl", "w") as out:
    for i in range(int(sys.argv[1])):
        steps = [{"action": {"kind": "tool_call", "tool": f"{random.choice(verbs)}_{random.choice(nouns)}_{(i * 7 + j) % 997}",
                             "args": {"id": f"#X{i}-{j}"}}} for j in range(random.randint(2, 4))]
        out.write(json.dumps({"id": f"run-{i}", "query": f"Task {i}: {random.choice(verbs)} the {random.choice(nouns)} <b>for</b> customer {i}",
                              "success": True, "meta": {"domain": random.choice(["retail", "airline", "telecom"])}, "steps": steps}) + "\n")
PY
"$flowmem" induce --mode rule runs.jsonl --memory memory.db | tail -n 1
"$flowmem" serve --memory memory.db --listen 127.0.0.1:0 2> serve.log &
server=$!
for _ in $(seq 100); do grep -q "listening on " serve.log && break; sleep 0.2; done
base="$(grep -o 'http://127.0.0.1:[0-9]*' serve.log | head -n 1)"
last=$(( (n + 49) / 50 ))
echo "# $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), debug build, $n workflows"
printf '%-48s %6s %10s %10s %9s\n' url status median_ms max_ms bytes
for url in "/" "/?page=$((last / 2))" "/?page=$last" "/?q=refund&sort=most_used" "/?q=refund&fragment=1" \
  "/?domain=airline&sort=best_success&page=20" "/learning" "/api/v1/workflows?offset=$((n - 100))&limit=100"; do
  times=()
  for _ in 1 2 3 4 5; do
    read -r status secs bytes < <(curl -s -o /dev/null -w '%{http_code} %{time_total} %{size_download}\n' "$base$url")
    times+=("$secs")
  done
  sorted=($(printf '%s\n' "${times[@]}" | sort -g))
  ms() { awk -v s="$1" 'BEGIN { printf "%.1f", s * 1000 }'; }
  printf '%-48s %6s %10s %10s %9s\n' "$url" "$status" "$(ms "${sorted[2]}")" "$(ms "${sorted[4]}")" "$bytes"
done
