# Sourced by the chat-model setup scripts (not run by the `scripts/setup/*.sh` loop).
#
# model_file FILE SHA256 FETCH: makes DIR/FILE a copy of the model whose full sha256 is
# SHA256, where DIR is $FLOWMEM_MODEL_DIR if set, else ~/.cache/flowmem/models. Nothing
# happens when a verified copy is already there. Otherwise it calls `FETCH TMP OUT`, a
# function of the caller's that downloads into the scratch folder TMP (with pip) and
# writes the model to OUT, then checks OUT's sha256 and moves it into place atomically,
# so a half-written file is never mistaken for the model.
model_file() {
  local file="$1" sha256="$2" fetch="$3"
  local dir="${FLOWMEM_MODEL_DIR:-$HOME/.cache/flowmem/models}"
  local target="$dir/$file"
  if [ -f "$target" ] && echo "$sha256  $target" | sha256sum --check --status; then
    echo "model already in place: $target" >&2
    return 0
  fi
  mkdir -p "$dir"
  local tmp
  tmp="$(mktemp -d)"
  # Removed however the script ends, a failed download (under `set -e`) included.
  trap "rm -rf '$tmp'" EXIT
  "$fetch" "$tmp" "$tmp/$file"
  if ! echo "$sha256  $tmp/$file" | sha256sum --check --status; then
    echo "error: the sha256 of the downloaded $file does not match $sha256" >&2
    return 1
  fi
  mv "$tmp/$file" "$target.partial"
  mv "$target.partial" "$target"
  echo "model ready: $target" >&2
}
