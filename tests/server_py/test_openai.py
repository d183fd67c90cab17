#!/usr/bin/env python3
"""End-to-end test of `tetra serve` with the real `openai` Python client and raw HTTP (stdlib).

Starts the server on a free loopback port with the default SmolLM2-135M-Instruct NVFP4 model
(scripts/prepare_model.sh) and checks: chat and completions (stream and not), the exact SSE framing
(serving.md §1.6), models list, vLLM's error codes and messages, 64 concurrent streams all ending in
[DONE], a disconnect storm after which the server still answers and /metrics shows no KV block held,
non-streaming requests whose clients hang up aborted (not run to max_tokens),
--api-key, and exit status 0 on SIGTERM. Every wait is bounded.

Usage: test_openai.py --tetra build/cli/tetra [--model DIR]
"""
import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

ARGS = None
SERVER = None  # the shared server of the main test case


def fail_setup(msg):
    print("test_openai: error: " + msg, file=sys.stderr)
    sys.exit(1)


try:
    import openai
except ImportError:
    fail_setup("the Python package `openai` is missing: run scripts/deps.sh (or pip install openai)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class server_process:
    """`tetra serve` on a free loopback port; stop() sends SIGTERM and returns the exit status."""

    def __init__(self, extra=()):
        self.port = free_port()
        cmd = [ARGS.tetra, "serve", ARGS.model, "--port", str(self.port), "--served-model-name", "smol", "--max-model-len",
               "512", "--max-num-seqs", "64", "--seed", "1", *extra]
        self.log = open(os.path.join(ARGS.logdir, "tetra_serve_%d.log" % self.port), "w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("tetra serve exited with %d:\n%s" % (self.proc.returncode, self.read_log()))
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        self.proc.kill()
        raise RuntimeError("tetra serve did not become healthy in 120 s:\n" + self.read_log())

    def read_log(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120):
        c = self.conn(timeout)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data, r

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def client(self, api_key="unused"):
        return openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % self.port, api_key=api_key, max_retries=0, timeout=300)

    def metrics(self):
        status, data, _ = self.get("/metrics")
        assert status == 200
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def sse_events(resp, limit=10000):
    """Reads `data: ...` events (raw bytes framing checked) until [DONE] or EOF."""
    events = []
    buf = b""
    while len(events) < limit:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            assert ev.startswith(b"data: "), ev
            events.append(ev[6:].decode())
            if events[-1] == "[DONE]":
                return events
    return events


CHAT = [{"role": "user", "content": "What is the capital of France?"}]
LABEL = 'model_name="smol"'


def setUpModule():
    global SERVER
    SERVER = server_process()


def tearDownModule():
    rc = SERVER.stop()
    if rc != 0:
        raise AssertionError("tetra serve exited with %r on SIGTERM (expected 0):\n%s" % (rc, SERVER.read_log()))


class basic(unittest.TestCase):
    def test_models_health_version(self):
        models = SERVER.client().models.list()
        self.assertEqual([m.id for m in models.data], ["smol"])
        status, data, _ = SERVER.get("/v1/models")
        self.assertEqual(json.loads(data)["data"][0]["max_model_len"], 512)
        self.assertEqual(SERVER.get("/health")[0], 200)
        self.assertEqual(SERVER.get("/version")[0], 200)
        status, data, _ = SERVER.get("/nope")
        self.assertEqual((status, json.loads(data)), (404, {"detail": "Not Found"}))

    def test_chat_non_stream(self):
        r = SERVER.client().chat.completions.create(model="smol", messages=CHAT, max_tokens=12, temperature=0)
        self.assertTrue(r.id.startswith("chatcmpl-"))
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.model, "smol")
        self.assertEqual(len(r.choices), 1)
        c = r.choices[0]
        self.assertEqual(c.message.role, "assistant")
        self.assertIn("Paris", c.message.content)
        self.assertIn(c.finish_reason, ("stop", "length"))
        self.assertGreater(r.usage.prompt_tokens, 10)
        self.assertLessEqual(r.usage.completion_tokens, 12)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)

    def test_chat_stream_matches_non_stream(self):
        cl = SERVER.client()
        full = cl.chat.completions.create(model="smol", messages=CHAT, max_tokens=10, temperature=0)
        chunks = list(cl.chat.completions.create(model="smol", messages=CHAT, max_tokens=10, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual(chunks[0].choices[0].delta.content, "")
        self.assertEqual(len({c.id for c in chunks}), 1)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, full.choices[0].message.content)  # greedy: same tokens either way
        finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(len(finals), 1)
        self.assertEqual(finals[0].choices[0].finish_reason, full.choices[0].finish_reason)
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, full.usage.completion_tokens)
        self.assertEqual(chunks[-1].usage.prompt_tokens, full.usage.prompt_tokens)

    def test_raw_sse_framing(self):
        c = SERVER.conn()
        c.request("POST", "/v1/chat/completions", json.dumps({"model": "smol", "messages": CHAT, "max_tokens": 4, "stream": True,
                                                               "stream_options": {"include_usage": True}}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        self.assertTrue(r.getheader("Content-Type").startswith("text/event-stream"))
        ev = sse_events(r)
        c.close()
        self.assertEqual(ev[-1], "[DONE]")
        objs = [json.loads(e) for e in ev[:-1]]
        self.assertEqual(objs[0]["choices"][0]["delta"], {"role": "assistant", "content": ""})
        self.assertIsNone(objs[0]["choices"][0]["finish_reason"])
        self.assertEqual(list(objs[0].keys()), ["id", "object", "created", "model", "choices"])
        self.assertEqual(objs[-2]["choices"][0]["finish_reason"], "length")
        self.assertIn("stop_reason", objs[-2]["choices"][0])
        self.assertEqual(objs[-1]["choices"], [])
        self.assertEqual(objs[-1]["usage"]["completion_tokens"], 4)

    def test_completions(self):
        cl = SERVER.client()
        r = cl.completions.create(model="smol", prompt="Once upon a time", max_tokens=6, temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertTrue(r.id.startswith("cmpl-"))
        self.assertEqual(r.usage.completion_tokens, 6)
        self.assertEqual(r.choices[0].finish_reason, "length")
        chunks = list(cl.completions.create(model="smol", prompt="Once upon a time", max_tokens=6, temperature=0, stream=True))
        self.assertEqual("".join(c.choices[0].text for c in chunks), r.choices[0].text)
        # default max_tokens is 16 (OpenAI / vLLM)
        r = cl.completions.create(model="smol", prompt="Once upon a time", temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 16)

    def test_stop_string_and_n_and_logprobs(self):
        cl = SERVER.client()
        r = cl.completions.create(model="smol", prompt="The capital of France is Paris. The capital of Italy is", max_tokens=16,
                                  temperature=0, stop=["."])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].model_extra.get("stop_reason"), ".")
        self.assertNotIn(".", r.choices[0].text)
        r = cl.chat.completions.create(model="smol", messages=CHAT, max_tokens=5, n=2, seed=3, temperature=1.0)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1])
        r = cl.chat.completions.create(model="smol", messages=CHAT, max_tokens=5, temperature=0, logprobs=True, top_logprobs=3)
        lp = r.choices[0].logprobs.content
        self.assertEqual(len(lp), r.usage.completion_tokens)
        self.assertTrue(all(len(x.top_logprobs) == 3 for x in lp))
        self.assertTrue(all(x.logprob <= 0 for x in lp))
        self.assertEqual("".join(x.token for x in lp), r.choices[0].message.content)
        # same seed, same samples
        a = cl.chat.completions.create(model="smol", messages=CHAT, max_tokens=8, seed=42, temperature=1.0)
        b = cl.chat.completions.create(model="smol", messages=CHAT, max_tokens=8, seed=42, temperature=1.0)
        self.assertEqual(a.choices[0].message.content, b.choices[0].message.content)

    def test_stream_n2_interleaves_and_counts_usage(self):
        chunks = list(SERVER.client().chat.completions.create(model="smol", messages=CHAT, max_tokens=5, n=2, seed=7,
                                                               temperature=1.0, stream=True,
                                                               stream_options={"include_usage": True}))
        roles = [c.choices[0].index for c in chunks if c.choices and c.choices[0].delta.role == "assistant"]
        self.assertEqual(sorted(roles), [0, 1])
        finals = sorted(c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason)
        self.assertEqual(finals, [0, 1])
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 10)

    def test_cors_as_vllm(self):
        # preflight (vLLM's defaults: any origin, method and header), answered before any API key check
        status, data, r = SERVER.request("OPTIONS", "/v1/chat/completions", headers={
            "Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        self.assertEqual(status, 200, data)
        self.assertEqual(r.getheader("Access-Control-Allow-Origin"), "*")
        self.assertIn("POST", r.getheader("Access-Control-Allow-Methods"))
        self.assertEqual(r.getheader("Access-Control-Allow-Headers"), "authorization, content-type")
        # simple requests, errors included, carry the origin header; none without an Origin
        for path in ("/v1/models", "/nope"):
            _, _, r = SERVER.get(path, headers={"Origin": "http://localhost:3000"})
            self.assertEqual(r.getheader("Access-Control-Allow-Origin"), "*", path)
        _, _, r = SERVER.get("/v1/models")
        self.assertIsNone(r.getheader("Access-Control-Allow-Origin"))

    def test_tokenize_detokenize(self):
        status, data, _ = SERVER.post("/tokenize", {"prompt": "Hello world", "add_special_tokens": False})
        self.assertEqual(status, 200)
        toks = json.loads(data)
        self.assertEqual(toks["count"], len(toks["tokens"]))
        status, data, _ = SERVER.post("/detokenize", {"tokens": toks["tokens"]})
        self.assertEqual(json.loads(data)["prompt"], "Hello world")


class errors(unittest.TestCase):
    def check(self, status, data, code, param=None, contains=None):
        self.assertEqual(status, code, data)
        err = json.loads(data)["error"]
        self.assertEqual(err["code"], code)
        self.assertEqual(sorted(err.keys()), ["code", "message", "param", "type"])
        if param is not None:
            self.assertEqual(err["param"], param)
        if contains:
            self.assertIn(contains, err["message"])

    def test_malformed_and_non_object_bodies(self):
        self.check(*SERVER.post("/v1/chat/completions", b"{\"model\": ")[:2], 400)
        self.check(*SERVER.post("/v1/chat/completions", b"[]")[:2], 400)
        self.check(*SERVER.post("/v1/completions", b"\"x\"")[:2], 400)
        self.check(*SERVER.post("/v1/chat/completions", {"messages": "x"})[:2], 400, "messages")
        self.check(*SERVER.post("/v1/chat/completions", {"messages": CHAT, "temperature": "hot"})[:2], 400, "temperature")
        self.check(*SERVER.post("/v1/chat/completions", {"messages": CHAT, "top_logprobs": 2})[:2], 400, "top_logprobs")
        self.check(*SERVER.post("/v1/chat/completions", {"messages": CHAT, "logprobs": True, "top_logprobs": 21})[:2], 400)
        self.check(*SERVER.post("/v1/chat/completions", {"messages": CHAT, "stream_options": {"include_usage": True}})[:2], 400,
                   "stream_options", "stream=True")
        self.check(*SERVER.post("/v1/chat/completions", {"messages": CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]})[:2],
                   400, "tool_choice", "--enable-auto-tool-choice")

    def raw(self, data, timeout=60):
        """Sends raw bytes on a new connection; returns everything until the server closes it."""
        with socket.create_connection(("127.0.0.1", SERVER.port), timeout=timeout) as c:
            c.sendall(data)
            out = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    return out
                out += chunk

    def test_session23_audit_deep_json_chunked_body_tokenize_types(self):
        # 200,000 nested arrays (a stack overflow killed the process): 400, and the server lives on
        deep = b'{"x":' + b"[" * 200000 + b"]" * 200000 + b',"prompt":"hi"}'
        for path in ("/v1/completions", "/v1/chat/completions", "/tokenize"):
            self.check(*SERVER.post(path, deep)[:2], 400, None, "deeper than 128")
        self.assertEqual(SERVER.get("/health")[0], 200)
        # a chunked body skipped the 32-MiB limit (read whole): refused before it is read
        head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        body = b'{"prompt":"hi","max_tokens":1}'
        resp = self.raw(head + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
        self.assertTrue(resp.startswith(b"HTTP/1.1 411"), resp[:200])
        self.assertIn(b"Content-Length", resp)
        # /tokenize's booleans: a wrong type is a 400 naming the field (was 500, or "no" taken as true)
        self.check(*SERVER.post("/tokenize", {"prompt": "Hello", "return_token_strs": "yes"})[:2], 400, "return_token_strs")
        self.check(*SERVER.post("/tokenize", {"prompt": "Hello", "add_special_tokens": "no"})[:2], 400, "add_special_tokens")

    def test_session23_audit_http10_stream_and_continuous_usage(self):
        # an HTTP/1.0 client cannot decode chunked framing: raw events, the body ends at the close
        body = json.dumps({"model": "smol", "prompt": "Once upon a time", "max_tokens": 3, "stream": True}).encode()
        resp = self.raw(b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                        % len(body) + body)
        head, _, payload = resp.partition(b"\r\n\r\n")
        self.assertIn(b" 200 ", head.split(b"\r\n")[0])
        self.assertNotIn(b"transfer-encoding: chunked", head.lower())
        events = [e for e in payload.split(b"\n\n") if e]
        self.assertTrue(all(e.startswith(b"data: ") for e in events), payload[:300])
        self.assertEqual(events[-1], b"data: [DONE]")
        # continuous_usage_stats: every chunk carries usage, the role chunk with 0 completion tokens (vLLM)
        chunks = list(SERVER.client().chat.completions.create(
            model="smol", messages=CHAT, max_tokens=3, stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True}))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual(chunks[0].usage.completion_tokens, 0)
        self.assertEqual(chunks[0].usage.total_tokens, chunks[0].usage.prompt_tokens)
        self.assertTrue(all(c.usage is not None for c in chunks))

    def test_wrong_method_is_405(self):
        status, data, r = SERVER.get("/v1/chat/completions")
        self.assertEqual(status, 405, data)
        self.assertEqual(json.loads(data), {"detail": "Method Not Allowed"})
        self.assertEqual(r.getheader("Allow"), "POST")
        self.assertEqual(SERVER.request("DELETE", "/tokenize")[0], 405)

    def test_unknown_model_is_404(self):
        with self.assertRaises(openai.NotFoundError) as cm:
            SERVER.client().chat.completions.create(model="nope", messages=CHAT, max_tokens=2)
        self.assertIn("The model `nope` does not exist.", str(cm.exception))

    def test_prompt_too_long(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            SERVER.client().completions.create(model="smol", prompt="word " * 700, max_tokens=4)
        self.assertIn("maximum context length", str(cm.exception))
        with self.assertRaises(openai.BadRequestError) as cm:
            SERVER.client().chat.completions.create(model="smol", messages=CHAT, max_tokens=600)
        self.assertIn("maximum context length", str(cm.exception))

    def test_openai_client_raises_on_400(self):
        with self.assertRaises(openai.BadRequestError):
            SERVER.client().chat.completions.create(model="smol", messages=CHAT, max_tokens=2, top_p=7.0)


def stream_once(max_tokens, results, i):
    try:
        c = SERVER.conn(timeout=300)
        c.request("POST", "/v1/chat/completions",
                  json.dumps({"model": "smol", "messages": [{"role": "user", "content": "Tell me about number %d." % i}],
                              "max_tokens": max_tokens, "stream": True, "temperature": 0.7, "seed": i}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        ev = sse_events(r)
        c.close()
        results[i] = ev
    except Exception as e:  # recorded, asserted by the caller
        results[i] = e


class load(unittest.TestCase):
    def test_64_concurrent_streams_all_finish(self):
        n = 64
        results = [None] * n
        threads = [threading.Thread(target=stream_once, args=(8, results, i)) for i in range(n)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        self.assertFalse(any(t.is_alive() for t in threads), "streams still running after 600 s")
        for i, ev in enumerate(results):
            self.assertIsInstance(ev, list, "stream %d failed: %r" % (i, ev))
            self.assertEqual(ev[-1], "[DONE]", "stream %d: %r" % (i, ev[-3:]))
            finals = [json.loads(e) for e in ev[:-1] if json.loads(e)["choices"] and json.loads(e)["choices"][0]["finish_reason"]]
            self.assertEqual(len(finals), 1, "stream %d" % i)
        print("\n64 streams x 8 tokens: %.1f s" % (time.time() - t0), file=sys.stderr)

    def test_health_answers_with_more_open_connections_than_pool_threads(self):
        # cpp-httplib serves a connection on one worker for its life (a stream until it ends, an idle
        # connection until the 30-s read timeout): 110 connections that send half a request hold
        # workers of a pool of max(64, 64 + 32) = 96, and with a fixed pool /health waited for one
        # (4-11 s at 68 streams on 64 workers in session 23's audit; here up to 30 s)
        socks = []
        try:
            for i in range(110):
                c = socket.create_connection(("127.0.0.1", SERVER.port), timeout=30)
                c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
                socks.append(c)
            time.sleep(0.5)
            t0 = time.time()
            status, _, _ = SERVER.get("/health", timeout=60)
            self.assertEqual(status, 200)
            self.assertLess(time.time() - t0, 3.0, "/health waited for a worker")
        finally:
            for c in socks:
                c.close()

    def test_disconnect_storm_frees_kv(self):
        before = SERVER.metrics()
        socks = []
        body = json.dumps({"model": "smol", "messages": CHAT, "max_tokens": 400, "stream": True, "ignore_eos": True})
        for i in range(24):
            c = SERVER.conn(timeout=120)
            c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            socks.append(c)
        for c in socks[:12]:  # some read a little first, others hang up before any token
            r = c.getresponse()
            r.read1(100)
        deadline = time.time() + 60
        while time.time() < deadline and SERVER.metrics().get("tetra:num_requests_running{%s}" % LABEL, 0) == 0:
            time.sleep(0.1)
        for c in socks:
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
        # still answers
        r = SERVER.client().chat.completions.create(model="smol", messages=CHAT, max_tokens=3, temperature=0)
        self.assertEqual(len(r.choices), 1)
        deadline = time.time() + 120
        m = {}
        while time.time() < deadline:
            m = SERVER.metrics()
            if (m["tetra:kv_cache_used_blocks{%s}" % LABEL] == 0 and m["tetra:num_requests_running{%s}" % LABEL] == 0
                    and m["tetra:num_requests_waiting{%s}" % LABEL] == 0):
                break
            time.sleep(0.25)
        self.assertEqual(m["tetra:kv_cache_used_blocks{%s}" % LABEL], 0, m)
        self.assertEqual(m["tetra:kv_cache_usage_perc{%s}" % LABEL], 0, m)
        self.assertEqual(m["tetra:num_requests_running{%s}" % LABEL], 0, m)
        aborted = m['tetra:request_success_total{%s,finished_reason="abort"}' % LABEL] - \
            before['tetra:request_success_total{%s,finished_reason="abort"}' % LABEL]
        self.assertEqual(aborted, 24, "every hung-up stream is aborted, none runs to max_tokens")
        self.assertEqual(SERVER.get("/health")[0], 200)


    def test_non_stream_disconnect_aborts(self):
        """A client that hangs up on a non-streaming request gets it aborted (vLLM does the same):
        the 400-token generations end as `abort`, not `length`, and their KV blocks are freed."""
        abort_key = 'tetra:request_success_total{%s,finished_reason="abort"}' % LABEL
        length_key = 'tetra:request_success_total{%s,finished_reason="length"}' % LABEL
        running_key = "tetra:num_requests_running{%s}" % LABEL
        before = SERVER.metrics()
        conns = []
        for path, body in [("/v1/chat/completions", {"messages": CHAT}), ("/v1/completions", {"prompt": "Once upon a time"})] * 2:
            c = SERVER.conn(timeout=120)
            c.request("POST", path, json.dumps(dict(body, model="smol", max_tokens=400, ignore_eos=True)),
                      {"Content-Type": "application/json"})
            conns.append(c)
        deadline = time.time() + 60
        while time.time() < deadline and SERVER.metrics().get(running_key, 0) < len(conns):
            time.sleep(0.1)
        self.assertEqual(SERVER.metrics()[running_key], len(conns), "the requests did not all start")
        for c in conns:  # hang up without reading: a plain close (FIN), as a killed client or a timeout does
            c.close()
        deadline = time.time() + 60
        m = {}
        while time.time() < deadline:
            m = SERVER.metrics()
            if m["tetra:kv_cache_used_blocks{%s}" % LABEL] == 0 and m[running_key] == 0:
                break
            time.sleep(0.1)
        self.assertEqual(m["tetra:kv_cache_used_blocks{%s}" % LABEL], 0, m)
        self.assertEqual(m[running_key], 0, m)
        self.assertEqual(m[abort_key] - before[abort_key], len(conns), "every hung-up request is aborted")
        self.assertEqual(m[length_key] - before[length_key], 0, "none ran to max_tokens")
        # the server still answers, on a fresh connection, non-streaming
        r = SERVER.client().completions.create(model="smol", prompt="Once upon a time", max_tokens=3, temperature=0)
        self.assertEqual(r.usage.completion_tokens, 3)

class second_server(unittest.TestCase):
    def test_api_key_parsers_and_sigterm_exit_0(self):
        # vLLM command-line flags that keep their meaning here: one GPU, no graphs, no checkpoint code
        bad = subprocess.run([ARGS.tetra, "serve", ARGS.model, "--tensor-parallel-size", "2"], capture_output=True, text=True,
                             timeout=120)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("--tensor-parallel-size 2", bad.stderr + bad.stdout)
        s = server_process(["--api-key", "sekret", "--reasoning-parser", "deepseek_r1", "--enable-auto-tool-choice",
                            "--tool-call-parser", "hermes", "--enforce-eager", "--tensor-parallel-size", "1", "--trust-remote-code"])
        try:
            cl = s.client("sekret")
            # a CORS preflight carries no credentials: answered before the key check (as vLLM)
            status, _, _ = s.request("OPTIONS", "/v1/models", headers={"Origin": "http://x", "Access-Control-Request-Method": "GET"})
            self.assertEqual(status, 200)
            self.assertEqual(s.get("/v1/models", headers={"Origin": "http://x"})[0], 401)
            # deepseek_r1: SmolLM2 never writes </think>, so its whole output is (truncated) reasoning
            r = cl.chat.completions.create(model="smol", messages=CHAT, max_tokens=6, temperature=0)
            m = r.choices[0].message
            self.assertIsNone(m.content)
            self.assertTrue(m.model_extra["reasoning"])
            self.assertEqual(m.model_extra["reasoning"], m.model_extra["reasoning_content"])
            chunks = list(cl.chat.completions.create(model="smol", messages=CHAT, max_tokens=6, temperature=0, stream=True))
            streamed = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in chunks if c.choices)
            self.assertEqual(streamed, m.model_extra["reasoning"])
            self.assertTrue(all(not c.choices or not c.choices[0].delta.content for c in chunks))
            # enable_thinking false: no reasoning block, all content
            r = cl.chat.completions.create(model="smol", messages=CHAT, max_tokens=6, temperature=0,
                                           extra_body={"chat_template_kwargs": {"enable_thinking": False}})
            self.assertEqual(r.choices[0].message.content, m.model_extra["reasoning"])
            # tools accepted once a parser is configured; history with tool calls renders
            tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
            hist = CHAT + [{"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                           {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
            r = cl.chat.completions.create(model="smol", messages=hist, tools=tools, max_tokens=4, temperature=0)
            self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
            self.assertEqual(s.get("/health")[0], 200)  # open
            self.assertEqual(s.get("/metrics")[0], 200)
            status, data, _ = s.get("/v1/models")
            self.assertEqual(status, 401)
            self.assertEqual(json.loads(data)["error"]["code"], 401)
            self.assertEqual(s.get("/v1/models", headers={"Authorization": "Bearer wrong"})[0], 401)
            with self.assertRaises(openai.AuthenticationError):
                s.client("wrong").models.list()
            self.assertEqual([m.id for m in s.client("sekret").models.list().data], ["smol"])
            # SIGTERM while a stream is in flight: it still ends with [DONE], then exit 0
            c = s.conn()
            c.request("POST", "/v1/chat/completions", json.dumps({"messages": CHAT, "max_tokens": 20, "stream": True}),
                      {"Content-Type": "application/json", "Authorization": "Bearer sekret"})
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            s.proc.send_signal(signal.SIGTERM)
            ev = sse_events(r)
            self.assertEqual(ev[-1], "[DONE]")
        finally:
            rc = s.stop()
        self.assertEqual(rc, 0, s.read_log())


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--tetra", required=True)
    ap.add_argument("--model", default=os.path.join(os.environ.get("TETRA_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tetra"), "models", "SmolLM2-135M-Instruct-NVFP4"))
    ap.add_argument("--logdir", default=os.environ.get("TMPDIR", "/tmp"))
    ARGS, rest = ap.parse_known_args()
    if not os.path.isdir(ARGS.model):
        fail_setup("model %s is missing: run scripts/prepare_model.sh" % ARGS.model)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
