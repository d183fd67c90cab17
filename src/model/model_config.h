// model_config: the architecture hyper-parameters read from an HF config.json, validated once.
// Supported architectures: LlamaForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM (Qwen2 needs q/k/v biases: not yet). Errors name the
// file and the field with expected vs actual.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tetra {

struct rope_config {
    float theta = 10000.0f;
    // rope_scaling {rope_type: "llama3", factor, low_freq_factor, high_freq_factor,
    // original_max_position_embeddings}; type "" = none.
    std::string type;
    float factor = 1.0f, low_freq_factor = 1.0f, high_freq_factor = 4.0f;
    int64_t original_max_position = 8192;
};

struct model_config {
    std::string path;          // the config.json it came from
    std::string architecture;  // "LlamaForCausalLM", ...
    std::string model_type;    // "llama", "qwen2", "qwen3"
    int64_t n_embd = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_layer = 0, n_vocab = 0;
    int64_t max_position = 0;
    float rms_norm_eps = 1e-6f;
    rope_config rope;
    bool tie_word_embeddings = false;
    bool attention_bias = false;  // q/k/v biases (Qwen2 always; Llama/Qwen3 if attention_bias)
    bool qk_norm = false;         // per-head RMSNorm on q and k before rope (Qwen3)
    std::vector<int32_t> eos_token_ids;  // from config.json (generation_config.json may add more)
    int32_t bos_token_id = -1;
    std::string torch_dtype;
    // Mixture of experts (Qwen3MoeForCausalLM, docs/moe.md); n_expert == 0 for dense models.
    int64_t n_expert = 0;               // num_experts (or num_local_experts)
    int64_t n_expert_used = 0;          // num_experts_per_tok (top-k)
    int64_t n_ff_exp = 0;               // moe_intermediate_size (per routed expert)
    int64_t n_ff_shexp = 0;             // shared_expert_intermediate_size; 0 = no shared expert
    bool norm_topk_prob = false;        // renormalize the top-k router probabilities (HF default false)
    int64_t decoder_sparse_step = 1;    // layer il is MoE when (il + 1) % step == 0 ...
    std::vector<int64_t> mlp_only_layers;  // ... and il is not listed here (HF Qwen3MoeDecoderLayer)
    bool is_moe_layer(int64_t il) const;

    std::string summary() const;  // one line: arch, layers, dims
};

model_config load_model_config(const std::string& model_dir);
model_config parse_model_config(const std::string& json_text, const std::string& path);

const std::vector<std::string>& supported_architectures();

}  // namespace tetra
