// Python object model for the engine: attribute/item lookup with jinja2's fallbacks, slicing,
// iteration, `in`, arithmetic, and the dict/list methods templates call (str methods live in
// jinja_str.cpp). Mutating methods resolve to an undefined that fails when called, as in jinja2's
// ImmutableSandboxedEnvironment.
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
        if (obj.is_string()) return jinja_str_method(obj.s, m, c);
        if (obj.is_mapping()) return dict_method(obj, m, c);
        return list_method(obj, m, c);
    });
}

jvalue unsafe(const jvalue& obj, const std::string& m) {
    return jvalue::undefined("access to attribute '" + m + "' of '" + obj.type_name() + "' object is unsafe.");
}

}  // namespace

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
            if (jinja_is_str_method(attr)) return bound(obj, attr);
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
