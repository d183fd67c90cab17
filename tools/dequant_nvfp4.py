#!/usr/bin/env python3
"""Dequantize a ModelOpt NVFP4 checkpoint into a plain HF directory, so transformers can run the
very weights the engine runs (tools/compare_hf.py compare --model OUT ...).

  dequant_nvfp4.py SRC OUT [--dtype f32|bf16]

Every module with .weight (U8 packed e2m1, even element in the low nibble), .weight_scale (e4m3
[out, in/16]) and .weight_scale_2 (f32, dequant direction) becomes .weight = (e2m1 * e4m3) *
weight_scale_2, computed in float32 (reference/nvfp4-format.md §3; the first product is exact).
f32 (default) keeps those values exactly; bf16 rounds them (to nearest even). .input_scale tensors
(W4A4) are dropped: this is the weight-only view. Every other tensor is copied as stored; config.json
loses quantization_config; hf_quant_config.json is not copied; tokenizer/generation files are.
Codecs come from tools/nvfp4_ref.py (numpy, written from the spec, independent of the C++).
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nvfp4_ref  # noqa: E402

E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)
SIDE_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
              "chat_template.jinja", "tokenizer.model")


def dequantize(packed, scale_bytes, scale_2):
    """packed u8 [R, C/2], scale_bytes u8 [R, C/16], scale_2 f32 scalar -> f32 [R, C]."""
    codes = np.stack([packed & 0xF, packed >> 4], axis=2).reshape(packed.shape[0], -1)
    w = E2M1_VALUES[codes] * np.repeat(nvfp4_ref.e4m3_decode(scale_bytes), 16, axis=1)
    return (w * np.float32(scale_2)).astype(np.float32)


def bf16_bits(x):
    """f32 array -> bf16 bit patterns (u16), round to nearest even (inputs are finite)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    args = ap.parse_args(argv)
    with open(os.path.join(args.src, "hf_quant_config.json"), encoding="utf-8") as f:
        algo = json.load(f)["quantization"]["quant_algo"]
    if algo not in ("NVFP4", "W4A16_NVFP4"):
        print(f"error: {args.src}: quant_algo {algo}; expected NVFP4 or W4A16_NVFP4", file=sys.stderr)
        return 2
    t = nvfp4_ref.st_read_dir(args.src)
    out, n = {}, 0
    for name, (dt, shape, arr) in t.items():
        if name.endswith((".weight_scale", ".weight_scale_2", ".input_scale")):
            continue
        module = name[:-len(".weight")] if name.endswith(".weight") else None
        if module and module + ".weight_scale_2" in t:
            w = dequantize(arr, t[module + ".weight_scale"][2], t[module + ".weight_scale_2"][2].reshape(()))
            n += 1
        elif dt in ("BF16", "F16", "F32"):
            w = nvfp4_ref.to_f32(dt, arr)
        else:
            out[name] = (dt, shape, arr)
            continue
        if args.dtype == "f32":
            out[name] = ("F32", list(w.shape), w)
        else:
            out[name] = ("BF16", list(w.shape), bf16_bits(w))
    os.makedirs(args.out, exist_ok=True)
    nvfp4_ref.st_write(os.path.join(args.out, "model.safetensors"), out)
    with open(os.path.join(args.src, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    cfg.pop("quantization_config", None)
    cfg["torch_dtype"] = "float32" if args.dtype == "f32" else "bfloat16"
    with open(os.path.join(args.out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    for fn in SIDE_FILES:
        if os.path.exists(os.path.join(args.src, fn)):
            shutil.copy(os.path.join(args.src, fn), os.path.join(args.out, fn))
    print(f"dequantized {n} NVFP4 linears of {args.src} -> {args.out} ({args.dtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
