#!/usr/bin/env bash
# Installs schemathesis (PyPI) into <repo>/.deps/schemathesis-venv/ (git-ignored): the
# property-based HTTP client that fuzzes `flowmem serve`'s REST API from its OpenAPI
# document (scripts/fuzz-api.sh, and the API test in crates/cli/tests/it/api.rs).
# Safe to run again: skipped when the pinned version is already installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"

# shellcheck source=scripts/setup/venv.bash
source "$root/scripts/setup/venv.bash"
pip_venv "schemathesis" "$root/.deps/schemathesis-venv" "schemathesis==4.32.5" schemathesis
