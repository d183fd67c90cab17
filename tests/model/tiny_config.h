// A tiny dense config (64 wide, 4 heads of 16, 2 kv heads, FFN 96, vocab 320) for model tests on
// dummy weights: fast on the CPU backend, every projection fusable.
#pragma once
#include <string>

#include "model/model_config.h"

namespace tetra {
namespace test_models {

inline model_config tiny_dense_config(const std::string& arch, int n_layer) {
    std::string j = R"({"architectures": [")" + arch + R"("], "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": )" + std::to_string(n_layer) + R"(, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 256,
        "vocab_size": 320, "tie_word_embeddings": false})";
    return parse_model_config(j, "tiny/config.json");
}

}  // namespace test_models
}  // namespace tetra
