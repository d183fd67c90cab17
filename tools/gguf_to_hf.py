#!/usr/bin/env python3
"""Convert a llama-architecture GGUF (e.g. SmolLM2-135M-Instruct.Q4_1.gguf) to a Hugging Face
LlamaForCausalLM directory: config.json, generation_config.json, model.safetensors (bf16 or f32),
tokenizer.json, tokenizer_config.json, special_tokens_map.json (serving.md §5.4).
Invariant: the q/k rows permuted by llama.cpp's convert_hf_to_gguf for its RoPE layout are put
back in HF order. Only byte-level BPE vocabularies (tokenizer.ggml.model == "gpt2") with the
`smollm` pre-tokenizer are supported; anything else is an error, never a silent guess.
"""
import argparse
import json
import os
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize

# GGUF tensor name (with {} = layer) -> HF tensor name.
TENSOR_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{}.attn_norm.weight": "model.layers.{}.input_layernorm.weight",
    "blk.{}.attn_q.weight": "model.layers.{}.self_attn.q_proj.weight",
    "blk.{}.attn_k.weight": "model.layers.{}.self_attn.k_proj.weight",
    "blk.{}.attn_v.weight": "model.layers.{}.self_attn.v_proj.weight",
    "blk.{}.attn_output.weight": "model.layers.{}.self_attn.o_proj.weight",
    "blk.{}.ffn_norm.weight": "model.layers.{}.post_attention_layernorm.weight",
    "blk.{}.ffn_gate.weight": "model.layers.{}.mlp.gate_proj.weight",
    "blk.{}.ffn_up.weight": "model.layers.{}.mlp.up_proj.weight",
    "blk.{}.ffn_down.weight": "model.layers.{}.mlp.down_proj.weight",
}

SUPPORTED_TYPES = {
    GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16,
    GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q8_0,
    GGMLQuantizationType.Q6_K,
}

# HF's SmolLM2 tokenizer.json pipeline (serving.md §2.1): Digits then GPT-2 byte-level regex.
SMOLLM_PRE_TOKENIZER = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    ],
}
# ByteLevel post-processing only adjusts offsets; the decoder maps byte-level chars back to bytes.
BYTE_LEVEL_POST = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
BYTE_LEVEL_DECODER = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}


class ConvertError(Exception):
    pass


class Metadata:
    """Typed access to GGUF key/value fields with errors that name the file and the key."""

    def __init__(self, reader, path):
        self.reader = reader
        self.path = path

    def get(self, key, default=None, required=False):
        field = self.reader.fields.get(key)
        if field is None:
            if required:
                raise ConvertError(f"{self.path}: missing metadata key '{key}'")
            return default
        return field.contents()


def unpermute_rows(w, n_head):
    """Undo llama.cpp's LlamaModel.permute on a [rows, cols] q/k weight.

    GGUF row h*D + 2*i + s holds HF row h*D + s*D/2 + i (D = rows / n_head): llama.cpp interleaves
    the two rotary halves; HF keeps them as contiguous halves (rotate_half)."""
    rows, cols = w.shape
    if rows % (2 * n_head) != 0:
        raise ConvertError(f"q/k weight has {rows} rows; expected a multiple of 2*n_head = {2 * n_head}")
    return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def permute_rows(w, n_head):
    """llama.cpp's forward permutation (HF -> GGUF order); the inverse of unpermute_rows."""
    rows, cols = w.shape
    return w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def hf_tensor_name(gguf_name):
    """Map a GGUF tensor name to (HF name, layer index or None); raises on unknown names."""
    if gguf_name in TENSOR_NAMES:
        return TENSOR_NAMES[gguf_name], None
    parts = gguf_name.split(".")
    if len(parts) >= 3 and parts[0] == "blk" and parts[1].isdigit():
        pattern = ".".join(["blk", "{}"] + parts[2:])
        if pattern in TENSOR_NAMES:
            return TENSOR_NAMES[pattern].format(parts[1]), int(parts[1])
    raise ConvertError(f"tensor '{gguf_name}' has no HF llama equivalent (known: {sorted(TENSOR_NAMES)})")


def tensor_to_f32(t, path):
    """Dequantize one GGUF tensor to f32 with numpy shape = reversed GGUF dims."""
    if t.tensor_type not in SUPPORTED_TYPES:
        raise ConvertError(f"{path}: tensor '{t.name}' has ggml type {t.tensor_type.name}; "
                           f"expected one of {sorted(x.name for x in SUPPORTED_TYPES)}")
    want = tuple(int(d) for d in reversed(t.shape))
    if t.tensor_type == GGMLQuantizationType.F32:
        out = np.asarray(t.data, dtype=np.float32)
    else:
        out = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
    out = out.reshape(want)
    if not np.all(np.isfinite(out)):
        raise ConvertError(f"{path}: tensor '{t.name}' has non-finite values after dequantization")
    return out


def f32_to_bf16_bits(x):
    """Round f32 to bf16 (round to nearest, ties to even); returns the uint16 bit patterns."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def f32_shortest(x):
    """GGUF stores f32; print the shortest decimal that round-trips (1e-05, not 9.9999997e-06)."""
    return float(str(np.float32(x)))


def read_config(meta):
    arch = meta.get("general.architecture", required=True)
    if arch != "llama":
        raise ConvertError(f"{meta.path}: general.architecture is '{arch}'; expected 'llama'")
    g = lambda k, **kw: meta.get(f"llama.{k}", **kw)
    n_embd = int(g("embedding_length", required=True))
    n_head = int(g("attention.head_count", required=True))
    n_head_kv = int(g("attention.head_count_kv", default=n_head))
    if n_embd % n_head != 0:
        raise ConvertError(f"{meta.path}: embedding_length {n_embd} is not a multiple of head_count {n_head}")
    head_dim = n_embd // n_head
    rope_dim = int(g("rope.dimension_count", default=head_dim))
    if rope_dim != head_dim:
        raise ConvertError(f"{meta.path}: llama.rope.dimension_count is {rope_dim}; expected head_dim {head_dim} "
                           "(partial rotary is not a llama HF config)")
    for key in ("rope.scaling.type", "rope.scaling.factor"):
        if g(key) is not None:
            raise ConvertError(f"{meta.path}: llama.{key} is set; rope scaling is not supported by this tool")
    n_vocab = g("vocab_size")
    if n_vocab is None:
        n_vocab = len(meta.get("tokenizer.ggml.tokens", required=True))
    return {
        "n_embd": n_embd, "n_head": n_head, "n_head_kv": n_head_kv, "head_dim": head_dim,
        "n_layer": int(g("block_count", required=True)), "n_ff": int(g("feed_forward_length", required=True)),
        "rms_eps": f32_shortest(g("attention.layer_norm_rms_epsilon", required=True)),
        "rope_theta": f32_shortest(g("rope.freq_base", default=10000.0)),
        "n_ctx": int(g("context_length", required=True)), "n_vocab": int(n_vocab),
    }


def convert_tensors(reader, cfg, path):
    """Returns {hf_name: f32 array} in GGUF order, q/k un-permuted; validates shapes."""
    n_embd, n_ff, head_dim = cfg["n_embd"], cfg["n_ff"], cfg["head_dim"]
    expected = {
        "embed_tokens": (cfg["n_vocab"], n_embd), "lm_head": (cfg["n_vocab"], n_embd), "norm": (n_embd,),
        "input_layernorm": (n_embd,), "post_attention_layernorm": (n_embd,),
        "q_proj": (cfg["n_head"] * head_dim, n_embd), "k_proj": (cfg["n_head_kv"] * head_dim, n_embd),
        "v_proj": (cfg["n_head_kv"] * head_dim, n_embd), "o_proj": (n_embd, cfg["n_head"] * head_dim),
        "gate_proj": (n_ff, n_embd), "up_proj": (n_ff, n_embd), "down_proj": (n_embd, n_ff),
    }
    out = {}
    for t in reader.tensors:
        name, layer = hf_tensor_name(t.name)
        if layer is not None and layer >= cfg["n_layer"]:
            raise ConvertError(f"{path}: tensor '{t.name}' has layer {layer}; block_count is {cfg['n_layer']}")
        w = tensor_to_f32(t, path)
        want = expected[name.split(".")[-2]]
        if w.shape != want:
            raise ConvertError(f"{path}: tensor '{t.name}' has shape {list(w.shape)}; expected {list(want)}")
        if name.endswith("q_proj.weight"):
            w = unpermute_rows(w, cfg["n_head"])
        elif name.endswith("k_proj.weight"):
            w = unpermute_rows(w, cfg["n_head_kv"])
        if name in out:
            raise ConvertError(f"{path}: tensor '{t.name}' appears twice")
        out[name] = np.ascontiguousarray(w)
    want_names = {"model.embed_tokens.weight", "model.norm.weight"}
    for il in range(cfg["n_layer"]):
        for pat in TENSOR_NAMES.values():
            if "{}" in pat:
                want_names.add(pat.format(il))
    missing = sorted(want_names - set(out))
    if missing:
        raise ConvertError(f"{path}: missing tensors {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    return out


def write_safetensors(tensors, dest, dtype):
    from safetensors import serialize_file
    keep = []
    specs = {}
    for name, w in tensors.items():
        arr = f32_to_bf16_bits(w) if dtype == "bf16" else np.ascontiguousarray(w, dtype=np.float32)
        keep.append(arr)
        st_dtype = "bfloat16" if dtype == "bf16" else "float32"
        specs[name] = _tensor_spec(st_dtype, arr)
    serialize_file(specs, dest, metadata={"format": "pt"})


def _tensor_spec(st_dtype, arr):
    """safetensors >= 0.8 takes TensorSpec objects; older versions take plain dicts."""
    try:
        from safetensors import TensorSpec
    except ImportError:
        return {"dtype": st_dtype, "shape": list(arr.shape), "data": arr.tobytes()}
    return TensorSpec(dtype=st_dtype, shape=arr.shape, data_ptr=arr.ctypes.data, data_len=arr.nbytes)


def build_tokenizer(meta):
    """Returns (tokenizer.json dict, added-token list, special ids dict) from tokenizer.ggml.*."""
    model = meta.get("tokenizer.ggml.model", required=True)
    if model != "gpt2":
        raise ConvertError(f"{meta.path}: tokenizer.ggml.model is '{model}'; expected 'gpt2' (byte-level BPE)")
    pre = meta.get("tokenizer.ggml.pre", default="default")
    if pre != "smollm":
        raise ConvertError(f"{meta.path}: tokenizer.ggml.pre is '{pre}'; only 'smollm' is supported")
    tokens = list(meta.get("tokenizer.ggml.tokens", required=True))
    types = list(meta.get("tokenizer.ggml.token_type", required=True))
    merges = list(meta.get("tokenizer.ggml.merges", required=True))
    if len(types) != len(tokens):
        raise ConvertError(f"{meta.path}: tokenizer.ggml.token_type has {len(types)} entries; expected {len(tokens)}")
    vocab = {}
    for i, tok in enumerate(tokens):
        if tok in vocab:
            raise ConvertError(f"{meta.path}: token '{tok}' appears at ids {vocab[tok]} and {i}")
        vocab[tok] = i
    for rank, m in enumerate(merges):
        parts = m.split(" ")
        if len(parts) != 2 or parts[0] not in vocab or parts[1] not in vocab or parts[0] + parts[1] not in vocab:
            raise ConvertError(f"{meta.path}: merge {rank} '{m}' is not 'left right' over vocab tokens")
    added = []
    for i, (tok, ty) in enumerate(zip(tokens, types)):
        if ty in (3, 4):  # 3 control -> special; 4 user-defined -> added, not special
            added.append({"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": ty == 3})
    tok_json = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": SMOLLM_PRE_TOKENIZER,
        "post_processor": BYTE_LEVEL_POST, "decoder": BYTE_LEVEL_DECODER,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": merges},
    }
    special = {}
    for role in ("bos", "eos", "unknown", "padding"):
        tid = meta.get(f"tokenizer.ggml.{role}_token_id")
        if tid is not None:
            if not 0 <= int(tid) < len(tokens):
                raise ConvertError(f"{meta.path}: tokenizer.ggml.{role}_token_id is {tid}; vocab has {len(tokens)}")
            special[role] = int(tid)
    return tok_json, added, tokens, special


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)
        f.write("\n")


def config_json(cfg, special, tied, dtype):
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": cfg["n_embd"], "intermediate_size": cfg["n_ff"],
        "num_hidden_layers": cfg["n_layer"], "num_attention_heads": cfg["n_head"],
        "num_key_value_heads": cfg["n_head_kv"], "head_dim": cfg["head_dim"],
        "rms_norm_eps": cfg["rms_eps"], "rope_theta": cfg["rope_theta"], "rope_scaling": None,
        "max_position_embeddings": cfg["n_ctx"], "vocab_size": cfg["n_vocab"],
        "tie_word_embeddings": tied, "attention_bias": False, "mlp_bias": False,
        "attention_dropout": 0.0, "initializer_range": 0.02, "pretraining_tp": 1, "use_cache": True,
        "bos_token_id": special.get("bos"), "eos_token_id": special.get("eos"),
        "pad_token_id": special.get("padding"),
        "torch_dtype": "bfloat16" if dtype == "bf16" else "float32",
    }


def tokenizer_config_json(meta, added, tokens, special, n_ctx):
    name = lambda role: tokens[special[role]] if role in special else None
    cfg = {
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", default=False)),
        "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", default=False)),
        "add_prefix_space": False,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
        "bos_token": name("bos"), "eos_token": name("eos"), "pad_token": name("padding"),
        "unk_token": name("unknown"), "clean_up_tokenization_spaces": False,
        "model_max_length": n_ctx, "tokenizer_class": "GPT2Tokenizer", "vocab_size": len(tokens),
    }
    template = meta.get("tokenizer.chat_template")
    if template is not None:
        cfg["chat_template"] = template
    return cfg


def convert(gguf_path, out_dir, dtype="bf16"):
    reader = GGUFReader(gguf_path)
    meta = Metadata(reader, gguf_path)
    cfg = read_config(meta)
    tok_json, added, tokens, special = build_tokenizer(meta)
    if len(tokens) != cfg["n_vocab"]:
        raise ConvertError(f"{gguf_path}: {len(tokens)} tokens; llama.vocab_size is {cfg['n_vocab']}")
    tensors = convert_tensors(reader, cfg, gguf_path)
    tied = "lm_head.weight" not in tensors
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(tensors, os.path.join(out_dir, "model.safetensors"), dtype)
    write_json(os.path.join(out_dir, "config.json"), config_json(cfg, special, tied, dtype))
    gen = {k: special[r] for k, r in (("bos_token_id", "bos"), ("eos_token_id", "eos"),
                                      ("pad_token_id", "padding")) if r in special}
    write_json(os.path.join(out_dir, "generation_config.json"), gen)
    write_json(os.path.join(out_dir, "tokenizer.json"), tok_json)
    tcfg = tokenizer_config_json(meta, added, tokens, special, cfg["n_ctx"])
    write_json(os.path.join(out_dir, "tokenizer_config.json"), tcfg)
    stm = {k: tcfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if tcfg[k] is not None}
    write_json(os.path.join(out_dir, "special_tokens_map.json"), stm)
    return cfg, tied


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", help="input .gguf file (llama architecture, gpt2/smollm tokenizer)")
    ap.add_argument("out_dir", help="output HF model directory (created; existing files overwritten)")
    ap.add_argument("--dtype", choices=("bf16", "f32"), default="bf16", help="stored weight dtype")
    args = ap.parse_args(argv)
    try:
        cfg, tied = convert(args.gguf, args.out_dir, args.dtype)
    except (ConvertError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"gguf_to_hf: wrote {args.out_dir} ({args.dtype}; n_layer={cfg['n_layer']} n_embd={cfg['n_embd']} "
          f"n_head={cfg['n_head']} n_head_kv={cfg['n_head_kv']} n_ff={cfg['n_ff']} n_vocab={cfg['n_vocab']} "
          f"tied={tied})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
