// Internal to src/chat: tokens, AST and the glue between lexer, parser, evaluator and builtins.
// Positions are byte offsets into the normalized source (\r\n -> \n, one trailing newline
// dropped, as jinja2 does); jinja_error_at() turns them into "name:line:col: msg" plus a caret.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace tetra {

struct jsource {
    std::string name;  // e.g. "chat template"
    std::string text;  // normalized source
};

// Throws tetra::error "name:line:col: msg\n  <line>\n  <caret>".
[[noreturn]] void jinja_error_at(const jsource& src, size_t pos, const std::string& msg);

enum class jtok { TEXT, VAR_BEGIN, VAR_END, BLOCK_BEGIN, BLOCK_END, NAME, STRING, INT, FLOAT, OP, END };

struct jtoken {
    jtok type;
    std::string text;  // TEXT data, NAME, OP, or the decoded STRING literal
    size_t pos = 0;
    int64_t ival = 0;
    double fval = 0.0;
};

// jinja2's newline normalization and trailing-newline removal (keep_trailing_newline=False).
std::string jinja_normalize_source(const std::string& text);
// Tokenizes with trim_blocks=True and lstrip_blocks=True semantics; comments are dropped and raw
// blocks become TEXT.
std::vector<jtoken> jinja_lex(const jsource& src);

enum class jexpr_kind {
    CONST, NAME, NSREF, LIST, TUPLE, DICT, ATTR, ITEM, SLICE, CALL, FILTER, TEST,
    NEG, POS, BINARY, COMPARE, AND, OR, NOT, CONCAT, COND
};

struct jexpr;
using jexpr_ptr = std::unique_ptr<jexpr>;

struct jexpr {
    jexpr_kind kind;
    size_t pos = 0;
    jvalue value;      // CONST
    std::string name;  // NAME/NSREF variable, ATTR attribute, FILTER/TEST name, BINARY operator
    std::string attr;  // NSREF attribute
    // Children. ATTR/ITEM/SLICE/CALL/FILTER/TEST: args[0] is the subject (callee), then the
    // positional arguments (ITEM: key; SLICE: start, stop, step, each possibly null).
    // COND: then, condition, else (else may be null). DICT: key, value, key, value, ...
    // COMPARE: first operand then one operand per entry of ops.
    std::vector<jexpr_ptr> args;
    std::vector<std::pair<std::string, jexpr_ptr>> kwargs;
    std::vector<std::string> ops;  // COMPARE: "eq" "ne" "lt" "lteq" "gt" "gteq" "in" "notin"
    bool negated = false;          // TEST with "is not"
};

enum class jstmt_kind {
    TEXT, OUTPUT, IF, FOR, SET, SET_BLOCK, MACRO, CALL_BLOCK, FILTER_BLOCK, BREAK, CONTINUE, SCOPE
};

struct jstmt;
using jbody = std::vector<std::unique_ptr<jstmt>>;

struct jstmt {
    jstmt_kind kind;
    size_t pos = 0;
    std::string text;    // TEXT
    jexpr_ptr expr;      // OUTPUT/SET value, FOR iterable, CALL_BLOCK call, SET_BLOCK/FILTER_BLOCK filter
    jexpr_ptr target;    // FOR/SET/SET_BLOCK target
    jexpr_ptr cond;      // FOR inline filter (`for x in xs if cond`)
    std::vector<std::pair<jexpr_ptr, jbody>> branches;  // IF: (condition or null for else, body)
    jbody body, else_body;
    std::string name;    // MACRO name
    std::vector<std::pair<std::string, jexpr_ptr>> params;  // MACRO/CALL_BLOCK params + defaults
};

// Name of the variable that holds a block's rendered body inside filter-block/set-block filters.
inline const char* jinja_block_var() { return "\x01block"; }

jbody jinja_parse(const jsource& src);

// Builtins (jinja_builtins.cpp). Filters and tests raise jinja_fail on bad input.
bool jinja_has_filter(const std::string& name);
bool jinja_has_test(const std::string& name);
jvalue jinja_filter(const std::string& name, const jvalue& subject, const jcall& call);
bool jinja_test(const std::string& name, const jvalue& subject, const jcall& call);
// Python getattr with fallback to item access (jinja2's Environment.getattr), methods bound.
jvalue jinja_getattr(const jvalue& obj, const std::string& attr);
// obj[key] with fallback to getattr for string keys (jinja2's Environment.getitem).
jvalue jinja_getitem(const jvalue& obj, const jvalue& key);
jvalue jinja_slice(const jvalue& obj, const jvalue& start, const jvalue& stop, const jvalue& step);
// Iteration as Python's iter(): lists, tuples, dict keys, string characters; undefined is empty.
jlist jinja_iterate(const jvalue& v);
bool jinja_contains(const jvalue& container, const jvalue& item);
jvalue jinja_binary(const std::string& op, const jvalue& a, const jvalue& b);
std::string py_strip(const std::string& s, const jvalue& chars, bool left, bool right);
// Python str methods (jinja_str.cpp).
bool jinja_is_str_method(const std::string& name);
jvalue jinja_str_method(const std::string& s, const std::string& m, const jcall& c);

}  // namespace tetra
