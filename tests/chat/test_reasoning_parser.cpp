// chat/reasoning_parser: hand-written cases (vLLM qwen3 / deepseek_r1 semantics, serving.md §1.13)
// and a chunking property. Oracle for the property: the spec as plain string operations (drop a
// leading <think>, split at the first </think>), independent of the parser's state machine.
#include <gtest/gtest.h>

#include <random>

#include "chat/reasoning_parser.h"
#include "core/error.h"

using namespace tetra;

namespace {

reasoning_delta oracle(std::string text, bool starts_in_reasoning) {
    reasoning_delta d;
    if (!starts_in_reasoning) {
        d.content = text;
        return d;
    }
    if (text.rfind("<think>", 0) == 0) text.erase(0, 7);
    size_t e = text.find("</think>");
    if (e == std::string::npos) {
        d.reasoning = text;
    } else {
        d.reasoning = text.substr(0, e);
        d.content = text.substr(e + 8);
    }
    return d;
}

reasoning_delta feed_chunks(const std::string& name, const std::string& text, const std::vector<size_t>& cuts,
                            bool start) {
    reasoning_parser p(name, start);
    reasoning_delta all;
    size_t prev = 0;
    for (size_t i = 0; i <= cuts.size(); ++i) {
        size_t c = i < cuts.size() ? cuts[i] : text.size();
        reasoning_delta d = p.feed(std::string_view(text).substr(prev, c - prev));
        // a delta never carries a complete tag
        EXPECT_EQ(d.reasoning.find("</think>"), std::string::npos) << text;
        all.reasoning += d.reasoning;
        all.content += d.content;
        prev = c;
    }
    reasoning_delta f = p.finish();
    all.reasoning += f.reasoning;
    all.content += f.content;
    return all;
}

}  // namespace

TEST(reasoning_parser, qwen3_with_start_tag) {
    auto d = reasoning_parser::parse("qwen3", "<think>\nLet me think.\n</think>\n\nHello!", true);
    EXPECT_EQ(d.reasoning, "\nLet me think.\n");
    EXPECT_EQ(d.content, "\n\nHello!");
}

TEST(reasoning_parser, deepseek_r1_without_start_tag) {
    auto d = reasoning_parser::parse("deepseek_r1", "I should add 2 and 2.</think>4", true);
    EXPECT_EQ(d.reasoning, "I should add 2 and 2.");
    EXPECT_EQ(d.content, "4");
}

TEST(reasoning_parser, truncated_reasoning_is_all_reasoning) {
    auto d = reasoning_parser::parse("qwen3", "<think>still thinking", true);
    EXPECT_EQ(d.reasoning, "still thinking");
    EXPECT_EQ(d.content, "");
    d = reasoning_parser::parse("qwen3", "abc</thi", true);  // partial tag at the end is text
    EXPECT_EQ(d.reasoning, "abc</thi");
    d = reasoning_parser::parse("qwen3", "<thin", true);
    EXPECT_EQ(d.reasoning, "<thin");
    d = reasoning_parser::parse("qwen3", "<thinking>x", true);  // not the tag
    EXPECT_EQ(d.reasoning, "<thinking>x");
}

TEST(reasoning_parser, content_mode_passes_tags_through) {
    auto d = reasoning_parser::parse("qwen3", "<think>a</think>b", false);
    EXPECT_EQ(d.reasoning, "");
    EXPECT_EQ(d.content, "<think>a</think>b");
}

TEST(reasoning_parser, only_first_end_tag_splits) {
    auto d = reasoning_parser::parse("qwen3", "r</think>c</think>d", true);
    EXPECT_EQ(d.reasoning, "r");
    EXPECT_EQ(d.content, "c</think>d");
}

TEST(reasoning_parser, streaming_holds_partial_tag) {
    reasoning_parser p("qwen3", true);
    auto d = p.feed("<th");
    EXPECT_EQ(d.reasoning, "");
    d = p.feed("ink>abc</");
    EXPECT_EQ(d.reasoning, "abc");  // "</" held: could be </think>
    EXPECT_TRUE(p.in_reasoning());
    d = p.feed("think>ok");
    EXPECT_EQ(d.reasoning, "");
    EXPECT_EQ(d.content, "ok");
    EXPECT_FALSE(p.in_reasoning());
    d = p.feed("</");
    EXPECT_EQ(d.content, "</");  // content is never held
}

TEST(reasoning_parser, initial_state_from_prompt) {
    // Qwen3 enable_thinking=false: the template closes an empty think block in the prompt
    EXPECT_FALSE(reasoning_parser::initial_reasoning_state(
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", std::nullopt));
    // DeepSeek-R1: the prompt opens the block
    EXPECT_TRUE(reasoning_parser::initial_reasoning_state("<｜Assistant｜><think>\n", false));
    EXPECT_TRUE(reasoning_parser::initial_reasoning_state("plain prompt", std::nullopt));
    EXPECT_FALSE(reasoning_parser::initial_reasoning_state("plain prompt", false));
    EXPECT_TRUE(reasoning_parser::initial_reasoning_state("a</think>b<think>", std::nullopt));
}

TEST(reasoning_parser, unknown_name) {
    EXPECT_THROW(reasoning_parser("granite", true), error);
    EXPECT_TRUE(reasoning_parser::is_known("deepseek_r1"));
}

TEST(reasoning_parser, every_chunking_matches_the_spec) {
    std::vector<std::string> texts = {
        "<think>\nabc\n</think>\n\nHello", "abc</think>", "</think>", "<think></think>", "<think>",
        "<<think>>a</</think>>b", "x</think</think>y", "<think>a</think>b</think>c", "plain", "",
        "<thi</think>", "héllo 世界</think>ünï"};
    for (const auto& t : texts) {
        for (bool start : {true, false}) {
            reasoning_delta want = oracle(t, start);
            // all single and double cut points
            for (size_t a = 0; a <= t.size(); ++a) {
                for (size_t b = a; b <= t.size(); ++b) {
                    reasoning_delta got = feed_chunks("qwen3", t, {a, b}, start);
                    ASSERT_EQ(got.reasoning, want.reasoning) << "text=" << t << " cuts=" << a << "," << b;
                    ASSERT_EQ(got.content, want.content) << "text=" << t << " cuts=" << a << "," << b;
                }
            }
        }
    }
}

TEST(reasoning_parser, random_texts_every_byte_a_chunk) {
    std::mt19937 rng(7);
    const std::vector<std::string> atoms = {"<think>", "</think>", "<", "/", "think", ">", "a", " ", "\n", "</th"};
    for (int it = 0; it < 500; ++it) {
        std::string t;
        int n = rng() % 12;
        for (int i = 0; i < n; ++i) t += atoms[rng() % atoms.size()];
        std::vector<size_t> cuts;
        for (size_t i = 1; i < t.size(); ++i)
            if (rng() % 2) cuts.push_back(i);
        for (bool start : {true, false}) {
            reasoning_delta want = oracle(t, start), got = feed_chunks("deepseek_r1", t, cuts, start);
            ASSERT_EQ(got.reasoning, want.reasoning) << t;
            ASSERT_EQ(got.content, want.content) << t;
        }
    }
}
