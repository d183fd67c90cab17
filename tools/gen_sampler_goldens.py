#!/usr/bin/env python3
"""Goldens for the sampler (tests/data/sampler/goldens.json), from an independent numpy/Python
implementation of the algorithm written from the spec in src/engine/sampler.h (f32 steps in
numpy float32, one IEEE operation at a time; sums and the top-p threshold in exact Python ints and
Fractions; canonical order by a full sort). The C++ sampler and any GPU port must match it bit for bit.

Logits are not stored: each case names a generator (below, mirrored in tests/engine/test_sampler.cpp)
driven by SplitMix64, so cases up to n_vocab = 152064 stay small.

Usage: python3 tools/gen_sampler_goldens.py [out.json]
"""
import json
import sys
from fractions import Fraction

import numpy as np

F = np.float32
M64 = (1 << 64) - 1


def splitmix64(seed, step):
    z = (seed + (step + 1) * 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def splitmix64_vec(seed, n):
    """splitmix64(seed, i) for i in range(n), as uint64 numpy (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        i = np.arange(n, dtype=np.uint64)
        z = np.uint64(seed) + (i + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def make_logits(dist, logit_seed, n, spread):
    """The test's logit generators; every step is one f32 operation."""
    h = splitmix64_vec(logit_seed, n)
    spread = F(spread)
    half = spread * F(0.5)
    u = (h >> np.uint64(40)).astype(np.float32) * F(2.0**-24)
    if dist == "uniform":
        return u * spread - half
    if dist in ("peaked", "peaked_masked"):
        u2 = u * u
        u4 = u2 * u2
        u8 = u4 * u4
        l = u8 * spread - half
        if dist == "peaked_masked":
            mask = ((h >> np.uint64(40)) & np.uint64(7)) == np.uint64(0)
            l = np.where(mask, F(-np.inf), l).astype(np.float32)
        return l
    if dist == "ties":
        return (h >> np.uint64(61)).astype(np.float32) * spread
    raise ValueError(dist)


def sampler_exp(d):
    d = np.asarray(d, dtype=np.float32)
    zero = ~(d >= F(-87.0))
    d = np.where(zero, F(-87.0), d).astype(np.float32)
    t = d * F(1.44269504)
    k = (t + F(12582912.0)) - F(12582912.0)
    r = d - k * F(0.693359375)
    r = r - k * F(-2.12194440e-4)
    p = F(1.0) / F(5040.0)
    for c in (F(1.0) / F(720.0), F(1.0) / F(120.0), F(1.0) / F(24.0), F(1.0) / F(6.0), F(0.5),
              F(1.0), F(1.0)):
        p = p * r + c
    scale = np.ldexp(np.ones_like(d), k.astype(np.int32)).astype(np.float32)
    return np.where(zero, F(0.0), p * scale).astype(np.float32)


def penalize(l, params, prompt, output):
    l = l.copy()
    n = len(l)
    rep = F(params.get("repetition_penalty", 1.0))
    freq = F(params.get("frequency_penalty", 0.0))
    pres = F(params.get("presence_penalty", 0.0))
    out_counts = {}
    for t in output:
        out_counts[t] = out_counts.get(t, 0) + 1
    if n and params.get("min_tokens", 0) > len(output):
        for t in params.get("eos_token_ids", []) + params.get("stop_token_ids", []):
            if 0 <= t < n:
                l[t] = F(-np.inf)
    if rep != F(1.0):
        for t in set(prompt) | set(output):
            if 0 <= t < n:
                l[t] = l[t] / rep if l[t] > 0 else l[t] * rep
    for t, c in out_counts.items():
        if 0 <= t < n:
            l[t] = l[t] - freq * F(c)
            l[t] = l[t] - pres
    return l


def kept_set(l, params):
    """Steps 4-8: kept ids in canonical order and their q weights."""
    temp = F(params.get("temperature", 1.0))
    x = (l / temp).astype(np.float32)
    m = x.max()
    w = sampler_exp((x - m).astype(np.float32))
    q = np.floor((w * F(2.0**40)).astype(np.float64))  # exact: w * 2^40 < 2^53, then floor
    n = len(x)
    xz = (x + F(0.0)).astype(np.float32)  # -0 -> +0
    order = np.lexsort((np.arange(n), -xz.astype(np.float64)))  # x desc, id asc
    top_k = params.get("top_k", 0)
    keep = q > 0
    if 0 < top_k < n:
        x_k = np.sort(x)[::-1][top_k - 1]
        keep &= x >= x_k
    ids = [int(i) for i in order if keep[i]]
    qs = [int(q[i]) for i in ids]
    top_p = F(params.get("top_p", 1.0))
    if top_p < F(1.0):
        total = sum(qs)
        t = -((-Fraction(float(top_p)) * total) // 1)  # exact ceil(p * total)
        if t < total:
            run = 0
            for j, qj in enumerate(qs):
                run += qj
                if run >= t:
                    ids, qs = ids[: j + 1], qs[: j + 1]
                    break
    min_p = F(params.get("min_p", 0.0))
    if min_p > F(0.0):
        sel = [j for j, i in enumerate(ids) if w[i] >= min_p]
        ids, qs = [ids[j] for j in sel], [qs[j] for j in sel]
    return ids, qs


def sample(l, params, prompt, output, seed, step):
    l = penalize(l, params, prompt, output)
    if F(params.get("temperature", 1.0)) < F(1e-5):
        return int(np.argmax(l)), 1, 0
    ids, qs = kept_set(l, params)
    total = sum(qs)
    r = ((splitmix64(seed, step) >> 11) * total) >> 53
    for i, qi in zip(ids, qs):
        if r < qi:
            return i, len(ids), total
        r -= qi
    raise AssertionError("r >= total")


def f32_bits(v):
    return int(np.asarray(v, dtype=np.float32).view(np.uint32))


def exp_goldens():
    rng = np.random.default_rng(1234)
    d = np.concatenate([
        np.array([0.0, -0.0, -1e-8, -0.5, -0.6931472, -1.0, -10.0, -27.7, -86.9, -87.0, -87.5,
                  -100.0, -np.inf], dtype=np.float32),
        (-rng.random(300) * 90).astype(np.float32),
        (-rng.random(100) * 0.01).astype(np.float32),
    ])
    w = sampler_exp(d)
    return [[f32_bits(a), f32_bits(b)] for a, b in zip(d, w)]


PARAM_SETS = [
    ("t1", {"temperature": 1.0}),
    ("greedy", {"temperature": 0.0}),
    ("t07_k20", {"temperature": 0.7, "top_k": 20}),
    ("t13_p09", {"temperature": 1.3, "top_p": 0.9}),
    ("t08_minp", {"temperature": 0.8, "min_p": 0.05}),
    ("all", {"temperature": 0.6, "top_k": 50, "top_p": 0.95, "min_p": 0.02}),
    ("k1", {"temperature": 1.0, "top_k": 1}),
    ("p_small", {"temperature": 1.0, "top_p": 0.01}),
    ("pen", {"temperature": 0.9, "repetition_penalty": 1.3, "presence_penalty": 0.5,
             "frequency_penalty": 0.7, "top_p": 0.97}),
    ("min_tokens", {"temperature": 1.0, "min_tokens": 5, "eos_token_ids": [0, 3],
                    "stop_token_ids": [1]}),
]

VOCABS = [(5, 8.0), (64, 12.0), (1000, 20.0), (49152, 30.0), (152064, 30.0)]
DISTS = ["uniform", "peaked", "peaked_masked", "ties"]


def cases():
    out = []
    cid = 0
    for n, spread in VOCABS:
        for dist in DISTS:
            for pname, params in PARAM_SETS:
                if n >= 49152 and pname not in ("t1", "all", "t07_k20", "pen", "greedy"):
                    continue
                cid += 1
                logit_seed = 1000 + cid
                seed = splitmix64(7, cid)  # a full 64-bit seed
                hist = np.random.default_rng(cid)
                prompt = [int(v) for v in hist.integers(0, n, size=6)]
                output = [int(v) for v in hist.integers(0, n, size=4)] + [prompt[0]]
                l = make_logits(dist, logit_seed, n, spread)
                if not np.isfinite(l).any():
                    continue
                steps = list(range(6)) + [1000, 123456789]
                tokens, n_kept, q_total = [], [], []
                for s in steps:
                    t, nk, qt = sample(l, params, prompt, output, seed, s)
                    tokens.append(t)
                    n_kept.append(nk)
                    q_total.append(qt)
                out.append({
                    "name": f"{dist}/n{n}/{pname}", "n_vocab": n, "dist": dist,
                    "logit_seed": logit_seed, "spread": spread, "params": params,
                    "prompt": prompt, "output": output, "seed": seed, "steps": steps,
                    "tokens": tokens, "n_kept": n_kept[0], "q_total": q_total[0],
                })
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/sampler/goldens.json"
    rb = [[s, st, splitmix64(s, st)] for s, st in
          [(0, 0), (0, 1), (1, 0), (42, 7), (M64, 0), (0x0123456789ABCDEF, 123456789)]]
    doc = {
        "generator": "tools/gen_sampler_goldens.py",
        "random_bits": rb,
        "exp": exp_goldens(),
        "cases": cases(),
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}: {len(doc['cases'])} cases, {len(doc['exp'])} exp values")


if __name__ == "__main__":
    main()
