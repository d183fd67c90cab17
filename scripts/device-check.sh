#!/usr/bin/env bash
# The whole GPU-machine round trip in one call (run from the repo root, e.g. through the device
# run tool with carry [".device"]): unpack the Debian build deps from .device/debs, configure a
# CUDA build for the GPU present (TETRA_CUDA_TARGETS, default 90a), build every gpu test and
# bench_* target, run ctest -L gpu, run the benchmarks, print a short table last. Logs → $OUT.
# Env: OUT (default ./device-out), BUILD (default /tmp/tetra-build), TETRA_CUDA_TARGETS, CTEST_ARGS,
# BENCHES (bench_* executables to run; default every one built, empty for none), BENCH=0 (no tetra bench).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/device-out}
build=${BUILD:-/tmp/tetra-build}
targets=${TETRA_CUDA_TARGETS:-90a}
prefix=/opt/debs
mkdir -p "$out"
rows=()
step() {  # step NAME LOG CMD...: runs CMD with output to $out/LOG, records status and seconds
    local name=$1 log=$2 t0=$SECONDS
    shift 2
    "$@" >"$out/$log" 2>&1
    local rc=$?
    rows+=("$(printf '%-28s %-6s %5ss  %s' "$name" "$([ $rc = 0 ] && echo ok || echo FAIL:$rc)" $((SECONDS - t0)) "$log")")
    return $rc
}

{ nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader; nvcc --version | tail -2; } \
    >"$out/machine.txt" 2>&1
if [ -d .device/debs ]; then
    step "unpack debs" debs.log bash -c "mkdir -p $prefix && for f in .device/debs/*.deb; do dpkg -x \"\$f\" $prefix; done"
fi
export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
# -dev symlinks (libX.so -> libX.so.N) whose runtime library is the machine's own: point them there.
for l in $prefix/usr/lib/x86_64-linux-gnu/*.so; do
    [ -L "$l" ] && [ ! -e "$l" ] && [ -e "/usr/lib/x86_64-linux-gnu/$(readlink "$l")" ] &&
        ln -sf "/usr/lib/x86_64-linux-gnu/$(readlink "$l")" "$l"
done
# cpp-httplib.pc requires brotli's .pc files, which ship in libbrotli-dev (not in .device/debs); the
# runtime libraries are installed. Configure-only stubs let the server module configure — none of
# the targets built here link it.
pcstub=$out/pkgconfig-stubs
for m in libbrotlicommon libbrotlidec libbrotlienc; do
    if ! PKG_CONFIG_PATH=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig pkg-config --exists $m 2>/dev/null; then
        mkdir -p "$pcstub"
        printf 'Name: %s\nDescription: configure-only stub (device-check.sh)\nVersion: 1.1.0\nLibs:\nCflags:\n' $m >"$pcstub/$m.pc"
    fi
done
[ -d "$pcstub" ] && export PKG_CONFIG_PATH=$pcstub${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
step configure configure.log cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTETRA_CUDA=ON \
    -DCMAKE_PREFIX_PATH=$prefix/usr -DTETRA_CUDA_TARGETS="$targets" -DCMAKE_CUDA_ARCHITECTURES="$targets" || true
gpu_targets=$(cmake --build "$build" --target help 2>/dev/null | sed -n 's/^\(test_[A-Za-z0-9_]*_gpu\|bench_[A-Za-z0-9_]*\):.*/\1/p' | sort -u)
step "build ($(echo $gpu_targets | wc -w) targets)" build.log cmake --build "$build" -j"$(nproc)" --target $gpu_targets || true
step "ctest -L gpu" ctest.log ctest --test-dir "$build" -L gpu --output-on-failure ${CTEST_ARGS:-} || true
for b in ${BENCHES-$(echo "$gpu_targets" | grep '^bench_')}; do
    exe=$(find "$build" -type f -name "$b" -perm -u+x | head -1)
    [ -n "$exe" ] && { step "$b" "$b.log" "$exe" || true; }
done

# The CLI on dummy weights of real configurations (BENCH_CONFIGS, space-separated configs/ names):
# tetra doctor, then tetra bench with and without CUDA graphs.
if [ "${BENCH:-1}" = 1 ]; then
    step "build tetra" build-cli.log cmake --build "$build" -j"$(nproc)" --target tetra || true
    step "tetra doctor" doctor.log "$build/cli/tetra" doctor --device cuda || true
    for c in ${BENCH_CONFIGS:-smollm2-135m-nvfp4 llama-3.1-8b-nvfp4}; do
        step "bench $c" "bench-$c.log" "$build/cli/tetra" bench "configs/$c" --load-format dummy --device cuda \
            --batch ${BENCH_BATCH:-1,8,32,64} --input-len 128 --output-len 64 || true
        step "bench $c no-graphs" "bench-$c-nographs.log" "$build/cli/tetra" bench "configs/$c" --load-format dummy \
            --device cuda --batch 1 --input-len 128 --output-len 64 --no-graphs --skip-selftest || true
    done
fi

echo "== $(head -1 "$out/machine.txt") | images $targets | logs in $out"
grep -E "^device: " "$build"/Testing/Temporary/LastTest.log 2>/dev/null | head -1
grep -E "tests passed|tests failed" "$out/ctest.log" 2>/dev/null
grep -E "^\s+[0-9]+ - .*\(Failed|\(Timeout|\(SEGFAULT|\(Subprocess" "$out/ctest.log" 2>/dev/null | head -20
for f in "$out"/bench-*.log; do [ -f "$f" ] && { echo "-- $f"; grep -A12 "^model" "$f"; }; done
printf '%s\n' "${rows[@]}"
