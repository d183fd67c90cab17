#!/usr/bin/env bash
# The main job, from a fresh machine: install deps (only when missing), build tetra, prepare the
# default model (SmolLM2-135M-Instruct → NVFP4, cached under ~/.cache/tetra), then serve it.
# Usage: bash scripts/run.sh [SUBCOMMAND [ARGS...]]
#   default: `tetra serve` on the default model (OpenAI API on http://127.0.0.1:8000/v1; it prints
#   how to call it); e.g. `bash scripts/run.sh chat` for an interactive chat instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh >&2
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTETRA_CUDA=AUTO >/dev/null
cmake --build build -j"$(nproc)" --target tetra >&2
bash scripts/prepare_model.sh build/cli/tetra >&2
if [ $# -eq 0 ]; then set -- serve; fi
exec build/cli/tetra "$@"
