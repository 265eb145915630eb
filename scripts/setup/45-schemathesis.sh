#!/usr/bin/env bash
# Installs schemathesis (PyPI) into <repo>/.deps/schemathesis-venv/ (git-ignored): the
# property-based HTTP client that fuzzes `flowmem serve`'s REST API from its OpenAPI
# document (scripts/fuzz-api.sh, and the API test in crates/cli/tests/it/api.rs).
# Safe to run again: skipped when the pinned version is already installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"

venv_dir="$root/.deps/schemathesis-venv"
venv_stamp="$venv_dir/.installed"
venv_want="schemathesis==4.32.5"
if [[ -f "$venv_stamp" && "$(cat "$venv_stamp")" == "$venv_want" && -x "$venv_dir/bin/schemathesis" ]]; then
  echo "schemathesis already installed in $venv_dir" >&2
  exit 0
fi
python="${PYTHON:-python3}"
command -v "$python" >/dev/null || { echo "error: python3 (3.10 or newer) is required" >&2; exit 1; }
[[ -x "$venv_dir/bin/python" ]] || "$python" -m venv "$venv_dir"
"$venv_dir/bin/python" -m pip install --quiet "$venv_want" >&2
echo "$venv_want" > "$venv_stamp"
