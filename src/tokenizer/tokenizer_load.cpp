// tokenizer.json / tokenizer_config.json parsing into tokenizer_impl. Every unsupported or
// malformed part fails here, once, with the file, the JSON field and what is supported; after
// load the pipeline never meets an unknown component.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace tetra {

using json = nlohmann::json;

namespace {

// GPT-2 pre-tokenization regex used by ByteLevel(use_regex=true).
const char* const gpt2_pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct loader {
    const std::string& path;
    tokenizer_impl& impl;

    [[noreturn]] void fail(const std::string& field, const std::string& msg) const {
        TETRA_FAIL("tokenizer: %s: field '%s': %s", path.c_str(), field.c_str(), msg.c_str());
    }

    const json& need(const json& obj, const char* key, const std::string& field) const {
        auto it = obj.find(key);
        if (it == obj.end()) fail(field + "." + key, "missing");
        return *it;
    }

    bool get_bool(const json& obj, const char* key, const std::string& field, bool def) const {
        auto it = obj.find(key);
        if (it == obj.end() || it->is_null()) return def;
        if (!it->is_boolean()) fail(field + "." + key, "expected a boolean, got " + it->dump());
        return it->get<bool>();
    }

    std::string type_of(const json& obj, const std::string& field) const {
        if (!obj.is_object()) fail(field, "expected an object, got " + obj.dump().substr(0, 80));
        const json& t = need(obj, "type", field);
        if (!t.is_string()) fail(field + ".type", "expected a string");
        return t.get<std::string>();
    }

    void model(const json& m);
    void merges(const json& arr);
    void added_tokens(const json& arr);
    void normalizer(const json& n, const std::string& field);
    void pre_tokenizer(const json& p, const std::string& field);
    void post_processor(const json& p, const std::string& field);
    void decoder(const json& d, const std::string& field);
    void build_id_table();
};

void loader::model(const json& m) {
    if (!m.is_object()) fail("model", "expected an object");
    auto t = m.find("type");
    std::string type = t != m.end() && t->is_string() ? t->get<std::string>() : "BPE";
    if (type != "BPE") fail("model.type", "'" + type + "' is not supported; supported: BPE");
    const json& vocab = need(m, "vocab", "model");
    if (!vocab.is_object()) fail("model.vocab", "expected an object token -> id");
    bpe_model& bpe = impl.model;
    int32_t max_id = -1;
    bpe.vocab.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
            it.value().get<int64_t>() > INT32_MAX)
            fail("model.vocab." + it.key(), "expected a non-negative integer id");
        int32_t id = it.value().get<int32_t>();
        bpe.vocab.emplace(it.key(), id);
        max_id = std::max(max_id, id);
    }
    bpe.id_to_token.assign(size_t(max_id + 1), std::string());
    for (auto& [tok, id] : bpe.vocab) bpe.id_to_token[size_t(id)] = tok;
    merges(need(m, "merges", "model"));

    bpe.ignore_merges = get_bool(m, "ignore_merges", "model", false);
    bpe.fuse_unk = get_bool(m, "fuse_unk", "model", false);
    if (get_bool(m, "byte_fallback", "model", false))
        fail("model.byte_fallback", "true is not supported; supported: false");
    auto dropout = m.find("dropout");
    if (dropout != m.end() && !dropout->is_null() && !(dropout->is_number() && *dropout == 0))
        fail("model.dropout", "BPE dropout is not supported; supported: null");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        auto it = m.find(key);
        if (it != m.end() && !it->is_null() && *it != "")
            fail(std::string("model.") + key, "non-empty values are not supported");
    }
    auto unk = m.find("unk_token");
    if (unk != m.end() && !unk->is_null()) {
        if (!unk->is_string()) fail("model.unk_token", "expected a string or null");
        auto it = bpe.vocab.find(unk->get<std::string>());
        if (it == bpe.vocab.end()) fail("model.unk_token", "'" + unk->get<std::string>() + "' is not in model.vocab");
        bpe.unk_id = it->second;
    }
}

void loader::merges(const json& arr) {
    if (!arr.is_array()) fail("model.merges", "expected an array");
    bpe_model& bpe = impl.model;
    bpe.merges.reserve(arr.size());
    std::string a, b, ab;  // reused buffers: this loop runs ~150k times for real vocabularies
    for (size_t r = 0; r < arr.size(); r++) {
        const json& e = arr[r];
        if (e.is_string()) {  // legacy "a b"
            const std::string& s = e.get_ref<const std::string&>();
            size_t sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                fail("model.merges[" + std::to_string(r) + "]",
                     "expected \"left right\" with one space, got \"" + s + "\"");
            a.assign(s, 0, sp);
            b.assign(s, sp + 1, std::string::npos);
        } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
            a = e[0].get_ref<const std::string&>();
            b = e[1].get_ref<const std::string&>();
        } else {
            fail("model.merges[" + std::to_string(r) + "]",
                 "expected \"left right\" or [left, right], got " + e.dump());
        }
        ab.assign(a).append(b);
        auto ia = bpe.vocab.find(a), ib = bpe.vocab.find(b), im = bpe.vocab.find(ab);
        if (ia == bpe.vocab.end() || ib == bpe.vocab.end() || im == bpe.vocab.end())
            fail("model.merges[" + std::to_string(r) + "]",
                 "merge (" + a + ", " + b + ") uses a token not in model.vocab");
        uint64_t key = (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second);
        bpe.merges.emplace(key, std::make_pair(int32_t(r), im->second));  // first rank wins
    }
}

void loader::added_tokens(const json& arr) {
    if (arr.is_null()) return;
    if (!arr.is_array()) fail("added_tokens", "expected an array");
    added_vocab& av = impl.added;
    for (size_t k = 0; k < arr.size(); k++) {
        const json& e = arr[k];
        std::string field = "added_tokens[" + std::to_string(k) + "]";
        if (!e.is_object()) fail(field, "expected an object");
        const json& id = need(e, "id", field);
        const json& content = need(e, "content", field);
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
            fail(field + ".id", "expected a non-negative integer");
        if (!content.is_string() || content.get<std::string>().empty())
            fail(field + ".content", "expected a non-empty string");
        added_token t;
        t.content = content.get<std::string>();
        t.id = id.get<int32_t>();
        t.special = get_bool(e, "special", field, false);
        t.lstrip = get_bool(e, "lstrip", field, false);
        t.rstrip = get_bool(e, "rstrip", field, false);
        t.single_word = get_bool(e, "single_word", field, false);
        t.normalized = get_bool(e, "normalized", field, !t.special);
        av.by_content[t.content] = t.id;
        av.content_by_id[t.id] = t.content;
        av.tokens.push_back(std::move(t));
    }
}

void loader::normalizer(const json& n, const std::string& field) {
    if (n.is_null()) return;
    std::string type = type_of(n, field);
    if (type == "NFC") {
        impl.nfc = true;
    } else if (type == "Sequence") {
        const json& list = need(n, "normalizers", field);
        if (!list.is_array()) fail(field + ".normalizers", "expected an array");
        for (size_t k = 0; k < list.size(); k++)
            normalizer(list[k], field + ".normalizers[" + std::to_string(k) + "]");
    } else {
        fail(field + ".type", "'" + type + "' is not supported; supported: NFC, Sequence (or null)");
    }
}

split_behavior parse_behavior(const loader& L, const json& b, const std::string& field) {
    static const std::pair<const char*, split_behavior> names[] = {
        {"Removed", split_behavior::REMOVED},
        {"Isolated", split_behavior::ISOLATED},
        {"MergedWithPrevious", split_behavior::MERGED_WITH_PREVIOUS},
        {"MergedWithNext", split_behavior::MERGED_WITH_NEXT},
        {"Contiguous", split_behavior::CONTIGUOUS}};
    if (b.is_string())
        for (auto& [name, v] : names)
            if (b == name) return v;
    L.fail(field, b.dump() + " is not supported; supported: Removed, Isolated, "
                  "MergedWithPrevious, MergedWithNext, Contiguous");
}

void loader::pre_tokenizer(const json& p, const std::string& field) {
    if (p.is_null()) return;
    std::string type = type_of(p, field);
    pre_tokenizer_step st;
    if (type == "Sequence") {
        const json& list = need(p, "pretokenizers", field);
        if (!list.is_array()) fail(field + ".pretokenizers", "expected an array");
        for (size_t k = 0; k < list.size(); k++)
            pre_tokenizer(list[k], field + ".pretokenizers[" + std::to_string(k) + "]");
        return;
    } else if (type == "Split") {
        const json& pat = need(p, "pattern", field);
        bool literal = pat.is_object() && pat.contains("String") && pat["String"].is_string();
        bool is_regex = pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string();
        if (!literal && !is_regex)
            fail(field + ".pattern", "expected {\"Regex\": str} or {\"String\": str}");
        std::string s = pat[literal ? "String" : "Regex"].get<std::string>();
        st.re = std::make_shared<regex>(s, literal, path + ": field '" + field + ".pattern'");
        st.behavior = parse_behavior(*this, need(p, "behavior", field), field + ".behavior");
        st.invert = get_bool(p, "invert", field, false);
    } else if (type == "ByteLevel") {
        st.type = pre_tokenizer_step::kind::BYTE_LEVEL;
        st.add_prefix_space = get_bool(p, "add_prefix_space", field, true);
        if (get_bool(p, "use_regex", field, true))
            st.re = std::make_shared<regex>(gpt2_pattern, false, "ByteLevel GPT-2 regex");
    } else if (type == "Digits") {
        st.type = pre_tokenizer_step::kind::DIGITS;
        st.re = std::make_shared<regex>("\\p{N}", false, "Digits");
        st.behavior = get_bool(p, "individual_digits", field, false) ? split_behavior::ISOLATED
                                                                      : split_behavior::CONTIGUOUS;
    } else {
        fail(field + ".type",
             "'" + type + "' is not supported; supported: Sequence, Split, ByteLevel, Digits (or null)");
    }
    impl.pre_steps.push_back(std::move(st));
}

void loader::post_processor(const json& p, const std::string& field) {
    if (p.is_null()) return;
    std::string type = type_of(p, field);
    if (type == "ByteLevel") return;  // only trims offsets; ids unchanged
    if (type == "Sequence") {
        const json& list = need(p, "processors", field);
        if (!list.is_array()) fail(field + ".processors", "expected an array");
        for (size_t k = 0; k < list.size(); k++)
            post_processor(list[k], field + ".processors[" + std::to_string(k) + "]");
        return;
    }
    if (type != "TemplateProcessing")
        fail(field + ".type", "'" + type + "' is not supported; supported: TemplateProcessing, "
                              "ByteLevel, Sequence (or null)");
    if (impl.has_template) fail(field, "more than one TemplateProcessing is not supported");
    impl.has_template = true;
    const json& single = need(p, "single", field);
    const json& specials = need(p, "special_tokens", field);
    if (!single.is_array()) fail(field + ".single", "expected an array");
    for (size_t k = 0; k < single.size(); k++) {
        std::string f = field + ".single[" + std::to_string(k) + "]";
        const json& e = single[k];
        if (e.is_object() && e.contains("Sequence")) {
            impl.template_single.push_back({true, {}});  // $A (single input: $B never occurs)
        } else if (e.is_object() && e.contains("SpecialToken") && e["SpecialToken"].contains("id")) {
            std::string name = e["SpecialToken"]["id"].get<std::string>();
            auto it = specials.find(name);
            if (it == specials.end() || !it->contains("ids") || !(*it)["ids"].is_array())
                fail(f, "special token '" + name + "' has no ids in " + field + ".special_tokens");
            template_piece tp{false, {}};
            for (const json& id : (*it)["ids"]) tp.ids.push_back(id.get<int32_t>());
            impl.template_single.push_back(std::move(tp));
        } else {
            fail(f, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
        }
    }
}

void loader::decoder(const json& d, const std::string& field) {
    if (d.is_null()) fail(field, "null is not supported; supported: ByteLevel, Sequence of ByteLevel");
    std::string type = type_of(d, field);
    if (type == "ByteLevel") return;
    if (type == "Sequence") {
        const json& list = need(d, "decoders", field);
        if (!list.is_array() || list.empty()) fail(field + ".decoders", "expected a non-empty array");
        for (size_t k = 0; k < list.size(); k++)
            decoder(list[k], field + ".decoders[" + std::to_string(k) + "]");
        return;
    }
    fail(field + ".type", "'" + type + "' is not supported; supported: ByteLevel, Sequence");
}

// Byte-level decoding of a model token: bytes of its characters in the byte-level alphabet; a
// token with any character outside the alphabet is kept as its UTF-8 text (HF ByteLevel).
std::string byte_level_decode_token(const std::string& tok) {
    std::string out;
    for (size_t i = 0; i < tok.size();) {
        int b = byte_level_byte(utf8_next(tok, i));
        if (b < 0) return tok;
        out += char(b);
    }
    return out;
}

void loader::build_id_table() {
    int32_t n = int32_t(impl.model.id_to_token.size());
    for (const added_token& t : impl.added.tokens) n = std::max(n, t.id + 1);
    impl.ids.assign(size_t(n), id_info{});
    for (size_t id = 0; id < impl.model.id_to_token.size(); id++) {
        const std::string& tok = impl.model.id_to_token[id];
        if (tok.empty()) continue;
        impl.ids[id].known = true;
        impl.ids[id].bytes = byte_level_decode_token(tok);
    }
    for (size_t k = 0; k < impl.added.tokens.size(); k++) {
        const added_token& t = impl.added.tokens[k];
        id_info& info = impl.ids[size_t(t.id)];
        info.known = true;
        info.special = info.special || t.special;
        info.bytes = byte_level_decode_token(t.content);  // the added content wins, as in HF
        std::string pattern = t.content;
        if (t.normalized && impl.nfc) pattern = nfc(pattern);
        (t.normalized ? impl.added.norm_trie : impl.added.raw_trie).insert(pattern, int32_t(k));
    }
    for (const template_piece& tp : impl.template_single)
        if (!tp.is_sequence && !tp.ids.empty()) { impl.bos_id = tp.ids[0]; break; }
}

json read_json(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    TETRA_CHECK(f.good(), "tokenizer: cannot open '%s'", path.c_str());
    std::stringstream ss;
    ss << f.rdbuf();
    try {
        return json::parse(ss.str());
    } catch (const json::exception& e) {
        TETRA_FAIL("tokenizer: %s: invalid JSON: %s", path.c_str(), e.what());
    }
}

}  // namespace

void load_tokenizer_json(tokenizer_impl& impl, const std::string& path) {
    impl.path = path;
    json root = read_json(path);
    loader L{path, impl};
    if (!root.is_object()) L.fail("(root)", "expected an object");
    try {
        L.model(L.need(root, "model", "(root)"));
        L.added_tokens(root.value("added_tokens", json()));
        L.normalizer(root.value("normalizer", json()), "normalizer");
        L.pre_tokenizer(root.value("pre_tokenizer", json()), "pre_tokenizer");
        L.post_processor(root.value("post_processor", json()), "post_processor");
        L.decoder(root.value("decoder", json()), "decoder");
    } catch (const json::exception& e) {  // a value of the wrong JSON type deep inside
        TETRA_FAIL("tokenizer: %s: unexpected JSON value: %s", path.c_str(), e.what());
    }
    L.build_id_table();
}

void load_tokenizer_config(tokenizer_impl& impl, const std::string& path) {
    json root = read_json(path);
    loader L{path, impl};
    if (!root.is_object()) L.fail("(root)", "expected an object");
    auto token_id = [&](const char* key, int32_t* out) {
        auto it = root.find(key);
        if (it == root.end() || it->is_null()) return;
        const json& v = it->is_object() ? L.need(*it, "content", key) : *it;
        if (!v.is_string()) L.fail(key, "expected a string, an object with 'content', or null");
        auto found = impl.added.by_content.find(v.get<std::string>());
        if (found != impl.added.by_content.end()) { *out = found->second; return; }
        auto m = impl.model.vocab.find(v.get<std::string>());
        if (m == impl.model.vocab.end())
            L.fail(key, "token '" + v.get<std::string>() + "' is not in " + impl.path);
        *out = m->second;
    };
    token_id("bos_token", &impl.bos_id);
    token_id("eos_token", &impl.eos_id);
    impl.add_bos = L.get_bool(root, "add_bos_token", "(root)", false);
    impl.add_eos = L.get_bool(root, "add_eos_token", "(root)", false);
    TETRA_CHECK(!impl.add_bos || impl.bos_id >= 0,
                "tokenizer: %s: field 'add_bos_token' is true but there is no bos_token", path.c_str());
    TETRA_CHECK(!impl.add_eos || impl.eos_id >= 0,
                "tokenizer: %s: field 'add_eos_token' is true but there is no eos_token", path.c_str());
}

}  // namespace tetra
