#!/usr/bin/env bash
# Sets up everything the tests need, runs the gates, then runs every test in the workspace.
# Usage: scripts/test.sh            (from the repository root)
# Each script in scripts/setup/ installs one kind of dependency into .deps/ and is safe
# to run again: it does nothing when its dependency is already in place.
# The gates (unique public type names, formatting, clippy, rustdoc, with warnings denied) run before the tests
# and stop the run at the first that fails; the tidy test (crates/testsupport/tests/it/
# tidy.rs) runs with the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's banner carries the minutes and seconds since the start, so a slow CI run's
# log shows which stage took the time.
stage() { printf '==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }
for setup in scripts/setup/*.sh; do
  stage "$setup"
  bash "$setup"
done
stage "gate: scripts/public-type-clashes.sh (every public type name is unique)"
bash scripts/public-type-clashes.sh
stage "gate: cargo fmt --all --check"
cargo fmt --all --check
stage "gate: cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
stage "gate: RUSTDOCFLAGS='-D warnings' cargo doc --workspace --no-deps"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
stage "cargo test --workspace"
status=0
cargo test --workspace --no-fail-fast "$@" || status=$?
stage "done (exit status $status)"
exit "$status"
