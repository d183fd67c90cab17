// Tokenizer tests against goldens from HF `tokenizers` (tools/gen_tokenizer_goldens.py): encode
// with and without special tokens, decode with and without skipping specials, streaming decode
// (equal to the golden full decode, never invalid UTF-8 mid-stream), NFC against Python
// unicodedata, and load errors for malformed tokenizer.json files.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using nlohmann::json;
using tetra::tokenizer;

namespace {

const std::string data_dir = std::string(TETRA_SOURCE_DIR) + "/tests/data/tokenizer/";

json read_json(const std::string& path) {
    std::ifstream f(path);
    EXPECT_TRUE(f.good()) << path;
    return json::parse(f);
}

// Loaded once per directory: the real vocabularies take a moment to parse.
struct loaded { std::shared_ptr<const tokenizer> tok; json golden; };
const loaded& get(const std::string& name) {
    static std::mutex mu;
    static std::map<std::string, loaded> cache;
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(name);
    if (it == cache.end())
        it = cache.emplace(name, loaded{tokenizer::load_dir(data_dir + name),
                                        read_json(data_dir + name + "/goldens.json")}).first;
    return it->second;
}

std::vector<int32_t> ids_of(const json& a) { return a.get<std::vector<int32_t>>(); }

std::string escaped(const std::string& s) { return json(s).dump(); }

// Independent strict UTF-8 check (not the library's), for streamed chunks.
bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        unsigned char c = s[i];
        int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        uint32_t cp = n == 1 ? c : c & (0x7F >> n);
        for (int k = 1; k < n; k++) {
            unsigned char d = s[i + k];
            if ((d & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += n;
    }
    return true;
}

class golden_test : public ::testing::TestWithParam<std::string> {};

TEST_P(golden_test, encode_matches_hf) {
    const loaded& L = get(GetParam());
    int n = 0;
    for (const json& c : L.golden["cases"]) {
        std::string text = c["text"];
        EXPECT_EQ(L.tok->encode(text, true), ids_of(c["ids"])) << "text " << escaped(text);
        EXPECT_EQ(L.tok->encode(text, false), ids_of(c["ids_plain"])) << "text " << escaped(text);
        n++;
    }
    EXPECT_GE(n, 40);
}

TEST_P(golden_test, decode_matches_hf) {
    const loaded& L = get(GetParam());
    for (const char* key : {"cases", "decode_cases"}) {
        for (const json& c : L.golden[key]) {
            auto ids = ids_of(c["ids"]);
            EXPECT_EQ(L.tok->decode(ids, false), c["decoded"].get<std::string>()) << c["ids"].dump();
            EXPECT_EQ(L.tok->decode(ids, true), c["decoded_skip"].get<std::string>())
                << c["ids"].dump();
        }
    }
}

TEST_P(golden_test, streaming_decode_equals_full_decode) {
    const loaded& L = get(GetParam());
    for (const char* key : {"cases", "decode_cases"}) {
        for (const json& c : L.golden[key]) {
            for (bool skip : {false, true}) {
                tetra::detokenizer d = L.tok->make_detokenizer(skip);
                std::string all;
                for (int32_t id : ids_of(c["ids"])) {
                    std::string piece = d.push(id);
                    EXPECT_TRUE(valid_utf8(piece)) << "chunk " << escaped(piece) << " of " << c["ids"].dump();
                    EXPECT_LE(d.n_pending(), 3u);
                    all += piece;
                }
                std::string tail = d.finish();
                EXPECT_TRUE(valid_utf8(tail));
                all += tail;
                EXPECT_EQ(all, c[skip ? "decoded_skip" : "decoded"].get<std::string>())
                    << "skip " << skip << " ids " << c["ids"].dump();
            }
        }
    }
}

TEST_P(golden_test, vocab_lookups_match_hf) {
    const loaded& L = get(GetParam());
    EXPECT_EQ(L.tok->n_vocab(), L.golden["vocab_size"].get<int32_t>());
    for (const json& t : L.golden["tokens"]) {
        std::string tok = t["token"];
        int32_t id = t["id"];
        EXPECT_EQ(L.tok->token_to_id(tok), id) << escaped(tok);
        EXPECT_EQ(L.tok->id_to_token(id), tok) << id;
    }
    EXPECT_EQ(L.tok->token_to_id("\xF0\x9F\x98\x80 surely not a token"), -1);
    EXPECT_EQ(L.tok->id_to_token(-1), "");
    EXPECT_EQ(L.tok->id_to_token(L.tok->n_vocab()), "");
}

// A 4 KB text, cold cache: encoding must stay far below 50 ms.
// A 4 KB text encoded by a freshly loaded tokenizer (cold caches) equals the golden ids. Its time
// is printed for information only: speed is a benchmark's job, never a unit test's assertion.
TEST_P(golden_test, encode_4kb_cold) {
    auto tok = tokenizer::load_dir(data_dir + GetParam());
    const json& c = get(GetParam()).golden["cases"].back();
    std::string text = c["text"];
    ASSERT_GE(text.size(), 4096u);
    auto t0 = std::chrono::steady_clock::now();
    auto ids = tok->encode(text, false);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(ids, ids_of(c["ids_plain"]));
    std::printf("cold encode of %zu bytes: %.2f ms\n", text.size(), ms);
}

TEST_P(golden_test, concurrent_encode_is_consistent) {
    const loaded& L = get(GetParam());
    std::vector<std::thread> threads;
    std::vector<int> failures(4, 0);
    for (int t = 0; t < 4; t++)
        threads.emplace_back([&, t] {
            for (const json& c : L.golden["cases"])
                if (L.tok->encode(c["text"].get<std::string>(), false) != ids_of(c["ids_plain"]))
                    failures[t]++;
        });
    for (auto& th : threads) th.join();
    for (int f : failures) EXPECT_EQ(f, 0);
}

std::vector<std::string> shipped_tokenizers() {
    return {"llama3-trained", "qwen2-trained", "misc-trained", "qwen3", "smollm2"};
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
    std::string s = info.param;
    for (char& c : s)
        if (c == '-') c = '_';
    return s;
}

INSTANTIATE_TEST_SUITE_P(tokenizers, golden_test, ::testing::ValuesIn(shipped_tokenizers()), param_name);

TEST(tokenizer, nfc_matches_python_unicodedata) {
    json g = read_json(data_dir + "nfc.json");
    int n = 0;
    for (const json& c : g["cases"]) {
        std::string text = c["text"];
        EXPECT_EQ(tetra::nfc(text), c["nfc"].get<std::string>()) << escaped(text);
        n++;
    }
    EXPECT_GT(n, 300);
}

TEST(tokenizer, special_tokens_and_config) {
    const loaded& llama = get("llama3-trained");
    EXPECT_EQ(llama.tok->bos_id(), llama.tok->token_to_id("<|begin_of_text|>"));
    EXPECT_EQ(llama.tok->eos_id(), llama.tok->token_to_id("<|eot_id|>"));
    EXPECT_TRUE(llama.tok->is_special(llama.tok->bos_id()));
    EXPECT_FALSE(llama.tok->is_special(llama.tok->token_to_id("[RSTRIP]")));
    EXPECT_EQ(llama.tok->encode("", true), std::vector<int32_t>{llama.tok->bos_id()});

    const loaded& qwen = get("qwen3");
    EXPECT_EQ(qwen.tok->bos_id(), -1);  // bos_token: null, no template
    EXPECT_EQ(qwen.tok->eos_id(), 151645);
    EXPECT_EQ(qwen.tok->token_to_id("<|im_start|>"), 151644);
    EXPECT_TRUE(qwen.tok->encode("", true).empty());
}

// tokenizer_config add_bos_token/add_eos_token (LlamaTokenizerFast-style) when the
// post-processor adds nothing: BOS prepended, EOS appended, plain encode unchanged.
TEST(tokenizer, config_add_bos_and_eos) {
    std::string dir = std::string(TETRA_BINARY_DIR) + "/test_tokenizer_tmp";
    std::string cfg = dir + "_cfg.json";
    std::ofstream(cfg) << R"({"bos_token": {"content": "<|im_start|>"}, "eos_token": "<|im_end|>",
                             "add_bos_token": true, "add_eos_token": true})";
    auto tok = tokenizer::load(data_dir + "qwen2-trained/tokenizer.json", cfg);
    const json& c = get("qwen2-trained").golden["cases"][3];
    auto plain = ids_of(c["ids_plain"]);
    std::vector<int32_t> want = {tok->token_to_id("<|im_start|>")};
    want.insert(want.end(), plain.begin(), plain.end());
    want.push_back(tok->token_to_id("<|im_end|>"));
    EXPECT_EQ(tok->encode(c["text"].get<std::string>(), true), want);
    EXPECT_EQ(tok->encode(c["text"].get<std::string>(), false), plain);
    std::remove(cfg.c_str());
}

TEST(tokenizer, streaming_holds_back_partial_characters) {
    const loaded& L = get("qwen2-trained");
    // U+1F980 (4 bytes) is not in the training corpus, so the small vocab splits it.
    const std::string crab = "\xF0\x9F\xA6\x80";
    auto ids = L.tok->encode(crab, false);
    ASSERT_GE(ids.size(), 2u);
    tetra::detokenizer d = L.tok->make_detokenizer(false);
    for (size_t k = 0; k + 1 < ids.size(); k++) {
        EXPECT_EQ(d.push(ids[k]), "");
        EXPECT_GT(d.n_pending(), 0u);
    }
    EXPECT_EQ(d.push(ids.back()), crab);
    EXPECT_EQ(d.n_pending(), 0u);
    // A truncated character at end of stream becomes one U+FFFD only at finish().
    EXPECT_EQ(d.push(ids[0]), "");
    EXPECT_EQ(d.finish(), "\xEF\xBF\xBD");
    EXPECT_EQ(d.finish(), "");
}

// SmolLM2 was trained with a restricted initial alphabet: byte symbols absent from its vocab are
// silently dropped (unk_token is null), as HF does. Third-party vectors from serving.md §2.
TEST(tokenizer, smollm2_known_vectors_and_dropped_bytes) {
    const loaded& L = get("smollm2");
    EXPECT_EQ(L.tok->encode("Hello world! 123", false), (std::vector<int32_t>{19556, 905, 17, 216, 33, 34, 35}));
    EXPECT_EQ(L.tok->encode("  multiple   spaces", false), (std::vector<int32_t>{216, 2701, 256, 5600}));
    EXPECT_EQ(L.tok->token_to_id("\x04"), -1);
    EXPECT_EQ(L.tok->decode(L.tok->encode("a\x04\x06" "b", false), false), "ab");
    EXPECT_EQ(L.tok->bos_id(), 1);  // tokenizer_config: bos <|im_start|>, eos <|im_end|>
    EXPECT_EQ(L.tok->eos_id(), 2);
    EXPECT_EQ(L.tok->encode("hi", true), L.tok->encode("hi", false));  // no BOS added
}

TEST(tokenizer, invalid_utf8_text_is_an_error) {
    const loaded& L = get("qwen2-trained");
    try {
        L.tok->encode("ok\xC3(", false);
        FAIL() << "expected tetra::error";
    } catch (const tetra::error& e) {
        EXPECT_NE(std::string(e.what()).find("not valid UTF-8 at byte 2"), std::string::npos) << e.what();
    }
}

// ---- malformed tokenizer.json -----------------------------------------------------------------

std::string expect_load_error(const std::string& name, const std::string& content) {
    std::string path = std::string(TETRA_BINARY_DIR) + "/test_tokenizer_" + name + ".json";
    std::ofstream(path) << content;
    std::string msg;
    try {
        tokenizer::load(path);
        ADD_FAILURE() << name << ": load succeeded";
    } catch (const tetra::error& e) {
        msg = e.what();
        EXPECT_NE(msg.find(path), std::string::npos) << "message does not name the file: " << msg;
    }
    std::remove(path.c_str());
    return msg;
}

const char* const ok_model = R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";
const char* const ok_decoder = R"("decoder": {"type": "ByteLevel"})";

std::string with(const std::string& extra) {
    return std::string("{") + ok_model + ", " + ok_decoder + (extra.empty() ? "" : ", " + extra) + "}";
}

TEST(tokenizer_errors, minimal_file_loads) {
    std::string path = std::string(TETRA_BINARY_DIR) + "/test_tokenizer_minimal.json";
    std::ofstream(path) << with(R"("pre_tokenizer": null, "normalizer": null)");
    auto tok = tokenizer::load(path);
    EXPECT_EQ(tok->encode("abba", false), (std::vector<int32_t>{2, 1, 0}));
    std::remove(path.c_str());
}

TEST(tokenizer_errors, names_file_field_and_supported) {
    struct bad { const char* name; std::string json; std::vector<std::string> want; };
    std::vector<bad> cases = {
        {"no_model", std::string("{") + ok_decoder + "}", {"'(root).model'", "missing"}},
        {"wordpiece", R"({"model": {"type": "WordPiece", "vocab": {}}, )" + std::string(ok_decoder) + "}",
         {"'model.type'", "WordPiece", "supported: BPE"}},
        {"unigram", R"({"model": {"type": "Unigram", "vocab": []}})", {"'model.type'", "Unigram", "supported: BPE"}},
        {"pretok", with(R"("pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Whitespace"}]})"),
         {"'pre_tokenizer.pretokenizers[1].type'", "Whitespace", "supported: Sequence, Split, ByteLevel, Digits"}},
        {"normalizer", with(R"("normalizer": {"type": "NFKC"})"), {"'normalizer.type'", "NFKC", "supported: NFC"}},
        {"behavior", with(R"("pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways"})"),
         {"'pre_tokenizer.behavior'", "Sideways", "Isolated"}},
        {"regex", with(R"("pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"})"),
         {"pre_tokenizer.pattern", "does not compile"}},
        {"merges", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a c"]}, )" + std::string(ok_decoder) + "}",
         {"'model.merges[0]'", "not in model.vocab"}},
        {"merge_fmt", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [7]}, )" + std::string(ok_decoder) + "}",
         {"'model.merges[0]'", "[left, right]"}},
        {"byte_fallback", R"({"model": {"type": "BPE", "vocab": {}, "merges": [], "byte_fallback": true}, )" + std::string(ok_decoder) + "}",
         {"'model.byte_fallback'", "not supported"}},
        {"decoder", std::string("{") + ok_model + R"(, "decoder": {"type": "Metaspace"}})",
         {"'decoder.type'", "Metaspace", "supported: ByteLevel"}},
        {"postproc", with(R"("post_processor": {"type": "BertProcessing"})"),
         {"'post_processor.type'", "BertProcessing", "TemplateProcessing"}},
        {"added", with(R"("added_tokens": [{"content": "x"}])"), {"'added_tokens[0].id'", "missing"}},
        {"syntax", "{\"model\": ", {"invalid JSON"}},
    };
    for (const bad& b : cases) {
        std::string msg = expect_load_error(b.name, b.json);
        for (const std::string& w : b.want)
            EXPECT_NE(msg.find(w), std::string::npos) << b.name << ": '" << w << "' not in: " << msg;
    }
}

TEST(tokenizer_errors, missing_file) {
    try {
        tokenizer::load("/nonexistent/tokenizer.json");
        FAIL() << "expected tetra::error";
    } catch (const tetra::error& e) {
        EXPECT_NE(std::string(e.what()).find("cannot open '/nonexistent/tokenizer.json'"), std::string::npos);
    }
}

}  // namespace
