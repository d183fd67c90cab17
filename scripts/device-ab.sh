#!/bin/bash
# A/B of a performance change on the GPU machine, in one device call (run tool, carry [".device"]):
# a base tree (BASE: a tarball made beforehand, e.g. `git archive <rev> | gzip > .device/base.tgz`)
# and this tree are built side by side (the base's build dir is made anew: tar keeps old mtimes, so a
# reused one could keep stale objects), then `tetra bench` runs both on dummy weights of reduced-layer
# (l8: Llama-3.1-8B with 8 layers, q12: Qwen3-30B-A3B with 12) or full (l32, q48) configs in
# alternated rounds; a table of ms/step per batch with the change in % comes last. Needs the Debian
# build deps in .device/debs (scripts/device-check.sh says how they are unpacked) — for `tetra`, whose
# server includes httplib.h, also libbrotli-dev, libssl-dev and zlib1g-dev (their headers).
# Env: BASE (tgz, default .device/base0.tgz), CFGS ("l8 q12" and/or "l32 q48"),
# ROUNDS (2), BENCH_BATCH (1,8), TARGETS (extra ninja targets for the new tree), TESTS (ctest -R regex
# run on the new tree), VARS ("NAME=VAL ..." extra env variants of the new tree), MM (bench_matmul args
# for both trees, e.g. "--quick"). Every tree and variant first runs a 2-token smoke bench (8-layer
# Llama-3.1-8B); a failing one stops the script before the rounds.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ab-out}; mkdir -p $OUT
BASE=${BASE:-.device/base0.tgz}
P=/opt/debs
mkdir -p $P; for f in .device/debs/*.deb; do dpkg -x "$f" $P; done
export LD_LIBRARY_PATH=$P/usr/lib/x86_64-linux-gnu
for l in $P/usr/lib/x86_64-linux-gnu/*.so; do  # -dev symlinks whose runtime library is the machine's own
  [ -L "$l" ] && [ ! -e "$l" ] && [ -e "/usr/lib/x86_64-linux-gnu/$(readlink "$l")" ] && ln -sf "/usr/lib/x86_64-linux-gnu/$(readlink "$l")" "$l"
done
export PKG_CONFIG_PATH=$P/usr/lib/x86_64-linux-gnu/pkgconfig:$P/usr/share/pkgconfig
rm -rf /tmp/srcb /tmp/bb /tmp/bn/CMakeCache.txt && mkdir -p /tmp/srcb && tar xzf $BASE -C /tmp/srcb
conf() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DTETRA_CUDA=ON -DTETRA_CUDA_TARGETS=90a -DCMAKE_PREFIX_PATH=$P/usr > $OUT/conf-$3.log 2>&1; }
t0=$SECONDS
( conf . /tmp/bn new && ninja -C /tmp/bn -j10 tetra bench_matmul ${TARGETS:-} > $OUT/build-new.log 2>&1 ) & pn=$!
( conf /tmp/srcb /tmp/bb base && ninja -C /tmp/bb -j6 tetra bench_matmul > $OUT/build-base.log 2>&1 ) & pb=$!
wait $pn; rn=$?; wait $pb; rb=$?
echo "build new rc=$rn base rc=$rb ($((SECONDS - t0)) s)"
[ $rn = 0 ] || { tail -30 $OUT/build-new.log; exit 1; }
[ $rb = 0 ] || { tail -30 $OUT/build-base.log; exit 1; }
mkdir -p /tmp/cfg
mk() { python3 - "$@" <<'PY'
import json, sys, os, shutil
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst, exist_ok=True)
for f in os.listdir(src): shutil.copy(os.path.join(src, f), dst)
c = json.load(open(os.path.join(src, "config.json"))); c["num_hidden_layers"] = n
json.dump(c, open(os.path.join(dst, "config.json"), "w"))
PY
}
mk configs/llama-3.1-8b-nvfp4 /tmp/cfg/l8 8; mk configs/qwen3-30b-a3b-nvfp4 /tmp/cfg/q12 12
mk configs/llama-3.1-8b-nvfp4 /tmp/cfg/l32 32; mk configs/qwen3-30b-a3b-nvfp4 /tmp/cfg/q48 48
if [ -n "${TESTS:-}" ]; then
  ninja -C /tmp/bn -j16 $(ninja -C /tmp/bn -t targets all | sed -n 's/^\(test_[a-z0-9_]*_gpu\):.*/\1/p' | sort -u) > $OUT/build-tests.log 2>&1 || { tail -20 $OUT/build-tests.log; }
  (cd /tmp/bn && ctest -R "$TESTS" -L gpu --output-on-failure > $OUT/ctest.log 2>&1); echo "ctest: $(grep -E 'tests passed|tests failed' $OUT/ctest.log)"
  grep -E "\(Failed|\(SEGFAULT|\(Timeout" $OUT/ctest.log | head
fi
if [ -n "${MM:-}" ]; then
  for r in 1 2; do for t in bb bn; do echo "== bench_matmul $t $MM" >> $OUT/mm.log; /tmp/$t/bench/bench_matmul $MM >> $OUT/mm.log 2>&1; done; done
fi
run() {  # run TREE CFG LABEL [env...]
  local tree=$1 cfg=$2 lab=$3; shift 3
  env "$@" /tmp/$tree/cli/tetra bench /tmp/cfg/$cfg --load-format dummy --device cuda --batch ${BENCH_BATCH:-1,8} \
     --input-len 128 --output-len 64 --skip-selftest > $OUT/run.tmp 2>&1 || { echo "FAIL $lab"; tail -5 $OUT/run.tmp; }
  cat $OUT/run.tmp >> $OUT/bench-all.log
  awk -v l="$lab" -v c="$cfg" '/^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$/ {printf "%s %s b%s %s\n", c, l, $1, $2}' $OUT/run.tmp >> $OUT/res.txt
}
# Smoke run of every tree and variant first (a variant that aborts would otherwise cost every round).
for v in base new ${VARS:-}; do
  tree=bn; [ $v = base ] && tree=bb; e=(); [ $v = base ] || [ $v = new ] || e=("$v")
  env "${e[@]}" /tmp/$tree/cli/tetra bench /tmp/cfg/l8 --load-format dummy --device cuda --batch 1 --input-len 8 \
     --output-len 2 --skip-selftest > $OUT/smoke.log 2>&1 || { echo "smoke run failed: $v"; tail -8 $OUT/smoke.log; exit 1; }
done
for r in $(seq 1 ${ROUNDS:-2}); do
  for cfg in ${CFGS:-l8 q12}; do
    run bb $cfg base; run bn $cfg new
    for v in ${VARS:-}; do run bn $cfg "new:$v" "$v"; done
  done
done
python3 - $OUT/res.txt <<'PY'
import sys, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    c, l, b, ms = line.split(); d[(c, b, l)].append(float(ms))
keys = sorted(set((c, b) for c, b, _ in d))
for c, b in keys:
    base = d.get((c, b, "base"), [])
    row = [f"{c:4s} {b:4s}"]
    for (cc, bb, l), v in sorted(d.items()):
        if (cc, bb) != (c, b): continue
        m = min(v); rel = f" ({100*(m/min(base)-1):+.1f}%)" if base and l != "base" else ""
        row.append(f"{l}: " + "/".join(f"{x:.3f}" for x in v) + rel)
    print(" | ".join(row))
PY
if [ -n "${MM:-}" ]; then grep -E "^==|\| (1|16) \|" $OUT/mm.log | head -80; fi
