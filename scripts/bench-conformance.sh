#!/usr/bin/env bash
# Side-by-side benchmark of flowmem's conformance checking against PM4Py 2.7.23.11 on
# every shared XES log, for PM4Py's IM and IMf(0.2) nets.
#
# End to end = reading the XES file plus the algorithm (token-based replay, or
# alignments), both timed inside each process (PM4Py's interpreter start-up and imports
# are not counted against it). flowmem's times are the minimum over REPS runs of
# `cargo bench -p flowmem-mining --bench conformance`; PM4Py runs once (its alignments
# take minutes). Models whose alignments PM4Py does not finish for the reference fixture
# (see scripts/reference/pm4py_conformance.py) are not aligned by either side.
#
# Usage: scripts/bench-conformance.sh [REPS]     (default 3; PM4PY_VENV picks the venv,
#        LOGS=a.xes.gz,b.xes limits the logs)
# Output: a table with ratios on stdout; raw CSV and the table under bench/runs/<date>-<host>/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS="${1:-3}"
DATA="$ROOT/../shared/data/xes"
FIXTURE="$ROOT/crates/mining/tests/fixtures/pm4py_conformance.json"
VENV="${PM4PY_VENV:-$ROOT/.deps/pm4py}"
OUT="$ROOT/bench/runs/$(date -u +%Y-%m-%d)-$(hostname -s)"
mkdir -p "$OUT"

source "$ROOT/scripts/setup/venv.bash"
pip_venv "PM4Py" "$VENV" "pm4py==2.7.23.11"

if [[ -n "${LOGS:-}" ]]; then
    IFS=, read -r -a LOGS <<< "$LOGS"      # LOGS=a.xes.gz,b.xes limits the run
else
    mapfile -t LOGS < <(cd "$DATA" && ls *.xes *.xes.gz | sort)
fi
RAW="$OUT/conformance-raw.csv"
echo "tool,log,model,read_ms,token_replay_ms,alignments_ms" > "$RAW"

echo "load before: $(uptime)" >&2
echo "timing flowmem ($REPS repetitions per log)" >&2
(cd "$ROOT" && CONFORM_LOGS="$(IFS=,; echo "${LOGS[*]}")" REPS="$REPS" \
    cargo bench --quiet -p flowmem-mining --bench conformance) | sed 's/^/flowmem,/' >> "$RAW"

echo "timing PM4Py (once per log)" >&2
PM4PY_SHOW_PROGRESS_BAR=False "$VENV/bin/python" "$ROOT/scripts/bench/pm4py_conform.py" "$DATA" "$FIXTURE" "${LOGS[@]}" \
    2>/dev/null | sed 's/^/pm4py,/' >> "$RAW"
LOAD="$(uptime)"

"$VENV/bin/python" - "$RAW" "$DATA" "$LOAD" <<'PY' | tee "$OUT/conformance.txt"
import csv, json, os, sys
raw, data, load = sys.argv[1:4]
rows = {}
for row in csv.DictReader(open(raw)):
    rows[(row["tool"], row["log"], row["model"])] = row
events = {k: v["events"] for k, v in json.load(open(os.path.join(data, "pm4py-trees.json")))["logs"].items()}
logs = sorted({k[1] for k in rows}, key=lambda name: events.get(name, 0))
def ms(row, key):
    return float(row[key]) if row[key] else None
print(f"machine load at the end: {load.strip()}")
print(f"{'log':38} {'events':>7} {'model':6} | {'token replay e2e: pm4py':>23} {'flowmem':>9} {'ratio':>6} | {'alignments e2e: pm4py':>21} {'flowmem':>9} {'ratio':>6}")
for name in logs:
    for model in ("im", "imf02"):
        p, f = rows.get(("pm4py", name, model)), rows.get(("flowmem", name, model))
        if not p or not f:
            continue
        pt, ft = ms(p, "read_ms") + ms(p, "token_replay_ms"), ms(f, "read_ms") + ms(f, "token_replay_ms")
        pa, fa = ms(p, "alignments_ms"), ms(f, "alignments_ms")
        align = "skipped (PM4Py does not finish)"
        if pa is not None and fa is not None:
            pa, fa = pa + ms(p, "read_ms"), fa + ms(f, "read_ms")
            align = f"{pa:>19.1f}ms {fa:>7.1f}ms {pa / fa:>5.0f}x"
        print(f"{name:38} {events.get(name, 0):>7} {model:6} | {pt:>21.1f}ms {ft:>7.1f}ms {pt / ft:>5.0f}x | {align}")
largest = logs[-1]
for model in ("im", "imf02"):
    p, f = rows[("pm4py", largest, model)], rows[("flowmem", largest, model)]
    tr = (ms(p, "read_ms") + ms(p, "token_replay_ms")) / (ms(f, "read_ms") + ms(f, "token_replay_ms"))
    al = (ms(p, "read_ms") + ms(p, "alignments_ms")) / (ms(f, "read_ms") + ms(f, "alignments_ms"))
    print(f"largest log {largest} ({model}): token replay {tr:.0f}x, alignments {al:.0f}x faster end to end (target >= 10x)")
PY
echo "raw CSV: $RAW" >&2
