#!/usr/bin/env bash
# Installs the toolchain components the gates in scripts/test.sh use (rustfmt, clippy) and
# fetches the crates the workspace needs, so later steps fail only on real errors.
set -euo pipefail
cd "$(dirname "$0")/../.."
missing=()
cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
cargo clippy --version >/dev/null 2>&1 || missing+=(clippy)
if ((${#missing[@]})); then
  rustup component add "${missing[@]}"
fi
cargo fetch --locked 2>/dev/null || cargo fetch
