#!/usr/bin/env bash
# CI without a GPU: configure a CUDA build (-DTETRA_CUDA=ON) for the CI target list, compile the CUDA
# objects and every gpu test executable (run only on the device: scripts/device-check.sh), then
# check the SASS of the FP4 kernels (scripts/check_sass.sh). Skipped with a notice when the machine
# has no nvcc. Env: CI_CUDA_TARGETS (default "80;90a;120a;121a"), CI_CUDA_BUILD (build-cuda-ci).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${CI_CUDA_BUILD:-build-cuda-ci}
targets=${CI_CUDA_TARGETS:-80;90a;120a;121a}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ ! -x "$nvcc" ]; then
    echo "ci-cuda-build: no nvcc on this machine; CUDA build not checked"
    exit 0
fi
t0=$SECONDS
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTETRA_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DTETRA_CUDA_TARGETS="$targets" -DCMAKE_CUDA_ARCHITECTURES="90a" >/dev/null
gpu_tests=$(cmake --build "$build" --target help | sed -n 's/^\(test_[A-Za-z0-9_]*_gpu\):.*/\1/p' | sort -u)
cmake --build "$build" -j"$(nproc)" --target tetra_backend_cuda tetra_backend $gpu_tests
echo "ci-cuda-build: compiled for $targets in $((SECONDS - t0)) s"
bash scripts/check_sass.sh "$build"
