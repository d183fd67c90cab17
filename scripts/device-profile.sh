#!/usr/bin/env bash
# Per-kernel GPU time of decode steps (ncu, exact kernel durations) for a configs/ model with dummy
# weights: where a step's time goes. Run on the GPU machine after scripts/device-check.sh built
# $BUILD/cli/tetra. Args: CONFIG (default llama-3.1-8b-nvfp4). Prints kernels by total time.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-/tmp/tetra-build}
cfg=${1:-llama-3.1-8b-nvfp4}
out=${OUT:-$PWD/device-out}
# Skip the bandwidth probe, two prefills and the warm-up steps; then ~3 decode steps of kernels.
ncu --launch-skip ${SKIP:-3000} --launch-count ${COUNT:-1100} --clock-control none --metrics gpu__time_duration.sum --csv \
    "$build/cli/tetra" bench "configs/$cfg" --load-format dummy --device cuda --batch 1 --input-len 128 \
    --output-len ${OUTLEN:-8} --no-graphs --skip-selftest >"$out/ncu-$cfg.csv" 2>"$out/ncu-$cfg.err"
python3 - "$out/ncu-$cfg.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; k = hdr.index("Kernel Name"); v = hdr.index("Metric Value"); u = hdr.index("Metric Unit")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[1:]:
    try: x = float(r[v].replace(",", ""))
    except ValueError: continue
    x *= {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1, "us": 1, "msecond": 1e3, "ms": 1e3}.get(r[u], 1)
    name = r[k].replace("(anonymous namespace)::", "").split("(")[0].replace("void ", "")
    tot[name] += x; cnt[name] += 1
s = sum(tot.values())
print(f"{sum(cnt.values())} kernels, {s:.0f} us total")
for n, t in sorted(tot.items(), key=lambda a: -a[1]):
    print(f"{100*t/s:5.1f}%  {t:9.1f} us  {cnt[n]:5d} calls  {t/cnt[n]:7.2f} us/call  {n}")
PY
