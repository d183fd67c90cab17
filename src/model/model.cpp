// Architecture dispatch and the paged KV cache allocation.
#include "model/model.h"

#include "core/error.h"

namespace tetra {

std::unique_ptr<causal_lm> create_llama(const model_config& c, model_weights& w, backend& be, const model_options& opt);
std::unique_ptr<causal_lm> create_qwen3(const model_config& c, model_weights& w, backend& be, const model_options& opt);
std::unique_ptr<causal_lm> create_qwen3_moe(const model_config& c, model_weights& w, backend& be,
                                            const model_options& opt);

rope_params rope_params_of(const rope_config& r) {
    rope_params rp;
    rp.theta = r.theta;
    if (r.type == "llama3") {
        rp.scaling = rope_scaling_type::LLAMA3;
        rp.factor = r.factor;
        rp.low_freq_factor = r.low_freq_factor;
        rp.high_freq_factor = r.high_freq_factor;
        rp.original_max_position_embeddings = r.original_max_position;
    }
    return rp;
}

dtype default_act_type(const device_info& dev) { return dev.kind == device_kind::CPU ? dtype::F32 : dtype::BF16; }

std::unique_ptr<causal_lm> create_model(const model_config& c, model_weights& w, backend& be, const model_options& opt) {
    TETRA_CHECK(opt.max_tokens >= 1, "create_model: max_tokens must be >= 1, got %lld", (long long)opt.max_tokens);
    if (c.architecture == "LlamaForCausalLM") return create_llama(c, w, be, opt);
    if (c.architecture == "Qwen3ForCausalLM") return create_qwen3(c, w, be, opt);
    if (c.architecture == "Qwen3MoeForCausalLM") return create_qwen3_moe(c, w, be, opt);
    TETRA_FAIL("%s: no forward for architecture '%s'", c.path.c_str(), c.architecture.c_str());
}

kv_cache kv_cache::create(backend& be, const model_config& c, int64_t n_blocks, int block_size, dtype t) {
    TETRA_CHECK(n_blocks >= 1 && block_size >= 1, "kv cache: need at least one block (got %lld blocks of %d)",
                (long long)n_blocks, block_size);
    kv_cache kv;
    kv.block_size = block_size;
    kv.n_blocks = n_blocks;
    for (int64_t il = 0; il < c.n_layer; ++il) {
        kv.k.push_back(be.alloc(t, {n_blocks, block_size, c.n_head_kv, c.head_dim}));
        kv.v.push_back(be.alloc(t, {n_blocks, block_size, c.n_head_kv, c.head_dim}));
    }
    return kv;
}

size_t kv_cache::bytes() const {
    size_t n = 0;
    for (size_t i = 0; i < k.size(); ++i) n += k[i].nbytes() + v[i].nbytes();
    return n;
}

}  // namespace tetra
