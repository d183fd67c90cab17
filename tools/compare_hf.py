#!/usr/bin/env python3
"""Compare tetra's logits with Hugging Face transformers, teacher-forced on the same token ids.

  compare_hf.py tokens  --model DIR --text FILE --out ids.json [--max-tokens N]
  compare_hf.py compare --model DIR --ids ids.json --logits ours.npy [--min-agreement 0.99]
                        [--max-abs-diff X] [--device cpu|cuda] [--dump-hf hf.npy]
                        [--baseline-bf16] [--summary-json out.json] [--label NAME]

File format (written by the engine, read here): ids.json = {"token_ids": [int, ...]} (fed as is, no
BOS added) and optionally "positions": [int, ...] naming which positions the .npy rows hold (default:
all, 0..n-1). ours.npy = float32 [n_positions, n_vocab], row r = logits after token_ids[:positions[r]+1].
transformers runs in float32; --baseline-bf16 also runs it in bfloat16 and prints how far that lands
from its own float32 logits (the same metrics: what bf16 activations alone cost on these weights), and
how far ours land from that bf16 run.
--summary-json writes the metrics (label, positions, agreement, max/mean |dlogit|, baseline) as JSON.
Exit status 1 when top-1 agreement < --min-agreement (or max |Δlogit|
> --max-abs-diff when given), 2 on bad input. Needs torch + transformers (present on the GPU machine).
"""
import argparse
import json
import math
import sys

import numpy as np


def fail(msg, code=2):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


def load_ids(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    ids = doc.get("token_ids") if isinstance(doc, dict) else None
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and i >= 0 for i in ids):
        fail(f"{path}: 'token_ids' must be a non-empty list of non-negative ints")
    positions = doc.get("positions", list(range(len(ids))))
    if not isinstance(positions, list) or not all(isinstance(p, int) and 0 <= p < len(ids) for p in positions):
        fail(f"{path}: 'positions' must be a list of ints in [0, {len(ids)})")
    return ids, positions


def cmd_tokens(args):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(args.model)
    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if args.max_tokens:
        ids = ids[:args.max_tokens]
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"token_ids": ids}, f)
        f.write("\n")
    print(f"tokens: {len(ids)} ids from {args.text} -> {args.out}")
    return 0


def hf_logits(model_dir, ids, device, dtype="float32"):
    import torch
    from transformers import AutoModelForCausalLM
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device).eval()
    with torch.no_grad():
        out = model(torch.tensor([ids], device=device)).logits[0]
    out = out.float().cpu().numpy()
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def metrics(ours, ref):
    """Top-1 agreement, |dlogit| stats and the differing positions (row, ours, ref, ref's gap between them)."""
    a, b = ours.argmax(axis=1), ref.argmax(axis=1)
    diff = np.abs(ours.astype(np.float64) - ref)
    rows = np.nonzero(a != b)[0]
    differ = [(int(r), int(a[r]), int(b[r]), float(ref[r, b[r]] - ref[r, a[r]])) for r in rows]
    nmse = float(((ours.astype(np.float64) - ref) ** 2).sum() / (ref.astype(np.float64) ** 2).sum())
    return {"agreement": float(np.mean(a == b)), "max_abs": float(diff.max()), "mean_abs": float(diff.mean()),
            "nmse": nmse, "worst": np.unravel_index(diff.argmax(), diff.shape), "differ": differ}


def nll_ppl(logits, ids, positions):
    """Perplexity of the next tokens that the given rows predict (rows at the last position skipped)."""
    nll, n = 0.0, 0
    for row, p in enumerate(positions):
        if p + 1 < len(ids):
            x = logits[row].astype(np.float64)
            lse = x.max() + math.log(np.exp(x - x.max()).sum())
            nll += lse - x[ids[p + 1]]
            n += 1
    return math.exp(nll / n) if n else float("nan")


def cmd_compare(args):
    ids, positions = load_ids(args.ids)
    try:
        ours = np.load(args.logits, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        fail(f"{args.logits}: {e}")
    if ours.ndim != 2 or ours.dtype != np.float32 or ours.shape[0] != len(positions):
        fail(f"{args.logits}: shape {list(ours.shape)} dtype {ours.dtype}; expected float32 [{len(positions)}, n_vocab]")
    full = hf_logits(args.model, ids, args.device)
    ref = full[positions]
    if ref.shape[1] != ours.shape[1]:
        fail(f"{args.logits}: n_vocab {ours.shape[1]}; the HF model has {ref.shape[1]}")
    if args.dump_hf:
        np.save(args.dump_hf, ref.astype(np.float32))
    if not np.all(np.isfinite(ours)):
        fail(f"{args.logits}: {int((~np.isfinite(ours)).sum())} non-finite logits", 1)
    m = metrics(ours, ref)
    print(f"positions: {len(positions)}  n_vocab: {ref.shape[1]}")
    print(f"top-1 agreement: {m['agreement']:.4f}  (min {args.min_agreement})")
    print(f"max |dlogit|: {m['max_abs']:.4f} at position {positions[m['worst'][0]]} token {m['worst'][1]}  "
          f"mean |dlogit|: {m['mean_abs']:.4f}  NMSE: {m['nmse']:.3g}")
    gaps = sorted(g for *_, g in m["differ"])
    print(f"differing top-1: {len(m['differ'])}; HF's gap between its top-1 and ours there: "
          + (" ".join(f"{g:.3f}" for g in gaps[:12]) + (" ..." if len(gaps) > 12 else "") if gaps else "-"))
    print(f"perplexity: ours {nll_ppl(ours, ids, positions):.4f}  hf {nll_ppl(ref, ids, positions):.4f}")
    summary = {"label": args.label or args.logits, "positions": len(positions), "n_vocab": int(ref.shape[1]),
               **{k: m[k] for k in ("agreement", "max_abs", "mean_abs", "nmse")},
               "differ_hf_gaps": gaps}
    if args.baseline_bf16:
        hf16 = hf_logits(args.model, ids, args.device, "bfloat16")[positions]
        bm, om = metrics(hf16, ref), metrics(ours, hf16)
        print(f"baseline, transformers in bf16 vs float32: top-1 agreement {bm['agreement']:.4f}  max |dlogit| "
              f"{bm['max_abs']:.4f}  mean |dlogit| {bm['mean_abs']:.4f}  NMSE {bm['nmse']:.3g}")
        print(f"ours vs transformers in bf16: top-1 agreement {om['agreement']:.4f}  max |dlogit| {om['max_abs']:.4f}  "
              f"mean |dlogit| {om['mean_abs']:.4f}  NMSE {om['nmse']:.3g}")
        summary["baseline_bf16"] = {k: bm[k] for k in ("agreement", "max_abs", "mean_abs", "nmse")}
        summary["ours_vs_hf_bf16"] = {k: om[k] for k in ("agreement", "max_abs", "mean_abs", "nmse")}
    ok = m["agreement"] >= args.min_agreement and (args.max_abs_diff is None or m["max_abs"] <= args.max_abs_diff)
    summary["pass"] = bool(ok)
    if args.summary_json:
        with open(args.summary_json, "w", encoding="utf-8") as f:
            json.dump(summary, f)
            f.write("\n")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokens", help="tokenize a text file with the HF tokenizer into ids.json")
    t.add_argument("--model", required=True)
    t.add_argument("--text", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--max-tokens", type=int, default=0)
    c = sub.add_parser("compare", help="compare our logits (.npy) with transformers on the same ids")
    c.add_argument("--model", required=True)
    c.add_argument("--ids", required=True)
    c.add_argument("--logits", required=True)
    c.add_argument("--min-agreement", type=float, default=0.99)
    c.add_argument("--max-abs-diff", type=float, default=None)
    c.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    c.add_argument("--dump-hf", default=None, help="also save the HF logits rows (.npy float32)")
    c.add_argument("--baseline-bf16", action="store_true", help="also measure transformers in bf16 vs float32")
    c.add_argument("--summary-json", default=None, help="write the metrics as JSON")
    c.add_argument("--label", default=None, help="name of this comparison in --summary-json")
    args = ap.parse_args(argv)
    return cmd_tokens(args) if args.cmd == "tokens" else cmd_compare(args)


if __name__ == "__main__":
    sys.exit(main())
