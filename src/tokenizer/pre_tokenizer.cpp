// Pre-tokenizers: PCRE2 regex splitting with HF SplitDelimiterBehavior semantics, ByteLevel
// (optional prefix space, GPT-2 regex, byte -> alphabet mapping) and Digits. Patterns run with
// PCRE2_UTF | PCRE2_UCP (Unicode \s \d \w and \p{..}); input is validated UTF-8, so matching
// skips PCRE2's own UTF check.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace tetra {

namespace {

// HF runs its patterns with Oniguruma, whose Unicode \s is [\t-\r\x85\p{Z}]; PCRE2's UCP \s
// also matches U+180E (in \h for historical reasons). Spell \s and \S out so both agree.
// \S inside a character class has no such spelling and is left to PCRE2.
std::string oniguruma_spaces(const std::string& p) {
    static const char* const space = "\\x{9}-\\x{D}\\x{85}\\p{Z}";
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < p.size(); i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            char e = p[++i];
            if (e == 'Q') {  // \Q...\E: literal text, copied untouched
                size_t end = p.find("\\E", i + 1);
                end = end == std::string::npos ? p.size() : end + 2;
                out.append(p, i - 1, end - (i - 1));
                i = end - 1;
            } else if (e == 's') {
                out += in_class ? space : std::string("[") + space + "]";
            } else if (e == 'S' && !in_class) {
                out += std::string("[^") + space + "]";
            } else {
                out += c;
                out += e;
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            out += c;
            if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
            if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // literal ] first in a class
            continue;
        }
        if (in_class && c == ']') in_class = false;
        out += c;
    }
    return out;
}

}  // namespace

regex::regex(const std::string& pattern, bool literal, const std::string& where) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    // PCRE2_LITERAL admits no UCP (nothing in a literal depends on it).
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    std::string pat = literal ? pattern : oniguruma_spaces(pattern);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                                     opts, &err, &err_off, nullptr);
    if (!code) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(err, buf, sizeof(buf));
        TETRA_FAIL("%s: regex does not compile at offset %zu: %s (pattern: %s)", where.c_str(),
                   size_t(err_off), reinterpret_cast<const char*>(buf), pattern.c_str());
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // failure is fine: the interpreter is used
    code_ = code;
}

regex::~regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

namespace {

// Per-thread match data and JIT stack: pcre2_match needs scratch space that cannot be shared.
struct match_scratch {
    pcre2_match_data* md = nullptr;
    pcre2_match_context* mctx = nullptr;
    pcre2_jit_stack* jit = nullptr;
    match_scratch() {
        md = pcre2_match_data_create(1, nullptr);
        mctx = pcre2_match_context_create(nullptr);
        jit = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
        if (jit) pcre2_jit_stack_assign(mctx, nullptr, jit);
        TETRA_ASSERT(md && mctx);
    }
    ~match_scratch() {
        pcre2_match_data_free(md);
        pcre2_match_context_free(mctx);
        if (jit) pcre2_jit_stack_free(jit);
    }
};

}  // namespace

void regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
    thread_local match_scratch scratch;
    auto* code = static_cast<const pcre2_code*>(code_);
    auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    size_t pos = 0;
    while (pos <= s.size()) {
        int rc = pcre2_match(code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, scratch.md,
                             scratch.mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        TETRA_CHECK(rc >= 0, "tokenizer: regex match failed with PCRE2 error %d on a %zu-byte text",
                    rc, s.size());
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.md);
        size_t start = ov[0], end = ov[1];
        out.emplace_back(start, end);
        if (end > start) {
            pos = end;
        } else {  // empty match: resume after the next character
            if (end >= s.size()) break;
            pos = end + utf8_len(static_cast<unsigned char>(s[end]));
        }
    }
}

// HF NormalizedString::split: segments (gaps and matches) are combined according to behavior,
// then empty ones are dropped.
void split_pieces(const regex& re, split_behavior behavior, bool invert, std::string_view s,
                  std::vector<std::string>& out) {
    struct seg { size_t start, end; bool match; };
    std::vector<std::pair<size_t, size_t>> found;
    re.find_all(s, found);
    std::vector<seg> segs;
    size_t prev = 0;
    for (auto [start, end] : found) {
        if (prev != start) segs.push_back({prev, start, invert});
        segs.push_back({start, end, !invert});
        prev = end;
    }
    if (prev != s.size()) segs.push_back({prev, s.size(), invert});

    std::vector<seg> res;
    bool previous_match = false;
    switch (behavior) {
        case split_behavior::ISOLATED: res = segs; break;
        case split_behavior::REMOVED:
            for (const seg& g : segs)
                if (!g.match) res.push_back(g);
            break;
        case split_behavior::MERGED_WITH_PREVIOUS:
            for (const seg& g : segs) {
                if (g.match && !previous_match && !res.empty()) res.back().end = g.end;
                else res.push_back(g);
                previous_match = g.match;
            }
            break;
        case split_behavior::MERGED_WITH_NEXT:
            for (size_t k = segs.size(); k-- > 0;) {
                const seg& g = segs[k];
                if (g.match && !previous_match && !res.empty()) res.back().start = g.start;
                else res.push_back(g);
                previous_match = g.match;
            }
            std::reverse(res.begin(), res.end());
            break;
        case split_behavior::CONTIGUOUS:
            for (const seg& g : segs) {
                if (g.match == previous_match && !res.empty()) res.back().end = g.end;
                else res.push_back(g);
                previous_match = g.match;
            }
            break;
    }
    for (const seg& g : res)
        if (g.end > g.start) out.emplace_back(s.substr(g.start, g.end - g.start));
}

void pre_tokenize(const std::vector<pre_tokenizer_step>& steps, std::string_view text,
                  std::vector<std::string>& pieces) {
    pieces.clear();
    if (text.empty()) return;
    pieces.emplace_back(text);
    std::vector<std::string> next;
    for (const pre_tokenizer_step& st : steps) {
        next.clear();
        for (std::string& p : pieces) {
            switch (st.type) {
                case pre_tokenizer_step::kind::SPLIT:
                case pre_tokenizer_step::kind::DIGITS:
                    split_pieces(*st.re, st.behavior, st.invert, p, next);
                    break;
                case pre_tokenizer_step::kind::BYTE_LEVEL: {
                    if (st.add_prefix_space && p[0] != ' ') p.insert(p.begin(), ' ');
                    size_t first = next.size();
                    if (st.re) split_pieces(*st.re, split_behavior::ISOLATED, false, p, next);
                    else next.push_back(std::move(p));
                    for (size_t k = first; k < next.size(); k++) next[k] = byte_level_encode(next[k]);
                    break;
                }
            }
        }
        pieces.swap(next);
    }
}

}  // namespace tetra
