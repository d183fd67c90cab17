#!/usr/bin/env bash
# Fault-injection tests (docs/no-silent-garbage.md §3) on the CPU backend: a second build with
# -DTETRA_FAULT_INJECTION=ON (the test-only faulty kernels compiled in; never a build that ships),
# of only what those tests need — test_engine (self-test, output guard), test_cli and the tetra
# binary (doctor, forced kernels) — then only those tests. Env: FAULT_BUILD (build-fault-injection).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${FAULT_BUILD:-build-fault-injection}
t0=$SECONDS
# The configure warns on purpose that this build has faulty kernels; only that warning is expected.
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTETRA_CUDA=OFF -DTETRA_FAULT_INJECTION=ON \
    >/dev/null 2>"$build/configure.log" || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target test_engine test_cli tetra
cd "$build"
ctest -L cpu -R '^(selftest|output_guard|cli_doctor|cli_strict)\.' --output-on-failure -j"$(nproc)"
echo "test-fault-injection: built and ran in $((SECONDS - t0)) s"
