#!/usr/bin/env bash
# SASS check of the compiled CUDA objects (reference/kernels.md §8): the hardware E2M1 convert
# F2FP.SATFINITE.E2M1 must be in the sm_120a and sm_121a (and sm_100a) cubins of the
# quantize_nvfp4_act_sm120a kernel and in no cubin of other targets (sm_80, sm_90a, ...), and never
# in the software kernel quantize_nvfp4_act_sm80; HGMMA exactly in the sm_90a cubin of the fused
# large-M W4A16 kernel. Usage: check_sass.sh [build dir] (default
# build-cuda-ci). cuobjdump: $CUOBJDUMP, PATH, /usr/local/cuda/bin, or PyPI nvidia-cuda-cuobjdump.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda-ci}
find_cuobjdump() {
    [ -n "${CUOBJDUMP:-}" ] && { echo "$CUOBJDUMP"; return; }
    command -v cuobjdump 2>/dev/null && return
    [ -x /usr/local/cuda/bin/cuobjdump ] && { echo /usr/local/cuda/bin/cuobjdump; return; }
    local py
    py=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null || true)
    for c in "$py"/nvidia/cu13/bin/cuobjdump "$py"/nvidia/cuda_cuobjdump/bin/cuobjdump; do
        [ -x "$c" ] && { echo "$c"; return; }
    done
}
cuobjdump=$(find_cuobjdump || true)
if [ -z "$cuobjdump" ]; then
    python3 -m pip install -q nvidia-cuda-cuobjdump >&2
    cuobjdump=$(find_cuobjdump)
fi
# cuobjdump -sass runs nvdisasm (CUDA 13 toolkits without it, and the PyPI cuobjdump, need the
# separate PyPI nvidia-cuda-nvdisasm): $NVDISASM_PATH, PATH, next to cuobjdump, /usr/local/cuda/bin,
# or PyPI.
find_nvdisasm() {
    [ -n "${NVDISASM_PATH:-}" ] && [ -x "$NVDISASM_PATH/nvdisasm" ] && { echo "$NVDISASM_PATH"; return; }
    command -v nvdisasm >/dev/null 2>&1 && { dirname "$(command -v nvdisasm)"; return; }
    local py d
    py=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null || true)
    for d in "$(dirname "$cuobjdump")" /usr/local/cuda/bin "$py"/nvidia/cu13/bin "$py"/nvidia/cuda_nvdisasm/bin; do
        [ -x "$d/nvdisasm" ] && { echo "$d"; return; }
    done
}
nvdisasm_dir=$(find_nvdisasm || true)
if [ -z "$nvdisasm_dir" ]; then
    python3 -m pip install -q nvidia-cuda-nvdisasm >&2
    nvdisasm_dir=$(find_nvdisasm || true)
fi
[ -n "$nvdisasm_dir" ] || { echo "check_sass: nvdisasm not found (cuobjdump -sass needs it)" >&2; exit 1; }
export PATH="$nvdisasm_dir:$PATH" NVDISASM_PATH="$nvdisasm_dir"
hw=$(find "$build" -name 'quantize_nvfp4_act_sm120a.cu.o' | head -1)
sw=$(find "$build" -name 'quantize_nvfp4_act_sm80.cu.o' | head -1)
[ -n "$hw" ] && [ -n "$sw" ] || { echo "check_sass: quantize_nvfp4_act objects not found under $build" >&2; exit 1; }

fail=0
count() { "$cuobjdump" -sass -arch "$2" "$1" | grep -c 'F2FP\.SATFINITE\.E2M1' || true; }
arches() { "$cuobjdump" -lelf "$1" | sed -n 's/.*\.\(sm_[0-9]*[af]\?\)\.cubin$/\1/p' | sort -u; }
seen=""
for a in $(arches "$hw"); do
    n=$(count "$hw" "$a")
    case $a in sm_100a | sm_100f | sm_103a | sm_103f | sm_110a | sm_110f | sm_12[01][af]) want=yes ;; *) want=no ;; esac
    if { [ $want = yes ] && [ "$n" -gt 0 ]; } || { [ $want = no ] && [ "$n" -eq 0 ]; }; then st=ok; else st=FAIL; fail=1; fi
    printf 'quantize_nvfp4_act_sm120a %-8s F2FP.SATFINITE.E2M1 x%-3s expected %-3s %s\n' "$a" "$n" "$want" "$st"
    seen="$seen $a"
done
for a in $(arches "$sw"); do
    n=$(count "$sw" "$a")
    st=ok; [ "$n" -eq 0 ] || { st=FAIL; fail=1; }
    printf 'quantize_nvfp4_act_sm80    %-8s F2FP.SATFINITE.E2M1 x%-3s expected no  %s\n' "$a" "$n" "$st"
done
# The fused large-M W4A16 kernel: wgmma (HGMMA) exactly in the sm_90a cubin; other images hold the
# trap the registry never selects (it needs FEAT_WGMMA).
wg=$(find "$build" -name 'matmul_nvfp4_w4a16_wgmma_sm90.cu.o' | head -1)
if [ -n "$wg" ]; then
    for a in $(arches "$wg"); do
        n=$("$cuobjdump" -sass -arch "$a" "$wg" | grep -c 'HGMMA' || true)
        case $a in sm_90a) want=yes ;; *) want=no ;; esac
        if { [ $want = yes ] && [ "$n" -gt 0 ]; } || { [ $want = no ] && [ "$n" -eq 0 ]; }; then st=ok; else st=FAIL; fail=1; fi
        printf 'matmul_nvfp4_w4a16_wgmma   %-8s HGMMA x%-3s expected %-3s %s\n' "$a" "$n" "$want" "$st"
    done
else
    echo "check_sass: matmul_nvfp4_w4a16_wgmma_sm90 object not found under $build"; fail=1
fi
for need in ${CHECK_SASS_REQUIRE:-sm_120a sm_121a}; do
    case " $seen " in *" $need "*) ;; *) echo "check_sass: no $need cubin in $hw (compiled:$seen)"; fail=1 ;; esac
done
[ $fail = 0 ] && echo "check_sass: OK" || echo "check_sass: FAILED"
exit $fail
