// engine/generation_config: per-request sampling parameters (vLLM SamplingParams where the meaning
// matches) with validate(), and the model's generation_config.json (eos ids, request defaults).
// Invariant: a sampling_params that passed validate() is safe for the sampler and the stop checks.
// Not here: request JSON parsing (server), `n` (the engine forks sequences), logit_bias.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace tetra {

// temperature below this is greedy (vLLM's _SAMPLING_EPS); temperature 0 is the usual spelling.
constexpr float sampling_eps = 1e-5f;
constexpr int32_t max_logprobs = 20;  // vLLM --max-logprobs default

struct sampling_params {
    float temperature = 1.0f;         // >= 0; < sampling_eps -> greedy argmax
    int32_t top_k = 0;                // 0 or -1: off; >= n_vocab: off
    float top_p = 1.0f;               // (0, 1]
    float min_p = 0.0f;               // [0, 1]; relative to the most likely token
    float repetition_penalty = 1.0f;  // > 0; prompt and output tokens (HF/vLLM)
    float presence_penalty = 0.0f;    // [-2, 2]; output tokens only (OpenAI)
    float frequency_penalty = 0.0f;   // [-2, 2]; output tokens only (OpenAI)
    std::optional<uint64_t> seed;     // none: resolve_seed() draws one per request
    int32_t max_tokens = 16;          // >= 1 (vLLM default 16)
    int32_t min_tokens = 0;           // [0, max_tokens]; EOS and stop ids suppressed until reached
    std::vector<std::string> stop;    // non-empty strings
    std::vector<int32_t> stop_token_ids;
    bool ignore_eos = false;
    bool include_stop_str_in_output = false;
    std::optional<int32_t> logprobs;  // none: no logprobs; k in [0, 20]: sampled token + top k
    // Filled by the engine (from generation_config.json / config.json), never from the request:
    // every id that ends generation as EOS (finish_reason "stop", stop_reason null).
    std::vector<int32_t> eos_token_ids;

    bool greedy() const { return temperature < sampling_eps; }
    // Throws sampling_param_error naming the first invalid field, its allowed range and the value.
    void validate() const;
};

// An invalid request field; `param` is the field name (the server puts it in the 400's "param").
struct sampling_param_error : error {
    std::string param;
    sampling_param_error(const std::string& param_, const std::string& msg)
        : error(msg), param(param_) {}
};

// The request's seed, or a fresh random one (std::random_device) when it has none. Call once per
// request and keep the result: the sampler is a pure function of (seed, step).
uint64_t resolve_seed(const sampling_params& p);

// generation_config.json. Absent or null fields stay empty.
struct generation_config {
    std::vector<int32_t> eos_token_ids;  // "eos_token_id": int or list of ints
    std::optional<int32_t> bos_token_id;
    std::optional<int32_t> pad_token_id;
    // Request defaults vLLM takes from the file (--generation-config auto).
    std::optional<float> temperature;
    std::optional<float> top_p;
    std::optional<int32_t> top_k;
    std::optional<float> min_p;
    std::optional<float> repetition_penalty;
    std::optional<int32_t> max_new_tokens;  // becomes the default max_tokens
};

// Parses JSON text; `source` (the file path) names the culprit in errors. Throws tetra::error.
generation_config parse_generation_config(const std::string& json_text, const std::string& source);
// Reads and parses a file; a missing or unreadable file is an error naming the path.
generation_config load_generation_config(const std::string& path);

// Server defaults for a request: the built-in defaults overridden by the file's fields, and
// eos_token_ids set to the file's list merged with `extra_eos_ids` (e.g. config.json's
// eos_token_id), deduplicated in first-seen order. The server then applies the request's fields.
sampling_params default_sampling_params(const generation_config& gc,
                                        const std::vector<int32_t>& extra_eos_ids = {});

}  // namespace tetra
