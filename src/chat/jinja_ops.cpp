// Python object model for the engine: attribute/item lookup with jinja2's fallbacks, slicing,
// iteration, `in`, arithmetic, and the str/dict/list methods templates call. Mutating methods
// resolve to an undefined that fails when called, as in jinja2's ImmutableSandboxedEnvironment.
// Case mapping is ASCII-only (non-goal: Unicode case tables); str.format supports a spec subset.
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
const std::set<std::string> k_dict_methods = {"items", "keys", "values", "get"};
const std::set<std::string> k_dict_unsafe = {"update", "pop", "popitem", "setdefault", "clear"};
const std::set<std::string> k_list_methods = {"index", "count"};
const std::set<std::string> k_list_unsafe = {"append", "extend", "insert", "pop", "remove", "sort",
                                             "reverse", "clear"};

jvalue dict_method(const jvalue& obj, const std::string& m, const jcall& c) {
    jlist out;
    if (m == "get") {
        jvalue* v = obj.dict->find(c.arg(0, "key"));
        return v ? *v : c.arg(1, "default", jvalue::none());
    }
    for (auto& kv : obj.dict->items) {
        if (m == "items") out.push_back(jvalue::make_tuple({kv.first, kv.second}));
        else if (m == "keys") out.push_back(kv.first);
        else out.push_back(kv.second);
    }
    return jvalue::make_list(std::move(out));
}

jvalue list_method(const jvalue& obj, const std::string& m, const jcall& c) {
    jvalue x = c.arg(0, "value");
    int64_t n = 0;
    for (size_t k = 0; k < obj.list->size(); ++k) {
        if (!py_equal((*obj.list)[k], x)) continue;
        if (m == "index") return py_index((int64_t)k);
        ++n;
    }
    if (m == "index") jinja_throw(x.repr() + " is not in list");
    return py_index(n);
}

jvalue bound(const jvalue& obj, const std::string& m) {
    return jvalue::callable(obj.type_name() + "." + m, [obj, m](jcall& c) -> jvalue {
        if (obj.is_string()) return str_method(obj.s, m, c);
        if (obj.is_mapping()) return dict_method(obj, m, c);
        return list_method(obj, m, c);
    });
}

jvalue unsafe(const jvalue& obj, const std::string& m) {
    return jvalue::undefined("access to attribute '" + m + "' of '" + obj.type_name() + "' object is unsafe.");
}

}  // namespace

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

jvalue jinja_getattr(const jvalue& obj, const std::string& attr) {
    switch (obj.kind) {
        case jkind::DICT: {
            if (k_dict_methods.count(attr)) return bound(obj, attr);
            if (k_dict_unsafe.count(attr)) return unsafe(obj, attr);
            if (jvalue* v = obj.dict->find(attr)) return *v;
            return jvalue::undefined("'dict object' has no attribute '" + attr + "'");
        }
        case jkind::NAMESPACE: {
            if (jvalue* v = obj.dict->find(attr)) return *v;
            return jvalue::undefined("'jinja2.utils.Namespace object' has no attribute '" + attr + "'");
        }
        case jkind::STRING:
            if (k_str_methods.count(attr)) return bound(obj, attr);
            break;
        case jkind::LIST: case jkind::TUPLE:
            if (k_list_methods.count(attr)) return bound(obj, attr);
            if (obj.kind == jkind::LIST && k_list_unsafe.count(attr)) return unsafe(obj, attr);
            break;
        case jkind::UNDEFINED: jinja_check_defined(obj); break;
        default: break;
    }
    if (obj.is_none()) return jvalue::undefined("'None' has no attribute '" + attr + "'");
    return jvalue::undefined("'" + obj.type_name() + " object' has no attribute '" + attr + "'");
}

jvalue jinja_getitem(const jvalue& obj, const jvalue& key) {
    if (obj.kind == jkind::DICT) {
        if (jvalue* v = obj.dict->find(key)) return *v;
        if (key.is_string()) return jinja_getattr(obj, key.s);
        return jvalue::undefined("'dict object' has no element " + key.repr());
    }
    if ((obj.is_sequence() || obj.is_string()) && is_int_like(key)) {
        int64_t k = int_of(key);
        if (obj.is_string()) {
            std::u32string u = utf8_decode(obj.s);
            int64_t n = (int64_t)u.size();
            if (k < 0) k += n;
            if (k < 0 || k >= n) return jvalue::undefined("'str object' has no element " + key.repr());
            std::string out;
            utf8_append(out, u[(size_t)k]);
            return jvalue::string(out);
        }
        int64_t n = (int64_t)obj.list->size();
        if (k < 0) k += n;
        if (k < 0 || k >= n) return jvalue::undefined(obj.type_name() + " object has no element " + key.repr());
        return (*obj.list)[(size_t)k];
    }
    if (key.is_string()) return jinja_getattr(obj, key.s);
    jinja_check_defined(obj);
    return jvalue::undefined("'" + obj.type_name() + " object' has no element " + key.repr());
}

jvalue jinja_slice(const jvalue& obj, const jvalue& start, const jvalue& stop, const jvalue& step) {
    auto idx = [](const jvalue& v, const char* what) -> std::pair<bool, int64_t> {
        if (v.is_none()) return {false, 0};
        if (!is_int_like(v)) jinja_throw(std::string("slice ") + what + " must be an integer or None");
        return {true, int_of(v)};
    };
    auto [has_start, b] = idx(start, "start");
    auto [has_stop, e] = idx(stop, "stop");
    auto [has_step, st] = idx(step, "step");
    if (!has_step) st = 1;
    if (st == 0) jinja_throw("slice step cannot be zero");
    std::u32string u;
    bool is_str = obj.is_string();
    if (is_str) u = utf8_decode(obj.s);
    else if (!obj.is_sequence())  // jinja2's getitem turns the TypeError into an undefined
        return jvalue::undefined("'" + obj.type_name() + " object' has no element slice");
    int64_t n = is_str ? (int64_t)u.size() : (int64_t)obj.list->size();
    auto clamp = [&](bool has, int64_t v, int64_t def) {
        if (!has) return def;
        if (v < 0) v += n;
        if (st > 0) return std::min(std::max(v, (int64_t)0), n);
        return std::min(std::max(v, (int64_t)-1), n - 1);
    };
    b = clamp(has_start, b, st > 0 ? 0 : n - 1);
    e = clamp(has_stop, e, st > 0 ? n : -1);
    std::u32string su;
    jlist items;
    for (int64_t k = b; st > 0 ? k < e : k > e; k += st) {
        if (is_str) su += u[(size_t)k];
        else items.push_back((*obj.list)[(size_t)k]);
    }
    if (is_str) return jvalue::string(utf8_encode(su));
    return obj.kind == jkind::TUPLE ? jvalue::make_tuple(std::move(items)) : jvalue::make_list(std::move(items));
}

jlist jinja_iterate(const jvalue& v) {
    switch (v.kind) {
        case jkind::UNDEFINED: return {};
        case jkind::LIST: case jkind::TUPLE: return *v.list;
        case jkind::GENERATOR: {
            jlist out = std::move(*v.list);
            v.list->clear();
            return out;
        }
        case jkind::DICT: {
            jlist out;
            for (auto& kv : v.dict->items) out.push_back(kv.first);
            return out;
        }
        case jkind::STRING: {
            jlist out;
            for (char32_t c : utf8_decode(v.s)) {
                std::string ch;
                utf8_append(ch, c);
                out.push_back(jvalue::string(ch));
            }
            return out;
        }
        default: jinja_throw("'" + v.type_name() + "' object is not iterable");
    }
}

bool jinja_contains(const jvalue& container, const jvalue& item) {
    switch (container.kind) {
        case jkind::UNDEFINED: return false;
        case jkind::STRING:
            if (!item.is_string())
                jinja_throw("'in <string>' requires string as left operand, not " + item.type_name());
            return container.s.find(item.s) != std::string::npos;
        case jkind::LIST: case jkind::TUPLE:
            for (auto& x : *container.list)
                if (py_equal(x, item)) return true;
            return false;
        case jkind::DICT: return container.dict->find(item) != nullptr;
        case jkind::GENERATOR: {  // consumes up to and including the match
            jlist& l = *container.list;
            for (size_t k = 0; k < l.size(); ++k) {
                if (!py_equal(l[k], item)) continue;
                l.erase(l.begin(), l.begin() + (std::ptrdiff_t)k + 1);
                return true;
            }
            l.clear();
            return false;
        }
        default: jinja_throw("argument of type '" + container.type_name() + "' is not iterable");
    }
}

// Call as checked(__builtin_*_overflow(...), r) is wrong (argument order); compute first.
static jvalue checked(bool overflow, int64_t r) {
    if (overflow) jinja_throw("integer overflow (the engine's ints are 64-bit)");
    return jvalue::integer(r);
}

jvalue jinja_binary(const std::string& op, const jvalue& a, const jvalue& b) {
    jinja_check_defined(a);
    jinja_check_defined(b);
    bool nums = a.is_number() && b.is_number();
    bool ints = nums && a.kind != jkind::FLOAT && b.kind != jkind::FLOAT;
    double x = a.kind == jkind::FLOAT ? a.f : (double)int_of(a);
    double y = b.kind == jkind::FLOAT ? b.f : (double)int_of(b);
    int64_t r = 0;
    auto fail = [&]() -> jvalue {
        jinja_throw("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                    b.type_name() + "'");
    };
    if (op == "+") {
        if (ints) {
            bool ovf = __builtin_add_overflow(int_of(a), int_of(b), &r);
            return checked(ovf, r);
        }
        if (nums) return jvalue::floating(x + y);
        if (a.is_string() && b.is_string()) {
            if (!a.markup && !b.markup) return jvalue::string(a.s + b.s);
            return markup_string((a.markup ? a.s : html_escape(a.s)) + (b.markup ? b.s : html_escape(b.s)));
        }
        if (a.kind == b.kind && a.is_sequence()) {
            jlist items = *a.list;
            items.insert(items.end(), b.list->begin(), b.list->end());
            return a.kind == jkind::LIST ? jvalue::make_list(std::move(items)) : jvalue::make_tuple(std::move(items));
        }
        if (a.is_string()) jinja_throw("can only concatenate str (not \"" + b.type_name() + "\") to str");
        return fail();
    }
    if (op == "-") {
        if (ints) {
            bool ovf = __builtin_sub_overflow(int_of(a), int_of(b), &r);
            return checked(ovf, r);
        }
        if (nums) return jvalue::floating(x - y);
        return fail();
    }
    if (op == "*") {
        if (ints) {
            bool ovf = __builtin_mul_overflow(int_of(a), int_of(b), &r);
            return checked(ovf, r);
        }
        if (nums) return jvalue::floating(x * y);
        const jvalue* seq = is_int_like(b) ? &a : is_int_like(a) ? &b : nullptr;
        const jvalue* cnt = seq == &a ? &b : &a;
        if (!seq || !(seq->is_string() || seq->is_sequence())) return fail();
        int64_t n = std::max(int_of(*cnt), (int64_t)0);
        if (n * (int64_t)(seq->is_string() ? seq->s.size() : seq->list->size()) > 100000000)
            jinja_throw("repetition result too large");
        if (seq->is_string()) {
            std::string out;
            for (int64_t k = 0; k < n; ++k) out += seq->s;
            return seq->markup ? markup_string(out) : jvalue::string(out);
        }
        jlist items;
        for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq->list->begin(), seq->list->end());
        return seq->kind == jkind::LIST ? jvalue::make_list(std::move(items)) : jvalue::make_tuple(std::move(items));
    }
    if (!nums) {
        if (op == "%" && a.is_string()) jinja_throw("printf-style '%' string formatting is not supported");
        return fail();
    }
    if (op == "/") {
        if (y == 0) jinja_throw("division by zero");
        return jvalue::floating(x / y);
    }
    if (op == "//" || op == "%") {
        if (y == 0) jinja_throw(ints ? "integer division or modulo by zero" : "float floor division by zero");
        if (ints) {
            int64_t p = int_of(a), q = int_of(b);
            int64_t d = p / q, m = p % q;
            if (m != 0 && ((m < 0) != (q < 0))) { --d; m += q; }
            return jvalue::integer(op == "//" ? d : m);
        }
        // CPython float_divmod
        double m = std::fmod(x, y);
        double div = (x - m) / y;
        if (m != 0 && ((y < 0) != (m < 0))) { m += y; div -= 1.0; }
        if (op == "%") return jvalue::floating(m == 0 ? std::copysign(0.0, y) : m);
        double fl = std::floor(div);
        if (div - fl > 0.5) fl += 1.0;
        return jvalue::floating(fl);
    }
    if (op == "**") {
        if (ints && int_of(b) >= 0) {
            int64_t base = int_of(a), e = int_of(b), acc = 1;
            bool ovf = false;
            while (e > 0) {
                if (e & 1) ovf |= __builtin_mul_overflow(acc, base, &acc);
                e >>= 1;
                if (e) ovf |= __builtin_mul_overflow(base, base, &base);
            }
            return checked(ovf, acc);
        }
        if (x == 0 && y < 0) jinja_throw("0.0 cannot be raised to a negative power");
        return jvalue::floating(std::pow(x, y));
    }
    return fail();
}

}  // namespace tetra
