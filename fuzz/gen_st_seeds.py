#!/usr/bin/env python3
"""Seed corpus for fuzz_st_header: small valid safetensors files written by the Python
`safetensors` library (plus a few valid edge cases it does not produce). Writes
fuzz/seeds/st_header/. Usage: pip install safetensors numpy; python3 fuzz/gen_st_seeds.py"""
import json
import os
import struct

import numpy as np
from safetensors.numpy import save

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds", "st_header")


def raw(header, data=b""):
    h = header.encode()
    return struct.pack("<Q", len(h)) + h + data


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {
        "empty": save({}),
        "one_f32": save({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}),
        "scalar_meta": save({"s": np.array(1.5, np.float64)}, metadata={"format": "pt"}),
        "mixed": save({"a": np.zeros((2, 2), np.float16), "b": np.ones(3, np.int64), "c": np.zeros((0, 4), np.uint8),
                       "d": np.array([True, False]), "e": np.arange(4, dtype=np.int8)},
                      metadata={"k": "v"}),
        "many": save({f"model.layers.{i}.mlp.up_proj.weight": np.zeros(2, np.uint8) for i in range(12)}),
        "leading_ws": raw('  {"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"\x01\x02"),
        "meta_null": raw('{"__metadata__":null,"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}}', b"\x80\x3f"),
        "shared_zero": raw(json.dumps({"a": {"dtype": "F8_E4M3", "shape": [0], "data_offsets": [0, 0]},
                                       "b": {"dtype": "U32", "shape": [1, 0], "data_offsets": [0, 0]}})),
    }
    for name, b in seeds.items():
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(b)
    print(f"wrote {len(seeds)} seeds to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
