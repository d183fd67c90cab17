// server/openai_request: request parsing and validation against serving.md §1.2–1.4 and §1.9–1.10
// (field types, vLLM's 400 rules and messages, message normalization, sampling defaults priority).
#include <gtest/gtest.h>

#include "server/openai_request.h"

using namespace tetra;

namespace {

ojson J(const char* s) { return ojson::parse(s); }

// The api_error a parse raises (status 0 when none).
template <class F>
api_error error_of(F f) {
    try {
        f();
    } catch (const api_error& e) {
        return e;
    }
    return api_error(0, "no error");
}

std::string param_of(const api_error& e) { return e.param.value_or("<none>"); }

}  // namespace

TEST(openai_request, body_must_be_a_json_object) {
    EXPECT_EQ(error_of([] { parse_json_body("{\"a\": "); }).status, 400);
    EXPECT_EQ(error_of([] { parse_json_body("[]"); }).status, 400);
    EXPECT_EQ(error_of([] { parse_json_body("\"x\""); }).status, 400);
    EXPECT_EQ(error_of([] { parse_json_body(""); }).status, 400);
    EXPECT_EQ(parse_json_body("{\"a\": 1}")["a"], 1);
}

// Nesting is bounded (128 levels): copying or destroying a deeper value recursed once per level and
// a 300-KB body of 150,000 nested arrays crashed the server (session 23's audit). The same bound
// for a tool call's arguments given as a JSON string; a parse error's message is cut (it used to end
// with the whole token read, e.g. a 100-MB string).
TEST(openai_request, json_nesting_is_bounded_and_errors_are_short) {
    auto nested = [](int depth) {  // the innermost array at depth `depth` (the body object: 0)
        return "{\"x\": " + std::string(size_t(depth), '[') + std::string(size_t(depth), ']') + "}";
    };
    EXPECT_TRUE(parse_json_body(nested(128)).contains("x"));
    const api_error deep = error_of([&] { parse_json_body(nested(129)); });
    EXPECT_EQ(deep.status, 400);
    EXPECT_NE(std::string(deep.what()).find("deeper than 128"), std::string::npos) << deep.what();
    EXPECT_FALSE(deep.param);
    EXPECT_EQ(error_of([&] { parse_json_body(nested(200000)); }).status, 400);  // did not return before
    const std::string args = std::string(1000, '[') + std::string(1000, ']');
    ojson body = J(R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
        "function": {"name": "f", "arguments": ""}}]}]})");
    body["messages"][0]["tool_calls"][0]["function"]["arguments"] = args;
    const api_error e = error_of([&] { parse_chat_request(body); });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(param_of(e), "messages[0].tool_calls[0].function.arguments");
    const std::string huge = "{\"prompt\": \"" + std::string(1 << 20, 'a');  // unterminated string
    const api_error cut = error_of([&] { parse_json_body(huge); });
    EXPECT_EQ(cut.status, 400);
    EXPECT_LT(std::string(cut.what()).size(), 400u) << std::string(cut.what()).substr(0, 400);
}

// A boolean field: absent / null → nullopt, a boolean → its value, anything else → 400 naming it
// (/tokenize's add_special_tokens and return_token_strs: "yes" was a 500, "no" counted as true).
TEST(openai_request, request_bool_names_the_field) {
    EXPECT_FALSE(request_bool(J(R"({})"), "return_token_strs"));
    EXPECT_FALSE(request_bool(J(R"({"return_token_strs": null})"), "return_token_strs"));
    EXPECT_EQ(request_bool(J(R"({"return_token_strs": true})"), "return_token_strs"), true);
    EXPECT_EQ(request_bool(J(R"({"add_special_tokens": false})"), "add_special_tokens"), false);
    for (const char* v : {R"({"add_special_tokens": "no"})", R"({"add_special_tokens": 0})"}) {
        const api_error e = error_of([&] { request_bool(J(v), "add_special_tokens"); });
        EXPECT_EQ(e.status, 400) << v;
        EXPECT_EQ(param_of(e), "add_special_tokens") << v;
    }
}

TEST(openai_request, chat_minimal_and_defaults) {
    chat_request r = parse_chat_request(J(R"({"messages": [{"role": "user", "content": "hi"}], "user": "ignored", "store": false})"));
    EXPECT_FALSE(r.model);
    EXPECT_FALSE(r.stream);
    EXPECT_EQ(r.n, 1);
    EXPECT_FALSE(r.max_tokens);
    EXPECT_FALSE(r.temperature);
    EXPECT_TRUE(r.add_generation_prompt);
    EXPECT_TRUE(r.include_reasoning);
    EXPECT_EQ(r.tool_choice, "none");
    EXPECT_FALSE(r.logprobs);
    EXPECT_EQ(r.messages, J(R"([{"role": "user", "content": "hi"}])"));
}

TEST(openai_request, chat_fields) {
    chat_request r = parse_chat_request(J(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "stream": true, "stream_options": {"include_usage": true}, "n": 3, "seed": -5, "stop": "END",
        "stop_token_ids": [7, 9], "max_tokens": 10, "max_completion_tokens": 20, "temperature": 0,
        "top_p": 0.5, "top_k": 40, "min_p": 0.1, "presence_penalty": 1.5, "frequency_penalty": -1,
        "repetition_penalty": 1.1, "logprobs": true, "top_logprobs": 20, "min_tokens": 2.0,
        "chat_template_kwargs": {"enable_thinking": false}, "add_generation_prompt": true})"));
    EXPECT_EQ(*r.model, "m");
    EXPECT_TRUE(r.stream);
    EXPECT_TRUE(r.include_usage);
    EXPECT_EQ(r.n, 3);
    EXPECT_EQ(*r.seed, uint64_t(int64_t(-5)));
    EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
    EXPECT_EQ(r.stop_token_ids, (std::vector<int32_t>{7, 9}));
    EXPECT_EQ(*r.max_tokens, 20);  // max_completion_tokens wins
    EXPECT_EQ(*r.temperature, 0.0f);
    EXPECT_EQ(*r.top_k, 40);
    EXPECT_EQ(*r.logprobs, 20);
    EXPECT_EQ(*r.min_tokens, 2);  // integral float accepted
    EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
    // stream_options object present: include_usage defaults to true (vLLM)
    r = parse_chat_request(J(R"({"messages": [{"role": "user", "content": "x"}], "stream": true, "stream_options": {}})"));
    EXPECT_TRUE(r.include_usage);
    r = parse_chat_request(J(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})"));
    EXPECT_EQ(*r.logprobs, 0);
}

TEST(openai_request, chat_validation_errors) {
    struct bad_case {
        const char* body;
        const char* param;
    };
    const bad_case cases[] = {
        {R"({})", "messages"},
        {R"({"messages": []})", "messages"},
        {R"({"messages": "hi"})", "messages"},
        {R"({"messages": [1]})", "messages[0]"},
        {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
        {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
        {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})", "messages[0].content"},
        {R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature"},
        {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5})", "max_tokens"},
        {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens"},
        {R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", "n"},
        {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream"},
        {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}})", "stream_options"},
        {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3})", "top_logprobs"},
        {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", "top_logprobs"},
        {R"({"messages": [{"role": "user", "content": "x"}], "stop": [1]})", "stop"},
        {R"({"messages": [{"role": "user", "content": "x"}], "stop_token_ids": [-1]})", "stop_token_ids"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": []})", "tools"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"})", "tool_choice"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"})", "tool_choice"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "tools[0]"},
        {R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true})", "continue_final_message"},
        {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})", "response_format"},
        {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": 1}})", "logit_bias"},
        {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []})", "chat_template_kwargs"},
        {R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{bad"}}]}]})",
         "messages[0].tool_calls[0].function.arguments"},
    };
    for (const auto& c : cases) {
        api_error e = error_of([&] { parse_chat_request(J(c.body)); });
        EXPECT_EQ(e.status, 400) << c.body;
        EXPECT_EQ(param_of(e), c.param) << c.body << " → " << e.what();
    }
    api_error e = error_of([] { parse_chat_request(J(R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {}})")); });
    EXPECT_STREQ(e.what(), "Stream options can only be defined when `stream=True`.");
}

TEST(openai_request, messages_normalized_like_vllm) {
    chat_request r = parse_chat_request(J(R"({"messages": [
        {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "f", "arguments": "{\"city\": \"Paris\"}"}}], "reasoning_content": "hmm"},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": "ok", "tool_calls": []}]})"));
    EXPECT_EQ(r.messages[0], J(R"({"role": "system", "content": "a\nb"})"));
    EXPECT_EQ(r.messages[1]["content"], "");
    EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"], J(R"({"city": "Paris"})"));
    EXPECT_EQ(r.messages[1]["reasoning_content"], "hmm");
    EXPECT_EQ(r.messages[2], J(R"({"role": "tool", "tool_call_id": "c1", "content": "sunny"})"));
    EXPECT_FALSE(r.messages[3].contains("tool_calls"));
}

TEST(openai_request, tools_and_reasoning_effort) {
    chat_request r = parse_chat_request(J(R"({"messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}], "reasoning_effort": "none"})"));
    EXPECT_EQ(r.tool_choice, "auto");  // default with tools
    EXPECT_EQ(r.tools.size(), 1u);
    EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
    EXPECT_EQ(r.chat_template_kwargs["reasoning_effort"], "none");
}

TEST(openai_request, completion_prompts) {
    completion_request r = parse_completion_request(J(R"({"prompt": "Once upon", "max_tokens": 5, "logprobs": 2, "echo": false})"));
    EXPECT_EQ(r.prompt, "Once upon");
    EXPECT_FALSE(r.prompt_is_ids);
    EXPECT_EQ(*r.max_tokens, 5);
    EXPECT_EQ(*r.logprobs, 2);
    r = parse_completion_request(J(R"({"prompt": [1, 2, 3]})"));
    EXPECT_TRUE(r.prompt_is_ids);
    EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
    r = parse_completion_request(J(R"({"prompt": ["one"]})"));
    EXPECT_EQ(r.prompt, "one");
    r = parse_completion_request(J(R"({"prompt": [[4, 5]]})"));
    EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{4, 5}));
    for (const char* b : {R"({})", R"({"prompt": ""})", R"({"prompt": []})", R"({"prompt": ["a", "b"]})", R"({"prompt": 3})",
                          R"({"prompt": [1, -2]})", R"({"prompt": "x", "logprobs": 21})", R"({"prompt": "x", "suffix": "y"})",
                          R"({"prompt": "x", "echo": true, "logprobs": 1})"}) {
        EXPECT_EQ(error_of([&] { parse_completion_request(J(b)); }).status, 400) << b;
    }
}

TEST(openai_request, sampling_defaults_priority) {
    sampling_params model_defaults;  // as if from generation_config.json
    model_defaults.temperature = 0.6f;
    model_defaults.top_p = 0.9f;
    model_defaults.eos_token_ids = {2};
    request_common r;
    sampling_params p = make_sampling_params(r, model_defaults, 10, 100, 16);
    EXPECT_EQ(p.temperature, 0.6f);  // model default
    EXPECT_EQ(p.top_p, 0.9f);
    EXPECT_EQ(p.max_tokens, 16);
    EXPECT_EQ(p.eos_token_ids, std::vector<int32_t>{2});
    EXPECT_FALSE(p.logprobs);
    r.temperature = 0.0f;  // request wins
    r.max_tokens = 90;
    p = make_sampling_params(r, model_defaults, 10, 100, 16);
    EXPECT_EQ(p.temperature, 0.0f);
    EXPECT_EQ(p.max_tokens, 90);
    r.max_tokens.reset();
    p = make_sampling_params(r, model_defaults, 10, 100, 0);  // chat without max_tokens: the rest of the context
    EXPECT_EQ(p.max_tokens, 90);
}

TEST(openai_request, context_length_errors) {
    request_common r;
    api_error e = error_of([&] { make_sampling_params(r, sampling_params{}, 100, 100, 16); });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(param_of(e), "input_tokens");
    EXPECT_NE(std::string(e.what()).find("maximum context length"), std::string::npos) << e.what();
    r.max_tokens = 64;
    e = error_of([&] { make_sampling_params(r, sampling_params{}, 8150, 8192, 16); });
    EXPECT_EQ(e.status, 400);
    EXPECT_STREQ(e.what(), "'max_tokens' or 'max_completion_tokens' is too large: 64. This model's maximum context length "
                           "is 8192 tokens and your request has 8150 input tokens (64 > 8192 - 8150).");
    r.max_tokens = 42;  // exactly fills the context: fine
    EXPECT_EQ(make_sampling_params(r, sampling_params{}, 8150, 8192, 16).max_tokens, 42);
}

TEST(openai_request, out_of_range_sampling_is_400_naming_the_field) {
    request_common r;
    r.top_p = 1.5f;
    api_error e = error_of([&] { make_sampling_params(r, sampling_params{}, 1, 100, 16); });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(param_of(e), "top_p");
    r.top_p.reset();
    r.temperature = -1.0f;
    EXPECT_EQ(param_of(error_of([&] { make_sampling_params(r, sampling_params{}, 1, 100, 16); })), "temperature");
}
