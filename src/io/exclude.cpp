// Exclusion matching (see exclude.h). fnmatch is a small backtracking matcher with Python's
// fnmatchcase semantics; "re:" patterns use std::regex (ECMAScript) with match_continuous, which is
// Python's re.match (anchored at the start only). Python-only regex syntax ((?i), lookbehind, named
// groups (?P<..>)) is not supported by ECMAScript and fails to compile with an error naming it.
#include "io/exclude.h"

#include <regex>

#include "core/error.h"

namespace tetra {

namespace {

// Matches a bracket expression at pattern[pi] ('['). Returns false with *ok=false when the bracket
// is unclosed (then '[' is a literal, as in Python's fnmatch.translate).
bool match_bracket(const std::string& p, size_t& pi, char c, bool* ok) {
    size_t j = pi + 1;
    bool negate = false;
    if (j < p.size() && p[j] == '!') { negate = true; ++j; }
    if (j < p.size() && p[j] == ']') ++j;  // a leading ']' is a member
    while (j < p.size() && p[j] != ']') ++j;
    if (j >= p.size()) { *ok = false; return false; }
    *ok = true;
    size_t k = pi + 1 + (negate ? 1 : 0);
    bool hit = false;
    for (bool first = true; k < j; first = false) {
        if (k + 2 < j && p[k + 1] == '-') {
            if (p[k] <= c && c <= p[k + 2]) hit = true;
            k += 3;
        } else {
            if (p[k] == c && (first || p[k] != ']')) hit = true;
            ++k;
        }
    }
    pi = j + 1;
    return hit != negate;
}

}  // namespace

bool fnmatch_case(const std::string& p, const std::string& s) {
    size_t pi = 0, si = 0;
    size_t star_p = std::string::npos, star_s = 0;
    while (si < s.size()) {
        bool advanced = false;
        if (pi < p.size()) {
            char pc = p[pi];
            if (pc == '*') {
                star_p = pi++;
                star_s = si;
                continue;
            }
            if (pc == '?') {
                ++pi, ++si;
                advanced = true;
            } else if (pc == '[') {
                size_t save = pi;
                bool ok = false;
                bool hit = match_bracket(p, pi, s[si], &ok);
                if (!ok) {  // literal '['
                    pi = save;
                    if (s[si] == '[') { ++pi, ++si; advanced = true; }
                } else if (hit) {
                    ++si;
                    advanced = true;
                } else {
                    pi = save;
                }
            } else if (pc == s[si]) {
                ++pi, ++si;
                advanced = true;
            }
        }
        if (advanced) continue;
        if (star_p == std::string::npos) return false;
        pi = star_p + 1;  // backtrack: the last '*' swallows one more character
        si = ++star_s;
    }
    while (pi < p.size() && p[pi] == '*') ++pi;
    return pi == p.size();
}

std::vector<std::string> exclude_aliases(const std::string& module) {
    static const struct { const char* shard; const char* fused; } k_fused[] = {
        {"q_proj", "qkv_proj"}, {"k_proj", "qkv_proj"}, {"v_proj", "qkv_proj"},
        {"gate_proj", "gate_up_proj"}, {"up_proj", "gate_up_proj"},
    };
    std::vector<std::string> out{module};
    size_t dot = module.rfind('.');
    std::string parent = dot == std::string::npos ? "" : module.substr(0, dot + 1);
    std::string leaf = dot == std::string::npos ? module : module.substr(dot + 1);
    for (const auto& f : k_fused)
        if (leaf == f.shard) out.push_back(parent + f.fused);
    const std::string lm = "language_model.";
    size_t n = out.size();
    for (size_t i = 0; i < n; ++i)
        if (out[i].compare(0, lm.size(), lm) == 0) out.push_back(out[i].substr(lm.size()));
    return out;
}

struct exclude_matcher::compiled {
    std::vector<std::unique_ptr<std::regex>> re;  // null for non-regex patterns
};

exclude_matcher::exclude_matcher(std::vector<std::string> patterns, exclude_syntax syntax)
    : patterns_(std::move(patterns)), syntax_(syntax) {
    auto c = std::make_shared<compiled>();
    for (const std::string& p : patterns_) {
        if (p.compare(0, 3, "re:") != 0) {
            c->re.emplace_back();
            continue;
        }
        try {
            c->re.emplace_back(new std::regex(p.substr(3), std::regex::ECMAScript));
        } catch (const std::regex_error& e) {
            TETRA_FAIL("exclusion pattern '%s' is not a valid regular expression (ECMAScript syntax): %s",
                       p.c_str(), e.what());
        }
    }
    re_ = c;
}

bool exclude_matcher::match_one(size_t i, const std::string& name, bool strict) const {
    const std::string& p = patterns_[i];
    if (re_->re[i]) return std::regex_search(name, *re_->re[i], std::regex_constants::match_continuous);
    if (p == name) return true;
    if (syntax_ == exclude_syntax::COMPRESSED_TENSORS) return false;
    if (name.size() > p.size() && name.compare(0, p.size(), p) == 0 && name[p.size()] == '.') return true;
    if (strict && p.size() >= 2 && p.back() == '*' && p[p.size() - 2] != '.') {  // vLLM: name* → name, name.*
        std::string stem = p.substr(0, p.size() - 1);
        return fnmatch_case(stem, name) || fnmatch_case(stem + ".*", name);
    }
    return fnmatch_case(p, name);
}

const std::string* exclude_matcher::match(const std::string& module, bool strict) const {
    if (patterns_.empty()) return nullptr;
    std::vector<std::string> names = exclude_aliases(module);
    for (size_t i = 0; i < patterns_.size(); ++i)
        for (const std::string& n : names)
            if (match_one(i, n, strict)) return &patterns_[i];
    return nullptr;
}

}  // namespace tetra
