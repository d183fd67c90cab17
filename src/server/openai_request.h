// server/openai_request: parsing and validation of OpenAI / vLLM request bodies (serving.md
// §1.2–1.4, §1.10) into plain structs. Every client mistake is an api_error (HTTP 400, param =
// the field); unknown fields are ignored as vLLM does. Not here: the model check, templates,
// tokenization and the context-length check (the server does them with the model at hand).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/generation_config.h"

namespace tetra {

using ojson = nlohmann::ordered_json;

// An error answered as {"error": {message, type, param, code}} with HTTP `status`.
struct api_error : error {
    int status;
    std::optional<std::string> param;
    api_error(int status_, const std::string& msg, std::optional<std::string> param_ = std::nullopt)
        : error(msg), status(status_), param(std::move(param_)) {}
};
// OpenAI's error type names: BadRequestError (400), AuthenticationError (401), NotFoundError (404),
// RequestTooLarge... (413), InternalServerError (500), ServiceUnavailableError (503).
const char* error_type_for_status(int status);

// The request body: must be a JSON object nesting at most 128 levels (malformed JSON, deeper
// nesting and other values are 400).
ojson parse_json_body(const std::string& body);
// A boolean field of a request: nullopt when absent or null, 400 naming the field when not a boolean.
std::optional<bool> request_bool(const ojson& body, const char* key);

// Fields shared by chat and completions; nullopt = absent or null (server default applies).
struct request_common {
    std::optional<std::string> model;
    bool stream = false;
    bool include_usage = false;            // stream_options.include_usage (true once the object is given)
    bool continuous_usage_stats = false;   // stream_options.continuous_usage_stats
    int32_t n = 1;
    std::optional<float> temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
    std::optional<int32_t> top_k, max_tokens, min_tokens;
    std::optional<uint64_t> seed;
    std::vector<std::string> stop;
    std::vector<int32_t> stop_token_ids;
    bool ignore_eos = false, include_stop_str_in_output = false;
    std::optional<int32_t> logprobs;       // top-k count (chat: top_logprobs when logprobs=true)
    std::optional<bool> add_special_tokens;
};

struct chat_request : request_common {
    ojson messages;                        // normalized for the chat template (see parse_chat_request)
    ojson tools;                           // null when absent
    std::string tool_choice = "none";      // "none" | "auto" | "required" | "function" (named)
    bool add_generation_prompt = true, continue_final_message = false, include_reasoning = true;
    ojson chat_template_kwargs = ojson::object();
};

struct completion_request : request_common {
    std::string prompt;                    // text prompt, or
    std::vector<int32_t> prompt_ids;       // token ids when the prompt was given as ids
    bool prompt_is_ids = false;
    bool echo = false;
};

// Messages are normalized as vLLM does before rendering: list content parts joined with "\n"
// (text parts only), null content → "", "developer" → "system", empty tool_calls dropped, and
// tool_calls[].function.arguments JSON strings parsed into objects.
chat_request parse_chat_request(const ojson& body);
completion_request parse_completion_request(const ojson& body);

// Engine sampling parameters: request value > model default (generation_config.json) > OpenAI
// default. max_tokens absent: default_max_tokens if > 0, else up to the context. Throws api_error
// 400 when the prompt (or prompt + max_tokens) exceeds max_model_len ("maximum context length")
// or a field is out of range (param = the field).
sampling_params make_sampling_params(const request_common& r, const sampling_params& defaults, int64_t n_prompt,
                                     int64_t max_model_len, int32_t default_max_tokens);

}  // namespace tetra
