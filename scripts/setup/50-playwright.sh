#!/usr/bin/env bash
# Installs playwright-core from npm into <repo>/.deps/playwright/ (git-ignored): the
# browser driver of the web UI's end-to-end tests. It drives Debian's Chromium
# (scripts/setup/40-chromium.sh); Playwright's own browser download is not used.
# Safe to run again: skipped when the pinned version is installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"

version="1.65.1"
dir="$root/.deps/playwright"
stamp="$dir/.installed"
if [[ -f "$stamp" && "$(cat "$stamp")" == "playwright-core@$version" && -f "$dir/node_modules/playwright-core/package.json" ]]; then
  echo "playwright-core $version already installed in $dir" >&2
  exit 0
fi
command -v npm >/dev/null || { echo "error: npm is required (install Node.js 18 or newer)" >&2; exit 1; }
mkdir -p "$dir"
[[ -f "$dir/package.json" ]] || echo '{"name": "flowmem-browser-tests", "private": true}' > "$dir/package.json"
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$dir" --no-audit --no-fund --save-exact "playwright-core@$version" >&2
echo "playwright-core@$version" > "$stamp"
