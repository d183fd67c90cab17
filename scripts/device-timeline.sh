#!/usr/bin/env bash
# A kernel timeline of a decode step on the GPU machine, without Nsight Systems (whose importer the
# device image lacks): builds the CUPTI injection library tools/cupti_trace/cupti_trace.cpp, runs
# `tetra bench` (batch BATCH, default 1) on dummy weights of CONFIG (a configs/ name, default
# llama-3.1-8b-nvfp4) cut to LAYERS layers (default 8) once per variant, traced, and prints
# tools/cupti_trace/timeline.py's table: per kernel class the time the step's frontier advanced while
# it ran last, its duration and its overlap with the kernel before (PDL), then one layer kernel by
# kernel. Run after scripts/device-check.sh built $BUILD/cli/tetra. VARIANTS: space-separated
# LABEL:ENV[+ENV...] run beside the default ("base"), e.g. "pdl0:TETRA_PDL=0". Tracing adds ~10 %
# to a step (H100: 0.93 → 1.06 ms on the 8-layer 8B); compare variants traced against each other.
# Where the GPU machine has no CUPTI headers, build the library on the development machine and carry
# it with its libcupti: g++ -std=c++17 -O2 -shared -fPIC -I$CUDA/include tools/cupti_trace/cupti_trace.cpp
# -L$CUDA/lib -lcupti -Wl,-rpath,'$ORIGIN' -o .device/cupti/libcupti_trace.so; cp $CUDA/lib/libcupti.so.13
# .device/cupti/; then CUPTI_TRACE_LIB=$PWD/.device/cupti/libcupti_trace.so (session 19 ran it so).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-/tmp/tetra-build}
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
if [ -n "${CUPTI_TRACE_LIB:-}" ]; then  # built elsewhere (with its libcupti beside it, rpath $ORIGIN)
    so=$CUPTI_TRACE_LIB
else
    cuda=${CUDA_HOME:-/usr/local/cuda}
    # CUPTI ships with the toolkit (include/ or extras/CUPTI/) or as the nvidia-cuda-cupti wheel (torch's
    # environment): the first cupti.h found, and a libcupti.so* of the same CUDA major next to it if any.
    roots="${CUPTI_HOME:-} $cuda/ $(ls -d /usr/local/cuda-*/ 2>/dev/null) /opt/ /usr/lib/python3*/ /usr/local/lib/python3*/"
    hdr=$(find $roots -name cupti.h -not -path '*/proc/*' 2>/dev/null | head -1)
    [ -n "$hdr" ] || { echo "device-timeline: cupti.h not found under: $roots"; exit 1; }
    inc=$(dirname "$hdr")
    libf=$(find "$(dirname "$inc")" $roots -name 'libcupti.so*' 2>/dev/null | head -1)
    [ -n "$libf" ] || { echo "device-timeline: libcupti.so not found (cupti.h: $hdr)"; exit 1; }
    lib=$(dirname "$libf")
    [ -e "$lib/libcupti.so" ] || { mkdir -p "$out/cupti-lib" && ln -sf "$libf" "$out/cupti-lib/libcupti.so" && lib=$out/cupti-lib; }
    echo "CUPTI: $hdr, $libf"
    so=$out/libcupti_trace.so
    g++ -std=c++17 -O2 -shared -fPIC -I"$inc" -I"$cuda/include" tools/cupti_trace/cupti_trace.cpp -L"$lib" -lcupti \
        -Wl,-rpath,"$(dirname "$libf")" -o "$so" ||
        { echo "device-timeline: building the CUPTI library failed"; exit 1; }
fi
cfg=/tmp/timeline-cfg
python3 - "configs/${CONFIG:-llama-3.1-8b-nvfp4}" "$cfg" "${LAYERS:-8}" <<'PY'
import json, os, shutil, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst, exist_ok=True)
for f in os.listdir(src): shutil.copy(os.path.join(src, f), dst)
c = json.load(open(os.path.join(src, "config.json"))); c["num_hidden_layers"] = n
json.dump(c, open(os.path.join(dst, "config.json"), "w"))
PY
traces=()
for v in base ${VARIANTS:-}; do
    label=${v%%:*}; envs=()
    [ "$v" = base ] || { e=${v#*:}; envs=(${e//+/ }); }
    env "${envs[@]}" CUDA_INJECTION64_PATH="$so" CUPTI_TRACE_OUT="$out/trace-$label.csv" "$build/cli/tetra" bench "$cfg" \
        --load-format dummy --device cuda --batch "${BATCH:-1}" --input-len 128 --output-len 64 --skip-selftest \
        >"$out/timeline-$label.log" 2>&1 || { echo "$label: tetra bench failed"; tail -3 "$out/timeline-$label.log"; continue; }
    echo "$label: $(grep -E '^ +[0-9]+ +[0-9.]+ ' "$out/timeline-$label.log" | head -1 | awk '{print $2}') ms/step traced"
    traces+=("$out/trace-$label.csv")
done
[ ${#traces[@]} -gt 0 ] && python3 tools/cupti_trace/timeline.py "${traces[@]}"
