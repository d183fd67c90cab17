#!/usr/bin/env bash
# The whole CPU test suite, from a fresh machine: install deps (only when missing), build, prepare
# the real test model (cached), run every ctest test labelled cpu (incl. slow). Extra args go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
build=build
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTETRA_CUDA=OFF >/dev/null
cmake --build "$build" -j"$(nproc)"
if [ -f scripts/prepare_model.sh ]; then bash scripts/prepare_model.sh; fi
cd "$build"
ctest -L cpu --output-on-failure -j"$(nproc)" "$@"
