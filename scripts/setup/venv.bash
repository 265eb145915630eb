# Sourced by the setup scripts (not run by the `scripts/setup/*.sh` loop).
#
# pip_venv WHAT DIR PINS [EXECUTABLE...]: makes DIR a Python venv with PINS installed
# (pip requirement specs separated by spaces), and records PINS in DIR/.installed. Skipped
# when that record matches and every EXECUTABLE exists in DIR/bin, so running a setup
# script again costs nothing.
pip_venv() {
  local what="$1" dir="$2" want="$3"
  shift 3
  local ready=1 exe
  [[ -f "$dir/.installed" && "$(cat "$dir/.installed")" == "$want" && -x "$dir/bin/python" ]] || ready=0
  for exe in "$@"; do
    [[ -x "$dir/bin/$exe" ]] || ready=0
  done
  if ((ready)); then
    echo "$what already installed in $dir" >&2
    return 0
  fi
  local python="${PYTHON:-python3}"
  command -v "$python" >/dev/null || { echo "error: python3 (3.10 or newer) is required" >&2; return 1; }
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { echo "error: $python is older than 3.10; set PYTHON to a newer interpreter" >&2; return 1; }
  [[ -x "$dir/bin/python" ]] || "$python" -m venv "$dir"
  # shellcheck disable=SC2086 # the pins are separate words on purpose
  "$dir/bin/python" -m pip install --quiet $want >&2
  echo "$want" > "$dir/.installed"
}
