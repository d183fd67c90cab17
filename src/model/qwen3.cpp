// Qwen3ForCausalLM: the Llama block plus per-head RMSNorm of q and k before RoPE
// (model.layers.N.self_attn.{q,k}_norm.weight [head_dim]), explicit head_dim, rope_theta 1e6.
// No q/k/v biases (attention_bias false in every released Qwen3 config). Forward: layers.cpp.
#include "core/error.h"
#include "model/layers.h"

namespace tetra {

std::unique_ptr<causal_lm> create_qwen3(const model_config& c, model_weights& w, backend& be, const model_options& opt) {
    TETRA_CHECK(c.qk_norm, "%s: Qwen3 expects qk-norm", c.path.c_str());
    TETRA_CHECK(!c.attention_bias, "%s: Qwen3 with attention_bias true is not supported (no q/k/v bias op yet)",
                c.path.c_str());
    return make_dense_decoder(c, load_decoder_weights(c, w, be, opt.progress, opt.fuse_projections), be, opt);
}

}  // namespace tetra
