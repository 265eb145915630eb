#!/usr/bin/env bash
# Sets up everything the tests need, then runs every test in the workspace.
# Usage: scripts/test.sh            (from the repository root)
# Each script in scripts/setup/ installs one kind of dependency into .deps/ and is safe
# to run again: it does nothing when its dependency is already in place.
set -euo pipefail
cd "$(dirname "$0")/.."
for setup in scripts/setup/*.sh; do
  echo "==> $setup" >&2
  bash "$setup"
done
echo "==> cargo test --workspace" >&2
cargo test --workspace --no-fail-fast "$@"
