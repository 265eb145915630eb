#!/usr/bin/env bash
# How often an expansion yields a candidate: `flowmem scout` on τ²-bench retail with the
# embedded model as executor and optimizer, once per plan decoding (edit by edit, and
# the whole plan first), on the first RECORDS records (default 10) with ITERATIONS
# search iterations (default 9). Prints, per decoding, the expansions, the candidates
# they yielded, the expansion success rate, the optimizer calls per candidate and the
# edits proposed, applied and dropped by kind, and why each dropped edit was refused.
#
# A benchmark, not a test: it asserts nothing and runs for a long time (every node of
# every candidate is the embedded model on the CPU). Everything lands in OUT (default
# ./bench-expansions/); the table is OUT/table.txt. DECODINGS="per-edit" runs one.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
out="${OUT:-$repo/bench-expansions}"
records="${RECORDS:-10}"
iterations="${ITERATIONS:-9}"
decodings="${DECODINGS:-per-edit whole}"
mkdir -p "$out"

source scripts/retail.bash
retail_setup "$out"
# One binary for the whole run, even if the tree is rebuilt meanwhile.
mkdir -p "$out/bin"
cp "$flowmem" "$out/bin/flowmem"
flowmem="$out/bin/flowmem"
head -n "$records" "$out/retail.jsonl" > "$out/records.jsonl"

state=(--state-key-arg state_key --reset-tool reset_state)
for decoding in $decodings; do
  dir="$out/$decoding"
  echo "==> scout, $decoding decoding, $records records, $iterations iterations" >&2
  t0=$(date +%s)
  if [ -f "$dir/run.json" ]; then
    "$flowmem" --json scout --resume "$dir" --task-check "${state[@]}" > "$out/$decoding.json"
  else
    "$flowmem" --json scout --records "$out/records.jsonl" --out "$dir" --iterations "$iterations" \
      --patience "$iterations" --plan-decoding "$decoding" --task-check "${state[@]}" > "$out/$decoding.json"
  fi
  echo $(( $(date +%s) - t0 )) > "$out/$decoding.wall_secs"
done

python3 - "$out" "$decodings" <<'PY' | tee "$out/table.txt"
import glob, json, os, sys, time
out, decodings = sys.argv[1], sys.argv[2].split()
load = open("/proc/loadavg").read().split()[:3]
print(f"bench-expansions: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, load {' '.join(load)}")
for decoding in decodings:
    summary = json.load(open(f"{out}/{decoding}.json"))
    e = summary["expansions"]
    wall = open(f"{out}/{decoding}.wall_secs").read().strip()
    rate = "-" if e["success_rate"] is None else f"{100 * e['success_rate']:.0f}%"
    per = "-" if e["calls_per_candidate"] is None else f"{e['calls_per_candidate']:.1f}"
    print(f"\n{decoding}: {e['candidates']} of {e['expansions']} expansions yielded a candidate "
          f"(success rate {rate}); {e['optimizer_calls']} optimizer calls, {per} per candidate; "
          f"best validation {summary['best_val_score']:.3f}; wall {wall} s")
    print(f"  {'edit':<16} {'proposed':>8} {'applied':>8} {'dropped':>8}")
    for op, c in sorted(e["edits"].items()):
        print(f"  {op:<16} {c['proposed']:>8} {c['applied']:>8} {c['dropped']:>8}")
    for path in sorted(glob.glob(f"{out}/{decoding}/candidates/*.plan.json")):
        plan = json.load(open(path))
        name = os.path.basename(path).split(".")[0]
        if plan["plan"] is None:
            last = plan["rejected"][-1] if plan["rejected"] else ["(no reason recorded)"]
            print(f"  candidate {name}: no candidate; last refusal: {'; '.join(last)[:300]}")
        for d in plan.get("dropped", []):
            print(f"  candidate {name}: dropped {d['edit']['op']} at position {d['position']}: {'; '.join(d['reasons'])[:300]}")
        # Did the candidate's edits change what ran? The nodes its plan added or changed,
        # and how often the optimisation split's runs entered them, beside its scores.
        touched = set()
        for edit in (plan["plan"] or {}).get("edits", []):
            node = edit.get("node")
            touched.add(node["id"] if isinstance(node, dict) and edit["op"] == "add_node" else edit.get("id"))
        touched.discard(None)
        trace = f"{out}/{decoding}/traces/{name}.opt.jsonl"
        scores = f"{out}/{decoding}/candidates/{name}.opt.json"
        if touched and os.path.exists(trace) and os.path.exists(scores):
            entered = sum(1 for line in open(trace)
                          if (event := json.loads(line)).get("kind") == "node" and event.get("node_id") in touched)
            opt = json.load(open(scores))
            print(f"  candidate {name}: {len(touched)} nodes edited, entered {entered} times on the optimisation split; "
                  f"reward {opt['reward']:.3f}, tc {opt['tc']:.3f}, es {opt['es']:.3f}")
PY
