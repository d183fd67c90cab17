#!/usr/bin/env bash
# The large-M W4A16 round trip in one device call (run from the repo root with carry [".device"]):
# every gpu test (scripts/device-check.sh, no benches), compute-sanitizer memcheck of the fused
# wgmma tests, bench_matmul --large and --quick, and the Llama-3.1-8B prefill of 1024 and 2048
# tokens with the registry's choice against the dequant + cuBLASLt path forced
# (TETRA_KERNEL=matmul_nvfp4_w4a16:matmul_nvfp4_w4a16_sm80). Env: OUT, BUILD, CHECK_T (seconds
# for device-check), LARGE=0 (no --large). Few files under $OUT: the device tool returns ~8.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/device-out}; mkdir -p "$out"
export BUILD=${BUILD:-/tmp/tetra-build}
BENCHES="" BENCH=0 CTEST_ARGS="${CTEST_ARGS:-}" timeout ${CHECK_T:-380} scripts/device-check.sh > "$out/check.txt" 2>&1
tail -8 "$out/check.txt"
export LD_LIBRARY_PATH=/opt/debs/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake --build "$BUILD" -j16 --target tetra > "$out/build-tetra.log" 2>&1 || tail -20 "$out/build-tetra.log"
exe=$(find "$BUILD" -type f -name bench_matmul -perm -u+x | head -1)
tm=$(find "$BUILD" -type f -name test_matmul_gpu -perm -u+x | head -1)
timeout 120 compute-sanitizer --tool memcheck "$tm" --gtest_filter='*wgmma*' > "$out/memcheck-wgmma.txt" 2>&1
echo "memcheck wgmma rc=$? $(grep -E 'ERROR SUMMARY' "$out/memcheck-wgmma.txt" | tail -1) $(grep -E 'PASSED|FAILED' "$out/memcheck-wgmma.txt" | tail -1)"
[ "${LARGE:-1}" = 1 ] && timeout 150 "$exe" --large > "$out/large.txt" 2>&1
timeout 100 "$exe" --quick > "$out/quick.txt" 2>&1
grep -E "fused|dequant\+" "$out/large.txt" | awk -F'|' '{printf "%s|%s|%s|%s|%s\n",$2,$3,$4,$5,$7}'
T="$BUILD/cli/tetra"
for il in 1024 2048; do
  for v in default sm80; do
    if [ $v = sm80 ]; then export TETRA_KERNEL=matmul_nvfp4_w4a16:matmul_nvfp4_w4a16_sm80; else unset TETRA_KERNEL; fi
    timeout 100 "$T" bench configs/llama-3.1-8b-nvfp4 --load-format dummy --device cuda --batch 1 --input-len $il --output-len 4 \
      --skip-selftest > "$out/prefill-$il-$v.log" 2>&1
    echo "prefill input $il $v: $(grep -iE 'prefill' "$out/prefill-$il-$v.log" | head -3 | tr '\n' ' ')"
  done
done
unset TETRA_KERNEL
