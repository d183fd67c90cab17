// Jinja-subset template engine for Hugging Face chat templates, byte-compatible with Python jinja2
// as configured by transformers (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols, json.dumps-style tojson, raise_exception, strftime_now). Errors (syntax and
// runtime) throw tetra::error "<name>:<line>:<col>: <message>" plus the source line and a caret.
//
// Supported: {{ }}, {% %}, {# #}, `-`/`+` whitespace control, raw; if/elif/else, for (else, inline
// if, tuple unpacking, loop.*, break/continue), set (incl. block set and namespace attributes),
// macro (defaults, keyword args, call blocks with caller()), filter blocks, generation blocks;
// literals, arithmetic, ~, comparisons, and/or/not, in, tests, ternaries, subscripts and slices,
// Python str/dict/list methods, the common jinja2 filters and tests (see jinja_builtins.cpp).
//
// Non-goals: template inheritance (extends/block/include/import), autoescape (Markup is modelled
// only as far as |safe, |escape and `+` escaping the other operand), recursive loops, *args/**kwargs, arbitrary-precision
// ints (int64, overflow is an error), Unicode case mapping beyond ASCII, printf-style `%` string
// formatting and the `format` filter (str.format is supported with a format-spec subset),
// list/dict mutation (the sandbox forbids it in jinja2 too), and the sandbox's attribute rules
// beyond what templates can reach here.
#pragma once
#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/jinja_value.h"

namespace tetra {

struct jbody_holder;

struct jinja_render_options {
    // Time seen by strftime_now(); unset means the local time at render.
    std::optional<std::tm> now;
};

class jinja_template {
public:
    // Parses `source`; `name` prefixes error messages. Throws tetra::error on syntax errors.
    explicit jinja_template(const std::string& source, std::string name = "chat template");
    ~jinja_template();
    jinja_template(jinja_template&&) noexcept;
    jinja_template& operator=(jinja_template&&) noexcept;

    // context: dict of variables (kind DICT). Globals raise_exception, strftime_now, namespace,
    // range and dict are always present unless the context shadows them.
    std::string render(const jvalue& context, const jinja_render_options& opts = {}) const;
    // Convenience: context from a JSON object (key order kept).
    std::string render(const nlohmann::ordered_json& context,
                       const jinja_render_options& opts = {}) const;

private:
    std::unique_ptr<jbody_holder> impl_;
};

}  // namespace tetra
