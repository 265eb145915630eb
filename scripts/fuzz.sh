#!/usr/bin/env bash
# Fuzzing (issue 27): runs every `cargo fuzz` target of fuzz/ for a bounded time, one at a
# time and niced, and prints per target the executions, the coverage and what it found.
# Not part of CI.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   (default 600 s, every target)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). The toolchain may be stable: the script
# builds without a sanitizer (`--sanitizer none`, libFuzzer's coverage alone) and sets
# RUSTC_BOOTSTRAP=1 for the flags cargo-fuzz passes. Each target starts from the seed
# corpus in fuzz/seeds/<target>/ (committed) plus what earlier runs found in
# fuzz/corpus/<target>/ (not committed); a crash is written to fuzz/artifacts/<target>/
# and reproduced with `cargo fuzz run --sanitizer none TARGET ARTIFACT`.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${1:-600}"
shift || true
export RUSTC_BOOTSTRAP=1
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"
if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi

nice -n 10 cargo fuzz build --sanitizer none --release

summary="$(mktemp)"
trap 'rm -f "$summary"' EXIT
printf '%-24s %12s %8s %8s %s\n' target executions cov features findings >"$summary"
for target in "${targets[@]}"; do
  mkdir -p "corpus/$target" "seeds/$target" "artifacts/$target"
  log="$(mktemp)"
  status=0
  nice -n 10 cargo fuzz run --sanitizer none --release "$target" "corpus/$target" "seeds/$target" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="artifacts/$target/" >"$log" 2>&1 || status=$?
  runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1 || true)"
  cov="$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || true)"
  ft="$(grep -o 'ft: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*' || true)"
  if [ "$status" -eq 0 ]; then
    findings="none"
  else
    findings="exit $status: $(grep -m 1 -E 'panicked at|ERROR: libFuzzer|deadly signal|timeout|out-of-memory' "$log" || echo 'see log')"
    findings="$findings; $(ls -1 "artifacts/$target" | head -n 3 | tr '\n' ' ')"
    cp "$log" "artifacts/$target/last-run.log"
  fi
  printf '%-24s %12s %8s %8s %s\n' "$target" "${runs:-?}" "${cov:-?}" "${ft:-?}" "$findings" >>"$summary"
  rm -f "$log"
done
echo "fuzzing: ${seconds} s per target, $(date -u +%Y-%m-%dT%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$summary"
