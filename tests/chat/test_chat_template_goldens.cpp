// Real chat templates (SmolLM2, Llama-3.1/3.2, Qwen2.5/3/3.5, gpt-oss, Nemotron, DeepSeek, ...) rendered
// over conversations by transformers' render_jinja_template (tools/gen_template_goldens.py ->
// tests/data/templates/goldens_chat.json). Byte-exact, or an error where Python raised one.
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/error.h"

namespace tetra {
namespace {

using ojson = nlohmann::ordered_json;

std::string data_dir() { return std::string(TETRA_SOURCE_DIR) + "/tests/data/templates/"; }

const ojson& goldens() {
    static const ojson j = [] {
        std::ifstream f(data_dir() + "goldens_chat.json");
        return f.good() ? ojson::parse(f) : ojson::object();
    }();
    return j;
}

const chat_template& template_for(const std::string& file) {
    static std::map<std::string, std::unique_ptr<chat_template>> cache;
    auto it = cache.find(file);
    if (it != cache.end()) return *it->second;
    std::ifstream f(data_dir() + file, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    auto t = std::make_unique<chat_template>(ss.str(), file);
    return *(cache[file] = std::move(t));
}

// One test per template (each process started by ctest parses the golden file once).
std::vector<std::string> template_names() {
    std::vector<std::string> names;
    if (goldens().contains("templates"))
        for (auto it = goldens()["templates"].begin(); it != goldens()["templates"].end(); ++it)
            names.push_back(it.key());
    return names;
}

class chat_golden : public ::testing::TestWithParam<std::string> {};

TEST(chat_golden_file, loaded) {
    ASSERT_TRUE(goldens().contains("cases")) << "missing tests/data/templates/goldens_chat.json";
    EXPECT_GE(goldens()["cases"].size(), 600u);
    EXPECT_GE(goldens()["templates"].size(), 19u);
}

void check_case(const ojson& c) {
    const ojson& conv = goldens()["conversations"][c["conversation"].get<std::string>()];
    const ojson& tokens = goldens()["templates"][c["template"].get<std::string>()];
    chat_template_inputs in;
    in.messages = conv["messages"];
    in.tools = conv["tools"];
    in.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    if (tokens["bos_token"].is_string()) in.bos_token = tokens["bos_token"].get<std::string>();
    if (tokens["eos_token"].is_string()) in.eos_token = tokens["eos_token"].get<std::string>();
    in.kwargs = conv["kwargs"];
    std::tm tm{};
    tm.tm_year = 2024 - 1900; tm.tm_mon = 6; tm.tm_mday = 26;
    tm.tm_hour = 13; tm.tm_min = 45; tm.tm_sec = 7;
    std::time_t t = timegm(&tm);
    gmtime_r(&t, &tm);
    in.now = tm;
    const chat_template& tmpl = template_for(c["template"].get<std::string>());
    if (c.contains("error")) {
        std::string err = c["error"].get<std::string>();
        try {
            tmpl.render(in);
            ADD_FAILURE() << "expected an error like Python's: " << err;
        } catch (const tetra::error& e) {
            if (err.rfind("TemplateError: ", 0) == 0)
                EXPECT_NE(std::string(e.what()).find(err.substr(15)), std::string::npos) << e.what();
        }
        return;
    }
    try {
        EXPECT_EQ(tmpl.render(in), c["expected"].get<std::string>());
    } catch (const tetra::error& e) {
        ADD_FAILURE() << "unexpected error: " << e.what();
    }
}

TEST_P(chat_golden, matches_transformers) {
    int n = 0;
    for (const ojson& c : goldens()["cases"]) {
        if (c["template"] != GetParam()) continue;
        SCOPED_TRACE("conversation " + c["conversation"].get<std::string>() +
                     (c["add_generation_prompt"].get<bool>() ? " + add_generation_prompt" : ""));
        check_case(c);
        ++n;
    }
    EXPECT_GE(n, 40);
}

std::string case_name(const ::testing::TestParamInfo<std::string>& info) {
    std::string n = info.param;
    for (char& ch : n)
        if (!isalnum((unsigned char)ch)) ch = '_';
    return n;
}

INSTANTIATE_TEST_SUITE_P(goldens, chat_golden, ::testing::ValuesIn(template_names()), case_name);

}  // namespace
}  // namespace tetra
