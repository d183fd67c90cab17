#!/usr/bin/env python3
"""Compare tetra's logits with Hugging Face transformers, teacher-forced on the same token ids.

  compare_hf.py tokens  --model DIR --text FILE --out ids.json [--max-tokens N]
  compare_hf.py compare --model DIR --ids ids.json --logits ours.npy [--min-agreement 0.99]
                        [--max-abs-diff X] [--device cpu|cuda] [--dump-hf hf.npy]

File format (written by the engine, read here): ids.json = {"token_ids": [int, ...]} (fed as is, no
BOS added) and optionally "positions": [int, ...] naming which positions the .npy rows hold (default:
all, 0..n-1). ours.npy = float32 [n_positions, n_vocab], row r = logits after token_ids[:positions[r]+1].
transformers runs in float32; exit status 1 when top-1 agreement < --min-agreement (or max |Δlogit|
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


def hf_logits(model_dir, ids, device):
    import torch
    from transformers import AutoModelForCausalLM
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device).eval()
    with torch.no_grad():
        out = model(torch.tensor([ids], device=device)).logits[0]
    return out.float().cpu().numpy()


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
    agree = float(np.mean(ours.argmax(axis=1) == ref.argmax(axis=1)))
    diff = np.abs(ours.astype(np.float64) - ref)
    worst = np.unravel_index(diff.argmax(), diff.shape)
    print(f"positions: {len(positions)}  n_vocab: {ref.shape[1]}")
    print(f"top-1 agreement: {agree:.4f}  (min {args.min_agreement})")
    print(f"max |dlogit|: {diff.max():.4f} at position {positions[worst[0]]} token {worst[1]}  "
          f"mean |dlogit|: {diff.mean():.4f}")
    print(f"perplexity: ours {nll_ppl(ours, ids, positions):.4f}  hf {nll_ppl(ref, ids, positions):.4f}")
    ok = agree >= args.min_agreement and (args.max_abs_diff is None or diff.max() <= args.max_abs_diff)
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
    args = ap.parse_args(argv)
    return cmd_tokens(args) if args.cmd == "tokens" else cmd_compare(args)


if __name__ == "__main__":
    sys.exit(main())
