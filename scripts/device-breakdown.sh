#!/usr/bin/env bash
# Where a decode step goes inside the CUDA graph (`tetra bench --breakdown`: each op class left out
# in turn, its marginal cost beside its weights' time at the roofline; docs/perf.md) for configs/
# models with dummy weights. Run on the GPU machine after scripts/device-check.sh built
# $BUILD/cli/tetra. Args: CONFIGS (default: llama-3.1-8b-nvfp4 qwen3-30b-a3b-nvfp4). Env: BATCH
# (default 1), ROUNDS (default 2), OUT. One table per config, also as JSON in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-/tmp/tetra-build}
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
cfgs=${*:-llama-3.1-8b-nvfp4 qwen3-30b-a3b-nvfp4}
for cfg in $cfgs; do
    "$build/cli/tetra" bench "configs/$cfg" --load-format dummy --device cuda --batch "${BATCH:-1}" --input-len 128 \
        --output-len 64 --skip-selftest --breakdown --breakdown-rounds "${ROUNDS:-2}" --json \
        >"$out/breakdown-$cfg.json" 2>"$out/breakdown-$cfg.err" || { echo "$cfg: FAIL"; tail -3 "$out/breakdown-$cfg.err"; continue; }
    python3 - "$out/breakdown-$cfg.json" "$cfg" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); b = j["breakdown"]; bw = j["read_bandwidth_gbs"] * 1e9; full = b["ms_per_step"]
print(f"{sys.argv[2]}: batch {b['batch']}, {full:.3f} ms/step, read bandwidth {bw/1e9:.0f} GB/s")
print(f"  {'op class':15s} {'calls':>5s} {'marginal ms':>11s} {'us/call':>8s} {'% step':>6s} {'roofline us/call':>16s}")
for r in b["ops"]:
    m = r["marginal_ms"]; c = r["calls_per_step"]; w = r["weight_bytes_per_step"]
    roof = f"{1e6 * w / c / bw:16.2f}" if w > 0 else f"{'-':>16s}"
    print(f"  {r['op']:15s} {c:5d} {m:11.3f} {1e3 * m / c:8.2f} {100 * m / full:6.1f} {roof}")
PY
done
