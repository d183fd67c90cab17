// Python str methods for templates (strip/split/startswith/replace/find/join/format/...), working on
// code points where Python does. Case mapping is ASCII-only (non-goal: Unicode case tables);
// str.format supports positional/keyword fields, .attr/[key], !r/!s and a format-spec subset.
#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>

#include "chat/jinja_ast.h"

namespace tetra {

namespace {

jvalue py_index(int64_t v) { return jvalue::integer(v); }

bool is_int_like(const jvalue& v) { return v.kind == jkind::INT || v.kind == jkind::BOOL; }
int64_t int_of(const jvalue& v) { return v.kind == jkind::INT ? v.i : (int64_t)v.b; }

std::string need_str(const jvalue& v, const char* what) {
    if (!v.is_string()) jinja_throw(std::string(what) + " must be str, not " + v.type_name());
    return v.s;
}

std::vector<std::string> split_ws(const std::string& s, int64_t maxsplit, bool from_right) {
    std::u32string u = utf8_decode(s);
    std::vector<std::u32string> parts;
    if (!from_right) {
        size_t k = 0, n = u.size();
        while (true) {
            while (k < n && py_isspace(u[k])) ++k;
            if (k >= n) break;
            if (maxsplit >= 0 && (int64_t)parts.size() == maxsplit) {
                size_t e = n;
                while (e > k && py_isspace(u[e - 1])) --e;
                parts.push_back(u.substr(k, e - k));
                break;
            }
            size_t b = k;
            while (k < n && !py_isspace(u[k])) ++k;
            parts.push_back(u.substr(b, k - b));
        }
    } else {
        size_t k = u.size();
        while (true) {
            while (k > 0 && py_isspace(u[k - 1])) --k;
            if (k == 0) break;
            if (maxsplit >= 0 && (int64_t)parts.size() == maxsplit) {
                size_t b = 0;
                while (b < k && py_isspace(u[b])) ++b;
                parts.push_back(u.substr(b, k - b));
                break;
            }
            size_t e = k;
            while (k > 0 && !py_isspace(u[k - 1])) --k;
            parts.push_back(u.substr(k, e - k));
        }
        std::reverse(parts.begin(), parts.end());
    }
    std::vector<std::string> out;
    for (auto& p : parts) out.push_back(utf8_encode(p));
    return out;
}

std::vector<std::string> split_sep(const std::string& s, const std::string& sep, int64_t maxsplit,
                                   bool from_right) {
    if (sep.empty()) jinja_throw("empty separator");
    std::vector<std::string> out;
    if (!from_right) {
        size_t k = 0;
        while (maxsplit < 0 || (int64_t)out.size() < maxsplit) {
            size_t p = s.find(sep, k);
            if (p == std::string::npos) break;
            out.push_back(s.substr(k, p - k));
            k = p + sep.size();
        }
        out.push_back(s.substr(k));
    } else {
        size_t end = s.size();
        int64_t n = 0;
        while (maxsplit < 0 || n < maxsplit) {
            if (end < sep.size()) break;
            size_t p = s.rfind(sep, end - sep.size());
            if (p == std::string::npos) break;
            out.push_back(s.substr(p + sep.size(), end - p - sep.size()));
            end = p;
            ++n;
        }
        out.push_back(s.substr(0, end));
        std::reverse(out.begin(), out.end());
    }
    return out;
}

jvalue str_list(const std::vector<std::string>& parts) {
    jlist items;
    for (auto& p : parts) items.push_back(jvalue::string(p));
    return jvalue::make_list(std::move(items));
}

std::string ascii_map(const std::string& s, int (*f)(int)) {
    std::string out = s;
    for (char& c : out)
        if ((unsigned char)c < 0x80) c = (char)f((unsigned char)c);
    return out;
}

std::string py_title(const std::string& s) {
    std::string out = s;
    bool prev_cased = false;
    for (char& c : out) {
        unsigned char u = c;
        bool alpha = u < 0x80 && isalpha(u);
        if (alpha) c = (char)(prev_cased ? tolower(u) : toupper(u));
        prev_cased = alpha || u >= 0x80;
    }
    return out;
}

int64_t cp_index(const std::string& s, size_t byte_pos) {
    return (int64_t)utf8_decode(s.substr(0, byte_pos)).size();
}

bool starts_or_ends(const std::string& s, const jvalue& arg, bool ends) {
    auto one = [&](const jvalue& p) {
        std::string x = need_str(p, ends ? "endswith arg" : "startswith arg");
        if (x.size() > s.size()) return false;
        return ends ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0;
    };
    if (arg.kind == jkind::TUPLE) {
        for (auto& p : *arg.list)
            if (one(p)) return true;
        return false;
    }
    return one(arg);
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep,
                       int64_t count) {
    std::string out;
    if (old.empty()) {
        std::u32string u = utf8_decode(s);
        int64_t n = 0;
        for (size_t k = 0; k <= u.size(); ++k) {
            if (count < 0 || n < count) { out += rep; ++n; }
            if (k < u.size()) utf8_append(out, u[k]);
        }
        return out;
    }
    size_t k = 0;
    int64_t n = 0;
    while (count < 0 || n < count) {
        size_t p = s.find(old, k);
        if (p == std::string::npos) break;
        out += s.substr(k, p - k) + rep;
        k = p + old.size();
        ++n;
    }
    return out + s.substr(k);
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
    std::u32string u = utf8_decode(s);
    std::vector<std::string> out;
    size_t b = 0;
    for (size_t k = 0; k < u.size(); ++k) {
        char32_t c = u[k];
        bool br = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) ||
                  c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!br) continue;
        size_t e = k + 1;
        if (c == '\r' && k + 1 < u.size() && u[k + 1] == '\n') e = k + 2;
        out.push_back(utf8_encode(u.substr(b, (keepends ? e : k) - b)));
        b = e;
        k = e - 1;
    }
    if (b < u.size()) out.push_back(utf8_encode(u.substr(b)));
    return out;
}

template <typename P>
bool all_chars(const std::string& s, P pred) {
    if (s.empty()) return false;
    for (unsigned char c : s)
        if (!pred(c)) return false;
    return true;
}

// Python format-spec subset: [[fill]align][sign][0][width][,][.precision][type], type in
// s d f F e E g G x X o % or none.
std::string apply_spec(const jvalue& v, const std::string& spec) {
    if (spec.empty()) return v.str();
    size_t k = 0;
    char fill = ' ', align = 0, sign = '-', type = 0;
    bool zero = false, comma = false;
    int64_t width = -1, prec = -1;
    if (spec.size() >= 2 && strchr("<>^=", spec[1])) { fill = spec[0]; align = spec[1]; k = 2; }
    else if (strchr("<>^=", spec[0])) { align = spec[0]; k = 1; }
    if (k < spec.size() && strchr("+- ", spec[k])) sign = spec[k++];
    if (k < spec.size() && spec[k] == '0') { zero = true; ++k; }
    while (k < spec.size() && isdigit((unsigned char)spec[k])) width = std::max<int64_t>(width, 0) * 10 + (spec[k++] - '0');
    if (k < spec.size() && spec[k] == ',') { comma = true; ++k; }
    if (k < spec.size() && spec[k] == '.') {
        prec = 0;
        ++k;
        while (k < spec.size() && isdigit((unsigned char)spec[k])) prec = prec * 10 + (spec[k++] - '0');
    }
    if (k < spec.size()) type = spec[k++];
    if (k != spec.size() || (type && !strchr("sdfFeEgGxXo%", type)))
        jinja_throw("unsupported format spec '" + spec + "'");
    std::string body;
    bool numeric = v.is_number();
    if (!numeric || type == 's') {
        if (type && type != 's') jinja_throw("Unknown format code '" + std::string(1, type) + "' for object of type '" + v.type_name() + "'");
        body = v.str();
        if (prec >= 0) body = utf8_encode(utf8_decode(body).substr(0, (size_t)prec));
    } else {
        bool is_float = v.kind == jkind::FLOAT || (type && strchr("fFeEgG%", type));
        double x = v.kind == jkind::FLOAT ? v.f : (double)int_of(v);
        char buf[512];
        if (!is_float) {
            if (type == 'f' || prec >= 0) jinja_throw("unsupported format spec '" + spec + "' for int");
            int64_t i = int_of(v);
            const char* f = type == 'x' ? "%llx" : type == 'X' ? "%llX" : type == 'o' ? "%llo" : "%lld";
            snprintf(buf, sizeof buf, f, (long long)(i < 0 ? -i : i));
            body = buf;
        } else if (!type) {
            if (prec >= 0) { snprintf(buf, sizeof buf, "%.*g", (int)std::max<int64_t>(prec, 1), std::fabs(x)); body = buf; }
            else body = py_float_repr(std::fabs(x));
        } else {
            double y = type == '%' ? std::fabs(x) * 100 : std::fabs(x);
            char t = type == '%' ? 'f' : type;
            snprintf(buf, sizeof buf, (std::string("%.*") + t).c_str(), (int)(prec < 0 ? 6 : prec), y);
            body = std::string(buf) + (type == '%' ? "%" : "");
        }
        if (comma) {
            size_t e = body.find_first_not_of("0123456789");
            if (e == std::string::npos) e = body.size();
            for (int64_t p = (int64_t)e - 3; p > 0; p -= 3) body.insert((size_t)p, ",");
        }
        bool neg = v.kind == jkind::FLOAT ? std::signbit(x) : int_of(v) < 0;
        std::string sg = neg ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
        if (zero && !align) { fill = '0'; align = '='; }
        if (align == '=') {
            int64_t pad = width - (int64_t)(sg.size() + body.size());
            return sg + (pad > 0 ? std::string((size_t)pad, fill) : "") + body;
        }
        body = sg + body;
    }
    int64_t pad = width - (int64_t)utf8_decode(body).size();
    if (pad <= 0) return body;
    if (!align) align = numeric && type != 's' ? '>' : '<';
    std::string f(1, fill);
    auto rep = [&](int64_t n) { std::string r; for (int64_t i = 0; i < n; ++i) r += f; return r; };
    if (align == '<') return body + rep(pad);
    if (align == '>') return rep(pad) + body;
    return rep(pad / 2) + body + rep(pad - pad / 2);
}

// str.format with positional/keyword fields, .attr/[key] lookups, !r/!s conversions and specs.
std::string py_format(const std::string& fmt, const jcall& c) {
    std::string out;
    size_t auto_idx = 0;
    for (size_t k = 0; k < fmt.size(); ++k) {
        char ch = fmt[k];
        if (ch == '}') {
            if (k + 1 < fmt.size() && fmt[k + 1] == '}') { out += '}'; ++k; continue; }
            jinja_throw("Single '}' encountered in format string");
        }
        if (ch != '{') { out += ch; continue; }
        if (k + 1 < fmt.size() && fmt[k + 1] == '{') { out += '{'; ++k; continue; }
        size_t e = fmt.find('}', k);
        if (e == std::string::npos) jinja_throw("Single '{' encountered in format string");
        std::string field = fmt.substr(k + 1, e - k - 1), spec, conv;
        size_t colon = field.find(':');
        if (colon != std::string::npos) { spec = field.substr(colon + 1); field.resize(colon); }
        size_t bang = field.find('!');
        if (bang != std::string::npos) { conv = field.substr(bang + 1); field.resize(bang); }
        size_t stop = field.find_first_of(".[");
        std::string head = field.substr(0, stop);
        jvalue v;
        if (head.empty()) {
            if (auto_idx >= c.args.size()) jinja_throw("Replacement index " + std::to_string(auto_idx) + " out of range for positional args tuple");
            v = c.args[auto_idx++];
        } else if (std::all_of(head.begin(), head.end(), ::isdigit)) {
            size_t idx = std::stoul(head);
            if (idx >= c.args.size()) jinja_throw("Replacement index " + head + " out of range for positional args tuple");
            v = c.args[idx];
        } else {
            v = c.arg(SIZE_MAX, head.c_str());
            if (v.is_undefined()) jinja_throw("'" + head + "'");
        }
        for (size_t p = stop; p != std::string::npos && p < field.size();) {
            if (field[p] == '.') {
                size_t q = field.find_first_of(".[", p + 1);
                v = jinja_getattr(v, field.substr(p + 1, q == std::string::npos ? std::string::npos : q - p - 1));
                p = q;
            } else {
                size_t q = field.find(']', p);
                if (q == std::string::npos) jinja_throw("Missing ']' in format string");
                std::string key = field.substr(p + 1, q - p - 1);
                bool digits = !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit);
                v = jinja_getitem(v, digits ? jvalue::integer(std::stoll(key)) : jvalue::string(key));
                p = q + 1;
            }
        }
        if (conv == "r" || conv == "a") v = jvalue::string(v.repr());
        else if (conv == "s") v = jvalue::string(v.str());
        else if (!conv.empty()) jinja_throw("Unknown conversion specifier " + conv);
        out += apply_spec(v, spec);
        k = e;
    }
    return out;
}

jvalue str_method(const std::string& s, const std::string& m, const jcall& c) {
    if (m == "format") return jvalue::string(py_format(s, c));
    if (m == "strip" || m == "lstrip" || m == "rstrip")
        return jvalue::string(py_strip(s, c.arg(0, "chars", jvalue::none()), m != "rstrip", m != "lstrip"));
    if (m == "split" || m == "rsplit") {
        jvalue sep = c.arg(0, "sep", jvalue::none());
        jvalue maxsplit = c.arg(1, "maxsplit", jvalue::integer(-1));
        if (!is_int_like(maxsplit)) jinja_throw("maxsplit must be an integer");
        if (sep.is_none()) return str_list(split_ws(s, int_of(maxsplit), m == "rsplit"));
        return str_list(split_sep(s, need_str(sep, "separator"), int_of(maxsplit), m == "rsplit"));
    }
    if (m == "startswith" || m == "endswith")
        return jvalue::boolean(starts_or_ends(s, c.arg(0, "prefix"), m == "endswith"));
    if (m == "upper") return jvalue::string(ascii_map(s, toupper));
    if (m == "lower") return jvalue::string(ascii_map(s, tolower));
    if (m == "title") return jvalue::string(py_title(s));
    if (m == "capitalize") {
        std::string out = ascii_map(s, tolower);
        if (!out.empty()) out[0] = (char)toupper((unsigned char)out[0]);
        return jvalue::string(out);
    }
    if (m == "replace") {
        jvalue count = c.arg(2, "count", jvalue::integer(-1));
        return jvalue::string(py_replace(s, need_str(c.arg(0, "old"), "replace() argument 1"),
                                         need_str(c.arg(1, "new"), "replace() argument 2"), int_of(count)));
    }
    if (m == "find" || m == "rfind" || m == "index" || m == "rindex") {
        std::string sub = need_str(c.arg(0, "sub"), "substring");
        size_t p = (m == "find" || m == "index") ? s.find(sub) : s.rfind(sub);
        if (p == std::string::npos) {
            if (m == "index" || m == "rindex") jinja_throw("substring not found");
            return py_index(-1);
        }
        return py_index(cp_index(s, p));
    }
    if (m == "count") {
        std::string sub = need_str(c.arg(0, "sub"), "substring");
        if (sub.empty()) return py_index((int64_t)utf8_decode(s).size() + 1);
        int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return py_index(n);
    }
    if (m == "join") {
        std::string out;
        jlist items = jinja_iterate(c.arg(0, "iterable"));
        for (size_t k = 0; k < items.size(); ++k) {
            if (!items[k].is_string())
                jinja_throw("sequence item " + std::to_string(k) + ": expected str instance, " +
                            items[k].type_name() + " found");
            if (k) out += s;
            out += items[k].s;
        }
        return jvalue::string(out);
    }
    if (m == "splitlines") return str_list(py_splitlines(s, c.arg(0, "keepends", jvalue::boolean(false)).truthy()));
    if (m == "removeprefix" || m == "removesuffix") {
        std::string a = need_str(c.arg(0, "prefix"), m.c_str());
        bool pre = m == "removeprefix";
        if (a.size() <= s.size() && (pre ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0))
            return jvalue::string(pre ? s.substr(a.size()) : s.substr(0, s.size() - a.size()));
        return jvalue::string(s);
    }
    if (m == "isdigit") return jvalue::boolean(all_chars(s, [](unsigned char ch) { return isdigit(ch) != 0; }));
    if (m == "isalpha") return jvalue::boolean(all_chars(s, [](unsigned char ch) { return isalpha(ch) != 0; }));
    if (m == "isalnum") return jvalue::boolean(all_chars(s, [](unsigned char ch) { return isalnum(ch) != 0; }));
    if (m == "isspace") {
        std::u32string u = utf8_decode(s);
        return jvalue::boolean(!u.empty() && std::all_of(u.begin(), u.end(), py_isspace));
    }
    if (m == "islower" || m == "isupper") {
        bool any = false, ok = true;
        for (unsigned char ch : s) {
            if (isupper(ch)) { any = true; ok = ok && m == "isupper"; }
            if (islower(ch)) { any = true; ok = ok && m == "islower"; }
        }
        return jvalue::boolean(any && ok);
    }
    jinja_throw("str method '" + m + "' is not supported");
}

const std::set<std::string> k_str_methods = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower", "title",
    "capitalize", "replace", "find", "rfind", "index", "rindex", "count", "join", "splitlines",
    "removeprefix", "removesuffix", "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper",
    "format"};

}  // namespace

bool jinja_is_str_method(const std::string& name) { return k_str_methods.count(name) > 0; }

jvalue jinja_str_method(const std::string& s, const std::string& m, const jcall& c) { return str_method(s, m, c); }

std::string py_strip(const std::string& s, const jvalue& chars, bool left, bool right) {
    std::u32string u = utf8_decode(s);
    std::u32string set;
    bool ws = chars.is_none() || chars.is_undefined();
    if (!ws) set = utf8_decode(need_str(chars, "strip arg"));
    auto strip_me = [&](char32_t c) { return ws ? py_isspace(c) : set.find(c) != std::u32string::npos; };
    size_t b = 0, e = u.size();
    if (left) while (b < e && strip_me(u[b])) ++b;
    if (right) while (e > b && strip_me(u[e - 1])) --e;
    return utf8_encode(u.substr(b, e - b));
}

}  // namespace tetra
