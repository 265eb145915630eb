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
for setup in scripts/setup/*.sh; do
  echo "==> $setup" >&2
  bash "$setup"
done
echo "==> gate: scripts/public-type-clashes.sh (every public type name is unique)" >&2
bash scripts/public-type-clashes.sh
echo "==> gate: cargo fmt --all --check" >&2
cargo fmt --all --check
echo "==> gate: cargo clippy --workspace --all-targets -- -D warnings" >&2
cargo clippy --workspace --all-targets -- -D warnings
echo "==> gate: RUSTDOCFLAGS='-D warnings' cargo doc --workspace --no-deps" >&2
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
echo "==> cargo test --workspace" >&2
cargo test --workspace --no-fail-fast "$@"
