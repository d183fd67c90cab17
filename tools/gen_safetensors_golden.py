#!/usr/bin/env python3
"""Write tests/data/safetensors/golden.safetensors with the Python `safetensors` library.

tests/io/test_safetensors.cpp hard-codes the same tensors (names, dtypes, shapes, bit patterns)
and checks (1) tetra's reader sees exactly these values and (2) tetra's writer reproduces the file
byte for byte. Claim (2) rests on the HF serializer being deterministic: tensors are sorted by
dtype (descending enum order) then name, and the metadata is a hash map, so we use a single
metadata key. This script verifies that determinism (several serializations with shuffled input
order must be identical) before writing.

Usage: pip install safetensors numpy; python3 tools/gen_safetensors_golden.py
"""
import hashlib
import os
import random

import numpy as np
import safetensors
from safetensors import TensorSpec

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "safetensors",
                   "golden.safetensors")

# name -> (TensorSpec dtype, shape, numpy array holding the little-endian bytes)
# bf16 / f16 / e4m3 are given as bit patterns (numpy has no bf16/e4m3).
TENSORS = {
    "embed.weight": ("float32", [2, 3], np.array([1.5, -2.25, 0.0, 3.0e38, -0.0, 1e-45], "<f4")),
    "norm.bias": ("float16", [4], np.array([0x3C00, 0xB800, 0x7BFF, 0x0001], "<u2")),
    "layer.0.w": ("bfloat16", [2, 2], np.array([0x3F80, 0xC000, 0x7F80, 0x0001], "<u2")),
    "layer.0.w_scale": ("float8_e4m3fn", [3], np.array([0x38, 0x7E, 0x01], "u1")),
    "ids": ("int64", [], np.array(-1234567890123, "<i8")),
    "mask": ("bool", [3], np.array([1, 0, 1], "u1")),
    "empty": ("uint8", [0, 4], np.zeros((0, 4), "u1")),
    "counts": ("uint32", [2], np.array([4000000000, 7], "<u4")),
    "small": ("int8", [3], np.array([-128, 0, 127], "i1")),
    "i16": ("int16", [2], np.array([-32768, 32767], "<i2")),
    "u16": ("uint16", [2], np.array([65535, 1], "<u2")),
    "i32": ("int32", [2], np.array([-2147483648, 42], "<i4")),
    "u64": ("uint64", [1], np.array([18446744073709551615], "<u8")),
    "f64": ("float64", [2], np.array([3.141592653589793, -1e308], "<f8")),
    "naïve.é": ("float32", [], np.array(0.25, "<f4")),  # non-ASCII name: raw UTF-8 in the header
    'odd "q"\\name': ("float32", [1], np.array([-1.0], "<f4")),  # JSON escapes in the name
}
METADATA = {"format": "pt"}


def serialize(order):
    specs = {}
    for name in order:
        dt, shape, arr = TENSORS[name]
        arr = np.ascontiguousarray(arr)
        specs[name] = TensorSpec(dtype=dt, shape=shape, data_ptr=arr.ctypes.data, data_len=arr.nbytes)
    return bytes(safetensors.serialize(specs, metadata=METADATA))


def main():
    names = list(TENSORS)
    ref = serialize(names)
    rng = random.Random(1234)
    for _ in range(20):
        rng.shuffle(names)
        assert serialize(names) == ref, "HF serialization depends on input order"
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "wb") as f:
        f.write(ref)
    print(f"wrote {os.path.normpath(OUT)}: {len(ref)} bytes, sha256 {hashlib.sha256(ref).hexdigest()}, "
          f"safetensors {safetensors.__version__}")


if __name__ == "__main__":
    main()
