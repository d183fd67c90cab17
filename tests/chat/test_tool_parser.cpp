// chat/tool_parser: hand-written hermes / llama3_json cases (vLLM shapes, serving.md §1.14) and a
// generated property: outputs are assembled from known pieces (text, calls with raw argument
// JSON), so the expected content and arguments come from the pieces, not from the parser; every
// random chunking must reproduce them, and one-shot parsing must agree with streaming.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "chat/tool_parser.h"
#include "core/error.h"

using namespace tetra;

namespace {

struct collected {
    std::string content;
    std::vector<parsed_tool_call> calls;
    int name_deltas = 0;
};

collected stream(const std::string& parser, const std::string& text, const std::vector<size_t>& cuts) {
    tool_parser p(parser);
    collected c;
    auto take = [&](const tool_parse_delta& d) {
        c.content += d.content;
        for (const auto& x : d.calls) {
            if (x.index >= int(c.calls.size())) {
                EXPECT_EQ(x.index, int(c.calls.size()));  // indices are dense and in order
                EXPECT_FALSE(x.name.empty());             // the first delta of a call names it
                c.calls.resize(x.index + 1);
            }
            if (!x.name.empty()) {
                c.calls[x.index].name = x.name;
                ++c.name_deltas;
            }
            c.calls[x.index].arguments += x.arguments;
        }
    };
    size_t prev = 0;
    for (size_t i = 0; i <= cuts.size(); ++i) {
        size_t e = i < cuts.size() ? cuts[i] : text.size();
        take(p.feed(std::string_view(text).substr(prev, e - prev)));
        prev = e;
    }
    take(p.finish());
    return c;
}

collected stream_whole(const std::string& parser, const std::string& text) { return stream(parser, text, {}); }

collected stream_bytes(const std::string& parser, const std::string& text) {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < text.size(); ++i) cuts.push_back(i);
    return stream(parser, text, cuts);
}

}  // namespace

TEST(tool_parser, hermes_one_call) {
    std::string t = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    auto r = tool_parser::parse("hermes", t);
    EXPECT_EQ(r.content, "");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(r.calls[0].arguments, "{\"city\": \"Paris\"}");
    for (auto c : {stream_whole("hermes", t), stream_bytes("hermes", t)}) {
        ASSERT_EQ(c.calls.size(), 1u);
        EXPECT_EQ(c.calls[0].name, "get_weather");
        EXPECT_EQ(c.calls[0].arguments, "{\"city\": \"Paris\"}");
        EXPECT_EQ(c.name_deltas, 1);
        EXPECT_EQ(c.content, "");
    }
}

TEST(tool_parser, hermes_streams_name_before_arguments) {
    tool_parser p("hermes");
    auto d = p.feed("Sure.<tool_ca");
    EXPECT_EQ(d.content, "Sure.");  // the partial tag is held back
    d = p.feed("ll>{\"name\": \"f\", \"argu");
    EXPECT_EQ(d.content, "");
    ASSERT_EQ(d.calls.size(), 0u);  // head not complete yet
    d = p.feed("ments\": {\"a\": ");
    ASSERT_EQ(d.calls.size(), 1u);
    EXPECT_EQ(d.calls[0].name, "f");
    EXPECT_EQ(d.calls[0].arguments, "{\"a\": ");
    d = p.feed("[1, 2]}}</tool_call>");
    ASSERT_EQ(d.calls.size(), 1u);
    EXPECT_EQ(d.calls[0].name, "");
    EXPECT_EQ(d.calls[0].arguments, "[1, 2]}");
    EXPECT_EQ(p.n_calls(), 1);
    EXPECT_TRUE(p.calls_valid());
}

TEST(tool_parser, hermes_content_and_two_calls) {
    std::string t =
        "Let me check both.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": \"}\\\"{\"}}\n</tool_call>\n";
    auto r = tool_parser::parse("hermes", t);
    EXPECT_EQ(r.content, "Let me check both.\n\n");
    ASSERT_EQ(r.calls.size(), 2u);
    EXPECT_EQ(r.calls[0].name, "a");
    EXPECT_EQ(r.calls[0].arguments, "{}");
    EXPECT_EQ(r.calls[1].name, "b");
    EXPECT_EQ(r.calls[1].arguments, "{\"x\": \"}\\\"{\"}");
    auto c = stream_bytes("hermes", t);
    EXPECT_EQ(c.content, r.content);
    ASSERT_EQ(c.calls.size(), 2u);
    EXPECT_EQ(c.calls[1].arguments, r.calls[1].arguments);
}

TEST(tool_parser, hermes_text_after_call_is_content) {
    auto r = tool_parser::parse("hermes", "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\nDone.  \n");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.content, "\nDone.");
}

TEST(tool_parser, hermes_malformed_call_is_content) {
    std::string t = "Hi <tool_call>{\"name\": \"a\", \"arguments\": {\"x\": }</tool_call> bye";
    auto r = tool_parser::parse("hermes", t);
    EXPECT_TRUE(r.calls.empty());
    EXPECT_EQ(r.content, t);
    // not a {name, arguments} object: verbatim content even when streamed
    std::string u = "a<tool_call>[1, 2]</tool_call>b";
    EXPECT_EQ(stream_bytes("hermes", u).content, u);
    EXPECT_TRUE(stream_bytes("hermes", u).calls.empty());
    std::string v = "a<tool_call>{\"nam";
    EXPECT_EQ(stream_bytes("hermes", v).content, v);
}

TEST(tool_parser, hermes_reordered_and_missing_arguments) {
    auto r = tool_parser::parse("hermes", "<tool_call>{\"arguments\": {\"k\": [1, 2]}, \"name\": \"f\"}</tool_call>");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].name, "f");
    EXPECT_EQ(r.calls[0].arguments, "{\"k\":[1,2]}");
    r = tool_parser::parse("hermes", "<tool_call>{\"name\": \"now\"}</tool_call>");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].arguments, "{}");
}

TEST(tool_parser, hermes_unterminated_and_truncated) {
    // complete JSON without the closing tag: accepted (vLLM's `<tool_call>(.*)` alternative)
    auto r = tool_parser::parse("hermes", "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].arguments, "{\"a\": 1}");
    // truncated arguments (finish_reason length): one-shot gives everything back as content
    std::string t = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, ";
    r = tool_parser::parse("hermes", t);
    EXPECT_TRUE(r.calls.empty());
    EXPECT_EQ(r.content, t);
    tool_parser p("hermes");
    p.feed(t);
    p.finish();
    EXPECT_EQ(p.n_calls(), 1);  // streaming already named it
    EXPECT_FALSE(p.calls_valid());
}

TEST(tool_parser, hermes_name_with_escapes_and_string_arguments) {
    auto r = tool_parser::parse("hermes", "<tool_call>{\"name\": \"a\\u0062\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].name, "ab");
    EXPECT_EQ(r.calls[0].arguments, "\"{\\\"x\\\": 1}\"");
}

TEST(tool_parser, llama3_json) {
    std::string t = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}";
    for (auto c : {stream_whole("llama3_json", t), stream_bytes("llama3_json", t)}) {
        ASSERT_EQ(c.calls.size(), 1u);
        EXPECT_EQ(c.calls[0].name, "get_weather");
        EXPECT_EQ(c.calls[0].arguments, "{\"city\": \"Paris\"}");
        EXPECT_EQ(c.content, "");
    }
    auto r = tool_parser::parse("llama3_json", "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"z\": null}}");
    ASSERT_EQ(r.calls.size(), 2u);
    EXPECT_EQ(r.calls[0].name, "a");
    EXPECT_EQ(r.calls[1].name, "b");
    EXPECT_EQ(r.calls[1].arguments, "{\"z\": null}");
    EXPECT_EQ(r.content, "");
}

TEST(tool_parser, llama3_json_plain_text_and_json_answers) {
    for (std::string t : {"Hello {\"name\": \"a\"}", "  The answer is 4.", "{\"answer\": 42}", "{\"name\": 3}", ""}) {
        auto r = tool_parser::parse("llama3_json", t);
        EXPECT_TRUE(r.calls.empty()) << t;
        EXPECT_EQ(r.content, t);
        EXPECT_EQ(stream_bytes("llama3_json", t).content, t);
    }
    // text after a call is content
    auto r = tool_parser::parse("llama3_json", "{\"name\": \"a\", \"parameters\": {}} ok");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.content, " ok");
}

TEST(tool_parser, unknown_name) {
    EXPECT_THROW(tool_parser("pythonic"), error);
    EXPECT_TRUE(tool_parser::is_known("llama3_json"));
}

namespace {

std::string random_json(std::mt19937& rng, int depth) {
    static const std::vector<std::string> strs = {"\"a\"", "\"}{\"", "\"\\\"q\\\"\"", "\"</tool\"", "\"é世\"",
                                                  "\"\\\\\"", "\"<tool_call\"", "\"[,]\""};
    int k = rng() % (depth > 2 ? 4 : 6);
    switch (k) {
    case 0: return strs[rng() % strs.size()];
    case 1: return std::to_string(int(rng() % 2000) - 1000);
    case 2: return rng() % 2 ? "true" : "null";
    case 3: return "-1.5e3";
    case 4: {
        std::string s = "[";
        int n = rng() % 3;
        for (int i = 0; i < n; ++i) s += (i ? ", " : "") + random_json(rng, depth + 1);
        return s + "]";
    }
    default: {
        std::string s = "{";
        int n = rng() % 3;
        for (int i = 0; i < n; ++i) s += (i ? ", " : "") + strs[rng() % strs.size()] + (rng() % 2 ? ": " : ":") + random_json(rng, depth + 1);
        return s + "}";
    }
    }
}

std::string random_text(std::mt19937& rng, bool allow_empty) {
    static const std::vector<std::string> atoms = {"a", " ", "\n", "<", "tool", "{", "}", "\"", "call>", "é", "</"};
    std::string s;
    int n = rng() % 6 + (allow_empty ? 0 : 1);
    for (int i = 0; i < n; ++i) s += atoms[rng() % atoms.size()];
    return s;
}

std::string rstrip_ws(std::string s) {
    while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.pop_back();
    return s;
}

}  // namespace

TEST(tool_parser, hermes_generated_outputs_any_chunking) {
    std::mt19937 rng(11);
    for (int it = 0; it < 400; ++it) {
        std::string text, want_content;
        std::vector<parsed_tool_call> want;
        int n_calls = rng() % 4;
        std::string seg = random_text(rng, true);
        for (int c = 0; c <= n_calls; ++c) {
            if (seg.find("<tool_call>") != std::string::npos) seg = "x";
            text += seg;
            want_content += c == 0 ? seg : rstrip_ws(seg);  // whitespace ending text after a call is dropped
            if (c == n_calls) break;
            parsed_tool_call call{"fn_" + std::to_string(c), random_json(rng, 0)};
            if (call.arguments[0] != '{') call.arguments = "{\"v\": " + call.arguments + "}";
            text += "<tool_call>" + std::string(rng() % 2 ? "\n" : "") + "{\"name\": \"" + call.name +
                    "\", \"arguments\": " + call.arguments + "}" + (rng() % 2 ? "\n" : "") + "</tool_call>";
            want.push_back(call);
            seg = random_text(rng, true);
        }
        std::vector<size_t> cuts;
        for (size_t i = 1; i < text.size(); ++i)
            if (rng() % 3 == 0) cuts.push_back(i);
        collected got = stream("hermes", text, cuts);
        ASSERT_EQ(got.content, want_content) << text;
        ASSERT_EQ(got.calls.size(), want.size()) << text;
        for (size_t i = 0; i < want.size(); ++i) {
            EXPECT_EQ(got.calls[i].name, want[i].name) << text;
            EXPECT_EQ(got.calls[i].arguments, want[i].arguments) << text;
            EXPECT_TRUE(nlohmann::json::accept(got.calls[i].arguments)) << text;
        }
        auto r = tool_parser::parse("hermes", text);
        EXPECT_EQ(r.content, want_content) << text;
        EXPECT_EQ(r.calls.size(), want.size()) << text;
    }
}

TEST(tool_parser, llama3_generated_outputs_any_chunking) {
    std::mt19937 rng(12);
    for (int it = 0; it < 300; ++it) {
        std::string text = rng() % 2 ? "<|python_tag|>" : (rng() % 2 ? "\n " : "");
        std::vector<parsed_tool_call> want;
        int n_calls = 1 + rng() % 3;
        for (int c = 0; c < n_calls; ++c) {
            parsed_tool_call call{"f" + std::to_string(c), random_json(rng, 0)};
            text += std::string(c ? "; " : "") + "{\"name\": \"" + call.name + "\", \"" +
                    (rng() % 2 ? "parameters" : "arguments") + "\": " + call.arguments + "}";
            want.push_back(call);
        }
        std::vector<size_t> cuts;
        for (size_t i = 1; i < text.size(); ++i)
            if (rng() % 2 == 0) cuts.push_back(i);
        collected got = stream("llama3_json", text, cuts);
        ASSERT_EQ(got.content, "") << text;
        ASSERT_EQ(got.calls.size(), want.size()) << text;
        for (size_t i = 0; i < want.size(); ++i) {
            EXPECT_EQ(got.calls[i].name, want[i].name) << text;
            EXPECT_EQ(got.calls[i].arguments, want[i].arguments) << text;
        }
    }
}
