// Dynamic value of the Jinja-subset engine, with Python semantics: str()/repr() like CPython
// (True/None/1.0/{'a': 1}), truthiness, ==, ordering, and json.dumps-compatible tojson.
// Invariant: lists, dicts and namespaces are shared by reference (like Python objects); dicts keep
// insertion order. Markup is a flag on strings (kept by + and a few filters; str methods drop it).
// Does not model autoescape, big integers (int is int64) or sets.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tetra {

struct jvalue;
struct jcall;
using jlist = std::vector<jvalue>;
using jfunction = std::function<jvalue(jcall&)>;

// GENERATOR models the lazy iterators jinja2 filters return (map, select, items, unique, reverse):
// always truthy, no len(), not JSON-serializable, and consumed by iteration (single use).
enum class jkind { UNDEFINED, NONE, BOOL, INT, FLOAT, STRING, LIST, TUPLE, DICT, NAMESPACE, CALLABLE, GENERATOR };

struct jdict;
struct jfunc { std::string name; jfunction fn; };

struct jvalue {
    jkind kind = jkind::UNDEFINED;
    bool b = false;
    bool markup = false;  // STRING marked safe (|safe, |escape): `+` escapes the other operand
    int64_t i = 0;
    double f = 0.0;
    std::string s;  // STRING: text (UTF-8); UNDEFINED: the error hint ("'x' is undefined")
    std::shared_ptr<jlist> list;  // LIST, TUPLE, GENERATOR (remaining items)
    std::shared_ptr<jdict> dict;  // DICT, NAMESPACE
    std::shared_ptr<jfunc> fn;    // CALLABLE

    jvalue() = default;
    static jvalue undefined(std::string hint);
    static jvalue none();
    static jvalue boolean(bool v);
    static jvalue integer(int64_t v);
    static jvalue floating(double v);
    static jvalue string(std::string v);
    static jvalue make_list(jlist items = {});
    static jvalue make_tuple(jlist items);
    static jvalue make_generator(jlist items);
    static jvalue make_dict();
    static jvalue make_namespace();
    static jvalue callable(std::string name, jfunction fn);

    bool is_undefined() const { return kind == jkind::UNDEFINED; }
    bool is_none() const { return kind == jkind::NONE; }
    bool is_string() const { return kind == jkind::STRING; }
    bool is_number() const { return kind == jkind::INT || kind == jkind::FLOAT || kind == jkind::BOOL; }
    bool is_sequence() const { return kind == jkind::LIST || kind == jkind::TUPLE; }
    bool is_mapping() const { return kind == jkind::DICT; }

    bool truthy() const;
    std::string str() const;   // Python str()
    std::string repr() const;  // Python repr()
    std::string type_name() const;  // Python type name: 'int', 'str', 'dict', 'list', ...
};

struct jdict {
    std::vector<std::pair<jvalue, jvalue>> items;
    jvalue* find(const jvalue& key);
    jvalue* find(const std::string& key);
    void set(const jvalue& key, jvalue v);
    void set(const std::string& key, jvalue v) { set(jvalue::string(key), std::move(v)); }
};

// Call arguments: positional then keyword, as written at the call site.
struct jcall {
    std::vector<jvalue> args;
    std::vector<std::pair<std::string, jvalue>> kwargs;
    // Python-style binding of argument `idx` named `name`; returns def when absent.
    jvalue arg(size_t idx, const char* name, jvalue def = jvalue::undefined("")) const;
    bool has(size_t idx, const char* name) const;
};

// Internal runtime failure without a location; the evaluator adds line/column and a caret.
struct jinja_fail {
    std::string msg;
};
[[noreturn]] void jinja_throw(std::string msg);
// Throws the undefined value's error ("'x' is undefined") when v is undefined.
void jinja_check_defined(const jvalue& v);

bool py_equal(const jvalue& a, const jvalue& b);
int py_compare(const jvalue& a, const jvalue& b);  // <0, 0, >0; throws on unorderable types
std::string py_float_repr(double d);
std::string html_escape(const std::string& s);  // markupsafe.escape: & < > " '
jvalue markup_string(std::string s);
std::string py_str_repr(const std::string& s);

// json.dumps(v, ensure_ascii=false, indent=indent (<0: none), separators default, sort_keys).
std::string py_json_dumps(const jvalue& v, int indent, bool sort_keys = false);

jvalue jvalue_from_json(const nlohmann::ordered_json& j);

// UTF-8 helpers: code points in, code points out; invalid bytes map to U+FFFD.
std::u32string utf8_decode(const std::string& s);
std::string utf8_encode(const std::u32string& s);
void utf8_append(std::string& out, char32_t c);
bool py_isspace(char32_t c);

}  // namespace tetra
