// server/openai_format, chat_output, auth: exact wire bytes from serving.md §1.5–1.6 and §1.10
// (written out by hand from the note's examples), reasoning/tool deltas, and the Bearer check.
#include <gtest/gtest.h>

#include "server/auth.h"
#include "server/chat_output.h"
#include "server/openai_format.h"

using namespace tetra;

TEST(openai_format, sse_chunks_match_the_reference_bytes) {
    // serving.md §1.6: the four events of a one-choice stream
    ojson role = {{"role", "assistant"}, {"content", ""}};
    EXPECT_EQ(sse_event(response_envelope("chatcmpl-X", "chat.completion.chunk", 7, "m",
                                          ojson::array({chat_chunk_choice(0, role, nullptr, nullptr)}))),
              "data: {\"id\":\"chatcmpl-X\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\",\"choices\":"
              "[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
    EXPECT_EQ(sse_event(response_envelope("chatcmpl-X", "chat.completion.chunk", 7, "m",
                                          ojson::array({chat_chunk_choice(0, {{"content", "lo"}}, nullptr, "stop")}))),
              "data: {\"id\":\"chatcmpl-X\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\",\"choices\":"
              "[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null}]}\n\n");
    EXPECT_EQ(sse_event(response_envelope("chatcmpl-X", "chat.completion.chunk", 7, "m", ojson::array(), usage_json(9, 2))),
              "data: {\"id\":\"chatcmpl-X\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\",\"choices\":[],"
              "\"usage\":{\"prompt_tokens\":9,\"total_tokens\":11,\"completion_tokens\":2,\"prompt_tokens_details\":null}}\n\n");
    EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(openai_format, error_bodies) {
    EXPECT_EQ(dump_json(error_body(404, "The model `x` does not exist.", std::string("model"))),
              "{\"error\":{\"message\":\"The model `x` does not exist.\",\"type\":\"NotFoundError\",\"param\":\"model\",\"code\":404}}");
    EXPECT_EQ(dump_json(error_body(api_error(400, "bad"))),
              "{\"error\":{\"message\":\"bad\",\"type\":\"BadRequestError\",\"param\":null,\"code\":400}}");
    EXPECT_EQ(error_body(500, "x")["error"]["type"], "InternalServerError");
    EXPECT_EQ(error_body(401, "x")["error"]["type"], "AuthenticationError");
}

TEST(openai_format, invalid_utf8_never_throws) {
    std::string bad = "a\xff\xfe";
    EXPECT_EQ(dump_json(ojson{{"t", bad}}), "{\"t\":\"a\xEF\xBF\xBD\xEF\xBF\xBD\"}");
}

TEST(openai_format, completion_choice_and_stop_reason) {
    stop_status st;
    st.reason = finish_reason::STOP;
    st.stop_str = "END";
    EXPECT_EQ(dump_json(completion_choice(1, "hi", nullptr, "stop", stop_reason_json(st))),
              "{\"index\":1,\"text\":\"hi\",\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":\"END\"}");
    stop_status tok;
    tok.stop_token = 42;
    EXPECT_EQ(stop_reason_json(tok), 42);
    EXPECT_TRUE(stop_reason_json(stop_status{}).is_null());
}

TEST(openai_format, ids_are_prefixed_hex) {
    std::string a = random_id("chatcmpl-"), b = random_id("chatcmpl-");
    EXPECT_EQ(a.size(), 9u + 32u);
    EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
    EXPECT_EQ(a.find_first_not_of("0123456789abcdef", 9), std::string::npos);
    EXPECT_NE(a, b);
}

TEST(openai_format, logprobs_shapes) {
    auto text = [](int32_t id) { return id == 1 ? std::string("Hi") : std::string(" there"); };
    sample_result a;
    a.token = 1;
    a.logprob = -0.5f;
    a.top_logprobs = {{1, -0.5f}, {2, -1.0f}};
    sample_result b;
    b.token = 2;
    b.logprob = -0.25f;
    ojson c = chat_logprobs_content({1, 2}, {a, b}, text);
    EXPECT_EQ(dump_json(c[0]), "{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":[72,105],\"top_logprobs\":"
                               "[{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":[72,105]},{\"token\":\" there\",\"logprob\":-1.0,"
                               "\"bytes\":[32,116,104,101,114,101]}]}");
    EXPECT_EQ(c[1]["top_logprobs"], ojson::array());
    ojson l = completion_logprobs({1, 2}, {a, b}, text, 5);
    EXPECT_EQ(dump_json(l), "{\"text_offset\":[5,7],\"token_logprobs\":[-0.5,-0.25],\"tokens\":[\"Hi\",\" there\"],"
                            "\"top_logprobs\":[{\"Hi\":-0.5,\" there\":-1.0},{}]}");
    ojson acc;
    append_completion_logprobs(acc, l);
    append_completion_logprobs(acc, l);
    EXPECT_EQ(acc["tokens"].size(), 4u);
}

TEST(openai_format, models_list) {
    ojson m = models_json({"a", "b"}, "/models/x", 2048, 123);
    EXPECT_EQ(m["object"], "list");
    ASSERT_EQ(m["data"].size(), 2u);
    EXPECT_EQ(m["data"][1]["id"], "b");
    EXPECT_EQ(m["data"][0]["object"], "model");
    EXPECT_EQ(m["data"][0]["max_model_len"], 2048);
    EXPECT_EQ(m["data"][0]["root"], "/models/x");
}

TEST(chat_output, plain_content_passes_through) {
    chat_choice_output o(chat_output_options{});
    EXPECT_EQ(o.feed("Hel"), ojson({{"content", "Hel"}}));
    EXPECT_EQ(o.feed(""), ojson::object());
    EXPECT_EQ(o.finish(), ojson::object());
    bool tools = true;
    ojson m = chat_message("Hello", chat_output_options{}, tools);
    EXPECT_FALSE(tools);
    EXPECT_EQ(dump_json(m), "{\"role\":\"assistant\",\"content\":\"Hello\",\"reasoning\":null,\"reasoning_content\":null}");
}

TEST(chat_output, reasoning_in_both_fields) {
    chat_output_options opt;
    opt.reasoning_parser = "qwen3";
    chat_choice_output o(opt);
    EXPECT_EQ(o.feed("<think>ab"), ojson({{"reasoning", "ab"}, {"reasoning_content", "ab"}}));
    EXPECT_EQ(o.feed("c</think>\n\nHi"), ojson({{"reasoning", "c"}, {"reasoning_content", "c"}, {"content", "\n\nHi"}}));
    bool tools = false;
    ojson m = chat_message("<think>abc</think>Hi", opt, tools);
    EXPECT_EQ(m["reasoning"], "abc");
    EXPECT_EQ(m["reasoning_content"], "abc");
    EXPECT_EQ(m["content"], "Hi");
    m = chat_message("<think>abc", opt, tools);  // truncated: no content
    EXPECT_TRUE(m["content"].is_null());
    opt.include_reasoning = false;
    m = chat_message("<think>abc</think>Hi", opt, tools);
    EXPECT_TRUE(m["reasoning"].is_null());
    EXPECT_EQ(m["content"], "Hi");
}

TEST(chat_output, tool_calls_stream_and_message) {
    chat_output_options opt;
    opt.tool_parser = "hermes";
    chat_choice_output o(opt);
    ojson d1 = o.feed("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"ci");
    ASSERT_TRUE(d1.contains("tool_calls"));
    const ojson& c = d1["tool_calls"][0];
    EXPECT_EQ(c["index"], 0);
    EXPECT_EQ(c["type"], "function");
    EXPECT_EQ(c["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u);
    EXPECT_EQ(c["function"]["name"], "get_weather");
    EXPECT_EQ(c["function"]["arguments"], "{\"ci");
    ojson d2 = o.feed("ty\": \"Paris\"}}</tool_call>");
    EXPECT_EQ(d2, ojson({{"tool_calls", {{{"index", 0}, {"function", {{"arguments", "ty\": \"Paris\"}"}}}}}}}));
    EXPECT_TRUE(o.called_tools());
    EXPECT_STREQ(chat_finish_reason("stop", true), "tool_calls");
    EXPECT_STREQ(chat_finish_reason("length", true), "length");
    EXPECT_STREQ(chat_finish_reason("stop", false), "stop");
    bool tools = false;
    ojson m = chat_message("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>", opt, tools);
    EXPECT_TRUE(tools);
    EXPECT_TRUE(m["content"].is_null());
    EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"a\": 1}");
    EXPECT_EQ(m["tool_calls"][0]["type"], "function");
}

TEST(auth, bearer) {
    EXPECT_TRUE(bearer_matches("Bearer sekret", "sekret"));
    EXPECT_FALSE(bearer_matches("Bearer sekret2", "sekret"));
    EXPECT_FALSE(bearer_matches("Bearer sekre", "sekret"));
    EXPECT_FALSE(bearer_matches("sekret", "sekret"));
    EXPECT_FALSE(bearer_matches("", "sekret"));
    EXPECT_TRUE(path_needs_auth("/v1/chat/completions"));
    EXPECT_TRUE(path_needs_auth("/v1/models"));
    EXPECT_TRUE(path_needs_auth("/tokenize"));
    EXPECT_FALSE(path_needs_auth("/health"));
    EXPECT_FALSE(path_needs_auth("/metrics"));
    EXPECT_FALSE(path_needs_auth("/v1x"));
}
