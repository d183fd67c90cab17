#!/usr/bin/env python3
"""Tiny random-weight Qwen3-MoE checkpoints + transformers reference logits (tests/model/test_qwen3_moe.cpp).

  tests/data/moe/qwen3_moe_tiny/    Qwen3MoeForCausalLM: 3 layers, mlp_only_layers [1] (layer 1 keeps the
                                    dense mlp), 8 experts top-2, norm_topk_prob true, untied lm_head.
  tests/data/moe/qwen3_moe_shared/  The same architecture name with shared_expert_intermediate_size 48 (the
                                    Qwen3-Next/Qwen2-MoE shared expert + sigmoid shared_expert_gate, a tetra
                                    extension of the Qwen3-MoE config: docs/moe.md): 4 layers,
                                    decoder_sparse_step 2 (layers 1 and 3 are MoE), 8 experts top-3,
                                    norm_topk_prob false, tied embeddings.
Checkpoints use the Hub's per-expert names (mlp.experts.<e>.{gate,up,down}_proj.weight, router mlp.gate.weight),
bf16. References are computed by transformers in float32 (eager attention) from the files as reloaded from disk
(transformers' own per-expert → fused conversion). For the shared variant transformers has no Qwen3-MoE class with
a shared expert, so each MoE layer's mlp is replaced by transformers' Qwen3NextSparseMoeBlock (router, experts,
shared expert and gate: transformers' code) holding the same checkpoint tensors.
ref_logits_nvfp4.bin: the same with every linear that tools/nvfp4_ref.py quantizes (ModelOpt W4A16 recipe,
byte-identical to `tetra quantize`; routers, shared_expert_gate and lm_head stay bf16) dequantized by
tools/dequant_nvfp4.py to float32; ref_logits_nvfp4_ct.bin: the compressed-tensors recipe, dequantized with
S = 1/weight_global_scale. Files as tools/make_random_model.py (ref_ids.json, raw f32 logits).
Usage: python3 tools/gen_moe_goldens.py [OUT_ROOT]   (default tests/data/moe)
       python3 tools/gen_moe_goldens.py --random-model OUT [--hidden 1024 --layers 8 --experts 64 --top-k 8
                                        --moe-ff 256 --tokenizer DIR --seed 1 --device cpu]
The second form writes one larger random Qwen3MoeForCausalLM checkpoint (the same weight recipe, Hub tensor
names, bf16, the tokenizer of DIR, default tests/data/tokenizer/qwen3) and no references: for
scripts/device-moe-hf.sh, which compares the engine with live transformers (tools/compare_hf.py).
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dequant_nvfp4  # noqa: E402
import make_random_model as mrm  # noqa: E402
import nvfp4_ref  # noqa: E402

ROOT = mrm.ROOT
COMMON = {"hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
          "attention_bias": False, "torch_dtype": "bfloat16", "rope_theta": 1000000.0, "rope_scaling": None,
          "use_sliding_window": False, "sliding_window": None, "architectures": ["Qwen3MoeForCausalLM"],
          "model_type": "qwen3_moe", "num_experts": 8, "moe_intermediate_size": 32, "bos_token_id": None,
          "eos_token_id": 961}

MODELS = {
    "qwen3_moe_tiny": {"seed": 777, "config": dict(COMMON, num_hidden_layers=3, mlp_only_layers=[1],
                                                   decoder_sparse_step=1, num_experts_per_tok=2,
                                                   norm_topk_prob=True, tie_word_embeddings=False)},
    "qwen3_moe_shared": {"seed": 778, "config": dict(COMMON, num_hidden_layers=4, mlp_only_layers=[],
                                                     decoder_sparse_step=2, num_experts_per_tok=3,
                                                     norm_topk_prob=False, tie_word_embeddings=True,
                                                     shared_expert_intermediate_size=48)},
}


def is_moe_layer(cfg, il):
    return il not in cfg["mlp_only_layers"] and (il + 1) % cfg["decoder_sparse_step"] == 0


def random_checkpoint(cfg, seed, device="cpu", branch_scale=1.0):
    """Per-expert (Hub) state dict of f32 tensors with O(1) activations; routers scaled x3 so the top-k
    choices have clear margins (recorded as min_router_margin). device: where torch draws them (the seeded
    stream differs between cpu and cuda; the tensors come back on the cpu). branch_scale multiplies the
    projections that write into the residual stream (o_proj, every down_proj), as GPT-2's 1/sqrt(2 n_layer)
    init does: < 1 keeps deep random stacks from amplifying small differences (1 = the goldens' recipe)."""
    g = torch.Generator(device=device).manual_seed(seed)
    h, ff, fe, fs = cfg["hidden_size"], cfg["intermediate_size"], cfg["moe_intermediate_size"], \
        cfg.get("shared_expert_intermediate_size", 0)
    q, kv = cfg["num_attention_heads"] * cfg["head_dim"], cfg["num_key_value_heads"] * cfg["head_dim"]
    randn = lambda *shape: torch.randn(shape, generator=g, device=device).cpu()  # noqa: E731
    lin = lambda o, i, s=1.0: s * randn(o, i) / i ** 0.5  # noqa: E731
    norm = lambda n: 1.0 + 0.2 * randn(n)  # noqa: E731
    sd = {"model.embed_tokens.weight": 0.5 * randn(cfg["vocab_size"], h)}
    for il in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{il}."
        sd[p + "input_layernorm.weight"] = norm(h)
        sd[p + "post_attention_layernorm.weight"] = norm(h)
        sd[p + "self_attn.q_norm.weight"] = norm(cfg["head_dim"])
        sd[p + "self_attn.k_norm.weight"] = norm(cfg["head_dim"])
        bs = lambda n: branch_scale if n in ("o_proj", "down_proj") else 1.0  # noqa: E731
        for n, o, i in (("q_proj", q, h), ("k_proj", kv, h), ("v_proj", kv, h), ("o_proj", h, q)):
            sd[p + "self_attn." + n + ".weight"] = lin(o, i, bs(n))
        if not is_moe_layer(cfg, il):
            for n, o, i in (("gate_proj", ff, h), ("up_proj", ff, h), ("down_proj", h, ff)):
                sd[p + "mlp." + n + ".weight"] = lin(o, i, bs(n))
            continue
        sd[p + "mlp.gate.weight"] = lin(cfg["num_experts"], h, 3.0)
        for e in range(cfg["num_experts"]):
            for n, o, i in (("gate_proj", fe, h), ("up_proj", fe, h), ("down_proj", h, fe)):
                sd[p + f"mlp.experts.{e}.{n}.weight"] = lin(o, i, bs(n))
        if fs:
            for n, o, i in (("gate_proj", fs, h), ("up_proj", fs, h), ("down_proj", h, fs)):
                sd[p + "mlp.shared_expert." + n + ".weight"] = lin(o, i, bs(n))
            sd[p + "mlp.shared_expert_gate.weight"] = lin(1, h, 2.0)
    sd["model.norm.weight"] = norm(h)
    if not cfg["tie_word_embeddings"]:
        sd["lm_head.weight"] = 0.5 * randn(cfg["vocab_size"], h)
    return sd


def load_hf(d, cfg):
    """transformers' Qwen3MoeForCausalLM from the files in d (f32, eager); with a shared expert, each MoE
    layer's mlp becomes transformers' Qwen3NextSparseMoeBlock loaded with the same tensors."""
    model = mrm.load_f32(d)
    fs = cfg.get("shared_expert_intermediate_size", 0)
    if not fs:
        return model
    from safetensors.torch import load_file
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextSparseMoeBlock
    t = {k: v.float() for k, v in load_file(os.path.join(d, "model.safetensors")).items()}
    ncfg = Qwen3NextConfig(hidden_size=cfg["hidden_size"], num_experts=cfg["num_experts"],
                           num_experts_per_tok=cfg["num_experts_per_tok"], norm_topk_prob=cfg["norm_topk_prob"],
                           moe_intermediate_size=cfg["moe_intermediate_size"], shared_expert_intermediate_size=fs,
                           hidden_act="silu")
    for il, layer in enumerate(model.model.layers):
        if not is_moe_layer(cfg, il):
            continue
        p = f"model.layers.{il}.mlp."
        block = Qwen3NextSparseMoeBlock(ncfg).float().eval()
        ex = range(cfg["num_experts"])
        sd = {"gate.weight": t[p + "gate.weight"],
              "experts.gate_up_proj": torch.stack([torch.cat([t[p + f"experts.{e}.gate_proj.weight"],
                                                              t[p + f"experts.{e}.up_proj.weight"]]) for e in ex]),
              "experts.down_proj": torch.stack([t[p + f"experts.{e}.down_proj.weight"] for e in ex]),
              "shared_expert_gate.weight": t[p + "shared_expert_gate.weight"]}
        for n in ("gate_proj", "up_proj", "down_proj"):
            sd[f"shared_expert.{n}.weight"] = t[p + f"shared_expert.{n}.weight"]
        block.load_state_dict(sd, strict=True)
        layer.mlp = block
    return model


@torch.no_grad()
def run(model, ids):
    """Logits and the smallest router margin p_(k) - p_(k+1) over tokens and MoE layers."""
    margins, hooks = [], []
    for layer in model.model.layers:
        gate = getattr(layer.mlp, "gate", None)
        if gate is not None and hasattr(gate, "top_k"):
            def hook(mod, inp, out):
                p = torch.softmax(out[0].float(), dim=-1).sort(dim=-1, descending=True).values
                margins.append(float((p[:, mod.top_k - 1] - p[:, mod.top_k]).min()))
            hooks.append(gate.register_forward_hook(hook))
    logits = mrm.logits_of(model, ids)
    for h in hooks:
        h.remove()
    return logits, min(margins)


@torch.no_grad()
def sensitivity(d, cfg, ids, ref):
    """Logit NMSE vs the reference when a MoE feature is switched (printed, recorded in ref_ids.json)."""
    out = {}
    m = load_hf(d, cfg)
    for layer in m.model.layers:
        if hasattr(layer.mlp, "gate"):
            layer.mlp.gate.norm_topk_prob = not cfg["norm_topk_prob"]
    out["norm_topk_prob_flipped"] = mrm.nmse(run(m, ids)[0], ref)
    m = load_hf(d, cfg)
    for layer in m.model.layers:
        if hasattr(layer.mlp, "gate"):
            layer.mlp.gate.top_k -= 1
    out["top_k_minus_1"] = mrm.nmse(run(m, ids)[0], ref)
    if cfg.get("shared_expert_intermediate_size"):
        m = load_hf(d, cfg)
        for layer in m.model.layers:
            if hasattr(layer.mlp, "shared_expert_gate"):
                layer.mlp.shared_expert_gate.weight.zero_()  # sigmoid(0) = 0.5 for every token
        out["shared_expert_gate_ignored"] = mrm.nmse(run(m, ids)[0], ref)
    return out


def ct_logits(d, cfg, ids):
    """The compressed-tensors recipe (tools/nvfp4_ref.py, byte-identical to `tetra quantize --format
    compressed-tensors`), dequantized as the loader defines it: S = 1/G in f32, w = (e2m1 * e4m3) * S."""
    qdir, ddir = tempfile.mkdtemp(prefix="ct."), tempfile.mkdtemp(prefix="ctdeq.")
    try:
        nvfp4_ref.quantize_dir(d, qdir, "compressed-tensors")
        t = nvfp4_ref.st_read_dir(qdir)
        out = {}
        for name, (dt, shape, arr) in t.items():
            if name.endswith((".weight_scale", ".weight_global_scale")):
                continue
            if name.endswith(".weight_packed"):
                m = name[:-len(".weight_packed")]
                s = np.float32(1) / np.float32(t[m + ".weight_global_scale"][2].reshape(()))
                w = dequant_nvfp4.dequantize(arr, t[m + ".weight_scale"][2], s)
                out[m + ".weight"] = ("F32", list(w.shape), w)
            else:
                w = nvfp4_ref.to_f32(dt, arr)
                out[name] = ("F32", list(w.shape), w)
        nvfp4_ref.st_write(os.path.join(ddir, "model.safetensors"), out)
        with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
            c = json.load(f)
        c["torch_dtype"] = "float32"
        with open(os.path.join(ddir, "config.json"), "w", encoding="utf-8") as f:
            json.dump(c, f)
        return run(load_hf(ddir, cfg), ids)[0]
    finally:
        shutil.rmtree(qdir), shutil.rmtree(ddir)


def make(name, spec, out_root):
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    tok_dir = os.path.join(ROOT, "tests/data/tokenizer/qwen2-trained")
    cfg = dict(spec["config"], vocab_size=mrm.vocab_size(os.path.join(tok_dir, "tokenizer.json")))
    d = os.path.join(out_root, name)
    tmp = tempfile.mkdtemp(prefix=name + ".", dir=out_root)
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, fn), os.path.join(tmp, fn))
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in random_checkpoint(cfg, spec["seed"]).items()}
    save_file(sd, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    with open(mrm.TEXT, encoding="utf-8") as f:
        ids = Tokenizer.from_file(os.path.join(tmp, "tokenizer.json")).encode(f.read()).ids[:mrm.N_POS]
    model = load_hf(tmp, cfg)
    # transformers really holds the checkpoint's tensors (its per-expert → fused conversion included).
    e0 = next(il for il in range(cfg["num_hidden_layers"]) if is_moe_layer(cfg, il))
    fused = model.model.layers[e0].mlp.experts.gate_up_proj[1]
    want = torch.cat([sd[f"model.layers.{e0}.mlp.experts.1.gate_proj.weight"],
                      sd[f"model.layers.{e0}.mlp.experts.1.up_proj.weight"]]).float()
    assert torch.equal(fused, want), "expert weights not loaded as stored"
    assert type(model.model.layers[1].mlp).__name__.endswith("MLP") == (not is_moe_layer(cfg, 1))
    ref, router_margin = run(model, ids)
    top2 = np.sort(ref, axis=1)[:, -2:]
    import transformers
    meta = {"token_ids": ids, "n_vocab": int(ref.shape[1]), "generator": "tools/gen_moe_goldens.py",
            "torch": torch.__version__, "transformers": transformers.__version__,
            "min_top1_margin": float((top2[:, 1] - top2[:, 0]).min()), "min_router_margin": router_margin,
            "logit_rms": float(np.sqrt((ref ** 2).mean())), "sensitivity_nmse": sensitivity(tmp, cfg, ids, ref)}
    ref.astype("<f4").tofile(os.path.join(tmp, "ref_logits.bin"))
    qdir, ddir = tempfile.mkdtemp(prefix="nvfp4."), tempfile.mkdtemp(prefix="deq.")
    try:
        quant, excluded = nvfp4_ref.quantize_dir(tmp, qdir, "modelopt")
        assert dequant_nvfp4.main([qdir, ddir]) == 0
        qref, qmargin = run(load_hf(ddir, cfg), ids)
    finally:
        shutil.rmtree(qdir), shutil.rmtree(ddir)
    qref.astype("<f4").tofile(os.path.join(tmp, "ref_logits_nvfp4.bin"))
    cref = ct_logits(tmp, cfg, ids)
    cref.astype("<f4").tofile(os.path.join(tmp, "ref_logits_nvfp4_ct.bin"))
    meta["nvfp4_ct_vs_modelopt_nmse"] = mrm.nmse(cref, qref)
    meta.update({"nvfp4_quantized_linears": len(quant), "nvfp4_excluded": excluded,
                 "nvfp4_min_router_margin": qmargin, "nvfp4_vs_bf16_nmse": mrm.nmse(qref, ref),
                 "nvfp4_vs_bf16_top1": float(np.mean(qref.argmax(1) == ref.argmax(1)))})
    with open(os.path.join(tmp, "ref_ids.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f)
        f.write("\n")
    shutil.rmtree(d, ignore_errors=True)
    os.rename(tmp, d)
    print(f"{name}: {json.dumps({k: v for k, v in meta.items() if k != 'token_ids'})}")


def random_model(argv):
    """--random-model OUT ...: one larger checkpoint (config.json, model.safetensors, tokenizer files)."""
    import argparse
    from safetensors.torch import save_file
    ap = argparse.ArgumentParser(prog="gen_moe_goldens.py --random-model")
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--moe-ff", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=0, help="default: the tokenizer's, rounded up to a multiple of 128")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "tests/data/tokenizer/qwen3"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="torch device that draws the weights (cuda is faster)")
    ap.add_argument("--branch-scale", type=float, default=1.0, help="o_proj/down_proj weight scale (random_checkpoint)")
    a = ap.parse_args(argv)
    n_tok = mrm.vocab_size(os.path.join(a.tokenizer, "tokenizer.json"))
    vocab = a.vocab or (n_tok + 127) // 128 * 128
    assert vocab >= n_tok, f"--vocab {vocab} < the tokenizer's {n_tok} ids"
    cfg = dict(COMMON, hidden_size=a.hidden, intermediate_size=4 * a.hidden, num_attention_heads=a.heads,
               num_key_value_heads=a.kv_heads, head_dim=a.head_dim, max_position_embeddings=4096,
               num_experts=a.experts, moe_intermediate_size=a.moe_ff, num_hidden_layers=a.layers,
               mlp_only_layers=[], decoder_sparse_step=1, num_experts_per_tok=a.top_k, norm_topk_prob=True,
               tie_word_embeddings=False, vocab_size=vocab, eos_token_id=None)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(a.tokenizer, fn), os.path.join(a.out, fn))
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in random_checkpoint(cfg, a.seed, a.device, a.branch_scale).items()}
    save_file(sd, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    n = sum(v.numel() for v in sd.values())
    print(f"random Qwen3MoeForCausalLM -> {a.out}: {n / 1e6:.1f} M parameters, hidden {a.hidden}, {a.layers} layers, "
          f"{a.experts} experts top-{a.top_k}, moe_intermediate {a.moe_ff}, vocab {vocab}, seed {a.seed}, "
          f"branch scale {a.branch_scale}")
    return 0


def main(argv):
    if len(argv) > 1 and argv[1] == "--random-model":
        return random_model(argv[2:])
    out_root = argv[1] if len(argv) > 1 else os.path.join(ROOT, "tests/data/moe")
    os.makedirs(out_root, exist_ok=True)
    for name, spec in MODELS.items():
        make(name, spec, out_root)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
