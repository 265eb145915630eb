#!/usr/bin/env bash
# The data-flow quality benchmark: what mined bindings buy, on τ²-bench retail and
# airline, with the embedded model and the real τ²-bench MCP servers.
#
# Per domain: import the tasks, take the first RECORDS (default: all), split them 5:2:3
# with SEED (default 0), mine the skeleton with its bindings from the opt part (replayed
# through the real tools for their results), and evaluate on the first QUERIES of the
# test part (default: all), with the deterministic task check:
#   react-off       ReAct, the model writes every argument
#   react-context   ReAct, each value must occur in the query or an earlier result
#   mined-plain     the mined workflow with its bindings removed
#   mined-bound     the mined workflow with its bindings
#   scouted-bound   the best workflow `flowmem scout` finds in ITERATIONS (default 1)
#                   search iterations from the same records, with bindings
# and print TC, task success, ES, tool and LLM calls per query and wall time per system.
#
# Everything lands in OUT (default ./bench-quality/); the table is OUT/table.txt. A
# benchmark, not a test: it asserts nothing and takes long (every node of every run is
# the embedded model on the CPU). `DOMAINS="retail"` runs one domain; `SCOUT=0` leaves
# out the scouted system, the costliest. `SYSTEMS="mined-bound react-off"` runs those
# systems, in that order (the table still lists all five).
#
# Resumable: run the same command again after a kill (or `TABLE_ONLY=1` for the table of
# what is done so far, a system in progress included). A system whose report is written
# is not run again, and a system's interrupted evaluation continues from its journal
# (`flowmem eval` keeps one); its wall time is the sum over the attempts. Every attempt
# uses the binary the first one built (OUT/bin/flowmem, its commit in OUT/bin/commit).
#
# Every run's trace (node by node: prompts, grounding, routing reasons) is kept in
# OUT/DOMAIN/SYSTEM/traces/ (`flowmem eval --traces`).
#
# Example: RECORDS=30 QUERIES=5 bash scripts/bench-quality.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
out="${OUT:-$repo/bench-quality}"
seed="${SEED:-0}"
iterations="${ITERATIONS:-1}"
domains="${DOMAINS:-retail airline}"
systems="${SYSTEMS:-react-off react-context mined-plain mined-bound scouted-bound}"
mkdir -p "$out"

if [ "${TABLE_ONLY:-0}" != 1 ]; then
bash scripts/setup/00-rust.sh
bash scripts/setup/20-mcp-servers.sh
bash scripts/setup/30-model.sh
# One binary for the whole run, even if the tree is rebuilt meanwhile, and for every
# attempt of it: a resumed run keeps the binary (and so the commit) it began with.
# `REBUILD=1` builds the tree anew and replaces it (mixing commits within one OUT).
mkdir -p "$out/bin"
if [ ! -x "$out/bin/flowmem" ] || [ "${REBUILD:-0}" = 1 ]; then
  cargo build -p flowmem
  cp "$repo/target/debug/flowmem" "$out/bin/flowmem.part"
  mv "$out/bin/flowmem.part" "$out/bin/flowmem"
  git -C "$repo" describe --always --dirty > "$out/bin/commit" 2>/dev/null || echo unknown > "$out/bin/commit"
else
  echo "==> reusing $out/bin/flowmem, built at $(cat "$out/bin/commit" 2>/dev/null || echo 'an unrecorded commit')" >&2
fi
flowmem="$out/bin/flowmem"
state=(--state-key-arg state_key --reset-tool reset_state)
# Each run's trace goes to OUT/DOMAIN/SYSTEM/traces/, when the binary can write them (a
# resumed run may use a binary from before `--traces`).
traces=()
if "$flowmem" eval --help | grep -q -- '--traces'; then traces=(--traces); fi

started=$(date +%s)
for domain in $domains; do
  dir="$out/$domain"
  mkdir -p "$dir"
  upper="$(echo "$domain" | tr '[:lower:]' '[:upper:]')"
  cat > "$dir/flowmem.toml" <<TOML
[tools]
timeout_secs = 120

[[tools.mcp]]
name = "$domain"
command = "$repo/.deps/venv/bin/tau2-$domain-mcp"
env = { TAU2_${upper}_MCP_STATE_DIR = "$dir/state" }
TOML
  export FLOWMEM_CONFIG="$dir/flowmem.toml"
  echo "==> $domain: import, split, mine" >&2
  "$flowmem" import --format tau2-bench "../shared/data/tau2-bench/$domain/tasks.json" -o "$dir/all.jsonl"
  if [ -n "${RECORDS:-}" ]; then head -n "$RECORDS" "$dir/all.jsonl" > "$dir/records.jsonl"; else cp "$dir/all.jsonl" "$dir/records.jsonl"; fi
  "$flowmem" split "$dir/records.jsonl" --seed "$seed" --out "$dir/split"
  if [ -n "${QUERIES:-}" ]; then head -n "$QUERIES" "$dir/split/test.jsonl" > "$dir/test.jsonl"; else cp "$dir/split/test.jsonl" "$dir/test.jsonl"; fi
  if [ ! -f "$dir/mine.json" ]; then
    "$flowmem" --json mine "$dir/split/opt.jsonl" --miner imf --noise 0.2 --output skeleton "${state[@]}" > "$dir/mine.json.part"
    mv "$dir/mine.json.part" "$dir/mine.json"
  fi
  python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
graph = json.load(open(f"{d}/mine.json"))["output"]
graph["name"] = "mined-bound"
json.dump(graph, open(f"{d}/mined-bound.json", "w"), indent=1)
for node in graph["nodes"]:
    node.pop("bindings", None)
graph["name"] = "mined-plain"
json.dump(graph, open(f"{d}/mined-plain.json", "w"), indent=1)
PY

  eval_one() { # NAME GROUNDING [--workflow FILE | --baseline]
    local name="$1" grounding="$2"; shift 2
    if [ -f "$dir/$name/report.json" ]; then echo "==> $domain: $name (done before)" >&2; return; fi
    echo "==> $domain: $name" >&2
    local t0; t0=$(date +%s)
    mkdir -p "$dir/$name"
    # Each attempt adds its time to wall_secs, also when an error or Ctrl-C ends it.
    trap "echo \$(( \$(date +%s) - $t0 )) >> '$dir/$name/wall_secs'" EXIT
    "$flowmem" eval --records "$dir/test.jsonl" --out "$dir/$name" --grounding "$grounding" --task-check "${state[@]}" "${traces[@]}" "$@"
    trap - EXIT
    echo $(( $(date +%s) - t0 )) >> "$dir/$name/wall_secs"
  }
  for system in $systems; do
    case "$system" in
      react-off) eval_one react-off off --baseline ;;
      react-context) eval_one react-context context --baseline ;;
      mined-plain) eval_one mined-plain off --workflow "$dir/mined-plain.json" ;;
      mined-bound) eval_one mined-bound bindings --workflow "$dir/mined-bound.json" ;;
      scouted-bound) ;;
      *) echo "unknown system \`$system\` in SYSTEMS" >&2; exit 2 ;;
    esac
  done
  if [ "${SCOUT:-1}" = 1 ] && [[ " $systems " == *" scouted-bound "* ]]; then
    echo "==> $domain: scout, $iterations iteration(s)" >&2
    t0=$(date +%s)
    if [ -f "$dir/scout/run.json" ]; then
      "$flowmem" scout --resume "$dir/scout" --task-check "${state[@]}"
    else
      "$flowmem" scout --records "$dir/records.jsonl" --seed "$seed" --out "$dir/scout" --iterations "$iterations" --no-test --task-check "${state[@]}"
    fi
    echo $(( $(date +%s) - t0 )) > "$dir/scout_wall_secs"
    eval_one scouted-bound bindings --workflow "$dir/scout/best.workflow.json"
  fi
done
fi

started="${started:-$(date +%s)}"
python3 - "$out" "$domains" "$started" <<'PY' | tee "$out/table.txt"
import json, os, sys, time
out, domains, started = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
load = open("/proc/loadavg").read().split()[:3]
print(f"bench-quality: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, load {' '.join(load)}")
commit = open(f"{out}/bin/commit").read().strip() if os.path.exists(f"{out}/bin/commit") else "unrecorded"
print(f"binary built at {commit}")
print(f"embedded model, task check on; this attempt's wall {int(time.time()) - started} s; a system's wall s sums its attempts")
systems = ["react-off", "react-context", "mined-plain", "mined-bound", "scouted-bound"]
for domain in domains:
    d = f"{out}/{domain}"
    # Tasks whose reference makes no call score TC 1.0 for a run that makes none (an
    # agent that failed at once included), so TC is also shown over the other tasks.
    tasks = [json.loads(line) for line in open(f"{d}/test.jsonl") if line.strip()]
    with_calls = {str(task["id"]) for task in tasks if task.get("orchestration")}
    def tc_with_calls(runs):
        scored = [r["tc"] for r in runs if str(r["record_id"]) in with_calls]
        return f"{sum(scored) / len(scored):.3f}" if scored else "-"
    print(f"\n{domain}: {len(tasks) - len(with_calls)} of {len(tasks)} test tasks expect no tool call; 'TC calls' is TC over the other {len(with_calls)}")
    print(f"  {'system':<15} {'queries':>7} {'TC':>6} {'TC calls':>8} {'success':>8} {'ES':>6} {'tools/q':>8} {'LLM/q':>6} {'wall s':>7}")
    for name in systems:
        path = f"{d}/{name}/report.json"
        wall_path = f"{d}/{name}/wall_secs"
        wall = sum(int(line) for line in open(wall_path) if line.strip()) if os.path.exists(wall_path) else 0
        journal = f"{d}/{name}/progress.jsonl"
        if not os.path.exists(path) and os.path.exists(journal):
            # An evaluation in progress: its finished runs so far, from its journal.
            runs = [json.loads(line)["run"] for line in open(journal) if '"run"' in line[:8]]
            n_test = len(tasks)
            if runs:
                checked = [r["task_success"] for r in runs if r.get("task_success") is not None]
                ok = f"{sum(checked) / len(checked):.2f}" if checked else "-"
                mean = lambda key: sum(r[key] for r in runs) / len(runs)
                print(f"  {name:<15} {len(runs):>7} {mean('tc'):>6.3f} {tc_with_calls(runs):>8} {ok:>8} {'-':>6} "
                      f"{mean('tool_calls'):>8.1f} {mean('llm_calls'):>6.1f} {wall:>7}  (in progress: {len(runs)} of {n_test} queries)")
                continue
            print(f"  {name:<15} (in progress: 0 of {n_test} queries)")
            continue
        if not os.path.exists(path):
            print(f"  {name:<15} (not run)")
            continue
        report = json.load(open(path))
        runs_path = f"{d}/{name}/runs.jsonl"
        runs = [json.loads(line) for line in open(runs_path) if line.strip()] if os.path.exists(runs_path) else []
        for s in report["systems"]:
            es = "-" if s.get("mean_es") is None else f"{s['mean_es']:.3f}"
            ok = "-" if s.get("task_success_rate") is None else f"{s['task_success_rate']:.2f}"
            print(f"  {name:<15} {s['n_records']:>7} {s['mean_tc']:>6.3f} {tc_with_calls(runs):>8} {ok:>8} {es:>6} "
                  f"{s['tool_calls_per_query']:>8.1f} {s['llm_calls_per_query']:>6.1f} {wall:>7}")
PY
