#!/usr/bin/env python3
"""Tiny random-weight HF checkpoints + transformers reference logits (tests/model/test_random_models.cpp).

  tests/data/models/llama3_rope_untied/  LlamaForCausalLM, llama3 rope_scaling, GQA 4/2, untied lm_head,
                                         vocab of tests/data/tokenizer/llama3-trained (1407)
  tests/data/models/qwen3_qknorm_tied/   Qwen3ForCausalLM, qk-norm, head_dim 32 != n_embd/n_head 16,
                                         GQA 4/2, tied embeddings, vocab of tests/data/tokenizer/qwen2-trained (969)
Each directory holds config.json (written in the Hub's classic form: rope_theta + rope_scaling),
model.safetensors (bf16, from transformers' save_pretrained), tokenizer.json/tokenizer_config.json
(copied), ref_ids.json ({"token_ids", "n_vocab", provenance}) and ref_logits.bin: raw little-endian
float32 [len(token_ids), n_vocab], row r = logits after token_ids[:r+1], computed by transformers in
float32 (bf16 weights upcast exactly, eager attention) from the checkpoint as reloaded from disk.
qwen3_qknorm_tied also has ref_logits_nvfp4.bin: the same with the linears quantized by
tools/nvfp4_ref.py (ModelOpt W4A16) and dequantized to float32 (HF on the dequantized weights).
Seeded (torch.manual_seed): re-running gives identical weights; logits may differ in the last bits
across torch versions. Also prints how far the logits move when the feature each model guards is
switched off (rope scaling, qk-norm, tying), to show the test's bounds are far below those effects.
Usage: python3 tools/make_random_model.py [OUT_ROOT]   (default tests/data/models)
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = os.path.join(ROOT, "tests/data/text/devils_dictionary.txt")
N_POS = 64  # teacher-forced positions

COMMON = {"hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
          "rms_norm_eps": 1e-6, "attention_bias": False, "torch_dtype": "bfloat16"}

MODELS = {
    "llama3_rope_untied": {
        "tokenizer": "llama3-trained", "seed": 1234,
        "config": dict(COMMON, architectures=["LlamaForCausalLM"], model_type="llama", head_dim=16,
                       mlp_bias=False, rope_theta=10000.0, tie_word_embeddings=False,
                       # wavelengths 2*pi*10000^(2i/16) = 6.3 ... 19870: all three llama3 regimes
                       # (kept < 8, smoothed in [8, 32], divided by 8 above 32) occur.
                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
                       bos_token_id=1395, eos_token_id=1402),
    },
    "qwen3_qknorm_tied": {
        "tokenizer": "qwen2-trained", "seed": 4321, "nvfp4_ref": True,
        "config": dict(COMMON, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=32,
                       rope_theta=1000000.0, rope_scaling=None, tie_word_embeddings=True,
                       use_sliding_window=False, sliding_window=None, max_window_layers=2,
                       bos_token_id=None, eos_token_id=961),
    },
}


def vocab_size(tok_json):
    with open(tok_json, encoding="utf-8") as f:
        doc = json.load(f)
    ids = list(doc["model"]["vocab"].values()) + [t["id"] for t in doc.get("added_tokens", [])]
    return max(ids) + 1


def randomize(model, seed):
    """Weights with O(1) logits (so top-1 has clear margins); norms near 1 but not 1 (so they matter)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:  # linear [out, in]: std 1/sqrt(in) keeps activations O(1) through the layers
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)


@torch.no_grad()
def logits_of(model, ids):
    return model(torch.tensor([ids])).logits[0].float().numpy()


def nmse(a, b):
    return float(((a - b) ** 2).sum() / (b ** 2).sum())


def load_f32(d, **overrides):
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(d)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return AutoModelForCausalLM.from_pretrained(d, config=cfg, dtype=torch.float32,
                                                attn_implementation="eager").eval()


@torch.no_grad()
def sensitivity(name, d, ids, ref):
    """Logit NMSE vs the reference when the guarded feature is removed (printed, recorded in ref_ids.json)."""
    out = {}
    if name.startswith("llama3"):
        m = load_f32(d)
        m.config.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
        m.model.rotary_emb = LlamaRotaryEmbedding(config=m.config)
        out["no_rope_scaling"] = nmse(logits_of(m, ids), ref)
        m = load_f32(d)
        m.lm_head.weight.copy_(m.model.embed_tokens.weight)
        out["lm_head_tied_instead"] = nmse(logits_of(m, ids), ref)
    else:
        m = load_f32(d)
        for layer in m.model.layers:
            layer.self_attn.q_norm.weight.fill_(1.0)
        out["q_norm_weight_ignored"] = nmse(logits_of(m, ids), ref)
    return out


E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


@torch.no_grad()
def nvfp4_logits(d, ids):
    """HF logits with every linear that tools/nvfp4_ref.py (ModelOpt W4A16 recipe, byte-identical to
    `tetra quantize`, tests/io/test_quantize.cpp) quantizes replaced by its dequantized weights,
    w = (e2m1 * e4m3) * weight_scale_2 in float32 (the first product is exact)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import nvfp4_ref
    qdir = tempfile.mkdtemp(prefix="nvfp4.")
    try:
        quant, _ = nvfp4_ref.quantize_dir(d, qdir, "modelopt")
        t = nvfp4_ref.st_read_dir(qdir)
    finally:
        shutil.rmtree(qdir)
    m = load_f32(d)
    params = dict(m.named_parameters())
    for module in quant:
        packed, sb, s2 = (t[module + s][2] for s in (".weight", ".weight_scale", ".weight_scale_2"))
        codes = np.stack([packed & 0xF, packed >> 4], axis=2).reshape(packed.shape[0], -1)
        w = E2M1_VALUES[codes] * np.repeat(nvfp4_ref.e4m3_decode(sb), 16, axis=1)
        w = (w * np.float32(s2)).astype(np.float32)
        params[module + ".weight"].copy_(torch.from_numpy(w))
    return logits_of(m, ids), len(quant)


def make(name, spec, out_root):
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM
    tok_dir = os.path.join(ROOT, "tests/data/tokenizer", spec["tokenizer"])
    cfg_dict = dict(spec["config"], vocab_size=vocab_size(os.path.join(tok_dir, "tokenizer.json")))
    d = os.path.join(out_root, name)
    tmp = tempfile.mkdtemp(prefix=name + ".", dir=out_root)
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg_dict, f, indent=2)
        f.write("\n")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, fn), os.path.join(tmp, fn))
    torch.manual_seed(spec["seed"])
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp), dtype=torch.float32)
    randomize(model, spec["seed"])
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    if cfg_dict["tie_word_embeddings"]:
        sd.pop("lm_head.weight", None)  # tied: HF checkpoints carry only the embedding
    save_file(sd, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    with open(TEXT, encoding="utf-8") as f:
        ids = Tokenizer.from_file(os.path.join(tmp, "tokenizer.json")).encode(f.read()).ids[:N_POS]
    assert len(ids) == N_POS, len(ids)
    ref_model = load_f32(tmp)  # what transformers makes of the files on disk
    rp = ref_model.config.rope_parameters
    assert (rp.get("rope_type") == "llama3") == name.startswith("llama3"), rp
    ref = logits_of(ref_model, ids)
    top2 = np.sort(ref, axis=1)[:, -2:]
    margin = float((top2[:, 1] - top2[:, 0]).min())
    sens = sensitivity(name, tmp, ids, ref)
    import transformers
    meta = {"token_ids": ids, "n_vocab": int(ref.shape[1]),
            "generator": "tools/make_random_model.py", "torch": torch.__version__,
            "transformers": transformers.__version__, "min_top1_margin": margin,
            "sensitivity_nmse": sens, "logit_rms": float(np.sqrt((ref ** 2).mean()))}
    with open(os.path.join(tmp, "ref_ids.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f)
        f.write("\n")
    ref.astype("<f4").tofile(os.path.join(tmp, "ref_logits.bin"))
    if spec.get("nvfp4_ref"):
        q, n_quant = nvfp4_logits(tmp, ids)
        q.astype("<f4").tofile(os.path.join(tmp, "ref_logits_nvfp4.bin"))
        print(f"{name}: NVFP4 ({n_quant} linears dequantized) vs bf16 reference: NMSE {nmse(q, ref):.4g}, "
              f"top-1 agreement {float(np.mean(q.argmax(1) == ref.argmax(1))):.4f}")
    shutil.rmtree(d, ignore_errors=True)
    os.rename(tmp, d)
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    print(f"{name}: vocab {ref.shape[1]}, {len(ids)} positions, min top-1 margin {margin:.4f}, "
          f"logit rms {meta['logit_rms']:.3f}, sensitivity {sens}, {size} bytes")


def main(argv):
    out_root = argv[1] if len(argv) > 1 else os.path.join(ROOT, "tests/data/models")
    os.makedirs(out_root, exist_ok=True)
    for name, spec in MODELS.items():
        make(name, spec, out_root)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
