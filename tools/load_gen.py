#!/usr/bin/env python3
"""Load generator for an OpenAI-compatible server (`tetra serve`, vLLM): N concurrent streaming chat
requests, measuring TTFT, inter-token latency (ITL) and aggregate output tok/s. Stdlib only.

Each client thread sends `--requests-per-client` requests one after the other; every request is a
streaming chat completion with fixed max_tokens and ignore_eos (so all requests generate the same
number of tokens). TTFT = first content chunk - request sent; ITL = gaps between content chunks.
Output: one row per concurrency level (markdown table, or --json).

  python3 tools/load_gen.py --url http://127.0.0.1:8000 --concurrency 1 8 32 64 --max-tokens 64
"""
import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse


def one_request(url, model, prompt, max_tokens, seed, api_key):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=600)
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True, "temperature": 0.8, "seed": seed, "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:300]))
    times, n_tokens, buf, done = [], 0, b"", False
    while not done:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            data = ev[6:]
            if data == b"[DONE]":
                done = True
                break
            obj = json.loads(data)
            if "error" in obj:
                raise RuntimeError("stream error: %s" % obj["error"])
            if obj.get("usage"):
                n_tokens = obj["usage"]["completion_tokens"]
            for c in obj.get("choices", []):
                if c["delta"].get("content"):
                    times.append(time.perf_counter())
    conn.close()
    if not done:
        raise RuntimeError("stream ended without [DONE]")
    end = time.perf_counter()
    return {"ttft": times[0] - t0 if times else None, "itl": [b - a for a, b in zip(times, times[1:])],
            "tokens": n_tokens, "start": t0, "end": end}


def run_level(args, concurrency):
    results, errors = [], []
    lock = threading.Lock()

    def client(ci):
        for k in range(args.requests_per_client):
            try:
                res = one_request(args.url, args.model, args.prompt, args.max_tokens, ci * 1000 + k, args.api_key)
                with lock:
                    results.append(res)
            except Exception as e:  # counted and reported
                with lock:
                    errors.append(str(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttft = sorted(r["ttft"] for r in results if r["ttft"] is not None)
    itl = sorted(x for r in results for x in r["itl"])
    tokens = sum(r["tokens"] for r in results)

    def pct(v, p):
        return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")

    return {"concurrency": concurrency, "requests": len(results), "errors": len(errors), "wall_s": wall,
            "ttft_p50_s": pct(ttft, 0.5), "ttft_p95_s": pct(ttft, 0.95), "itl_p50_ms": 1000 * pct(itl, 0.5),
            "itl_p95_ms": 1000 * pct(itl, 0.95), "itl_mean_ms": 1000 * statistics.fmean(itl) if itl else float("nan"),
            "tok_s": tokens / wall if wall > 0 else 0.0, "first_error": errors[0] if errors else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default=None, help="model name to send (default: none, the server's)")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--requests-per-client", type=int, default=1)
    ap.add_argument("--prompt", default="Write a short story about a robot who learns to paint.")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [run_level(args, c) for c in args.concurrency]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print("| streams | requests | errors | wall s | TTFT p50 s | TTFT p95 s | ITL p50 ms | ITL p95 ms | output tok/s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %d | %d | %d | %.1f | %.2f | %.2f | %.0f | %.0f | %.1f |" % (
            r["concurrency"], r["requests"], r["errors"], r["wall_s"], r["ttft_p50_s"], r["ttft_p95_s"], r["itl_p50_ms"],
            r["itl_p95_ms"], r["tok_s"]))
        if r["first_error"]:
            print("  first error: " + r["first_error"])


if __name__ == "__main__":
    main()
