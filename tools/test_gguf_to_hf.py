#!/usr/bin/env python3
"""Tests for tools/gguf_to_hf.py (run: python3 tools/test_gguf_to_hf.py; needs numpy, gguf,
safetensors, tokenizers, jinja2 and the cached GGUF from scripts/prepare_model.sh).
Oracles: block layouts written from serving.md §5.3, the q/k row map of §5.4 as an index formula,
SmolLM2's published HF config (§5.2), token ids looked up in the GGUF's own token list, and the
HF `tokenizers` library loading the converted tokenizer.json.
"""
import json
import os
import re
import struct
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_to_hf as g2h  # noqa: E402
from gguf import GGUFReader, GGMLQuantizationType  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cache_dir():
    if os.environ.get("TETRA_CACHE_DIR"):
        return os.environ["TETRA_CACHE_DIR"]
    if os.environ.get("XDG_CACHE_HOME"):
        return os.path.join(os.environ["XDG_CACHE_HOME"], "tetra")
    return os.path.join(os.path.expanduser("~"), ".cache", "tetra")


GGUF_PATH = os.path.join(cache_dir(), "gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")


# --- reference dequantization, written from the block table in serving.md §5.3 -----------------
def ref_q4_1(raw, n):  # raw: u8 bytes of n/32 blocks of {f16 d; f16 m; u8 qs[16]}
    blocks = np.frombuffer(bytes(raw), dtype=np.uint8).reshape(-1, 20)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    qs = blocks[:, 4:20]
    lo = (qs & 0xF).astype(np.float32) * d + m
    hi = (qs >> 4).astype(np.float32) * d + m
    return np.concatenate([lo, hi], axis=1).reshape(n)


def ref_q8_0(raw, n):  # raw: n/32 blocks of {f16 d; i8 qs[32]}
    blocks = np.frombuffer(bytes(raw), dtype=np.uint8).reshape(-1, 34)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    qs = blocks[:, 2:34].copy().view(np.int8).astype(np.float32)
    return (qs * d).reshape(n)


def read_safetensors(path):
    """Minimal independent reader: {name: (dtype, shape, raw bytes)} straight from the header."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


def bf16_to_f32(raw, shape):
    return (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)


class RefBpe:
    """Reference byte-level BPE for ASCII text, written from serving.md §2.1-2.2: special tokens split
    first, Digits(individual) then the GPT-2 regex (ASCII classes suffice for ASCII input), GPT-2 byte
    alphabet, then repeatedly merge the lowest-rank adjacent pair (leftmost on ties)."""

    GPT2_ASCII = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")

    def __init__(self, tokens, merges, specials):
        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.rank = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
        self.specials = specials
        self.special_re = re.compile("(" + "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)) + ")")
        printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
        self.byte_char, extra = {b: chr(b) for b in printable}, 0
        for b in range(256):
            if b not in self.byte_char:
                self.byte_char[b], extra = chr(0x100 + extra), extra + 1

    def bpe(self, word):
        syms = [self.byte_char[b] for b in word.encode("ascii")]
        while len(syms) > 1:
            ranks = [self.rank.get((a, b), len(self.rank)) for a, b in zip(syms, syms[1:])]
            best = min(ranks)
            if best == len(self.rank):
                break
            i = ranks.index(best)
            syms[i:i + 2] = [syms[i] + syms[i + 1]]
        return [self.vocab[s] for s in syms if s in self.vocab]

    def encode(self, text):
        text.encode("ascii")  # the reference handles ASCII only
        ids = []
        for seg in self.special_re.split(text):
            if seg in self.specials:
                ids.append(self.specials[seg])
                continue
            for piece in re.split(r"([0-9])", seg):
                for word in self.GPT2_ASCII.findall(piece):
                    ids.extend(self.bpe(word))
        return ids


class BlockLayouts(unittest.TestCase):
    def test_q4_1_low_nibbles_first_half(self):
        # d = 0.5, m = -1.0, qs[j] = j | (15 - j) << 4: y[j] = 0.5*j - 1, y[j+16] = 0.5*(15-j) - 1.
        raw = np.float16(0.5).tobytes() + np.float16(-1.0).tobytes() + bytes(j | (15 - j) << 4 for j in range(16))
        want = [0.5 * j - 1 for j in range(16)] + [0.5 * (15 - j) - 1 for j in range(16)]
        got = dequantize(np.frombuffer(raw, dtype=np.uint8).reshape(1, 20), GGMLQuantizationType.Q4_1)
        np.testing.assert_array_equal(got.reshape(32), np.array(want, dtype=np.float32))

    def test_q8_0_signed(self):
        qs = list(range(-16, 16))
        raw = np.float16(0.25).tobytes() + np.array(qs, dtype=np.int8).tobytes()
        got = dequantize(np.frombuffer(raw, dtype=np.uint8).reshape(1, 34), GGMLQuantizationType.Q8_0)
        np.testing.assert_array_equal(got.reshape(32), np.array([0.25 * q for q in qs], dtype=np.float32))


class Permutation(unittest.TestCase):
    def test_unpermute_index_map(self):
        # serving.md §5.4: GGUF row h*D + 2*i + s holds HF row h*D + s*D/2 + i.
        for n_head, head_dim in ((9, 64), (3, 64), (2, 4)):
            rows = n_head * head_dim
            gguf_rows = np.arange(rows, dtype=np.float32).reshape(rows, 1) * np.ones((1, 3), np.float32)
            hf = g2h.unpermute_rows(gguf_rows, n_head)
            for h in range(n_head):
                for i in range(head_dim // 2):
                    for s in range(2):
                        self.assertEqual(hf[h * head_dim + s * head_dim // 2 + i, 0], h * head_dim + 2 * i + s,
                                         f"n_head={n_head} head_dim={head_dim} h={h} i={i} s={s}")
            np.testing.assert_array_equal(g2h.permute_rows(hf, n_head), gguf_rows)

    def test_rejects_rows_not_multiple_of_two_heads(self):
        with self.assertRaises(g2h.ConvertError):
            g2h.unpermute_rows(np.zeros((9, 4), np.float32), 2)


class Bf16Rounding(unittest.TestCase):
    def test_round_to_nearest_even(self):
        cases = [  # (f32 bits, bf16 bits)
            (0x3F800000, 0x3F80),  # 1.0
            (0x3F808000, 0x3F80),  # tie, even stays
            (0x3F818000, 0x3F82),  # tie, odd rounds up
            (0x3F808001, 0x3F81),  # above tie
            (0xBF807FFF, 0xBF80),  # below tie, negative
            (0x7F7FFFFF, 0x7F80),  # FLT_MAX rounds to +inf (as torch does)
        ]
        x = np.array([c[0] for c in cases], dtype=np.uint32).view(np.float32)
        got = g2h.f32_to_bf16_bits(x)
        self.assertEqual([hex(v) for v in got], [hex(c[1]) for c in cases])


class Names(unittest.TestCase):
    def test_mapping(self):
        self.assertEqual(g2h.hf_tensor_name("blk.12.ffn_down.weight"), ("model.layers.12.mlp.down_proj.weight", 12))
        self.assertEqual(g2h.hf_tensor_name("token_embd.weight"), ("model.embed_tokens.weight", None))
        with self.assertRaises(g2h.ConvertError):
            g2h.hf_tensor_name("blk.0.attn_qkv.weight")


def require_gguf():
    if not os.path.isfile(GGUF_PATH):
        raise AssertionError(f"{GGUF_PATH} is missing: run scripts/prepare_model.sh first")


class RealGguf(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_gguf()
        cls.reader = GGUFReader(GGUF_PATH)
        cls.tensors = {t.name: t for t in cls.reader.tensors}

    def test_reference_dequant_matches_gguf_package(self):
        for name, ref in (("blk.0.attn_q.weight", ref_q4_1), ("blk.29.ffn_down.weight", ref_q4_1),
                          ("token_embd.weight", ref_q8_0)):
            t = self.tensors[name]
            got = g2h.tensor_to_f32(t, GGUF_PATH)
            want = ref(t.data.tobytes(), t.n_elements).reshape(got.shape)
            np.testing.assert_array_equal(got, want, err_msg=name)

    def test_types_in_file(self):
        self.assertEqual(self.tensors["token_embd.weight"].tensor_type, GGMLQuantizationType.Q8_0)
        self.assertEqual(self.tensors["blk.0.attn_k.weight"].tensor_type, GGMLQuantizationType.Q4_1)
        self.assertNotIn("output.weight", self.tensors)


class Converted(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_gguf()
        cls.tmp = tempfile.TemporaryDirectory(prefix="gguf_to_hf_test.")
        cls.dir = cls.tmp.name
        g2h.convert(GGUF_PATH, cls.dir, "bf16")
        with open(os.path.join(cls.dir, "tokenizer_config.json"), encoding="utf-8") as f:
            cls.tcfg = json.load(f)
        cls.tokens = list(GGUFReader(GGUF_PATH).fields["tokenizer.ggml.tokens"].contents())

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def load(self, name):
        with open(os.path.join(self.dir, name), encoding="utf-8") as f:
            return json.load(f)

    def test_config_matches_published_smollm2(self):
        c = self.load("config.json")
        want = {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
                "head_dim": 64, "intermediate_size": 1536, "vocab_size": 49152, "rope_theta": 100000.0,
                "rms_norm_eps": 1e-5, "max_position_embeddings": 8192, "tie_word_embeddings": True,
                "bos_token_id": 1, "eos_token_id": 2, "model_type": "llama", "hidden_act": "silu",
                "architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"}
        self.assertEqual({k: c.get(k) for k in want}, want)
        self.assertEqual(self.load("generation_config.json"), {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2})

    def test_safetensors_layout(self):
        st = read_safetensors(os.path.join(self.dir, "model.safetensors"))
        self.assertEqual(len(st), 2 + 30 * 9)
        self.assertNotIn("lm_head.weight", st)
        self.assertEqual({v[0] for v in st.values()}, {"BF16"})
        self.assertEqual(st["model.embed_tokens.weight"][1], [49152, 576])
        self.assertEqual(st["model.layers.7.self_attn.k_proj.weight"][1], [192, 576])
        self.assertEqual(st["model.layers.7.mlp.down_proj.weight"][1], [576, 1536])

    def test_q_k_weights_unpermuted(self):
        st = read_safetensors(os.path.join(self.dir, "model.safetensors"))
        reader = GGUFReader(GGUF_PATH)
        src = {t.name: t for t in reader.tensors}
        for gname, hname, n_head in (("blk.3.attn_q.weight", "model.layers.3.self_attn.q_proj.weight", 9),
                                     ("blk.3.attn_k.weight", "model.layers.3.self_attn.k_proj.weight", 3)):
            t = src[gname]
            gguf_w = ref_q4_1(t.data.tobytes(), t.n_elements).reshape(-1, 576)
            dtype, shape, raw = st[hname]
            hf_w = bf16_to_f32(raw, shape)
            D = 64
            want = np.empty_like(gguf_w)
            for h in range(n_head):
                for i in range(D // 2):
                    for s in range(2):
                        want[h * D + s * D // 2 + i] = gguf_w[h * D + 2 * i + s]
            # bf16 keeps 8 significant bits: round-to-nearest error <= half an ulp <= 2^-8 relative.
            np.testing.assert_allclose(hf_w, want, rtol=2.0 ** -8, atol=0, err_msg=hname)

    def tokenizer(self):
        from tokenizers import Tokenizer
        return Tokenizer.from_file(os.path.join(self.dir, "tokenizer.json"))

    def ids_of(self, pieces):
        return [self.tokens.index(p) for p in pieces]

    def test_hello_world(self):
        tok = self.tokenizer()
        self.assertEqual(tok.encode("Hello world", add_special_tokens=False).ids, self.ids_of(["Hello", "Ġworld"]))
        # serving.md §2.1 third-party vector: digits split one per id, the space alone as 'Ġ'.
        self.assertEqual(tok.encode("Hello world! 123", add_special_tokens=False).ids,
                         [19556, 905, 17, 216, 33, 34, 35])
        self.assertEqual(tok.encode("Hello world", add_special_tokens=True).ids, self.ids_of(["Hello", "Ġworld"]))

    def test_chat_template_string(self):
        import jinja2
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        text = env.from_string(self.tcfg["chat_template"]).render(
            messages=[{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True)
        sys_prompt = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                      "<|im_end|>\n")
        self.assertEqual(text, sys_prompt + "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                         "<|im_start|>assistant\n")
        got = self.tokenizer().encode(text, add_special_tokens=False).ids
        self.assertEqual(got, self.ref_encoder().encode(text))
        # The user turn is whole words, so its ids are plain vocab look-ups.
        user = self.ids_of(["<|im_start|>", "user", "Ċ", "What", "Ġis", "Ġthe", "Ġcapital", "Ġof", "ĠFrance", "?",
                            "<|im_end|>", "Ċ", "<|im_start|>"])
        starts = [i for i in range(len(got)) if got[i:i + len(user)] == user]
        self.assertEqual(len(starts), 1, f"user turn ids {user} not found once in {got}")

    def ref_encoder(self):
        tj = self.load("tokenizer.json")
        return RefBpe(self.tokens, GGUFReader(GGUF_PATH).fields["tokenizer.ggml.merges"].contents(),
                      {a["content"]: a["id"] for a in tj["added_tokens"]})

    def test_special_tokens(self):
        tj = self.load("tokenizer.json")
        added = {a["id"]: a for a in tj["added_tokens"]}
        self.assertEqual(sorted(added), list(range(17)))
        self.assertTrue(all(a["special"] and not a["normalized"] for a in added.values()))
        self.assertEqual((self.tcfg["bos_token"], self.tcfg["eos_token"], self.tcfg["pad_token"],
                          self.tcfg["unk_token"]), ("<|im_start|>", "<|im_end|>", "<|im_end|>", "<|endoftext|>"))
        self.assertFalse(self.tcfg["add_bos_token"])
        tok = self.tokenizer()
        ids = tok.encode("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False).ids
        self.assertEqual(ids[0], 1)
        self.assertEqual(ids[-1], 2)
        self.assertEqual(tok.decode(ids, skip_special_tokens=True), "user\nhi")

    def test_round_trip_text(self):
        with open(os.path.join(ROOT, "tests", "data", "text", "devils_dictionary.txt"), encoding="utf-8") as f:
            text = f.read()
        tok = self.tokenizer()
        ids = tok.encode(text, add_special_tokens=False).ids
        self.assertGreater(len(ids), 500)
        self.assertEqual(ids, self.ref_encoder().encode(text))
        self.assertEqual(tok.decode(ids, skip_special_tokens=False), text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
