#!/usr/bin/env bash
# The whole CPU test suite, from a fresh machine: install deps (only when missing), build, prepare
# the real test model (cached), compile the CUDA backend for the CI target list and check its SASS,
# run every ctest test labelled cpu (incl. slow; extra args go to ctest), then the fault-injection
# tests in a second, minimal build (scripts/test-fault-injection.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
build=build
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTETRA_CUDA=OFF >/dev/null
cmake --build "$build" -j"$(nproc)"
if [ -f scripts/prepare_model.sh ]; then bash scripts/prepare_model.sh; fi
# Every CUDA source compiles for sm_80, sm_90a, sm_120a, sm_121a (no GPU needed) and the SASS of the
# FP4 kernels uses the hardware E2M1 convert exactly on the a-targets of 10.x-12.x.
bash scripts/ci-cuda-build.sh
(cd "$build" && ctest -L cpu --output-on-failure -j"$(nproc)" "$@")
# The self-test and the output guard catch deliberately wrong kernels (docs/no-silent-garbage.md §3).
bash scripts/test-fault-injection.sh
