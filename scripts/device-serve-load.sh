#!/usr/bin/env bash
# GPU load benchmark of `tetra serve` (issue 5 point 8): serve a configs/ model with dummy weights
# and a real tokenizer from tests/data, then tools/load_gen.py at 1, 8, 32 and 64 concurrent
# streams. Run on the GPU machine after a build of $BUILD/cli/tetra (e.g. scripts/device-check.sh).
# Args: CONFIG (default qwen3-8b-nvfp4) TOKENIZER_DIR (default tests/data/tokenizer/qwen3).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-/tmp/tetra-build}
cfg=${1:-qwen3-8b-nvfp4}
tok=${2:-tests/data/tokenizer/qwen3}
out=${OUT:-$PWD/device-out}
port=${PORT:-8011}
"$build/cli/tetra" serve "configs/$cfg" --load-format dummy --tokenizer "$tok" --port "$port" --max-num-seqs 64 \
    >"$out/serve-$cfg.log" 2>&1 &
pid=$!
for _ in $(seq 240); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || { echo "server exited"; tail -20 "$out/serve-$cfg.log"; exit 1; }
    sleep 0.5
done
python3 tools/load_gen.py --url "http://127.0.0.1:$port" --concurrency 1 8 32 64 --max-tokens 64 | tee "$out/load-$cfg.txt"
curl -s "http://127.0.0.1:$port/metrics" | grep -E "^tetra:(kv_cache_usage|num_requests|output_guard)" | head
kill -TERM $pid
wait $pid
echo "serve exit $?"
