// engine/stop: token stop conditions (vLLM check_stop order) and the streaming stop-string matcher.
// Oracle for the matcher: a naive whole-text reference (earliest completed stop string, ties to
// the longest) written here; every chunking of a text must give the same output as the reference.
#include <gtest/gtest.h>

#include <random>

#include "engine/stop.h"

using namespace tetra;

// ---- token-level ----

TEST(stop, eos_stop_ids_and_lengths) {
    sampling_params p;
    p.max_tokens = 10;
    p.eos_token_ids = {2, 7};
    p.stop_token_ids = {5};
    auto st = check_stop_token(p, 7, 3);
    EXPECT_EQ(st.reason, finish_reason::STOP);
    EXPECT_FALSE(st.stop_token);  // EOS: stop_reason null
    EXPECT_FALSE(st.stop_str);
    EXPECT_TRUE(st.drop_last_token_text);
    st = check_stop_token(p, 5, 3);
    EXPECT_EQ(st.reason, finish_reason::STOP);
    ASSERT_TRUE(st.stop_token);
    EXPECT_EQ(*st.stop_token, 5);
    EXPECT_STREQ(finish_reason_name(st.reason), "stop");
    st = check_stop_token(p, 4, 3);
    EXPECT_FALSE(st.finished());
    EXPECT_EQ(finish_reason_name(st.reason), nullptr);
    // max_tokens: "length", checked first (vLLM): EOS as the last allowed token reports length
    st = check_stop_token(p, 4, 10);
    EXPECT_EQ(st.reason, finish_reason::LENGTH);
    EXPECT_STREQ(finish_reason_name(st.reason), "length");
    st = check_stop_token(p, 2, 10);
    EXPECT_EQ(st.reason, finish_reason::LENGTH);
    EXPECT_FALSE(st.drop_last_token_text);
    // context limit
    st = check_stop_token(p, 4, 3, 100, 100);
    EXPECT_EQ(st.reason, finish_reason::LENGTH);
    EXPECT_FALSE(check_stop_token(p, 4, 3, 99, 100).finished());
    // include_stop_str_in_output keeps the stop token's text
    p.include_stop_str_in_output = true;
    EXPECT_FALSE(check_stop_token(p, 5, 3).drop_last_token_text);
}

TEST(stop, ignore_eos_and_min_tokens) {
    sampling_params p;
    p.max_tokens = 10;
    p.eos_token_ids = {2};
    p.stop_token_ids = {5};
    p.ignore_eos = true;
    EXPECT_FALSE(check_stop_token(p, 2, 3).finished());
    EXPECT_TRUE(check_stop_token(p, 5, 3).finished());  // stop ids still apply
    p.ignore_eos = false;
    p.min_tokens = 4;
    EXPECT_FALSE(check_stop_token(p, 2, 3).finished());
    EXPECT_FALSE(check_stop_token(p, 5, 3).finished());
    EXPECT_TRUE(check_stop_token(p, 2, 4).finished());
    EXPECT_TRUE(check_stop_token(p, 5, 4).finished());
}

// ---- stop strings ----

struct stream_out {
    std::string text;
    std::optional<std::string> stop;
};

static stream_out run_chunks(const std::vector<std::string>& stops, bool include,
                             const std::vector<std::string>& chunks) {
    stop_string_matcher m(stops, include);
    stream_out out;
    for (const auto& c : chunks) {
        auto r = m.feed(c);
        // emitted text can never still be the start of a stop string that later completes
        out.text += r.text;
        if (r.stop) {
            out.stop = r.stop;
            EXPECT_TRUE(m.stopped());
        }
    }
    if (!out.stop) out.text += m.flush();
    return out;
}

// Whole-text reference: the stop string that ends first, ties -> the longest.
static stream_out reference(const std::vector<std::string>& stops, bool include,
                            const std::string& text) {
    size_t best_end = std::string::npos, best_len = 0;
    for (const auto& s : stops) {
        size_t pos = text.find(s);
        if (pos == std::string::npos) continue;
        size_t end = pos + s.size();
        if (end < best_end || (end == best_end && s.size() > best_len)) {
            best_end = end;
            best_len = s.size();
        }
    }
    if (best_end == std::string::npos) return {text, std::nullopt};
    return {text.substr(0, include ? best_end : best_end - best_len),
            text.substr(best_end - best_len, best_len)};
}

TEST(stop, stop_string_split_over_three_chunks) {
    auto r = run_chunks({"STOP"}, false, {"abc ST", "O", "P and more"});
    EXPECT_EQ(r.text, "abc ");
    ASSERT_TRUE(r.stop);
    EXPECT_EQ(*r.stop, "STOP");
    r = run_chunks({"STOP"}, true, {"abc ST", "O", "P and more"});
    EXPECT_EQ(r.text, "abc STOP");

    // what is emitted at each step: "ST" is held, then "STO", then the match
    stop_string_matcher m({"STOP"}, false);
    EXPECT_EQ(m.feed("abc ST").text, "abc ");
    EXPECT_EQ(m.held_size(), 2u);
    auto f = m.feed("O");
    EXPECT_EQ(f.text, "");
    EXPECT_FALSE(f.stop);
    EXPECT_EQ(m.held_size(), 3u);
    f = m.feed("P and more");
    EXPECT_EQ(f.text, "");
    EXPECT_TRUE(f.stop);
    EXPECT_EQ(m.feed("later").text, "");  // nothing after a stop
    EXPECT_EQ(m.flush(), "");
}

TEST(stop, held_text_released_when_it_cannot_match) {
    stop_string_matcher m({"STOP"}, false);
    EXPECT_EQ(m.feed("ab ST").text, "ab ");
    EXPECT_EQ(m.feed("ART").text, "START");  // "STA" is no prefix of STOP
    EXPECT_EQ(m.feed("S").text, "");
    EXPECT_EQ(m.flush(), "S");  // end of generation: held text is emitted
}

TEST(stop, overlapping_prefixes) {
    // "abab" in "ababab": the first occurrence ends at 4
    EXPECT_EQ(run_chunks({"abab"}, false, {"ababab"}).text, "");
    EXPECT_EQ(run_chunks({"abab"}, true, {"ababab"}).text, "abab");
    EXPECT_EQ(run_chunks({"abab"}, false, {"a", "b", "a", "b", "a", "b"}).text, "");
    EXPECT_EQ(run_chunks({"abab"}, false, {"xab", "aba", "b"}).text, "x");
    // the held suffix must be the longest one that is a prefix: "aaab" with stop "aab"
    stop_string_matcher m({"aab"}, false);
    EXPECT_EQ(m.feed("a").text, "");
    EXPECT_EQ(m.feed("a").text, "");
    EXPECT_EQ(m.feed("a").text, "a");
    auto r = m.feed("b");
    EXPECT_TRUE(r.stop);
    EXPECT_EQ(r.text, "");
    // several stops: the one completed first wins, then the longest at the same end
    EXPECT_EQ(*run_chunks({"abcd", "bc"}, false, {"abcd"}).stop, "bc");
    EXPECT_EQ(run_chunks({"abcd", "bc"}, false, {"abcd"}).text, "a");
    EXPECT_EQ(*run_chunks({"c", "abc"}, false, {"xabc"}).stop, "abc");
    EXPECT_EQ(run_chunks({"c", "abc"}, false, {"xabc"}).text, "x");
}

TEST(stop, unicode_stop_strings) {
    // 停止 is 6 bytes; split between and inside the characters' chunks
    auto r = run_chunks({"停止"}, false, {"你好", "停", "止了"});
    EXPECT_EQ(r.text, "你好");
    ASSERT_TRUE(r.stop);
    EXPECT_EQ(*r.stop, "停止");
    stop_string_matcher m({"é!"}, false);
    EXPECT_EQ(m.feed("café").text, "caf");  // "é" held whole, never half a character
    EXPECT_EQ(m.feed(" ok").text, "é ok");
    EXPECT_EQ(m.feed("né").text, "n");
    auto f = m.feed("!");
    EXPECT_TRUE(f.stop);
    EXPECT_EQ(f.text, "");
    // a multi-byte character sharing its lead byte with the stop string's first character
    EXPECT_EQ(run_chunks({"€END"}, false, {"a€", "€E", "N", "D"}).text, "a€");
}

TEST(stop, allow_stop_false_holds_but_does_not_match) {
    stop_string_matcher m({"END"}, false);
    auto r = m.feed("xEND yE", false);
    EXPECT_FALSE(r.stop);
    EXPECT_EQ(r.text, "xEND y");
    r = m.feed("ND", true);  // completed by allowed text
    EXPECT_TRUE(r.stop);
    EXPECT_EQ(r.text, "");
}

TEST(stop, chunking_invariance_against_reference) {
    std::mt19937 rng(12345);
    std::vector<std::vector<std::string>> stop_sets = {
        {"aba"}, {"ab", "bab"}, {"\xC3\xA9" "a", "cc"}, {"aaa", "aab", "b\xC3\xA9"}, {"abcab"}};
    for (int iter = 0; iter < 3000; ++iter) {
        const auto& stops = stop_sets[iter % stop_sets.size()];
        bool include = (iter / 5) % 2;
        // random text of whole characters: a, b, é (2 bytes), c
        std::string text;
        int len = int(rng() % 14);
        for (int i = 0; i < len; ++i) {
            int c = int(rng() % 4);
            text += c == 0 ? "a" : c == 1 ? "b" : c == 2 ? "\xC3\xA9" : "c";
        }
        // random chunking at character boundaries
        std::vector<std::string> chunks;
        std::string cur;
        for (size_t i = 0; i < text.size();) {
            size_t n = (uint8_t(text[i]) >= 0xC0) ? 2 : 1;
            cur += text.substr(i, n);
            i += n;
            if (rng() % 3 == 0) {
                chunks.push_back(cur);
                cur.clear();
            }
        }
        chunks.push_back(cur);
        auto got = run_chunks(stops, include, chunks);
        auto want = reference(stops, include, text);
        ASSERT_EQ(got.text, want.text) << "text '" << text << "' iter " << iter;
        ASSERT_EQ(got.stop, want.stop) << "text '" << text << "' iter " << iter;
    }
}

TEST(stop, no_stop_strings_passes_everything) {
    stop_string_matcher m({}, false);
    EXPECT_EQ(m.feed("hello").text, "hello");
    EXPECT_EQ(m.held_size(), 0u);
    EXPECT_EQ(m.flush(), "");
    EXPECT_THROW(stop_string_matcher({"a", ""}, false), error);
}
