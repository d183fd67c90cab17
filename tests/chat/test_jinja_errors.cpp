// Error reporting: syntax and runtime errors carry "chat template:<line>:<col>: <message>", the
// offending source line and a caret under the column (the format is ours; jinja2 only gives lines).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/jinja.h"
#include "core/error.h"

namespace tetra {
namespace {

std::string error_of(const std::string& src, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
    try {
        jinja_template(src).render(ctx);
    } catch (const tetra::error& e) {
        return e.what();
    }
    return "<no error>";
}

TEST(jinja_errors, unknown_filter_at_parse_time) {
    EXPECT_EQ(error_of("line one\n  {{ x | foo }}"),
              "chat template:2:10: unknown filter 'foo'\n    {{ x | foo }}\n           ^");
}

TEST(jinja_errors, unknown_test) {
    EXPECT_EQ(error_of("{{ x is foo }}"), "chat template:1:9: unknown test 'foo'\n  {{ x is foo }}\n          ^");
}

TEST(jinja_errors, raise_exception_points_at_call) {
    EXPECT_EQ(error_of("{% if true %}\n  {{- raise_exception('Only user and assistant roles!') }}\n{% endif %}"),
              "chat template:2:7: Only user and assistant roles!\n"
              "    {{- raise_exception('Only user and assistant roles!') }}\n"
              "        ^");
}

TEST(jinja_errors, undefined_arithmetic_points_at_operator) {
    EXPECT_EQ(error_of("{{ x + 1 }}"), "chat template:1:6: 'x' is undefined\n  {{ x + 1 }}\n       ^");
}

TEST(jinja_errors, missing_attribute_chain) {
    nlohmann::ordered_json ctx = {{"m", {{"role", "user"}}}};
    EXPECT_EQ(error_of("{{ m.content.strip() }}", ctx),
              "chat template:1:14: 'dict object' has no attribute 'content'\n"
              "  {{ m.content.strip() }}\n"
              "               ^");
}

TEST(jinja_errors, unclosed_block_reports_end_of_template) {
    EXPECT_EQ(error_of("{% for x in y %}\nbody"),
              "chat template:2:5: unexpected end of template, expected 'endfor'\n  body\n      ^");
}

TEST(jinja_errors, unknown_tag) {
    EXPECT_EQ(error_of("ok\n{% include 'x' %}"),
              "chat template:2:4: unknown tag 'include'\n  {% include 'x' %}\n     ^");
}

TEST(jinja_errors, mismatched_end_tag) {
    EXPECT_EQ(error_of("{% if a %}x{% endfor %}"),
              "chat template:1:15: unexpected tag 'endfor', expected 'endif'\n"
              "  {% if a %}x{% endfor %}\n"
              "                ^");
}

TEST(jinja_errors, unterminated_string) {
    EXPECT_EQ(error_of("{{ 'abc }}"),
              "chat template:1:4: unterminated string literal\n  {{ 'abc }}\n     ^");
}

TEST(jinja_errors, bad_expression) {
    EXPECT_EQ(error_of("{{ 1 + }}"),
              "chat template:1:8: unexpected 'end of print statement'\n  {{ 1 + }}\n         ^");
}

TEST(jinja_errors, caret_keeps_tabs_and_counts_code_points) {
    EXPECT_EQ(error_of("\té {{ x | nope }}"),
              "chat template:1:11: unknown filter 'nope'\n  \té {{ x | nope }}\n  \t         ^");
}

TEST(jinja_errors, error_inside_macro_reports_macro_body_line) {
    EXPECT_EQ(error_of("{% macro m(a) %}\n{{ a + none }}\n{% endmacro %}\n{{ m(1) }}"),
              "chat template:2:6: unsupported operand type(s) for +: 'int' and 'NoneType'\n"
              "  {{ a + none }}\n"
              "       ^");
}

TEST(jinja_errors, template_name_prefix) {
    try {
        jinja_template("{{ x | foo }}", "tokenizer_config.json chat_template");
        FAIL();
    } catch (const tetra::error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("tokenizer_config.json chat_template:1:8: ", 0), 0u) << e.what();
    }
}

TEST(jinja_errors, context_must_be_object) {
    EXPECT_THROW(jinja_template("x").render(nlohmann::ordered_json::array()), tetra::error);
}

TEST(jinja_errors, deep_recursion_is_an_error_not_a_crash) {
    EXPECT_NE(error_of("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}").find("maximum call depth"),
              std::string::npos);
}

}  // namespace
}  // namespace tetra
