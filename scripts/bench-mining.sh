#!/usr/bin/env bash
# Side-by-side benchmark of `flowmem mine` against PM4Py 2.7.23.11 on every shared XES log.
#
# End to end = reading the XES file plus discovery; discovery alone = turning the log into
# variants plus the Inductive Miner (PM4Py's discover_process_tree_inductive does both).
# Both are timed inside each process (PM4Py's interpreter start-up and imports are not
# counted against it). Each measurement is the minimum over REPS repetitions.
#
# Usage: scripts/bench-mining.sh [REPS]        (default 5)
# Output: a table with speed ratios on stdout; raw CSV and the table under
#         bench/runs/<date>-<host>/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPS="${1:-5}"
DATA="$ROOT/../shared/data/xes"
VENV="$ROOT/.deps/pm4py"
OUT="$ROOT/bench/runs/$(date -u +%Y-%m-%d)-$(hostname -s)"
mkdir -p "$OUT"

source "$ROOT/scripts/setup/venv.bash"
pip_venv "PM4Py" "$VENV" "pm4py==2.7.23.11"

echo "building flowmem (release)" >&2
(cd "$ROOT" && cargo build --release --quiet -p flowmem)
FLOWMEM="$ROOT/target/release/flowmem"

mapfile -t LOGS < <(ls "$DATA"/*.xes "$DATA"/*.xes.gz | sort)

RAW="$OUT/raw.csv"
echo "tool,log,miner,rep,read_ms,discover_ms" > "$RAW"

echo "timing PM4Py ($REPS repetitions per log)" >&2
PM4PY_SHOW_PROGRESS_BAR=False "$VENV/bin/python" "$ROOT/scripts/bench/pm4py_mine.py" "$REPS" "${LOGS[@]}" 2>/dev/null \
    | sed 's/^/pm4py,/' >> "$RAW"

echo "timing flowmem ($REPS repetitions per log)" >&2
for log in "${LOGS[@]}"; do
    name="$(basename "$log")"
    for rep in $(seq 0 $((REPS - 1))); do
        for miner in im imf; do
            "$FLOWMEM" --json mine --miner "$miner" --noise 0.2 --timings "$log" \
                | "$VENV/bin/python" -c '
import json, sys
doc = json.load(sys.stdin)
t = doc["timings_ms"]
name, miner, rep = sys.argv[1:4]
# read = parsing the file; discovery = variants + Inductive Miner, as in PM4Py.
read, disc = t["read"], t["variants"] + t["discover"]
print(f"flowmem,{name},{miner},{rep},{read:.3f},{disc:.3f}")
' "$name" "$miner" "$rep" >> "$RAW"
        done
    done
done

"$VENV/bin/python" - "$RAW" "$DATA" <<'PY' | tee "$OUT/summary.txt"
import csv, json, os, sys
raw, data = sys.argv[1], sys.argv[2]
best = {}
for row in csv.DictReader(open(raw)):
    key = (row["tool"], row["log"], row["miner"])
    read, disc = float(row["read_ms"]), float(row["discover_ms"])
    old = best.get(key)
    e2e = read + disc
    best[key] = (min(old[0], e2e) if old else e2e, min(old[1], disc) if old else disc)
events = {k: v["events"] for k, v in json.load(open(os.path.join(data, "pm4py-trees.json")))["logs"].items()}
logs = sorted({k[1] for k in best}, key=lambda name: events.get(name, 0))
print(f"{'log':38} {'events':>7} {'miner':5} | {'e2e pm4py':>10} {'flowmem':>8} {'ratio':>7} | {'disc pm4py':>10} {'flowmem':>8} {'ratio':>7}")
worst = None
for name in logs:
    for miner in ("im", "imf"):
        p, f = best[("pm4py", name, miner)], best[("flowmem", name, miner)]
        r_e2e, r_disc = p[0] / f[0], p[1] / f[1]
        worst = min(worst, r_e2e, r_disc) if worst else min(r_e2e, r_disc)
        print(f"{name:38} {events.get(name, 0):>7} {miner:5} | {p[0]:>8.1f}ms {f[0]:>6.1f}ms {r_e2e:>6.0f}x | {p[1]:>8.1f}ms {f[1]:>6.1f}ms {r_disc:>6.0f}x")
largest = logs[-1]
print(f"\nlargest log {largest}: end-to-end ratio IM {best[('pm4py', largest, 'im')][0] / best[('flowmem', largest, 'im')][0]:.0f}x "
      f"(target >= 30x); slowest ratio over all logs {worst:.0f}x (target >= 10x)")
PY
echo "raw CSV: $RAW" >&2
