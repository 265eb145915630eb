#!/usr/bin/env bash
# Installs headless Chromium for the tests that open HTML reports in a real browser
# (flowmem-eval's report test). Debian's package works here; a test tool's own browser
# download does not. Does nothing when `chromium` is already on PATH.
set -euo pipefail
source "$(dirname "$0")/apt.bash"
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
apt_install chromium
command -v chromium >/dev/null
