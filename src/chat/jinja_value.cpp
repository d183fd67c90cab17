// Python semantics of jvalue: str/repr, truthiness, equality, ordering, json.dumps and UTF-8 helpers.
// Float formatting follows CPython's repr (shortest round-trip, exponent outside [-4, 16)).
// repr's "printable" test approximates Python's Unicode tables (ASCII and common ranges only).
#include "chat/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tetra {

jvalue jvalue::undefined(std::string hint) { jvalue v; v.kind = jkind::UNDEFINED; v.s = std::move(hint); return v; }
jvalue jvalue::none() { jvalue v; v.kind = jkind::NONE; return v; }
jvalue jvalue::boolean(bool x) { jvalue v; v.kind = jkind::BOOL; v.b = x; return v; }
jvalue jvalue::integer(int64_t x) { jvalue v; v.kind = jkind::INT; v.i = x; return v; }
jvalue jvalue::floating(double x) { jvalue v; v.kind = jkind::FLOAT; v.f = x; return v; }
jvalue jvalue::string(std::string x) { jvalue v; v.kind = jkind::STRING; v.s = std::move(x); return v; }
jvalue jvalue::make_list(jlist items) {
    jvalue v; v.kind = jkind::LIST; v.list = std::make_shared<jlist>(std::move(items)); return v;
}
jvalue jvalue::make_tuple(jlist items) {
    jvalue v; v.kind = jkind::TUPLE; v.list = std::make_shared<jlist>(std::move(items)); return v;
}
jvalue jvalue::make_generator(jlist items) {
    jvalue v; v.kind = jkind::GENERATOR; v.list = std::make_shared<jlist>(std::move(items)); return v;
}
jvalue jvalue::make_dict() { jvalue v; v.kind = jkind::DICT; v.dict = std::make_shared<jdict>(); return v; }
jvalue jvalue::make_namespace() {
    jvalue v; v.kind = jkind::NAMESPACE; v.dict = std::make_shared<jdict>(); return v;
}
jvalue jvalue::callable(std::string name, jfunction fn) {
    jvalue v; v.kind = jkind::CALLABLE;
    v.fn = std::make_shared<jfunc>(jfunc{std::move(name), std::move(fn)});
    return v;
}

std::string html_escape(const std::string& s) {
    std::string out;
    for (char ch : s) {
        switch (ch) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += ch;
        }
    }
    return out;
}

jvalue markup_string(std::string s) {
    jvalue v = jvalue::string(std::move(s));
    v.markup = true;
    return v;
}

void jinja_throw(std::string msg) { throw jinja_fail{std::move(msg)}; }
void jinja_check_defined(const jvalue& v) {
    if (v.is_undefined()) jinja_throw(v.s.empty() ? "value is undefined" : v.s);
}

bool jvalue::truthy() const {
    switch (kind) {
        case jkind::UNDEFINED: case jkind::NONE: return false;
        case jkind::BOOL: return b;
        case jkind::INT: return i != 0;
        case jkind::FLOAT: return f != 0.0;
        case jkind::STRING: return !s.empty();
        case jkind::LIST: case jkind::TUPLE: return !list->empty();
        case jkind::DICT: return !dict->items.empty();
        case jkind::NAMESPACE: case jkind::CALLABLE: case jkind::GENERATOR: return true;
    }
    return false;
}

std::string jvalue::type_name() const {
    switch (kind) {
        case jkind::UNDEFINED: return "Undefined";
        case jkind::NONE: return "NoneType";
        case jkind::BOOL: return "bool";
        case jkind::INT: return "int";
        case jkind::FLOAT: return "float";
        case jkind::STRING: return "str";
        case jkind::LIST: return "list";
        case jkind::TUPLE: return "tuple";
        case jkind::DICT: return "dict";
        case jkind::NAMESPACE: return "Namespace";
        case jkind::CALLABLE: return "function";
        case jkind::GENERATOR: return "generator";
    }
    return "object";
}

// ---- float repr ----------------------------------------------------------------------------

std::string py_float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
    char buf[64];
    int prec = 1;
    for (; prec <= 17; ++prec) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, nullptr) == d) break;
    }
    // buf = [-]D.DDDDe[+-]XX
    std::string s(buf);
    bool neg = s[0] == '-';
    if (neg) s.erase(0, 1);
    size_t epos = s.find('e');
    int exp = atoi(s.c_str() + epos + 1);
    std::string digits;
    for (size_t k = 0; k < epos; ++k) if (s[k] != '.') digits += s[k];
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    std::string out;
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            std::string ip = digits.substr(0, std::min(digits.size(), (size_t)exp + 1));
            while ((int)ip.size() < exp + 1) ip += '0';
            std::string fp = digits.size() > (size_t)exp + 1 ? digits.substr(exp + 1) : "0";
            out = ip + "." + fp;
        } else {
            out = "0." + std::string(-exp - 1, '0') + digits;
        }
    } else {
        out = digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        char eb[16];
        snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
        out += eb;
    }
    return neg ? "-" + out : out;
}

// ---- UTF-8 ---------------------------------------------------------------------------------

void utf8_append(std::string& out, char32_t c) {
    if (c < 0x80) { out += (char)c; }
    else if (c < 0x800) { out += (char)(0xC0 | (c >> 6)); out += (char)(0x80 | (c & 0x3F)); }
    else if (c < 0x10000) {
        out += (char)(0xE0 | (c >> 12)); out += (char)(0x80 | ((c >> 6) & 0x3F));
        out += (char)(0x80 | (c & 0x3F));
    } else {
        out += (char)(0xF0 | (c >> 18)); out += (char)(0x80 | ((c >> 12) & 0x3F));
        out += (char)(0x80 | ((c >> 6) & 0x3F)); out += (char)(0x80 | (c & 0x3F));
    }
}

std::u32string utf8_decode(const std::string& s) {
    std::u32string out;
    out.reserve(s.size());
    size_t i = 0, n = s.size();
    while (i < n) {
        unsigned char c = s[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > n) { out += U'\uFFFD'; ++i; continue; }
        char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
        bool ok = true;
        for (int k = 1; k < len; ++k) {
            unsigned char cc = s[i + k];
            if ((cc & 0xC0) != 0x80) { ok = false; break; }
            cp = (cp << 6) | (cc & 0x3F);
        }
        if (!ok) { out += U'\uFFFD'; ++i; continue; }
        out += cp;
        i += len;
    }
    return out;
}

std::string utf8_encode(const std::u32string& s) {
    std::string out;
    out.reserve(s.size());
    for (char32_t c : s) utf8_append(out, c);
    return out;
}

bool py_isspace(char32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

// Approximation of Python's str.isprintable() for one code point.
static bool py_isprintable(char32_t c) {
    if (c < 0x20 || c == 0x7f) return false;
    if (c < 0x7f) return true;
    if (c <= 0xa0 || c == 0xad) return false;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f)) return false;
    if ((c >= 0x205f && c <= 0x206f) || c == 0x3000 || c == 0xfeff) return false;
    if ((c >= 0xd800 && c <= 0xf8ff) || (c >= 0xfff9 && c <= 0xfffb)) return false;
    if (c >= 0xf0000) return false;
    return true;
}

std::string py_str_repr(const std::string& s) {
    bool has_sq = s.find('\'') != std::string::npos, has_dq = s.find('"') != std::string::npos;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    std::string out(1, q);
    for (char32_t c : utf8_decode(s)) {
        char buf[16];
        if (c == (char32_t)q || c == '\\') { out += '\\'; out += (char)c; }
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (py_isprintable(c)) utf8_append(out, c);
        else if (c < 0x100) { snprintf(buf, sizeof buf, "\\x%02x", (unsigned)c); out += buf; }
        else if (c < 0x10000) { snprintf(buf, sizeof buf, "\\u%04x", (unsigned)c); out += buf; }
        else { snprintf(buf, sizeof buf, "\\U%08x", (unsigned)c); out += buf; }
    }
    out += q;
    return out;
}

// ---- str / repr ----------------------------------------------------------------------------

std::string jvalue::str() const {
    switch (kind) {
        case jkind::UNDEFINED: return "";
        case jkind::STRING: return s;
        default: return repr();
    }
}

std::string jvalue::repr() const {
    switch (kind) {
        case jkind::UNDEFINED: return "";
        case jkind::NONE: return "None";
        case jkind::BOOL: return b ? "True" : "False";
        case jkind::INT: return std::to_string(i);
        case jkind::FLOAT: return py_float_repr(f);
        case jkind::STRING: return py_str_repr(s);
        case jkind::LIST: case jkind::TUPLE: {
            bool tup = kind == jkind::TUPLE;
            std::string out = tup ? "(" : "[";
            for (size_t k = 0; k < list->size(); ++k) {
                if (k) out += ", ";
                out += (*list)[k].repr();
            }
            if (tup && list->size() == 1) out += ",";
            return out + (tup ? ")" : "]");
        }
        case jkind::DICT: case jkind::NAMESPACE: {
            std::string out = kind == jkind::NAMESPACE ? "<Namespace {" : "{";
            bool first = true;
            for (auto& kv : dict->items) {
                if (!first) out += ", ";
                first = false;
                out += kv.first.repr() + ": " + kv.second.repr();
            }
            return out + (kind == jkind::NAMESPACE ? "}>" : "}");
        }
        case jkind::CALLABLE: return "<function " + fn->name + ">";
        case jkind::GENERATOR: return "<generator object>";
    }
    return "";
}

// ---- equality and ordering -----------------------------------------------------------------

static bool numeric(const jvalue& v) { return v.kind == jkind::INT || v.kind == jkind::FLOAT || v.kind == jkind::BOOL; }
static double as_double(const jvalue& v) {
    return v.kind == jkind::FLOAT ? v.f : v.kind == jkind::INT ? (double)v.i : (double)v.b;
}
static int64_t as_int(const jvalue& v) { return v.kind == jkind::INT ? v.i : (int64_t)v.b; }

bool py_equal(const jvalue& a, const jvalue& b) {
    if (numeric(a) && numeric(b)) {
        if (a.kind != jkind::FLOAT && b.kind != jkind::FLOAT) return as_int(a) == as_int(b);
        return as_double(a) == as_double(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case jkind::UNDEFINED: case jkind::NONE: return true;
        case jkind::STRING: return a.s == b.s;
        case jkind::LIST: case jkind::TUPLE: {
            if (a.list->size() != b.list->size()) return false;
            for (size_t k = 0; k < a.list->size(); ++k)
                if (!py_equal((*a.list)[k], (*b.list)[k])) return false;
            return true;
        }
        case jkind::DICT: {
            if (a.dict->items.size() != b.dict->items.size()) return false;
            for (auto& kv : a.dict->items) {
                jvalue* o = b.dict->find(kv.first);
                if (!o || !py_equal(kv.second, *o)) return false;
            }
            return true;
        }
        case jkind::NAMESPACE: return a.dict == b.dict;
        case jkind::GENERATOR: return a.list == b.list;
        case jkind::CALLABLE: return a.fn == b.fn;
        default: return false;
    }
}

int py_compare(const jvalue& a, const jvalue& b) {
    if (numeric(a) && numeric(b)) {
        if (a.kind != jkind::FLOAT && b.kind != jkind::FLOAT) {
            int64_t x = as_int(a), y = as_int(b);
            return x < y ? -1 : x > y ? 1 : 0;
        }
        double x = as_double(a), y = as_double(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.kind == jkind::STRING && b.kind == jkind::STRING) return a.s < b.s ? -1 : a.s > b.s ? 1 : 0;
    if (a.kind == b.kind && a.is_sequence()) {
        size_t n = std::min(a.list->size(), b.list->size());
        for (size_t k = 0; k < n; ++k) {
            if (py_equal((*a.list)[k], (*b.list)[k])) continue;
            return py_compare((*a.list)[k], (*b.list)[k]);
        }
        return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
    }
    jinja_check_defined(a);
    jinja_check_defined(b);
    jinja_throw("'<' not supported between instances of '" + a.type_name() + "' and '" +
                b.type_name() + "'");
}

jvalue* jdict::find(const jvalue& key) {
    for (auto& kv : items)
        if (py_equal(kv.first, key)) return &kv.second;
    return nullptr;
}
jvalue* jdict::find(const std::string& key) {
    for (auto& kv : items)
        if (kv.first.kind == jkind::STRING && kv.first.s == key) return &kv.second;
    return nullptr;
}
void jdict::set(const jvalue& key, jvalue v) {
    if (jvalue* p = find(key)) { *p = std::move(v); return; }
    items.emplace_back(key, std::move(v));
}

jvalue jcall::arg(size_t idx, const char* name, jvalue def) const {
    if (idx < args.size()) return args[idx];
    for (auto& kv : kwargs)
        if (kv.first == name) return kv.second;
    return def;
}
bool jcall::has(size_t idx, const char* name) const {
    if (idx < args.size()) return true;
    for (auto& kv : kwargs)
        if (kv.first == name) return true;
    return false;
}

// ---- json.dumps ----------------------------------------------------------------------------

static void json_str(std::string& out, const std::string& s) {
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += (char)c;
                }
        }
    }
    out += '"';
}

static std::string json_key(const jvalue& k) {
    switch (k.kind) {
        case jkind::STRING: return k.s;
        case jkind::INT: return std::to_string(k.i);
        case jkind::FLOAT: return py_float_repr(k.f);
        case jkind::BOOL: return k.b ? "true" : "false";
        case jkind::NONE: return "null";
        default: jinja_throw("keys must be str, int, float, bool or None, not " + k.type_name());
    }
}

static void json_dump(std::string& out, const jvalue& v, int indent, bool sort_keys, int depth) {
    auto newline = [&](int d) {
        out += '\n';
        out.append((size_t)(indent * d), ' ');
    };
    switch (v.kind) {
        case jkind::NONE: out += "null"; return;
        case jkind::BOOL: out += v.b ? "true" : "false"; return;
        case jkind::INT: out += std::to_string(v.i); return;
        case jkind::FLOAT:
            if (std::isnan(v.f)) out += "NaN";
            else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
            else out += py_float_repr(v.f);
            return;
        case jkind::STRING: json_str(out, v.s); return;
        case jkind::LIST: case jkind::TUPLE: {
            if (v.list->empty()) { out += "[]"; return; }
            out += '[';
            for (size_t k = 0; k < v.list->size(); ++k) {
                if (k) out += indent >= 0 ? "," : ", ";
                if (indent >= 0) newline(depth + 1);
                json_dump(out, (*v.list)[k], indent, sort_keys, depth + 1);
            }
            if (indent >= 0) newline(depth);
            out += ']';
            return;
        }
        case jkind::DICT: {
            if (v.dict->items.empty()) { out += "{}"; return; }
            std::vector<std::pair<std::string, const jvalue*>> kv;
            for (auto& p : v.dict->items) kv.emplace_back(json_key(p.first), &p.second);
            if (sort_keys)
                std::stable_sort(kv.begin(), kv.end(),
                                 [](auto& a, auto& b) { return a.first < b.first; });
            out += '{';
            for (size_t k = 0; k < kv.size(); ++k) {
                if (k) out += indent >= 0 ? "," : ", ";
                if (indent >= 0) newline(depth + 1);
                json_str(out, kv[k].first);
                out += ": ";
                json_dump(out, *kv[k].second, indent, sort_keys, depth + 1);
            }
            if (indent >= 0) newline(depth);
            out += '}';
            return;
        }
        default:
            jinja_throw("Object of type " + v.type_name() + " is not JSON serializable");
    }
}

std::string py_json_dumps(const jvalue& v, int indent, bool sort_keys) {
    std::string out;
    json_dump(out, v, indent, sort_keys, 0);
    return out;
}

jvalue jvalue_from_json(const nlohmann::ordered_json& j) {
    using t = nlohmann::ordered_json::value_t;
    switch (j.type()) {
        case t::null: return jvalue::none();
        case t::boolean: return jvalue::boolean(j.get<bool>());
        case t::number_integer: return jvalue::integer(j.get<int64_t>());
        case t::number_unsigned: return jvalue::integer((int64_t)j.get<uint64_t>());
        case t::number_float: return jvalue::floating(j.get<double>());
        case t::string: return jvalue::string(j.get<std::string>());
        case t::array: {
            jlist items;
            for (auto& e : j) items.push_back(jvalue_from_json(e));
            return jvalue::make_list(std::move(items));
        }
        case t::object: {
            jvalue d = jvalue::make_dict();
            for (auto it = j.begin(); it != j.end(); ++it)
                d.dict->items.emplace_back(jvalue::string(it.key()), jvalue_from_json(it.value()));
            return d;
        }
        default: return jvalue::none();
    }
}

}  // namespace tetra
