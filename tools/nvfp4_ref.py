#!/usr/bin/env python3
"""Independent NVFP4 reference quantizer (numpy only), written from reference/nvfp4-format.md.

Quantizes an unquantized HF checkpoint the way `tetra quantize` is specified to (docs/formats.md):
ModelOpt recipe (§3.4) or compressed-tensors recipe (§4.3), weight-only (W4A16). Every fp32
operation is one numpy float32 operation in the order the spec gives, so results are bit-exact.
Codecs are deliberately implemented differently from the C++ (table search instead of bit tricks):
  E2M1, ModelOpt:  searchsorted on the bounds [0.25,0.75,1.25,1.75,2.5,3.5,5] plus the RNE bump at
                   0.75/1.75/3.5, sign = (q < 0)                                  (§1.2, §1.3)
  E2M1, CT:        threshold ladder of §1.2 after clamp(±6), sign = signbit(q)   (§4.3)
  E4M3:            nearest of the 127 finite non-negative values, ties to the even byte,
                   > 448 saturates                                                (§2.1, §2.2)
Usage: nvfp4_ref.py SRC DST --format modelopt|compressed-tensors [--exclude PATTERN]...
The tests never run this; tools/make_test_checkpoint.py runs it to regenerate the goldens.
"""
import argparse
import fnmatch
import json
import os
import re
import struct
import sys

import numpy as np

F32 = np.float32

# ---- safetensors (minimal, numpy) --------------------------------------------------------------
ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "U8": np.uint8, "F8_E4M3": np.uint8,
             "I64": np.int64, "I32": np.int32}


def st_read(path):
    """name -> (dtype string, shape list, numpy array of the raw element type)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=ST_DTYPES[info["dtype"]])
        out[name] = (info["dtype"], list(info["shape"]), arr.reshape(info["shape"]))
    return out


def st_read_dir(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    out = {}
    for f in files:
        out.update(st_read(os.path.join(d, f)))
    return out


def st_write(path, tensors):
    """tensors: name -> (dtype string, shape, numpy array). Sorted by name, 8-byte aligned header."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        dt, shape, arr = tensors[name]
        data = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def to_f32(dt, arr):
    if dt == "BF16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    if dt == "F16":
        return arr.astype(np.float32)  # exact: every f16 is an f32
    assert dt == "F32", dt
    return arr.astype(np.float32)


# ---- E4M3 (e4m3fn) -----------------------------------------------------------------------------
def _e4m3_values():
    v = []
    for b in range(0x7F):  # 0x00..0x7E, 0x7F is NaN
        e, m = b >> 3, b & 7
        v.append(m * 2.0 ** -9 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7))
    return np.array(v, dtype=np.float64)


E4M3_VALUES = _e4m3_values()  # ascending, index == byte


def e4m3_decode(b):
    b = np.asarray(b, dtype=np.uint8)
    mag = np.where((b & 0x7F) == 0x7F, np.nan, E4M3_VALUES[np.minimum(b & 0x7F, 0x7E)])
    return np.where(b & 0x80, -mag, mag).astype(np.float32)


def e4m3_encode(x):
    """x: float32 array, >= 0 or NaN (block scales). Nearest value, ties to even byte, saturating."""
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    assert not np.any(x < 0), "block scales are non-negative"
    hi = np.clip(np.searchsorted(E4M3_VALUES, x, side="left"), 1, 0x7E)
    lo = hi - 1
    d_lo, d_hi = x - E4M3_VALUES[lo], E4M3_VALUES[hi] - x
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    out = np.where(pick_hi, hi, lo)
    out = np.where(x >= 448.0, 0x7E, out)
    out = np.where(np.isnan(x), 0x7F, out)
    return out.astype(np.uint8)


# ---- E2M1 --------------------------------------------------------------------------------------
E2M1_BOUNDS = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=np.float32)


def e2m1_encode_modelopt(q):
    """ModelOpt NVFP4QTensor._cast_fp4: searchsorted(left) + 1 where |q| is 0.75, 1.75 or 3.5."""
    a = np.abs(q)
    code = np.searchsorted(E2M1_BOUNDS, a, side="left")  # NaN sorts last -> 7
    code = code + np.isin(a, E2M1_BOUNDS[[1, 3, 5]])
    return (code | np.where(q < 0, 8, 0)).astype(np.uint8)


def e2m1_encode_ct(q):
    """compressed-tensors cast_to_fp4 ladder after clamp(±6); sign from signbit (−0 -> 0x8)."""
    q = np.clip(q, F32(-6.0), F32(6.0))
    a = np.abs(q)
    code = np.select([a <= 0.25, a < 0.75, a <= 1.25, a < 1.75, a <= 2.5, a < 3.5, a <= 5.0],
                     [0, 1, 2, 3, 4, 5, 6], 7)
    return (code | np.where(np.signbit(q), 8, 0)).astype(np.uint8)


def pack(codes):
    """codes [R, C] -> bytes [R, C/2], even element in the low nibble (§1.5)."""
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)


# ---- recipes -----------------------------------------------------------------------------------
def quantize_modelopt(w, amax_t):
    """§3.4. w: float32 [R, C]; amax_t: float32 group amax. -> (packed, scale bytes, weight_scale_2)."""
    r, c = w.shape
    s2 = F32(amax_t) / F32(2688.0)
    blocks = w.reshape(r, c // 16, 16)
    amax_b = np.max(np.abs(blocks), axis=2)
    s_b = amax_b / (F32(6.0) * s2)
    s_b = np.where(s_b == 0, F32(1.0), s_b).astype(np.float32)
    sb = e4m3_encode(s_b)
    divisor = (e4m3_decode(sb) * s2).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = (blocks / divisor[:, :, None]).astype(np.float32)
    codes = e2m1_encode_modelopt(q.reshape(r, c))
    return pack(codes), sb, np.array(s2, dtype=np.float32)


def quantize_ct(w, amax_t):
    """§4.3. -> (packed, scale bytes, weight_global_scale G)."""
    r, c = w.shape
    tiny = np.finfo(np.float32).tiny
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        g = F32(2688.0) / max(F32(amax_t), F32(tiny))
    g = F32(g) if np.isfinite(g) else F32(1.0)
    blocks = w.reshape(r, c // 16, 16)
    amax_b = np.max(np.abs(blocks), axis=2)
    local = np.clip(g * (amax_b / F32(6.0)), F32(-448.0), F32(448.0)).astype(np.float32)
    sb = e4m3_encode(local)
    sb = np.where(e4m3_decode(sb) == 0, np.uint8(0x20), sb).astype(np.uint8)  # eps 0.125
    divisor = (e4m3_decode(sb) / g).astype(np.float32)
    q = (blocks / divisor[:, :, None]).astype(np.float32)
    codes = e2m1_encode_ct(q.reshape(r, c))
    return pack(codes), sb, np.array([g], dtype=np.float32)


# ---- which tensors (docs/formats.md, "tetra quantize") -----------------------------------------
LINEAR_LEAVES = {
    "q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "query_key_value", "dense",
    "gate_proj", "up_proj", "down_proj", "gate_up_proj", "w1", "w2", "w3", "fc1", "fc2",
    "dense_h_to_4h", "dense_4h_to_h", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj",
    "in_proj", "out_proj", "x_proj", "dt_proj", "in_proj_qkvz", "in_proj_ba", "eh_proj",
    "lm_head", "gate", "router", "shared_expert_gate"}
DEFAULT_EXCLUDE = ["*lm_head*", "*proj_out", "*block_sparse_moe.gate", "*router*", "*mlp.gate",
                   "*shared_expert_gate*", "*conv1d*", "*output_layer*", "output", "*mtp*"]
FUSED = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gate_up", "up_proj": "gate_up",
         "w1": "w13", "w3": "w13", "q_a_proj": "mla_a", "kv_a_proj_with_mqa": "mla_a"}


def excluded_by(pattern, module):
    """ModelOpt-syntax match: re: (re.match), exact, dot-prefix, fnmatch."""
    if pattern.startswith("re:"):
        return re.match(pattern[3:], module) is not None
    return module == pattern or module.startswith(pattern + ".") or fnmatch.fnmatchcase(module, pattern)


def plan(tensors, user_exclude):
    """-> (quantize: {module: group amax}, excluded: sorted module list)."""
    cands = {}
    for name, (dt, shape, arr) in tensors.items():
        if not name.endswith(".weight") or len(shape) != 2 or dt not in ("BF16", "F16", "F32"):
            continue
        module = name[:-len(".weight")]
        if module.rsplit(".", 1)[-1] not in LINEAR_LEAVES:
            continue
        keep = not any(excluded_by(p, module) for p in DEFAULT_EXCLUDE + user_exclude) and shape[1] % 16 == 0
        amax = F32(np.max(np.abs(to_f32(dt, arr)))) if keep else F32(0)
        assert not keep or np.isfinite(amax), name
        parent, leaf = module.rsplit(".", 1) if "." in module else ("", module)
        group = parent + "|" + FUSED[leaf] if leaf in FUSED else ""
        cands[module] = (keep, amax, group)
    gmax = {}
    for m, (keep, amax, group) in cands.items():
        if keep and group:
            gmax[group] = max(gmax.get(group, F32(0)), amax)
    quant, excluded = {}, []
    for m, (keep, amax, group) in cands.items():
        a = gmax[group] if keep and group else amax
        if keep and a > 0:
            quant[m] = a
        else:
            excluded.append(m)
    return quant, sorted(excluded)


def write_configs(src, dst, fmt, excluded):
    cfg = json.load(open(os.path.join(src, "config.json")))
    if fmt == "modelopt":  # §3.1, W4A16: weights only
        cfg["quantization_config"] = {
            "config_groups": {"group_0": {"weights": {"dynamic": False, "num_bits": 4, "type": "float",
                                                      "group_size": 16}, "targets": ["Linear"]}},
            "ignore": excluded, "quant_algo": "W4A16_NVFP4", "kv_cache_scheme": None,
            "producer": {"name": "nvfp4_ref.py", "version": "1"}, "quant_method": "modelopt"}
        hq = {"producer": {"name": "nvfp4_ref.py", "version": "1"},
              "quantization": {"quant_algo": "W4A16_NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                               "exclude_modules": excluded}}
        json.dump(hq, open(os.path.join(dst, "hf_quant_config.json"), "w"), indent=2)
    else:  # §4.1, NVFP4A16 preset: no input_activations
        cfg["quantization_config"] = {
            "config_groups": {"group_0": {"targets": ["Linear"], "format": "nvfp4-pack-quantized",
                                          "weights": {"num_bits": 4, "type": "float", "symmetric": True,
                                                      "group_size": 16, "strategy": "tensor_group",
                                                      "dynamic": False},
                                          "input_activations": None, "output_activations": None}},
            "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
            "quantization_status": "compressed", "ignore": excluded, "kv_cache_scheme": None}
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)


def quantize_dir(src, dst, fmt, user_exclude=()):
    tensors = st_read_dir(src)
    quant, excluded = plan(tensors, list(user_exclude))
    out = {}
    for name, t in tensors.items():
        module = name[:-len(".weight")] if name.endswith(".weight") else None
        if module not in quant:
            out[name] = t  # copied as stored
            continue
        dt, shape, arr = t
        w = to_f32(dt, arr)
        r, c = shape
        if fmt == "modelopt":
            packed, sb, s2 = quantize_modelopt(w, quant[module])
            out[module + ".weight"] = ("U8", [r, c // 2], packed)
            out[module + ".weight_scale"] = ("F8_E4M3", [r, c // 16], sb)
            out[module + ".weight_scale_2"] = ("F32", [], s2)
        else:
            packed, sb, g = quantize_ct(w, quant[module])
            out[module + ".weight_packed"] = ("U8", [r, c // 2], packed)
            out[module + ".weight_scale"] = ("F8_E4M3", [r, c // 16], sb)
            out[module + ".weight_global_scale"] = ("F32", [1], g)
    os.makedirs(dst, exist_ok=True)
    st_write(os.path.join(dst, "model.safetensors"), out)
    write_configs(src, dst, fmt, excluded)
    return quant, excluded


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--format", choices=["modelopt", "compressed-tensors"], default="modelopt")
    ap.add_argument("--exclude", action="append", default=[])
    a = ap.parse_args()
    quant, excluded = quantize_dir(a.src, a.dst, a.format, a.exclude)
    print(f"{len(quant)} modules quantized, {len(excluded)} excluded: {excluded}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
