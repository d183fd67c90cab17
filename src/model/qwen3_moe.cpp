// Qwen3MoeForCausalLM: the Qwen3 block (qk-norm, GQA, RoPE) with a sparse MoE feed-forward in the
// layers model_config::is_moe_layer selects (decoder_sparse_step, mlp_only_layers; the others keep
// the dense mlp.{gate,up,down}_proj). Routed experts mlp.experts.<e>.{gate,up,down}_proj, router
// mlp.gate; with shared_expert_intermediate_size > 0 also the Qwen3-Next style shared expert
// (mlp.shared_expert.*, mlp.shared_expert_gate). Forward: layers.cpp + moe.cpp; docs/moe.md.
#include "core/error.h"
#include "model/layers.h"

namespace tetra {

std::unique_ptr<causal_lm> create_qwen3_moe(const model_config& c, model_weights& w, backend& be,
                                            const model_options& opt) {
    TETRA_CHECK(c.qk_norm, "%s: Qwen3-MoE expects qk-norm", c.path.c_str());
    TETRA_CHECK(!c.attention_bias, "%s: Qwen3-MoE with attention_bias true is not supported (no q/k/v bias op yet)",
                c.path.c_str());
    TETRA_CHECK(c.n_expert > 0, "%s: Qwen3MoeForCausalLM with num_experts 0 has no MoE layer; expected >= 1 expert",
                c.path.c_str());
    return make_dense_decoder(c, load_decoder_weights(c, w, be, opt.progress, opt.fuse_projections), be, opt);
}

}  // namespace tetra
