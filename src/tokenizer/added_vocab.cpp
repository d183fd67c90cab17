// Added tokens (HF AddedVocabulary): leftmost-longest, non-overlapping matches of the token
// contents (a byte trie stands in for aho-corasick), then per match: single_word requires no word
// character on either side, lstrip/rstrip swallow adjacent White_Space. Text between matches is
// returned as plain segments for normalization and pre-tokenization.
#include <algorithm>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace tetra {

void token_trie::insert(std::string_view s, int32_t token_index) {
    int32_t cur = 0;
    for (unsigned char c : s) {
        int32_t nxt = -1;
        for (auto& [b, child] : nodes[cur].next)
            if (b == c) { nxt = child; break; }
        if (nxt < 0) {
            nxt = int32_t(nodes.size());
            nodes[cur].next.emplace_back(c, nxt);
            nodes.emplace_back();
        }
        cur = nxt;
    }
    nodes[cur].token = token_index;
}

std::pair<int32_t, size_t> token_trie::longest_at(std::string_view s, size_t pos) const {
    std::pair<int32_t, size_t> best{-1, 0};
    int32_t cur = 0;
    for (size_t i = pos; i < s.size(); i++) {
        int32_t nxt = -1;
        for (auto& [b, child] : nodes[cur].next)
            if (b == static_cast<unsigned char>(s[i])) { nxt = child; break; }
        if (nxt < 0) break;
        cur = nxt;
        if (nodes[cur].token >= 0) best = {nodes[cur].token, i + 1 - pos};
    }
    return best;
}

namespace {

const regex& word_char_re() {
    static const regex re("\\w", false, "added token single_word");
    return re;
}

bool is_word_char_at(std::string_view s, size_t i) {  // the character starting at byte i
    size_t n = utf8_len(static_cast<unsigned char>(s[i]));
    std::vector<std::pair<size_t, size_t>> m;
    word_char_re().find_all(s.substr(i, n), m);
    return !m.empty();
}

bool ends_with_word(std::string_view s) {
    if (s.empty()) return false;
    size_t i = s.size() - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) i--;
    return is_word_char_at(s, i);
}

bool starts_with_word(std::string_view s) { return !s.empty() && is_word_char_at(s, 0); }

// Start of the run of White_Space at the end of s (s.size() when none).
size_t space_run_start_at_end(std::string_view s) {
    size_t start = s.size();
    while (start > 0) {
        size_t i = start - 1;
        while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) i--;
        size_t j = i;
        if (!is_white_space(utf8_next(s, j))) break;
        start = i;
    }
    return start;
}

// Length of the run of White_Space at the start of s.
size_t space_run_len_at_start(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        size_t j = i;
        if (!is_white_space(utf8_next(s, j))) break;
        i = j;
    }
    return i;
}

}  // namespace

void added_vocab::split(std::string_view s, const token_trie& trie,
                        std::vector<text_segment>& out) const {
    if (s.empty()) return;
    struct match { size_t start, stop; int32_t tok; };
    std::vector<match> found;
    for (size_t i = 0; i < s.size();) {
        auto [tok, len] = trie.longest_at(s, i);
        if (tok >= 0) {
            found.push_back({i, i + len, tok});
            i += len;
        } else {
            i++;
        }
    }
    size_t start_offset = 0;
    for (const match& m : found) {
        const added_token& t = tokens[m.tok];
        size_t start = m.start, stop = m.stop;
        if (t.single_word) {
            bool start_space = start == 0 || !ends_with_word(s.substr(0, start));
            bool stop_space = stop == s.size() || !starts_with_word(s.substr(stop));
            if (!start_space || !stop_space) continue;
        }
        if (t.lstrip) start = std::max(space_run_start_at_end(s.substr(0, start)), start_offset);
        if (t.rstrip) stop += space_run_len_at_start(s.substr(stop));
        if (start_offset < start) out.push_back({-1, s.substr(start_offset, start - start_offset)});
        out.push_back({t.id, s.substr(start, stop - start)});
        start_offset = stop;
    }
    if (start_offset < s.size()) out.push_back({-1, s.substr(start_offset)});
}

}  // namespace tetra
