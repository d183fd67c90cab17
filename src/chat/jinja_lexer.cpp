// Jinja lexer with the whitespace rules of transformers' environment (trim_blocks, lstrip_blocks)
// and jinja2's `-`/`+` tag modifiers, mirroring jinja2/lexer.py's regexes rule by rule.
// Also: error location formatting shared by the parser and evaluator.
#include <cctype>
#include <cerrno>
#include <cstring>

#include "chat/jinja_ast.h"
#include "core/error.h"

namespace tetra {

void jinja_error_at(const jsource& src, size_t pos, const std::string& msg) {
    const std::string& t = src.text;
    if (pos > t.size()) pos = t.size();
    size_t line_start = pos == 0 ? std::string::npos : t.rfind('\n', pos - 1);
    line_start = line_start == std::string::npos ? 0 : line_start + 1;
    size_t line_end = t.find('\n', pos);
    if (line_end == std::string::npos) line_end = t.size();
    int line = 1;
    for (size_t k = 0; k < line_start; ++k) line += t[k] == '\n';
    std::string line_text = t.substr(line_start, line_end - line_start);
    std::string caret;
    int col = 1;
    for (char32_t c : utf8_decode(t.substr(line_start, pos - line_start))) {
        caret += c == '\t' ? '\t' : ' ';
        ++col;
    }
    throw error(src.name + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + msg +
                "\n  " + line_text + "\n  " + caret + "^");
}

std::string jinja_normalize_source(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    for (size_t k = 0; k < text.size(); ++k) {
        if (text[k] == '\r') {
            out += '\n';
            if (k + 1 < text.size() && text[k + 1] == '\n') ++k;
        } else {
            out += text[k];
        }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
}

namespace {

// Python's str.isspace on the UTF-8 code point at s[k]; returns its byte length or 0.
size_t space_len(const std::string& s, size_t k) {
    unsigned char c = s[k];
    if (c < 0x80) return py_isspace(c) ? 1 : 0;
    size_t len = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (k + len > s.size()) return 0;
    std::u32string cp = utf8_decode(s.substr(k, len));
    return cp.size() == 1 && py_isspace(cp[0]) ? len : 0;
}

size_t skip_space(const std::string& s, size_t k) {
    while (k < s.size()) {
        size_t l = space_len(s, k);
        if (!l) break;
        k += l;
    }
    return k;
}

std::string rstrip_space(const std::string& s) {
    std::u32string u = utf8_decode(s);
    while (!u.empty() && py_isspace(u.back())) u.pop_back();
    return utf8_encode(u);
}

bool all_space(const std::string& s, size_t from) {
    if (from >= s.size()) return false;  // jinja2 uses \s+ (needs one character)
    for (size_t k = from; k < s.size();) {
        size_t l = space_len(s, k);
        if (!l) return false;
        k += l;
    }
    return true;
}

struct lexer {
    const jsource& src;
    const std::string& s;
    std::vector<jtoken> out;
    bool line_starting = true;

    explicit lexer(const jsource& source) : src(source), s(source.text) {}

    void emit(jtok type, std::string text, size_t pos) {
        jtoken t;
        t.type = type;
        t.text = std::move(text);
        t.pos = pos;
        out.push_back(std::move(t));
    }

    // Text before a tag, with `-` (strip all) or lstrip_blocks applied (not for `{{`).
    void emit_text(std::string text, size_t pos, char sign, bool is_var) {
        if (sign == '-') {
            text = rstrip_space(text);
        } else if (sign != '+' && !is_var) {
            size_t nl = text.rfind('\n');
            size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
            if ((l_pos > 0 || line_starting) && all_space(text, l_pos)) text.resize(l_pos);
        }
        if (!text.empty()) emit(jtok::TEXT, std::move(text), pos);
    }

    // After `%}` / `#}`: `-` strips all whitespace, `+` nothing, plain trims one newline.
    size_t after_block_end(size_t k, char sign) {
        if (sign == '-') k = skip_space(s, k);
        else if (sign != '+' && k < s.size() && s[k] == '\n') ++k;
        line_starting = k > 0 && s[k - 1] == '\n';
        return k;
    }

    bool try_raw(size_t t, size_t& pos);
    size_t lex_comment(size_t t, size_t body);
    size_t lex_tag(size_t t, size_t body, bool is_var);
    size_t lex_string(size_t k);
    size_t lex_number(size_t k);
    void run();
};

bool lexer::try_raw(size_t t, size_t& pos) {
    size_t k = t + 2;
    if (k < s.size() && (s[k] == '-' || s[k] == '+')) ++k;
    k = skip_space(s, k);
    if (s.compare(k, 3, "raw") != 0) return false;
    k = skip_space(s, k + 3);
    bool strip_after = false;
    if (s.compare(k, 3, "-%}") == 0) { strip_after = true; k += 3; }
    else if (s.compare(k, 2, "%}") == 0) k += 2;
    else return false;
    if (strip_after) k = skip_space(s, k);
    line_starting = k > 0 && s[k - 1] == '\n';
    // Find {%[-+]?\s*endraw\s*[-+]?%}
    for (size_t e = s.find("{%", k); e != std::string::npos; e = s.find("{%", e + 1)) {
        size_t m = e + 2;
        char sign = 0;
        if (m < s.size() && (s[m] == '-' || s[m] == '+')) sign = s[m++];
        m = skip_space(s, m);
        if (s.compare(m, 6, "endraw") != 0) continue;
        m = skip_space(s, m + 6);
        char end_sign = 0;
        if (m < s.size() && (s[m] == '-' || s[m] == '+')) end_sign = s[m++];
        if (s.compare(m, 2, "%}") != 0) continue;
        emit_text(s.substr(k, e - k), k, sign, false);
        pos = after_block_end(m + 2, end_sign);
        return true;
    }
    jinja_error_at(src, t, "missing end of raw directive");
}

size_t lexer::lex_comment(size_t t, size_t body) {
    size_t q = s.find("#}", body);
    if (q == std::string::npos) jinja_error_at(src, t, "missing end of comment tag");
    char sign = (q > body && (s[q - 1] == '-' || s[q - 1] == '+')) ? s[q - 1] : 0;
    return after_block_end(q + 2, sign);
}

size_t lexer::lex_string(size_t k) {
    char q = s[k];
    size_t start = k;
    std::string val;
    ++k;
    while (true) {
        if (k >= s.size()) jinja_error_at(src, start, "unterminated string literal");
        char c = s[k];
        if (c == q) { ++k; break; }
        if (c != '\\') { val += c; ++k; continue; }
        if (k + 1 >= s.size()) jinja_error_at(src, start, "unterminated string literal");
        char e = s[k + 1];
        k += 2;
        auto hex = [&](int n) {
            if (k + n > s.size()) jinja_error_at(src, k - 2, "truncated \\x/\\u escape");
            char32_t cp = 0;
            for (int d = 0; d < n; ++d) {
                char h = s[k + d];
                if (!isxdigit((unsigned char)h)) jinja_error_at(src, k - 2, "truncated \\x/\\u escape");
                cp = cp * 16 + (isdigit((unsigned char)h) ? h - '0' : (tolower(h) - 'a' + 10));
            }
            k += n;
            utf8_append(val, cp);
        };
        switch (e) {
            case 'n': val += '\n'; break;
            case 't': val += '\t'; break;
            case 'r': val += '\r'; break;
            case '\\': val += '\\'; break;
            case '\'': val += '\''; break;
            case '"': val += '"'; break;
            case 'a': val += '\a'; break;
            case 'b': val += '\b'; break;
            case 'f': val += '\f'; break;
            case 'v': val += '\v'; break;
            case '\n': break;
            case 'x': hex(2); break;
            case 'u': hex(4); break;
            case 'U': hex(8); break;
            default:
                if (e >= '0' && e <= '7') {
                    int v = e - '0';
                    for (int d = 0; d < 2 && k < s.size() && s[k] >= '0' && s[k] <= '7'; ++d)
                        v = v * 8 + (s[k++] - '0');
                    utf8_append(val, (char32_t)v);
                } else {
                    val += '\\';
                    val += e;
                }
        }
    }
    emit(jtok::STRING, std::move(val), start);
    return k;
}

size_t lexer::lex_number(size_t k) {
    size_t start = k;
    auto digits = [&](size_t& p) {
        size_t b = p;
        while (p < s.size() && (isdigit((unsigned char)s[p]) || (s[p] == '_' && p > b))) ++p;
        return p > b;
    };
    digits(k);
    bool is_float = false;
    bool after_dot = start > 0 && s[start - 1] == '.';
    if (!after_dot && k + 1 < s.size() && s[k] == '.' && isdigit((unsigned char)s[k + 1])) {
        ++k;
        digits(k);
        is_float = true;
    }
    if (!after_dot && k < s.size() && (s[k] == 'e' || s[k] == 'E')) {
        size_t p = k + 1;
        if (p < s.size() && (s[p] == '+' || s[p] == '-')) ++p;
        if (p < s.size() && isdigit((unsigned char)s[p])) {
            digits(p);
            k = p;
            is_float = true;
        }
    }
    std::string text;
    for (size_t p = start; p < k; ++p) if (s[p] != '_') text += s[p];
    jtoken t;
    t.type = is_float ? jtok::FLOAT : jtok::INT;
    t.text = text;
    t.pos = start;
    if (is_float) {
        t.fval = strtod(text.c_str(), nullptr);
    } else {
        errno = 0;
        t.ival = strtoll(text.c_str(), nullptr, 10);
        if (errno) jinja_error_at(src, start, "integer literal out of range (int64)");
    }
    out.push_back(std::move(t));
    return k;
}

size_t lexer::lex_tag(size_t t, size_t body, bool is_var) {
    emit(is_var ? jtok::VAR_BEGIN : jtok::BLOCK_BEGIN, "", t);
    std::vector<char> balance;
    size_t k = body;
    static const char* ops2[] = {"//", "**", "==", "!=", ">=", "<="};
    while (true) {
        if (k >= s.size())
            jinja_error_at(src, t, is_var ? "unexpected end of template, expected '}}'"
                                          : "unexpected end of template, expected '%}'");
        if (balance.empty()) {
            if (is_var) {
                if (s.compare(k, 3, "-}}") == 0) {
                    emit(jtok::VAR_END, "", k);
                    k = skip_space(s, k + 3);
                    line_starting = s[k - 1] == '\n';
                    return k;
                }
                if (s.compare(k, 2, "}}") == 0) {
                    emit(jtok::VAR_END, "", k);
                    line_starting = false;
                    return k + 2;
                }
            } else {
                char sign = (s[k] == '-' || s[k] == '+') ? s[k] : 0;
                size_t m = k + (sign ? 1 : 0);
                if (s.compare(m, 2, "%}") == 0) {
                    emit(jtok::BLOCK_END, "", k);
                    return after_block_end(m + 2, sign);
                }
            }
        }
        size_t sp = space_len(s, k);
        if (sp) { k += sp; continue; }
        unsigned char c = s[k];
        if (isdigit(c)) { k = lex_number(k); continue; }
        if (isalpha(c) || c == '_') {
            size_t b = k;
            while (k < s.size() && (isalnum((unsigned char)s[k]) || s[k] == '_')) ++k;
            emit(jtok::NAME, s.substr(b, k - b), b);
            continue;
        }
        if (c == '\'' || c == '"') { k = lex_string(k); continue; }
        std::string op;
        for (const char* o : ops2)
            if (s.compare(k, 2, o) == 0) op = o;
        if (op.empty() && strchr("+-/*%~[](){}><=.:|,;", c)) op = std::string(1, (char)c);
        if (op.empty()) jinja_error_at(src, k, strfmt("unexpected char '%c'", c));
        if (op == "(" || op == "[" || op == "{") {
            balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
            if (balance.empty()) jinja_error_at(src, k, "unexpected '" + op + "'");
            if (balance.back() != op[0])
                jinja_error_at(src, k, "unexpected '" + op + "', expected '" +
                                           std::string(1, balance.back()) + "'");
            balance.pop_back();
        }
        emit(jtok::OP, op, k);
        k += op.size();
    }
}

void lexer::run() {
    size_t pos = 0;
    while (pos < s.size()) {
        size_t t = pos;
        while (true) {
            t = s.find('{', t);
            if (t == std::string::npos || (t + 1 < s.size() && strchr("{%#", s[t + 1]))) break;
            ++t;
        }
        if (t == std::string::npos || t + 1 >= s.size()) {
            emit(jtok::TEXT, s.substr(pos), pos);
            break;
        }
        char kind = s[t + 1];
        char sign = (t + 2 < s.size() && (s[t + 2] == '-' || s[t + 2] == '+')) ? s[t + 2] : 0;
        size_t body = t + 2 + (sign ? 1 : 0);
        if (kind == '%') {
            // try_raw changes no state unless it matched a raw block.
            size_t after = 0;
            emit_text(s.substr(pos, t - pos), pos, sign, false);
            pos = try_raw(t, after) ? after : lex_tag(t, body, false);
        } else if (kind == '#') {
            emit_text(s.substr(pos, t - pos), pos, sign, false);
            pos = lex_comment(t, body);
        } else {
            emit_text(s.substr(pos, t - pos), pos, sign, true);
            pos = lex_tag(t, body, true);
        }
    }
    emit(jtok::END, "", s.size());
}

}  // namespace

std::vector<jtoken> jinja_lex(const jsource& src) {
    lexer lx(src);
    lx.run();
    return std::move(lx.out);
}

}  // namespace tetra
