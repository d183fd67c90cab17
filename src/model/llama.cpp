// LlamaForCausalLM (Llama 3.x, SmolLM2): pre-norm decoder, GQA, RoPE (default or llama3 scaling),
// SwiGLU MLP, optional tied embeddings. Tensors (HF names): model.embed_tokens, model.layers.N.
// {input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj},
// model.norm, lm_head (absent when tied). Forward: layers.cpp.
#include "core/error.h"
#include "model/layers.h"

namespace tetra {

std::unique_ptr<causal_lm> create_llama(const model_config& c, model_weights& w, backend& be, const model_options& opt) {
    TETRA_CHECK(!c.qk_norm && !c.attention_bias, "%s: LlamaForCausalLM with qk-norm or attention biases is not supported",
                c.path.c_str());
    return make_dense_decoder(c, load_decoder_weights(c, w, be, opt.progress, opt.fuse_projections), be, opt);
}

}  // namespace tetra
