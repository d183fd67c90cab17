// Flags shared by the generating subcommands (run, chat, perplexity): model argument with the
// default model, sampling flags (vLLM/OpenAI names), and model loading with friendly errors.
#pragma once
#include <memory>
#include <string>

#include "commands.h"
#include "engine/generation_config.h"
#include "engine/loaded_model.h"

namespace tetra {

// The model prepared by the README's main command (scripts/prepare_model.sh).
std::string default_model_dir();

struct model_flags {
    std::string model;
    std::string chat_template;
    int64_t max_model_len = 0;
    int64_t max_tokens_per_step = 256;
    int threads = 0;
    bool skip_selftest = false;
    std::string device = "auto";
    std::string act_dtype = "auto";  // --dtype
    std::string load_format = "auto";
    std::string tokenizer;
    uint64_t dummy_seed = 0;
    void add(CLI::App* cmd);
    std::unique_ptr<loaded_model> load() const;  // errors carry a hint
    load_options options() const;                 // the load options these flags say
};

struct sampling_flags {
    float temperature = -1, top_p = -1, min_p = -1, repetition_penalty = -1;
    float presence_penalty = 0, frequency_penalty = 0;
    int top_k = -2, max_tokens = 256, min_tokens = 0;
    int64_t seed = -1;
    std::vector<std::string> stop;
    bool ignore_eos = false;
    void add(CLI::App* cmd);
    // Model defaults (generation_config.json) overridden by the flags that were given.
    sampling_params resolve(const loaded_model& m) const;
};

}  // namespace tetra
