// loaded_model: everything a front end (CLI, server) needs from a model directory: config,
// canonical weights (mmap'd), a backend, the model with its kernels prepared, tokenizer, chat
// templates and generation defaults. Loading prints progress to stderr when asked.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "chat/chat_template.h"
#include "engine/generation_config.h"
#include "io/weights.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tetra {

struct load_options {
    int64_t max_tokens = 256;        // rows per forward step (prefill chunk)
    int64_t max_model_len = 0;       // 0: min(config max_position_embeddings, 8192)
    std::string chat_template_file;  // --chat-template
    matmul_mode mode = matmul_mode::AUTO;
    bool progress = true;
    bool skip_selftest = false;      // --skip-selftest: kernels are not checked at load (warns)
    std::string device = "auto";     // auto (CUDA device 0 if any, else CPU) | cpu | cuda | cuda:N
    std::string act_dtype = "auto";  // --dtype: activation dtype, auto (bf16 on CUDA, f32 on CPU) | bfloat16 | float32
    std::string load_format = "auto";  // auto | safetensors | dummy (seeded random weights from config.json)
    uint64_t seed = 0;               // dummy weights' seed
    std::string tokenizer_dir;       // --tokenizer: tokenizer.json from here instead of the model dir
    bool require_tokenizer = true;   // false: a model without tokenizer loads with tok == nullptr (bench)
};

// The activation dtype named by a --dtype value (vLLM's flag): nullopt for auto (the device's default:
// bf16 on CUDA, f32 on CPU), bf16 for bfloat16, f32 for float32 / float; float16 / half and anything
// else are errors naming the value.
std::optional<dtype> activation_dtype(const std::string& name);

// The backend named by a --device value (auto | cpu | cuda | cuda:N); errors name the value.
std::unique_ptr<backend> make_backend(const std::string& device);

struct loaded_model {
    std::string dir;
    model_config config;
    model_weights weights;
    std::unique_ptr<backend> be;
    std::unique_ptr<causal_lm> model;
    std::shared_ptr<const tokenizer> tok;
    chat_template_sources templates;  // empty when the model has none
    std::optional<std::string> bos_token, eos_token;
    generation_config gen;
    sampling_params defaults;  // generation_config.json defaults + eos ids
    int64_t max_model_len = 0;
    double load_s = 0;
};

std::unique_ptr<loaded_model> load_model(const std::string& dir, const load_options& opt);

// Applies the model's chat template to a list of messages (JSON array of {role, content}).
std::string apply_chat_template(const loaded_model& m, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt, const nlohmann::ordered_json& kwargs = {});

}  // namespace tetra
