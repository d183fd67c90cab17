// Shared blocks of the decoder-only transformers (Llama, Qwen3, Qwen3-MoE): pre-norm attention with
// GQA + RoPE (+ optional per-head qk-norm) and a SwiGLU MLP or a sparse MoE block (moe.h).
// Architecture files only say which tensors exist and which flags apply; the forward lives here,
// written once.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/mlp.h"
#include "model/moe.h"

namespace tetra {

struct decoder_layer_weights {
    tensor attn_norm, ffn_norm;   // [n_embd]
    tensor q_norm, k_norm;        // [head_dim] (qk-norm only)
    linear_weight q, k, v, o;     // [n_head·head_dim, n_embd], [n_head_kv·head_dim, n_embd] ×2, [n_embd, n_head·head_dim]
    gate_up_weights mlp;          // dense FFN layers: gate/up [n_ff, n_embd] (fused where exact)
    linear_weight down;           // [n_embd, n_ff] (dense FFN layers)
    // Fused form (one weight read, one launch), used instead of q/k/v when the checkpoint allows one
    // matmul to stand for them (same kind, and for NVFP4 the same global and activation scales —
    // ModelOpt shares weight_scale_2 across q/k/v, and across gate/up):
    bool fused_qkv = false;
    linear_weight qkv;            // rows [q | k | v]: [(n_head + 2·n_head_kv)·head_dim, n_embd]
    std::shared_ptr<const moe_layer_weights> moe;  // MoE layers (model_config::is_moe_layer): replaces gate/up/down
};

struct decoder_weights {
    tensor embed;                 // [n_vocab, n_embd]
    std::vector<decoder_layer_weights> layers;
    tensor norm;                  // [n_embd]
    linear_weight lm_head;        // [n_vocab, n_embd] (the embedding when tied)
};

// The host linear `module` (dense allowed only with dense_ok), its [n_out, n_in] checked against
// the config (the error names the checkpoint dir and the module); load_linear also prepares it on
// the backend. Used here and by the MoE loader (moe.cpp).
const linear_weight& host_linear(model_weights& w, const std::string& module, int64_t n_out, int64_t n_in,
                                 bool dense_ok = false);
linear_weight load_linear(model_weights& w, backend& be, const std::string& module, int64_t n_out, int64_t n_in,
                          bool dense_ok = false);

// Host linears stacked row-wise into one [Σ n_out, n_in] weight when a single matmul computes all
// of them exactly: same kind and n_in; NVFP4 with bit-equal scale_global and activation scales;
// dense with the same dtype; all on the host. Every output element is the same dot product as
// before (rows are independent), so fusing changes no value. nullopt when they cannot be stacked.
// Used for q/k/v and gate/up here and for every MoE expert's gate/up (moe.cpp).
std::optional<linear_weight> stack_rows(const std::vector<const linear_weight*>& ls);

// Reads HF-named tensors ("model.layers.{il}.self_attn.q_proj", ...) for a Llama-family model,
// checks every shape against the config, and prepares them on the backend.
// fuse: stack q/k/v and gate/up into one weight each where exact (decoder_layer_weights).
decoder_weights load_decoder_weights(const model_config& c, model_weights& w, backend& be,
                                     const std::function<void(int64_t, int64_t)>& progress = {}, bool fuse = true);

std::unique_ptr<causal_lm> make_dense_decoder(const model_config& c, decoder_weights w, backend& be,
                                              const model_options& opt);

}  // namespace tetra
