#!/usr/bin/env python3
"""Writes a small random Llama-style HF checkpoint (BF16) and the NVFP4 reference outputs.

tests/data/checkpoints/llama_tiny/              source: config.json, model.safetensors (bf16),
                                                generation_config.json, tokenizer_config.json,
                                                chat_template.jinja (to check they are copied)
tests/data/checkpoints/llama_tiny_modelopt_ref/ tools/nvfp4_ref.py --format modelopt
tests/data/checkpoints/llama_tiny_ct_ref/       tools/nvfp4_ref.py --format compressed-tensors
Hidden 64, 3 layers, n_ff 128, vocab 256 (every in-dim a multiple of 16). Planted on purpose:
all-zero blocks, tiny blocks (ModelOpt scale byte 0x00), subnormal-scale blocks, outliers, −0.0,
the spec's exact-tie blocks (§10 T5 with tensor amax 2688, T6 with tensor amax 3.0), and fused
q/k/v and gate/up partners with different amax. Seeded: re-running gives identical bytes.
Usage: python3 tools/make_test_checkpoint.py [OUT_ROOT]   (default tests/data/checkpoints)
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nvfp4_ref  # noqa: E402

HIDDEN, N_FF, N_LAYER, N_HEAD, N_HEAD_KV, HEAD_DIM, N_VOCAB = 64, 128, 3, 4, 2, 16, 256

T5 = [10, 5, -2.4375, 1.21875, 0.40625, 2.84375, 4.0625, 5.6875, 8.125, 2.03125, -0.09375, 0, -10, 0.8125,
      1.625, -6.5]
T6_C = [3.0, -1.5, 0.75, -0.375, 0.1875, 0, 2.25, -2.625, 1.125, 0.5625, -0.28125, 1.3125, -0.09375, 2.0, -3.0,
        0.046875]
T6_D = [0.75, -0.5, 0.25, 0.125, -0.0625, 0.375, 0.625, -0.6875, 0.3125, 0.4375, -0.1875, 0, 0.5625, -0.75,
        0.03125, 0.09375]


def bf16_bits(x):
    """float32 array -> bf16 bit patterns, round to nearest even."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def plant(name, w, rng):
    """Special blocks, per tensor (w: float32 [out, in], edited in place)."""
    if name.endswith("layers.0.self_attn.q_proj"):
        w[0:2, :] = 0.0                                   # all-zero rows: every block all zero
        w[2, 16:32] = rng.normal(0, 1e-7, 16)             # tiny block: ModelOpt scale 0x00
        w[2, 20] = 0.0                                    # ... with a zero (0/0 in ModelOpt)
        w[3, 0:16] = rng.normal(0, 3e-5, 16)              # subnormal block scale
        w[4, 0:16:3] = -0.0                               # negative zeros
        w[5, 7] = 1.5                                     # outlier: tensor amax holder
    if name.endswith("layers.0.self_attn.k_proj"):
        w *= 3.0                                          # q/k/v amax differ; the group shares the max
    if name.endswith("layers.1.mlp.up_proj"):
        w *= 5.0                                          # gate/up share up's amax
    if name.endswith("layers.1.mlp.down_proj"):
        w[0, 0:16] = T5                                   # §10 T5: every RNE tie
        w[1, 40] = 2688.0                                 # tensor amax 2688 -> weight_scale_2 = 1.0
        w[2, 16:32] = 0.0
    if name.endswith("layers.2.self_attn.o_proj"):
        w[0, 0:16] = T6_C                                 # §10 T6: tensor amax 3.0
        w[1, 16:32] = T6_D
        w[2, 32:48] = -0.0


def make(out_dir):
    rng = np.random.default_rng(20261122)
    shapes = {"model.embed_tokens.weight": [N_VOCAB, HIDDEN], "model.norm.weight": [HIDDEN],
              "lm_head.weight": [N_VOCAB, HIDDEN]}
    for il in range(N_LAYER):
        p = f"model.layers.{il}."
        shapes.update({p + "input_layernorm.weight": [HIDDEN], p + "post_attention_layernorm.weight": [HIDDEN],
                       p + "self_attn.q_proj.weight": [N_HEAD * HEAD_DIM, HIDDEN],
                       p + "self_attn.k_proj.weight": [N_HEAD_KV * HEAD_DIM, HIDDEN],
                       p + "self_attn.v_proj.weight": [N_HEAD_KV * HEAD_DIM, HIDDEN],
                       p + "self_attn.o_proj.weight": [HIDDEN, N_HEAD * HEAD_DIM],
                       p + "mlp.gate_proj.weight": [N_FF, HIDDEN], p + "mlp.up_proj.weight": [N_FF, HIDDEN],
                       p + "mlp.down_proj.weight": [HIDDEN, N_FF]})
    tensors = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if len(shape) == 1:
            w = (1.0 + rng.normal(0, 0.05, shape)).astype(np.float32)
        else:
            w = rng.normal(0, 0.02, shape).astype(np.float32)
            plant(name[:-len(".weight")], w, rng)
        tensors[name] = ("BF16", shape, bf16_bits(w).reshape(shape))
    os.makedirs(out_dir, exist_ok=True)
    nvfp4_ref.st_write(os.path.join(out_dir, "model.safetensors"), tensors)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
           "intermediate_size": N_FF, "num_hidden_layers": N_LAYER, "num_attention_heads": N_HEAD,
           "num_key_value_heads": N_HEAD_KV, "head_dim": HEAD_DIM, "vocab_size": N_VOCAB,
           "max_position_embeddings": 256, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
           "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
           "bos_token_id": 1, "eos_token_id": 2}
    json.dump(cfg, open(os.path.join(out_dir, "config.json"), "w"), indent=2)
    json.dump({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False},
              open(os.path.join(out_dir, "generation_config.json"), "w"), indent=2)
    json.dump({"bos_token": "<s>", "eos_token": "</s>", "model_max_length": 256},
              open(os.path.join(out_dir, "tokenizer_config.json"), "w"), indent=2)
    with open(os.path.join(out_dir, "chat_template.jinja"), "w") as f:
        f.write("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "checkpoints")
    src = os.path.join(root, "llama_tiny")
    make(src)
    for fmt, d in (("modelopt", "llama_tiny_modelopt_ref"), ("compressed-tensors", "llama_tiny_ct_ref")):
        quant, excluded = nvfp4_ref.quantize_dir(src, os.path.join(root, d), fmt)
        print(f"{d}: {len(quant)} quantized, excluded {excluded}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
