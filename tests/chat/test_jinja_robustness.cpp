// Robustness: mutated real templates and hostile inputs must either render or throw tetra::error
// (never crash, hang or leak another exception type). Deterministic (fixed seed).
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/error.h"

namespace tetra {
namespace {

using ojson = nlohmann::ordered_json;

std::string read(const std::string& name) {
    std::ifstream f(std::string(TETRA_SOURCE_DIR) + "/tests/data/templates/" + name, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

TEST(jinja_robustness, mutated_templates_render_or_throw_tetra_error) {
    const char* files[] = {"Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
                           "openai-gpt-oss-120b.jinja", "HuggingFaceTB-SmolLM2-135M-Instruct.jinja"};
    const char* pieces[] = {"{%", "%}", "{{", "}}", "{#", "#}", "(", ")", "[", "]", "{", "}", "|", "-", "'",
                            "\"", " if ", " endif ", " for ", " in ", "endfor", "loop.", ".", ",", "~", "*",
                            "\\", "\n", "is ", "not ", "set ", "=", "macro ", "raw", "::-1", "0", "1e9"};
    ojson ctx = {{"messages", ojson::array({{{"role", "system"}, {"content", "s"}},
                                            {{"role", "user"}, {"content", "u"}},
                                            {{"role", "assistant"}, {"content", "a"}}})},
                 {"tools", nullptr},
                 {"add_generation_prompt", true}};
    std::mt19937 rng(1234);
    int rendered = 0, rejected = 0;
    for (const char* file : files) {
        std::string base = read(file);
        ASSERT_FALSE(base.empty()) << file;
        for (int it = 0; it < 400; ++it) {
            std::string s = base;
            int n_mut = 1 + (int)(rng() % 4);
            for (int m = 0; m < n_mut; ++m) {
                size_t pos = rng() % (s.size() + 1);
                switch (rng() % 3) {
                    case 0: s.erase(pos, rng() % 8); break;
                    case 1: s.insert(pos, pieces[rng() % (sizeof pieces / sizeof *pieces)]); break;
                    default: if (pos < s.size()) s[pos] = (char)(rng() % 256); break;
                }
            }
            try {
                std::string out = jinja_template(s).render(ctx);
                ++rendered;
            } catch (const tetra::error& e) {
                ++rejected;
                EXPECT_NE(std::string(e.what()).find("chat template"), std::string::npos) << e.what();
            }
        }
    }
    // Both outcomes occur: the mutations neither always break nor never break the templates.
    EXPECT_GT(rendered, 50);
    EXPECT_GT(rejected, 50);
}

TEST(jinja_robustness, deep_nesting_is_rejected_not_overflowing) {
    std::string expr(100000, '(');
    EXPECT_THROW(jinja_template("{{ " + expr + "1"), tetra::error);
    std::string blocks;
    for (int k = 0; k < 5000; ++k) blocks += "{% if true %}";
    EXPECT_THROW(jinja_template(blocks + "x"), tetra::error);
    std::string ok;
    for (int k = 0; k < 50; ++k) ok += "{% if true %}";
    ok += "x";
    for (int k = 0; k < 50; ++k) ok += "{% endif %}";
    EXPECT_EQ(jinja_template(ok).render(ojson::object()), "x");
}

TEST(jinja_robustness, resource_limits) {
    EXPECT_THROW(jinja_template("{{ range(200000) | length }}").render(ojson::object()), tetra::error);
    EXPECT_THROW(jinja_template("{{ 'x' * 1000000000 }}").render(ojson::object()), tetra::error);
    EXPECT_THROW(jinja_template("{{ 2 ** 64 }}").render(ojson::object()), tetra::error);
    EXPECT_THROW(jinja_template("{{ 9223372036854775807 + 1 }}").render(ojson::object()), tetra::error);
    EXPECT_THROW(jinja_template("{{ 99999999999999999999 }}"), tetra::error);
    EXPECT_THROW(jinja_template("{{ '{0[99999999999999999999999]}'.format([1]) }}").render(ojson::object()),
                 tetra::error);
}

TEST(jinja_robustness, invalid_utf8_in_template_and_data) {
    ojson ctx = {{"s", std::string("a\xff\xfe")}};
    EXPECT_NO_THROW(jinja_template("{{ s }}|{{ s | length }}|{{ s[1:] }}|\xff").render(ctx));
}

}  // namespace
}  // namespace tetra
