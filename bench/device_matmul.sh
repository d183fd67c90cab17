#!/bin/bash
# The CUDA matmul round trip on the GPU machine (shared/device/README.md): unpack the build deps,
# build test_matmul_gpu and bench_matmul (CMake, sm_$ARCH only; falls back to an nvcc-only build of
# the matmul files when the full build fails or STANDALONE=1), run the test (+ compute-sanitizer
# memcheck on the small cases) and the bench; logs go to $OUT.
# Usage (repo root): bench/device_matmul.sh ["" | --quick | --variants | --pattern]...   (ARCH=90a by
# default; STANDALONE=1 skips the CMake build; PROFILE="N K M [v1]" adds an ncu run of one small-M launch)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/matmul-out}
B=${B:-/tmp/matmul-build}
ARCH=${ARCH:-90a}
mkdir -p "$OUT" "$B"
if [ -d .device/debs ] && [ ! -d /opt/debs/usr ]; then
  for f in .device/debs/*.deb; do dpkg -x "$f" /opt/debs; done
fi
GT=/opt/debs/usr
NV="nvcc -std=c++17 -O3 -gencode arch=compute_${ARCH},code=sm_${ARCH} -lineinfo -Isrc -I$GT/include"
t0=$(date +%s)
LIBS="-L$GT/lib/x86_64-linux-gnu -lcublasLt -lpthread"
build_cmake() {  # the real build: tetra_backend (all CUDA kernels) + the gpu test + the bench
  # cpp-httplib.pc names brotli .pc files that the unpacked debs lack (the runtime .so are there)
  mkdir -p $B/pc
  for b in common dec enc; do printf 'Name: libbrotli%s\nDescription: stub\nVersion: 1.0.9\nLibs:\nCflags:\n' $b > $B/pc/libbrotli$b.pc; done
  export PKG_CONFIG_PATH=$B/pc:$GT/lib/x86_64-linux-gnu/pkgconfig:$GT/share/pkgconfig
  cmake -S . -B $B/cm -G Ninja -DCMAKE_BUILD_TYPE=Release -DTETRA_CUDA=ON -DTETRA_CUDA_TARGETS=$ARCH \
        -DCMAKE_PREFIX_PATH=$GT > $OUT/cmake.log 2>&1 &&
    LD_LIBRARY_PATH=$GT/lib/x86_64-linux-gnu ninja -C $B/cm test_matmul_gpu bench_matmul >> $OUT/cmake.log 2>&1 &&
    ln -sf $B/cm/tests/test_matmul_gpu $B/test_matmul_gpu && ln -sf $B/cm/bench/bench_matmul $B/bench_matmul
}
build_standalone() {  # only the matmul files (when someone else's half-written file breaks the full build)
  local pids=() fail=0
  $NV -DTETRA_MATMUL_STANDALONE -c src/backend/cuda/matmul_nvfp4_w4a16_sm80.cu -o $B/w4.o & pids+=($!)
  $NV -DTETRA_MATMUL_STANDALONE -c src/backend/cuda/matmul_nvfp4_w4a16_gemv_sm80.cu -o $B/gv.o & pids+=($!)
  $NV -DTETRA_MATMUL_STANDALONE -c src/backend/cuda/matmul_nvfp4_w4a16_sweep_sm80.cu -o $B/sw.o & pids+=($!)
  $NV -DTETRA_MATMUL_STANDALONE -c src/backend/cuda/matmul_nvfp4_w4a16_large_sm80.cu -o $B/lg.o & pids+=($!)
  $NV -DTETRA_MATMUL_STANDALONE -c src/backend/cuda/matmul_dense_bf16_cublaslt.cu -o $B/lt.o & pids+=($!)
  $NV -DTETRA_MATMUL_STANDALONE -c src/backend/cuda/matmul_nvfp4_w4a16_wgmma_sm90.cu -o $B/wg.o & pids+=($!)
  $NV -DTETRA_MATMUL_STANDALONE -c tests/backend/cuda/test_matmul_gpu.cu -o $B/test.o & pids+=($!)
  $NV -c bench/bench_matmul.cu -o $B/bench.o & pids+=($!)
  for f in src/core/*.cpp src/nvfp4/*.cpp src/backend/cuda/w4a16_layout.cpp; do
    g++ -std=c++17 -O2 -Isrc -I$GT/include -c "$f" -o "$B/cpu_$(basename "$f" .cpp).o" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || fail=1; done
  [ $fail = 0 ] || return 1
  nvcc -o $B/test_matmul_gpu $B/test.o $B/w4.o $B/gv.o $B/sw.o $B/lg.o $B/lt.o $B/wg.o $B/cpu_*.o $LIBS \
       -lgtest_main -lgtest &&
    nvcc -o $B/bench_matmul $B/bench.o $B/w4.o $B/gv.o $B/sw.o $B/lg.o $B/lt.o $B/wg.o $B/cpu_*.o $LIBS
}
if [ -z "${STANDALONE:-}" ] && build_cmake; then echo "build (cmake): $(( $(date +%s) - t0 )) s"
else
  echo "cmake build failed or skipped (tail of $OUT/cmake.log below); standalone build"; tail -5 $OUT/cmake.log 2>/dev/null
  build_standalone || { echo "BUILD FAILED"; exit 1; }
  echo "build (standalone): $(( $(date +%s) - t0 )) s"
fi
export LD_LIBRARY_PATH=$GT/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
$B/test_matmul_gpu 2>&1 | tee "$OUT/test.log" | grep -E "^\[  (FAILED|PASSED|  OK) |Failure|error|got" | head -60
compute-sanitizer --tool memcheck $B/test_matmul_gpu --gtest_filter='*nan_parity*:*all_row_counts*:*dequant_exact*:*nan_inf_parity*:*versions_and_plans*:*wgmma*' \
  > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
for args in "${@:-}"; do  # each argument is one bench invocation's flags ("" = the full table)
  $B/bench_matmul $args 2>&1 | tee -a "$OUT/bench.log"
done
if [ -n "${PROFILE:-}" ]; then  # PROFILE="N K M [v1]": ncu sections of one small-M launch (v2, or v1)
  ncu --launch-skip 5 --launch-count 1 -k 'regex:small_kernel|run_kernel' --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section Occupancy --section SchedulerStats --section LaunchStats \
      --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
      $B/bench_matmul --one $PROFILE > "$OUT/ncu.txt" 2>&1
  grep -E "issue_stalled|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Registers|Issued Warp|No Eligible|Stall|Warp Cycles|Block Limit|Waves|Grid Size|Compute \(SM\)" "$OUT/ncu.txt" | head -70
fi
