// jinja2's builtin filters and tests (the subset chat templates use), with jinja2 3.1 semantics:
// argument names and defaults, case-insensitive sort/unique/dictsort by default, and
// transformers' tojson (json.dumps with ensure_ascii=False, indent, separators, sort_keys).
// Not provided: format, batch, slice, groupby, truncate, wordwrap, urlize, xmlattr, striptags, pprint.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "chat/jinja_ast.h"

namespace tetra {

namespace {

using filter_fn = jvalue (*)(const jvalue&, const jcall&);
using test_fn = bool (*)(const jvalue&, const jcall&);

int64_t py_len(const jvalue& v) {
    switch (v.kind) {
        case jkind::UNDEFINED: return 0;
        case jkind::STRING: return (int64_t)utf8_decode(v.s).size();
        case jkind::LIST: case jkind::TUPLE: return (int64_t)v.list->size();
        case jkind::DICT: return (int64_t)v.dict->items.size();
        default: jinja_throw("object of type '" + v.type_name() + "' has no len()");
    }
}

std::string lower_ascii(std::string s) {
    for (char& c : s)
        if ((unsigned char)c < 0x80) c = (char)tolower((unsigned char)c);
    return s;
}
std::string upper_ascii(std::string s) {
    for (char& c : s)
        if ((unsigned char)c < 0x80) c = (char)toupper((unsigned char)c);
    return s;
}

// Sort key for case-insensitive comparisons (jinja2's ignore_case).
jvalue fold(const jvalue& v, bool case_sensitive) {
    return (!case_sensitive && v.is_string()) ? jvalue::string(lower_ascii(v.s)) : v;
}

// Attribute path "a.b" or integer index as jinja2's make_attrgetter.
jvalue attr_path(const jvalue& item, const jvalue& attribute) {
    if (attribute.kind == jkind::INT) return jinja_getitem(item, attribute);
    std::string path = attribute.str();
    jvalue cur = item;
    size_t b = 0;
    while (true) {
        size_t e = path.find('.', b);
        std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
        bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
        cur = digits ? jinja_getitem(cur, jvalue::integer(std::stoll(part))) : jinja_getitem(cur, jvalue::string(part));
        if (e == std::string::npos) return cur;
        b = e + 1;
    }
}

jcall rest_args(const jcall& c, size_t from) {
    jcall r;
    for (size_t k = from; k < c.args.size(); ++k) r.args.push_back(c.args[k]);
    r.kwargs = c.kwargs;
    return r;
}

jvalue f_abs(const jvalue& v, const jcall&) {
    if (v.kind == jkind::INT) return jvalue::integer(v.i < 0 ? -v.i : v.i);
    if (v.kind == jkind::BOOL) return jvalue::integer(v.b);
    if (v.kind == jkind::FLOAT) return jvalue::floating(std::fabs(v.f));
    jinja_check_defined(v);
    jinja_throw("bad operand type for abs(): '" + v.type_name() + "'");
}
// Python getattr only: a dict's keys are not attributes (jinja2's attr filter).
jvalue f_attr(const jvalue& v, const jcall& c) {
    std::string name = c.arg(0, "name").str();
    if (v.is_mapping() && name != "items" && name != "keys" && name != "values" && name != "get")
        return jvalue::undefined("'dict object' has no attribute '" + name + "'");
    return jinja_getattr(v, name);
}
jvalue f_capitalize(const jvalue& v, const jcall&) {
    std::string s = lower_ascii(v.str());
    if (!s.empty()) s[0] = (char)toupper((unsigned char)s[0]);
    return jvalue::string(s);
}
jvalue f_center(const jvalue& v, const jcall& c) {
    std::u32string u = utf8_decode(v.str());
    int64_t width = c.arg(0, "width", jvalue::integer(80)).i;
    if ((int64_t)u.size() >= width) return jvalue::string(v.str());
    int64_t marg = width - (int64_t)u.size();
    int64_t left = marg / 2 + (marg & width & 1);
    return jvalue::string(std::string(left, ' ') + v.str() + std::string(marg - left, ' '));
}
jvalue f_length(const jvalue& v, const jcall&) { return jvalue::integer(py_len(v)); }
jvalue f_default(const jvalue& v, const jcall& c) {
    bool boolean = c.arg(1, "boolean", jvalue::boolean(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return c.arg(0, "default_value", jvalue::string(""));
    return v;
}
jvalue f_dictsort(const jvalue& v, const jcall& c) {
    if (!v.is_mapping()) jinja_throw("dictsort: expected a mapping, got " + v.type_name());
    bool cs = c.arg(0, "case_sensitive", jvalue::boolean(false)).truthy();
    std::string by = c.arg(1, "by", jvalue::string("key")).str();
    bool rev = c.arg(2, "reverse", jvalue::boolean(false)).truthy();
    if (by != "key" && by != "value") jinja_throw("You can only sort by either \"key\" or \"value\"");
    int pos = by == "key" ? 0 : 1;
    jlist items;
    for (auto& kv : v.dict->items) items.push_back(jvalue::make_tuple({kv.first, kv.second}));
    std::stable_sort(items.begin(), items.end(), [&](const jvalue& a, const jvalue& b) {
        int r = py_compare(fold((*a.list)[pos], cs), fold((*b.list)[pos], cs));
        return rev ? r > 0 : r < 0;
    });
    return jvalue::make_list(std::move(items));
}
jvalue f_escape(const jvalue& v, const jcall&) {
    if (v.is_string() && v.markup) return v;
    return markup_string(html_escape(v.str()));
}
// Filters that go through soft_str() keep Markup in jinja2.
jvalue keep_markup(const jvalue& in, jvalue out) {
    out.markup = in.is_string() && in.markup;
    return out;
}
jvalue f_first(const jvalue& v, const jcall&) {
    if (v.kind == jkind::GENERATOR) {  // next(iter(gen)) consumes one item
        if (v.list->empty()) return jvalue::undefined("No first item, sequence was empty.");
        jvalue x = v.list->front();
        v.list->erase(v.list->begin());
        return x;
    }
    jlist items = jinja_iterate(v);
    return items.empty() ? jvalue::undefined("No first item, sequence was empty.") : items.front();
}
jvalue f_last(const jvalue& v, const jcall&) {
    if (v.kind == jkind::GENERATOR) jinja_throw("'generator' object is not reversible");
    jlist items = jinja_iterate(v);
    return items.empty() ? jvalue::undefined("No last item, sequence was empty.") : items.back();
}

bool parse_py_float(std::string s, double& out) {
    s = py_strip(s, jvalue::none(), true, true);
    std::string t;
    for (char ch : s) if (ch != '_') t += ch;
    if (t.empty()) return false;
    std::string l = lower_ascii(t);
    const char* p = l.c_str();
    if (*p == '+' || *p == '-') ++p;
    if (strcmp(p, "inf") == 0 || strcmp(p, "infinity") == 0 || strcmp(p, "nan") == 0) {
        out = strtod(l.c_str(), nullptr);
        return true;
    }
    if (l.find_first_not_of("0123456789+-.e") != std::string::npos) return false;
    char* end = nullptr;
    out = strtod(t.c_str(), &end);
    return end && *end == 0;
}

jvalue f_float(const jvalue& v, const jcall& c) {
    jvalue def = c.arg(0, "default", jvalue::floating(0.0));
    if (v.kind == jkind::FLOAT) return v;
    if (v.kind == jkind::INT || v.kind == jkind::BOOL) return jvalue::floating((double)(v.kind == jkind::INT ? v.i : v.b));
    double d;
    if (v.is_string() && parse_py_float(v.s, d)) return jvalue::floating(d);
    return def;
}
jvalue f_int(const jvalue& v, const jcall& c) {
    jvalue def = c.arg(0, "default", jvalue::integer(0));
    int64_t base = c.arg(1, "base", jvalue::integer(10)).i;
    if (v.kind == jkind::INT) return v;
    if (v.kind == jkind::BOOL) return jvalue::integer(v.b);
    if (v.kind == jkind::FLOAT) {
        if (!std::isfinite(v.f)) return def;
        return jvalue::integer((int64_t)std::trunc(v.f));
    }
    if (!v.is_string()) return def;
    std::string s = py_strip(v.s, jvalue::none(), true, true), t;
    for (char ch : s) if (ch != '_') t += ch;
    if (!t.empty()) {
        char* end = nullptr;
        errno = 0;
        long long r = strtoll(t.c_str(), &end, (int)base);
        if (end && *end == 0 && !errno && !isspace((unsigned char)t[0])) return jvalue::integer(r);
    }
    double d;
    if (parse_py_float(v.s, d) && std::isfinite(d)) return jvalue::integer((int64_t)std::trunc(d));
    return def;
}
jvalue f_indent(const jvalue& v, const jcall& c) {
    jvalue w = c.arg(0, "width", jvalue::integer(4));
    std::string ind = w.is_string() ? w.s : std::string((size_t)std::max<int64_t>(w.i, 0), ' ');
    bool first = c.arg(1, "first", jvalue::boolean(false)).truthy();
    bool blank = c.arg(2, "blank", jvalue::boolean(false)).truthy();
    std::string s = v.str() + "\n";
    jcall none;
    jvalue lines_v = jinja_getattr(jvalue::string(s), "splitlines").fn->fn(none);
    jlist& lines = *lines_v.list;
    std::string rv;
    if (blank) {
        for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k].s;
    } else {
        rv = lines.empty() ? "" : lines[0].s;
        for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].s.empty() ? "" : ind + lines[k].s);
    }
    return jvalue::string(first ? ind + rv : rv);
}
jvalue f_items(const jvalue& v, const jcall&) {
    if (v.is_undefined()) return jvalue::make_generator({});
    if (!v.is_mapping()) jinja_throw("Can only get item pairs from a mapping.");
    jlist items;
    for (auto& kv : v.dict->items) items.push_back(jvalue::make_tuple({kv.first, kv.second}));
    return jvalue::make_generator(std::move(items));
}
jvalue f_join(const jvalue& v, const jcall& c) {
    std::string sep = c.arg(0, "d", jvalue::string("")).str();
    jvalue attribute = c.arg(1, "attribute", jvalue::none());
    std::string out;
    jlist items = jinja_iterate(v);
    for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += sep;
        out += (attribute.is_none() ? items[k] : attr_path(items[k], attribute)).str();
    }
    return jvalue::string(out);
}
jvalue f_list(const jvalue& v, const jcall&) { return jvalue::make_list(jinja_iterate(v)); }
jvalue f_lower(const jvalue& v, const jcall&) { return keep_markup(v, jvalue::string(lower_ascii(v.str()))); }
jvalue f_upper(const jvalue& v, const jcall&) { return keep_markup(v, jvalue::string(upper_ascii(v.str()))); }
jvalue f_map(const jvalue& v, const jcall& c) {
    jlist out;
    if (!v.truthy()) return jvalue::make_generator({});  // jinja2: `if value:` before iterating
    jlist items = jinja_iterate(v);
    if (c.args.empty()) {
        jvalue attribute = c.arg(99, "attribute");
        if (attribute.is_undefined()) jinja_throw("map: a filter name or attribute= is required");
        jvalue def = c.arg(99, "default");
        for (auto& it : items) {
            jvalue r = attr_path(it, attribute);
            out.push_back(r.is_undefined() && !def.is_undefined() ? def : r);
        }
    } else {
        std::string name = c.args[0].str();
        if (!jinja_has_filter(name)) jinja_throw("No filter named '" + name + "'.");
        jcall rest = rest_args(c, 1);
        for (auto& it : items) out.push_back(jinja_filter(name, it, rest));
    }
    return jvalue::make_generator(std::move(out));
}
jvalue select_impl(const jvalue& v, const jcall& c, bool by_attr, bool keep) {
    jlist out;
    if (!v.truthy()) return jvalue::make_generator({});  // jinja2: `if value:` before iterating
    size_t k = 0;
    jvalue attribute;
    if (by_attr) attribute = c.arg(k++, "attribute");
    std::string test = c.args.size() > k ? c.args[k].str() : "";
    if (!test.empty() && !jinja_has_test(test)) jinja_throw("No test named '" + test + "'.");
    jcall rest = rest_args(c, k + 1);
    rest.kwargs.clear();
    for (auto& it : jinja_iterate(v)) {
        jvalue x = by_attr ? attr_path(it, attribute) : it;
        bool ok = test.empty() ? x.truthy() : jinja_test(test, x, rest);
        if (ok == keep) out.push_back(it);
    }
    return jvalue::make_generator(std::move(out));
}
jvalue f_select(const jvalue& v, const jcall& c) { return select_impl(v, c, false, true); }
jvalue f_reject(const jvalue& v, const jcall& c) { return select_impl(v, c, false, false); }
jvalue f_selectattr(const jvalue& v, const jcall& c) { return select_impl(v, c, true, true); }
jvalue f_rejectattr(const jvalue& v, const jcall& c) { return select_impl(v, c, true, false); }

jvalue minmax(const jvalue& v, const jcall& c, bool want_max) {
    bool cs = c.arg(0, "case_sensitive", jvalue::boolean(false)).truthy();
    jvalue attribute = c.arg(1, "attribute", jvalue::none());
    jlist items = jinja_iterate(v);
    if (items.empty()) return jvalue::undefined(std::string("No aggregated item, sequence was empty."));
    auto key = [&](const jvalue& x) { return fold(attribute.is_none() ? x : attr_path(x, attribute), cs); };
    size_t best = 0;
    for (size_t k = 1; k < items.size(); ++k) {
        int r = py_compare(key(items[k]), key(items[best]));
        if (want_max ? r > 0 : r < 0) best = k;
    }
    return items[best];
}
jvalue f_max(const jvalue& v, const jcall& c) { return minmax(v, c, true); }
jvalue f_min(const jvalue& v, const jcall& c) { return minmax(v, c, false); }
jvalue f_replace(const jvalue& v, const jcall& c) {
    jvalue count = c.arg(2, "count", jvalue::none());
    jcall mc;
    mc.args = {jvalue::string(c.arg(0, "old").str()), jvalue::string(c.arg(1, "new").str()),
               count.is_none() ? jvalue::integer(-1) : count};
    return jinja_getattr(jvalue::string(v.str()), "replace").fn->fn(mc);
}
jvalue f_reverse(const jvalue& v, const jcall&) {
    if (v.is_string()) return jinja_slice(v, jvalue::none(), jvalue::none(), jvalue::integer(-1));
    bool reversible = v.is_sequence() || v.is_mapping();  // reversed() gives an iterator
    jlist items = jinja_iterate(v);
    std::reverse(items.begin(), items.end());
    return reversible ? jvalue::make_generator(std::move(items)) : jvalue::make_list(std::move(items));
}
jvalue f_round(const jvalue& v, const jcall& c) {
    int64_t prec = c.arg(0, "precision", jvalue::integer(0)).i;
    std::string method = c.arg(1, "method", jvalue::string("common")).str();
    if (method != "common" && method != "ceil" && method != "floor")
        jinja_throw("method must be common, ceil or floor");
    if (!v.is_number()) { jinja_check_defined(v); jinja_throw("type " + v.type_name() + " doesn't define __round__ method"); }
    double x = v.kind == jkind::FLOAT ? v.f : (double)(v.kind == jkind::INT ? v.i : v.b);
    if (method == "common") {
        if (v.kind != jkind::FLOAT && prec >= 0) return jvalue::integer(v.kind == jkind::INT ? v.i : v.b);
        char buf[512];
        if (prec < 0 || prec > 300) jinja_throw("round: unsupported precision");
        snprintf(buf, sizeof buf, "%.*f", (int)prec, x);  // exact, round-half-even like CPython
        return jvalue::floating(strtod(buf, nullptr));
    }
    double p = std::pow(10.0, (double)prec);
    return jvalue::floating((method == "ceil" ? std::ceil(x * p) : std::floor(x * p)) / p);
}
jvalue f_safe(const jvalue& v, const jcall&) { return markup_string(v.str()); }
jvalue f_sort(const jvalue& v, const jcall& c) {
    bool rev = c.arg(0, "reverse", jvalue::boolean(false)).truthy();
    bool cs = c.arg(1, "case_sensitive", jvalue::boolean(false)).truthy();
    jvalue attribute = c.arg(2, "attribute", jvalue::none());
    jlist items = jinja_iterate(v);
    auto key = [&](const jvalue& x) { return fold(attribute.is_none() ? x : attr_path(x, attribute), cs); };
    std::stable_sort(items.begin(), items.end(), [&](const jvalue& a, const jvalue& b) {
        int r = py_compare(key(a), key(b));
        return rev ? r > 0 : r < 0;
    });
    return jvalue::make_list(std::move(items));
}
jvalue f_string(const jvalue& v, const jcall&) { return keep_markup(v, jvalue::string(v.str())); }
jvalue f_sum(const jvalue& v, const jcall& c) {
    jvalue attribute = c.arg(0, "attribute", jvalue::none());
    jvalue acc = c.arg(1, "start", jvalue::integer(0));
    for (auto& it : jinja_iterate(v)) acc = jinja_binary("+", acc, attribute.is_none() ? it : attr_path(it, attribute));
    return acc;
}
jvalue f_title(const jvalue& v, const jcall&) {
    // jinja2: split on runs of [-\s({[<], capitalize each chunk
    std::u32string u = utf8_decode(v.str());
    std::string out;
    bool start = true;
    for (char32_t ch : u) {
        bool sep = ch == '-' || ch == '(' || ch == '{' || ch == '[' || ch == '<' || py_isspace(ch);
        char32_t o = ch;
        if (!sep && ch < 0x80) o = start ? (char32_t)toupper((int)ch) : (char32_t)tolower((int)ch);
        utf8_append(out, o);
        start = sep;
    }
    return jvalue::string(out);
}
jvalue f_tojson(const jvalue& v, const jcall& c) {
    bool ascii = c.arg(0, "ensure_ascii", jvalue::boolean(false)).truthy();
    jvalue indent = c.arg(1, "indent", jvalue::none());
    jvalue seps = c.arg(2, "separators", jvalue::none());
    bool sort_keys = c.arg(3, "sort_keys", jvalue::boolean(false)).truthy();
    if (!indent.is_none() && indent.kind != jkind::INT) jinja_throw("tojson: indent must be an integer");
    if (!seps.is_none()) jinja_throw("tojson: separators are not supported");
    std::string s = py_json_dumps(v, indent.is_none() ? -1 : (int)std::max<int64_t>(indent.i, 0), sort_keys);
    if (!ascii) return jvalue::string(s);
    std::string out;
    char buf[16];
    for (char32_t ch : utf8_decode(s)) {
        if (ch < 0x80) { out += (char)ch; continue; }
        if (ch >= 0x10000) {
            char32_t x = ch - 0x10000;
            snprintf(buf, sizeof buf, "\\u%04x\\u%04x", (unsigned)(0xD800 + (x >> 10)), (unsigned)(0xDC00 + (x & 0x3FF)));
        } else {
            snprintf(buf, sizeof buf, "\\u%04x", (unsigned)ch);
        }
        out += buf;
    }
    return jvalue::string(out);
}
jvalue f_trim(const jvalue& v, const jcall& c) {
    return keep_markup(v, jvalue::string(py_strip(v.str(), c.arg(0, "chars", jvalue::none()), true, true)));
}
jvalue f_unique(const jvalue& v, const jcall& c) {
    bool cs = c.arg(0, "case_sensitive", jvalue::boolean(false)).truthy();
    jvalue attribute = c.arg(1, "attribute", jvalue::none());
    jlist out, seen;
    for (auto& it : jinja_iterate(v)) {
        jvalue key = fold(attribute.is_none() ? it : attr_path(it, attribute), cs);
        bool dup = false;
        for (auto& s : seen) dup = dup || py_equal(s, key);
        if (dup) continue;
        seen.push_back(key);
        out.push_back(it);
    }
    return jvalue::make_generator(std::move(out));
}
jvalue f_wordcount(const jvalue& v, const jcall&) {
    int64_t n = 0;
    bool in_word = false;
    for (char32_t ch : utf8_decode(v.str())) {
        bool w = ch == '_' || ch >= 0x80 ? !py_isspace(ch) : isalnum((int)ch) != 0;
        if (w && !in_word) ++n;
        in_word = w;
    }
    return jvalue::integer(n);
}

const std::map<std::string, filter_fn>& filters() {
    static const std::map<std::string, filter_fn> m = {
        {"abs", f_abs}, {"attr", f_attr}, {"capitalize", f_capitalize}, {"center", f_center},
        {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort},
        {"e", f_escape}, {"escape", f_escape}, {"first", f_first}, {"float", f_float},
        {"indent", f_indent}, {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last},
        {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max},
        {"min", f_min}, {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace},
        {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", f_select},
        {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string}, {"sum", f_sum},
        {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"unique", f_unique},
        {"upper", f_upper}, {"wordcount", f_wordcount}};
    return m;
}

// ---- tests ---------------------------------------------------------------------------------

jvalue targ(const jcall& c) {
    if (c.args.empty()) jinja_throw("test needs an argument");
    return c.args[0];
}
bool t_defined(const jvalue& v, const jcall&) { return !v.is_undefined(); }
bool t_undefined(const jvalue& v, const jcall&) { return v.is_undefined(); }
bool t_none(const jvalue& v, const jcall&) { return v.is_none(); }
bool t_boolean(const jvalue& v, const jcall&) { return v.kind == jkind::BOOL; }
bool t_false(const jvalue& v, const jcall&) { return v.kind == jkind::BOOL && !v.b; }
bool t_true(const jvalue& v, const jcall&) { return v.kind == jkind::BOOL && v.b; }
bool t_integer(const jvalue& v, const jcall&) { return v.kind == jkind::INT; }
bool t_float(const jvalue& v, const jcall&) { return v.kind == jkind::FLOAT; }
bool t_number(const jvalue& v, const jcall&) { return v.is_number(); }
bool t_string(const jvalue& v, const jcall&) { return v.is_string(); }
bool t_mapping(const jvalue& v, const jcall&) { return v.is_mapping(); }
bool t_iterable(const jvalue& v, const jcall&) {
    return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_mapping() || v.kind == jkind::GENERATOR;
}
bool t_sequence(const jvalue& v, const jcall&) {
    return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_mapping();
}
bool t_callable(const jvalue& v, const jcall&) { return v.kind == jkind::CALLABLE; }
bool t_sameas(const jvalue& v, const jcall& c) {
    jvalue o = targ(c);
    if (v.kind != o.kind) return false;
    if (v.list) return v.list == o.list;
    if (v.dict) return v.dict == o.dict;
    if (v.fn) return v.fn == o.fn;
    return py_equal(v, o);
}
bool t_escaped(const jvalue& v, const jcall&) { return v.is_string() && v.markup; }
int64_t int_mod(const jvalue& v, int64_t m) {
    jvalue r = jinja_binary("%", v, jvalue::integer(m));
    return r.kind == jkind::FLOAT ? (r.f == 0 ? 0 : 1) : r.i;
}
bool t_even(const jvalue& v, const jcall&) { return int_mod(v, 2) == 0; }
bool t_odd(const jvalue& v, const jcall&) { return int_mod(v, 2) == 1; }
bool t_divisibleby(const jvalue& v, const jcall& c) {
    jvalue r = jinja_binary("%", v, targ(c));
    return !r.truthy();
}
bool t_eq(const jvalue& v, const jcall& c) { return py_equal(v, targ(c)); }
bool t_ne(const jvalue& v, const jcall& c) { return !py_equal(v, targ(c)); }
bool t_lt(const jvalue& v, const jcall& c) { return py_compare(v, targ(c)) < 0; }
bool t_le(const jvalue& v, const jcall& c) { return py_compare(v, targ(c)) <= 0; }
bool t_gt(const jvalue& v, const jcall& c) { return py_compare(v, targ(c)) > 0; }
bool t_ge(const jvalue& v, const jcall& c) { return py_compare(v, targ(c)) >= 0; }
bool t_in(const jvalue& v, const jcall& c) { return jinja_contains(targ(c), v); }
bool t_lower(const jvalue& v, const jcall&) {
    jcall none;
    return jinja_getattr(jvalue::string(v.str()), "islower").fn->fn(none).b;
}
bool t_upper(const jvalue& v, const jcall&) {
    jcall none;
    return jinja_getattr(jvalue::string(v.str()), "isupper").fn->fn(none).b;
}
bool t_filter(const jvalue& v, const jcall&) { return v.is_string() && jinja_has_filter(v.s); }
bool t_test(const jvalue& v, const jcall&) { return v.is_string() && jinja_has_test(v.s); }

const std::map<std::string, test_fn>& tests() {
    static const std::map<std::string, test_fn> m = {
        {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"boolean", t_boolean},
        {"false", t_false}, {"true", t_true}, {"integer", t_integer}, {"float", t_float},
        {"number", t_number}, {"string", t_string}, {"mapping", t_mapping}, {"iterable", t_iterable},
        {"sequence", t_sequence}, {"callable", t_callable}, {"sameas", t_sameas}, {"escaped", t_escaped},
        {"even", t_even}, {"odd", t_odd}, {"divisibleby", t_divisibleby}, {"eq", t_eq},
        {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne}, {"!=", t_ne}, {"lt", t_lt}, {"lessthan", t_lt},
        {"<", t_lt}, {"le", t_le}, {"<=", t_le}, {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt},
        {"ge", t_ge}, {">=", t_ge}, {"in", t_in}, {"lower", t_lower}, {"upper", t_upper},
        {"filter", t_filter}, {"test", t_test}};
    return m;
}

}  // namespace

bool jinja_has_filter(const std::string& name) { return filters().count(name) > 0; }
bool jinja_has_test(const std::string& name) { return tests().count(name) > 0; }

jvalue jinja_filter(const std::string& name, const jvalue& subject, const jcall& call) {
    auto it = filters().find(name);
    if (it == filters().end()) jinja_throw("unknown filter '" + name + "'");
    return it->second(subject, call);
}

bool jinja_test(const std::string& name, const jvalue& subject, const jcall& call) {
    auto it = tests().find(name);
    if (it == tests().end()) jinja_throw("unknown test '" + name + "'");
    return it->second(subject, call);
}

}  // namespace tetra
