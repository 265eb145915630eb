#!/usr/bin/env bash
# Fetches the crates the workspace needs, so later steps fail only on real errors.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo fetch --locked 2>/dev/null || cargo fetch
