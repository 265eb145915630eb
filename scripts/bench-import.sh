#!/usr/bin/env bash
# Benchmark: importing all of ../shared/data/ (every format but XES) in a release build.
# Target: under 3 s in total.
# Usage: scripts/bench-import.sh [RUNS]      (from anywhere; default 5 runs)
#
# Builds `flowmem` in release, then imports each data set directory RUNS times and
# prints, per data set, the best and median wall time, and the total of the medians as a
# ratio of the 3 s target. Raw timings go to target/bench-import/<date>-<host>.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
data="../shared/data"
target_s=3

cargo build --release --quiet -p flowmem
bin="target/release/flowmem"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
mkdir -p target/bench-import
csv="target/bench-import/$(date -u +%Y%m%dT%H%M%SZ)-$(hostname).csv"
echo "format,path,run,seconds,items" > "$csv"

# format and directory, one data set per line.
sets=(
  "tau-bench $data/tau-bench"
  "tau2-bench $data/tau2-bench"
  "toolbench $data/toolbench-data_example"
  "stabletoolbench $data/stabletoolbench"
)

now() { date +%s.%N; }

total=0
printf '%-16s %8s %10s %10s\n' "format" "items" "best s" "median s"
for set in "${sets[@]}"; do
  read -r format path <<<"$set"
  times=()
  for run in $(seq 1 "$runs"); do
    start=$(now)
    "$bin" import -q --format "$format" "$path" -o "$out/$format.jsonl"
    end=$(now)
    seconds=$(echo "$end - $start" | bc -l)
    items=$(wc -l < "$out/$format.jsonl")
    times+=("$seconds")
    echo "$format,$path,$run,$seconds,$items" >> "$csv"
  done
  sorted=($(printf '%s\n' "${times[@]}" | sort -g))
  best=${sorted[0]}
  median=${sorted[$(( runs / 2 ))]}
  total=$(echo "$total + $median" | bc -l)
  printf '%-16s %8d %10.3f %10.3f\n' "$format" "$items" "$best" "$median"
done
ratio=$(echo "$total / $target_s" | bc -l)
printf 'all shared data (no XES): %.3f s median total; target %d s; ratio %.3f of target\n' "$total" "$target_s" "$ratio"
echo "raw timings: $csv"
if (( $(echo "$total >= $target_s" | bc -l) )); then
  echo "FAIL: over the ${target_s} s target" >&2
  exit 1
fi
