#!/usr/bin/env python3
"""Reads cupti_trace.csv files (tools/cupti_trace/cupti_trace.cpp) and prints, for the CUDA graph
launched most often (a decode step of `tetra bench`), where its span goes: per kernel class the
time the step's frontier advanced while that kernel was the last to end ("advance", sums to the
span), its own duration, and how far it started before its predecessor ended ("overlap", PDL).
Several files: one column group per file, same kernel order (A/B of two builds or variants).

usage: timeline.py trace.csv [trace2.csv ...] [--graph-nodes N] [--per-layer N]
"""
import argparse
import collections
import csv
import itertools
import statistics


def launches(path, nodes=None):
    by_corr = collections.defaultdict(list)
    for r in csv.DictReader(open(path)):
        if r["graph"] == "0":
            continue
        by_corr[(r["graph"], r["correlation"])].append(
            (int(r["start_ns"]), int(r["end_ns"]), r["name"], int(r["ctas"]), int(r["smem"])))
    groups = collections.defaultdict(list)
    for (g, _), ks in by_corr.items():
        groups[g].append(sorted(ks))
    # the graph with the most launches (ties: more nodes), or the one with N nodes
    cands = [(len(v), len(v[0]), g) for g, v in groups.items() if nodes is None or len(v[0]) == nodes]
    if not cands:
        raise SystemExit(f"{path}: no graph launches" + (f" with {nodes} nodes" if nodes else ""))
    _, _, g = max(cands)
    ls = [l for l in groups[g] if len(l) == len(groups[g][0])]
    return ls[len(ls) // 4:]  # drop the first quarter (warm-up replays)


def classify(name, ctas):
    """A kernel class: the function name and the grid size (which tells a layer's matmuls apart)."""
    return f"{name.split('<')[0]} [{ctas}]"


def summarize(ls):
    n = len(ls[0])
    frontier = [list(itertools.accumulate((k[1] for k in l), max)) for l in ls]
    span = statistics.median(l[-1][1] - l[0][0] for l in ls) / 1e3
    per_node = []
    for i in range(n):
        dur = statistics.median(l[i][1] - l[i][0] for l in ls) / 1e3
        if i == 0:
            adv, ov = statistics.median(l[0][1] - l[0][0] for l in ls) / 1e3, 0.0
        else:  # frontier[k][i - 1]: the latest end among launch k's first i kernels
            adv = statistics.median(l[i][1] - f[i - 1] for l, f in zip(ls, frontier)) / 1e3
            ov = statistics.median(l[i - 1][1] - l[i][0] for l in ls) / 1e3
        per_node.append((ls[0][i][2], dur, adv, ov, ls[0][i][3], ls[0][i][4]))
    return span, per_node


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--graph-nodes", type=int)
    ap.add_argument("--per-layer", type=int, default=0, help="nodes per layer (0: guess from the trace)")
    a = ap.parse_args()
    sums = []
    for p in a.traces:
        ls = launches(p, a.graph_nodes)
        span, nodes = summarize(ls)
        print(f"{p}: {len(ls)} launches of a {len(nodes)}-kernel graph, median span {span:.1f} us")
        cls = collections.OrderedDict()
        for name, dur, adv, ov, ctas, smem in nodes:
            c = cls.setdefault(classify(name, ctas), [0, 0.0, 0.0, 0.0])
            c[0] += 1
            c[1] += dur
            c[2] += adv
            c[3] += ov
        sums.append((p, span, cls, nodes))
    print("\n| kernel | calls | " + " | ".join(f"advance us · duration us · overlap us ({i})" for i in range(len(sums))) + " |")
    print("|---|---:|" + "---|" * len(sums))
    keys = list(sums[0][2].keys())
    for s in sums[1:]:
        keys += [k for k in s[2] if k not in keys]
    for k in keys:
        cells = []
        calls = max(s[2].get(k, [0])[0] for s in sums)
        for _, _, cls, _ in sums:
            c = cls.get(k)
            cells.append(f"{c[2]:.1f} · {c[1]:.1f} · {c[3]:.1f}" if c else "-")
        print(f"| {k[:60]} | {calls} | " + " | ".join(cells) + " |")
    print("| span | | " + " | ".join(f"{s[1]:.1f}" for s in sums) + " |")
    # one layer node by node: the smallest period with which the kernel names repeat mid-graph
    for p, span, cls, nodes in sums:
        names = [n[0] for n in nodes]
        mid = len(names) // 3
        per = a.per_layer or next((q for q in range(2, len(names) // 3)
                                   if all(names[i] == names[i + q] for i in range(mid, mid + q))), len(names))
        start = mid
        print(f"\n{p}: nodes {start}..{start + per - 1} (one layer; us: duration, advance, overlap with predecessor; CTAs, smem KB)")
        for name, dur, adv, ov, ctas, smem in nodes[start:start + per]:
            print(f"  {name[:60]:60s} {dur:7.2f} {adv:7.2f} {ov:7.2f} {ctas:6d} {smem / 1024:6.1f}")

if __name__ == "__main__":
    main()
