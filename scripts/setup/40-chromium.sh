#!/usr/bin/env bash
# Installs headless Chromium for the tests that open HTML reports in a real browser
# (flowmem-eval's report test). Debian's package works here; a test tool's own browser
# download does not. Does nothing when `chromium` is already on PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null
