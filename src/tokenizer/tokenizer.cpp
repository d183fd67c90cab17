// Tokenizer pipeline (HF TokenizerImpl::encode / decode): added tokens on the raw text, normalize,
// added tokens on the normalized text, pre-tokenize, BPE per pre-token, post-process. Decoding
// maps every kept token through the ByteLevel decoder (alphabet chars -> bytes; a token with any
// other char stays as its UTF-8 text), concatenates, and decodes the bytes lossily (U+FFFD).
#include "tokenizer/tokenizer.h"

#include <sys/stat.h>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace tetra {

void tokenizer_impl::encode_text(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<text_segment> raw_segs, norm_segs;
    std::vector<std::string> pieces;
    added.split(text, added.raw_trie, raw_segs);
    for (const text_segment& seg : raw_segs) {
        if (seg.id >= 0) { out.push_back(seg.id); continue; }
        std::string normalized = nfc ? tetra::nfc(seg.text) : std::string(seg.text);
        norm_segs.clear();
        added.split(normalized, added.norm_trie, norm_segs);
        for (const text_segment& ns : norm_segs) {
            if (ns.id >= 0) { out.push_back(ns.id); continue; }
            pre_tokenize(pre_steps, ns.text, pieces);
            for (const std::string& p : pieces) model.tokenize(p, out);
        }
    }
}

tokenizer::tokenizer(std::unique_ptr<tokenizer_impl> impl) : impl_(std::move(impl)) {}
tokenizer::~tokenizer() = default;

std::shared_ptr<const tokenizer> tokenizer::load(const std::string& tokenizer_json_path,
                                                 const std::string& config_path) {
    auto impl = std::make_unique<tokenizer_impl>();
    load_tokenizer_json(*impl, tokenizer_json_path);
    if (!config_path.empty()) load_tokenizer_config(*impl, config_path);
    return std::shared_ptr<const tokenizer>(new tokenizer(std::move(impl)));
}

std::shared_ptr<const tokenizer> tokenizer::load_dir(const std::string& dir) {
    std::string config = dir + "/tokenizer_config.json";
    struct stat st;
    bool has_config = ::stat(config.c_str(), &st) == 0;
    return load(dir + "/tokenizer.json", has_config ? config : "");
}

std::vector<int32_t> tokenizer::encode(std::string_view text, bool add_special_tokens) const {
    size_t bad = utf8_invalid_at(text);
    TETRA_CHECK(bad == std::string_view::npos,
                "tokenizer: encode: text is not valid UTF-8 at byte %zu (of %zu)", bad, text.size());
    const tokenizer_impl& m = *impl_;
    std::vector<int32_t> body;
    body.reserve(text.size() / 3 + 4);
    m.encode_text(text, body);
    if (!add_special_tokens) return body;

    std::vector<int32_t> ids;
    if (m.has_template) {
        for (const template_piece& tp : m.template_single) {
            if (tp.is_sequence) ids.insert(ids.end(), body.begin(), body.end());
            else ids.insert(ids.end(), tp.ids.begin(), tp.ids.end());
        }
    } else {
        ids = std::move(body);
    }
    auto template_has = [&](int32_t id) {
        for (const template_piece& tp : m.template_single)
            for (int32_t t : tp.ids)
                if (t == id) return true;
        return false;
    };
    if (m.add_bos && !template_has(m.bos_id)) ids.insert(ids.begin(), m.bos_id);
    if (m.add_eos && !template_has(m.eos_id)) ids.push_back(m.eos_id);
    return ids;
}

std::string tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
    std::string bytes, out;
    for (int32_t id : ids) {
        if (id < 0 || size_t(id) >= impl_->ids.size()) continue;
        const id_info& info = impl_->ids[size_t(id)];
        if (!info.known || (skip_special_tokens && info.special)) continue;
        bytes += info.bytes;
    }
    utf8_lossy_append(out, bytes, true);
    return out;
}

int32_t tokenizer::token_to_id(std::string_view token) const {
    std::string key(token);
    auto a = impl_->added.by_content.find(key);
    if (a != impl_->added.by_content.end()) return a->second;
    auto m = impl_->model.vocab.find(key);
    return m != impl_->model.vocab.end() ? m->second : -1;
}

std::string tokenizer::id_to_token(int32_t id) const {
    if (id < 0 || size_t(id) >= impl_->ids.size()) return "";
    auto a = impl_->added.content_by_id.find(id);
    if (a != impl_->added.content_by_id.end()) return a->second;
    return size_t(id) < impl_->model.id_to_token.size() ? impl_->model.id_to_token[size_t(id)] : "";
}

bool tokenizer::is_special(int32_t id) const {
    return id >= 0 && size_t(id) < impl_->ids.size() && impl_->ids[size_t(id)].special;
}

int32_t tokenizer::n_vocab() const { return int32_t(impl_->ids.size()); }
int32_t tokenizer::bos_id() const { return impl_->bos_id; }
int32_t tokenizer::eos_id() const { return impl_->eos_id; }

detokenizer tokenizer::make_detokenizer(bool skip_special_tokens) const {
    return detokenizer(*this, skip_special_tokens);
}

detokenizer::detokenizer(const tokenizer& tok, bool skip_special_tokens)
    : tok_(&tok), skip_special_(skip_special_tokens) {}

std::string detokenizer::push(int32_t id) {
    const tokenizer_impl& m = *tok_->impl_;
    std::string out;
    if (id < 0 || size_t(id) >= m.ids.size()) return out;
    const id_info& info = m.ids[size_t(id)];
    if (!info.known || (skip_special_ && info.special)) return out;
    pending_ += info.bytes;
    size_t used = utf8_lossy_append(out, pending_, false);
    pending_.erase(0, used);
    return out;
}

std::string detokenizer::finish() {
    std::string out;
    utf8_lossy_append(out, pending_, true);
    pending_.clear();
    return out;
}

}  // namespace tetra
