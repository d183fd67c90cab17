#!/usr/bin/env bash
# Qwen3-MoE, the engine vs live transformers on the GPU machine (issue #7; docs/validation.md): build
# `tetra` + test_qwen3_moe_gpu and run the test, make a larger random Qwen3MoeForCausalLM
# (tools/gen_moe_goldens.py --random-model), `tetra quantize` it (ModelOpt NVFP4), dequantize it for
# transformers (tools/dequant_nvfp4.py), dump the engine's teacher-forced logits on N_TOK tokens of
# tests/data/text (tetra perplexity --dump-logits) and compare them with transformers in f32
# (tools/compare_hf.py, plus its bf16-vs-f32 baseline) for the bf16 and the NVFP4 model; table last.
# Env: OUT (logs, default ./device-out), BUILD (/tmp/tetra-build), WORK (/tmp/moe-hf: models, logits),
# DEVICE (cuda), MODEL_ARGS (gen_moe_goldens.py --random-model sizes), N_TOK (512), MIN_AGREEMENT (0.99),
# BUILD_TETRA=0 + TETRA=path (use a built tetra; the gpu test is then skipped), BUDGET (seconds, 530),
# CPU_REF (1: also the CPU engine, f32 activations, on the same models: the control for the GPU's bf16),
# CUDA_F32 (1: also the CUDA engine with --dtype float32, the like-for-like run against transformers in f32).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/device-out} build=${BUILD:-/tmp/tetra-build} work=${WORK:-/tmp/moe-hf} dev=${DEVICE:-cuda}
model_args=${MODEL_ARGS:---hidden 1024 --layers 8 --experts 64 --top-k 8 --moe-ff 256 --seed 1}
n_tok=${N_TOK:-512} min_agree=${MIN_AGREEMENT:-0.99} t_end=$((SECONDS + ${BUDGET:-530}))
tetra=${TETRA:-$build/cli/tetra} prefix=/opt/debs
mkdir -p "$out" "$work"
rows=()
step() {  # step NAME LOG CMD...: CMD with output to $out/LOG under the remaining budget; records status, seconds
    local name=$1 log=$2 t0=$SECONDS left=$((t_end - SECONDS))
    shift 2
    if [ $left -le 5 ]; then rows+=("$(printf '%-30s %-8s' "$name" "SKIP(budget)")"); return 1; fi
    timeout $left "$@" >"$out/$log" 2>&1
    local rc=$?
    rows+=("$(printf '%-30s %-8s %4ss  %s' "$name" "$([ $rc = 0 ] && echo ok || echo FAIL:$rc)" $((SECONDS - t0)) "$log")")
    return $rc
}

{ nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader 2>/dev/null
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)
from transformers import Qwen3MoeForCausalLM; print('Qwen3MoeForCausalLM: present')"; } >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

# The random model is drawn while tetra builds (torch on the GPU when there is one).
gen_dev=$([ "$dev" = cuda ] && echo cuda || echo cpu)
( t0=$SECONDS; timeout 300 python3 tools/gen_moe_goldens.py --random-model "$work/bf16" $model_args --device $gen_dev \
      >"$out/gen.log" 2>&1; rc=$?; [ $rc = 0 ] && echo ok >"$work/gen.rc" || echo FAIL:$rc >"$work/gen.rc"
  echo $((SECONDS - t0)) >"$work/gen.s" ) &
gen_pid=$!

if [ "${BUILD_TETRA:-1}" = 1 ]; then  # as scripts/device-check.sh: Debian -dev packages from .device/debs
    mkdir -p $prefix && for f in .device/debs/*.deb; do dpkg -x "$f" $prefix; done
    export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
    for l in $prefix/usr/lib/x86_64-linux-gnu/*.so; do
        [ -L "$l" ] && [ ! -e "$l" ] && [ -e "/usr/lib/x86_64-linux-gnu/$(readlink "$l")" ] &&
            ln -sf "/usr/lib/x86_64-linux-gnu/$(readlink "$l")" "$l"
    done
    pcstub=$work/pkgconfig-stubs && mkdir -p $pcstub  # configure-only (see device-check.sh)
    for m in libbrotlicommon libbrotlidec libbrotlienc; do
        printf 'Name: %s\nDescription: stub\nVersion: 1.1.0\nLibs:\nCflags:\n' $m >"$pcstub/$m.pc"
    done
    export PKG_CONFIG_PATH=$pcstub
    step configure configure.log cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTETRA_CUDA=ON \
        -DCMAKE_PREFIX_PATH=$prefix/usr -DTETRA_CUDA_TARGETS=90a -DCMAKE_CUDA_ARCHITECTURES=90a
    step "build tetra test_qwen3_moe_gpu" build.log cmake --build "$build" -j"$(nproc)" --target tetra test_qwen3_moe_gpu
    gtest=$(find "$build" -type f -name test_qwen3_moe_gpu -perm -u+x | head -1)
    [ -n "$gtest" ] && step "test_qwen3_moe_gpu" gpu-test.log "$gtest"
fi

# The random model, its NVFP4 form and that form dequantized to f32 for transformers.
wait $gen_pid
rows+=("$(printf '%-30s %-8s %4ss  %s' "random model (background)" "$(cat "$work/gen.rc")" "$(cat "$work/gen.s")" gen.log)")
step "tetra quantize (modelopt)" quantize.log "$tetra" quantize "$work/bf16" "$work/nvfp4" --force
step "dequant_nvfp4.py" dequant.log python3 tools/dequant_nvfp4.py "$work/nvfp4" "$work/nvfp4-deq"
text=tests/data/text/devils_dictionary.txt
for m in bf16 nvfp4; do
    hf=$([ $m = bf16 ] && echo "$work/bf16" || echo "$work/nvfp4-deq")
    step "tetra perplexity $m" ppl-$m.log "$tetra" perplexity "$work/$m" --device $dev -f $text \
        --max-model-len $n_tok --dump-logits "$work/logits-$m"
    step "compare_hf $m" compare-$m.log python3 tools/compare_hf.py compare --model "$hf" --ids "$work/logits-$m.json" \
        --logits "$work/logits-$m.npy" --device $dev --min-agreement $min_agree --baseline-bf16 \
        --summary-json "$out/compare-$m.json" --label "$m"
    if [ "${CUDA_F32:-1}" = 1 ] && [ "$dev" = cuda ]; then  # the GPU with f32 activations (--dtype float32)
        step "tetra perplexity $m cuda f32" ppl-$m-cudaf32.log "$tetra" perplexity "$work/$m" --device cuda --dtype float32 \
            -f $text --max-model-len $n_tok --dump-logits "$work/logits-$m-cudaf32"
        step "compare_hf $m cuda f32" compare-$m-cudaf32.log python3 tools/compare_hf.py compare --model "$hf" \
            --ids "$work/logits-$m-cudaf32.json" --logits "$work/logits-$m-cudaf32.npy" --device $dev \
            --min-agreement $min_agree --summary-json "$out/compare-$m-cudaf32.json" --label "$m (cuda f32)"
    fi
    if [ "${CPU_REF:-1}" = 1 ] && [ "$dev" != cpu ]; then  # control: the CPU engine (f32 activations), same model
        step "tetra perplexity $m cpu" ppl-$m-cpu.log "$tetra" perplexity "$work/$m" --device cpu -f $text \
            --max-model-len $n_tok --dump-logits "$work/logits-$m-cpu"
        step "compare_hf $m cpu" compare-$m-cpu.log python3 tools/compare_hf.py compare --model "$hf" \
            --ids "$work/logits-$m-cpu.json" --logits "$work/logits-$m-cpu.npy" --device $dev \
            --min-agreement $min_agree --summary-json "$out/compare-$m-cpu.json" --label "$m (cpu f32)"
    fi
done

echo "== $(head -1 "$out/machine.txt") | logs in $out"
grep -hE "^random Qwen3Moe|^quantized|^tokens " "$out"/gen.log "$out"/ppl-*.log 2>/dev/null
grep -E "^  cuda .*(prefill|step)\) vs transformers|PASSED|FAILED" "$out/gpu-test.log" 2>/dev/null | cut -c1-240
grep -E "^(top-1|max \||differing|perplexity|baseline|ours vs)" "$out"/compare-*.log 2>/dev/null
printf '%s\n' "${rows[@]}"
python3 - "$out" "$dev" <<'EOF'
import json, os, sys
nan = {"agreement": float("nan"), "max_abs": float("nan"), "mean_abs": float("nan")}
print(f"{'model':<6} {'engine':<8} {'positions':>9} {'top-1':>7} {'max |d|':>8} {'mean |d|':>8} {'NMSE':>9}  "
      f"{'HF bf16 vs f32: top-1':>21} {'max |d|':>8} {'mean |d|':>8}  {'ours vs HF bf16':>15}  result")
for m in ("bf16", "nvfp4"):
    for sfx, eng in (("", sys.argv[2]), ("-cudaf32", "cuda f32"), ("-cpu", "cpu f32")):
        p = os.path.join(sys.argv[1], f"compare-{m}{sfx}.json")
        if not os.path.exists(p):
            if not sfx:
                print(f"{m:<6} {eng:<8} (no result)")
            continue
        s = json.load(open(p))
        b, o = s.get("baseline_bf16", nan), s.get("ours_vs_hf_bf16", nan)
        print(f"{m:<6} {eng:<8} {s['positions']:>9} {s['agreement']:>7.4f} {s['max_abs']:>8.4f} {s['mean_abs']:>8.4f} "
              f"{s['nmse']:>9.2e}  {b['agreement']:>21.4f} {b['max_abs']:>8.4f} {b['mean_abs']:>8.4f}  "
              f"{o['agreement']:>15.4f}  {'PASS' if s['pass'] else 'FAIL'}")
EOF
