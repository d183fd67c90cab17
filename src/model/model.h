// model: a causal LM built from a config and canonical weights on one backend. The forward is
// written once against the backend op interface (backend/backend.h); architectures differ only in
// tensor names and flags (llama.cpp, qwen3.cpp). Activation buffers are allocated once for
// max_tokens rows, so a decode step allocates nothing (a prerequisite for CUDA graphs).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/weights.h"
#include "model/model_config.h"
#include "model/step_ops.h"

namespace tetra {

// Paged KV cache: per layer k and v [n_blocks, block_size, n_head_kv, head_dim] on the backend.
struct kv_cache {
    int block_size = 16;
    int64_t n_blocks = 0;
    std::vector<tensor> k, v;
    static kv_cache create(backend& be, const model_config& c, int64_t n_blocks, int block_size, dtype t);
    size_t bytes() const;
};

// One forward step's inputs, all on the backend's device.
struct forward_batch {
    int64_t n_tokens = 0;
    tensor ids;          // i32 [n_tokens]
    attn_metadata meta;  // positions, cu_seqlens_q, seq_lens_kv, block_tables, slot_mapping
    int64_t n_logits = 0;
    tensor logit_rows;   // i32 [n_logits]: which token rows get logits (e.g. last of each sequence)
};

// Called with each named intermediate ("attn_norm", "q", "attn_out", "ffn_out", "l_out", "norm",
// "logits") and its layer (-1 outside layers); MoE layers also give "moe_ids", the routed experts
// (i32 [n_tokens, n_expert_used]). Tensors are on the backend's device.
using tap_fn = std::function<void(const std::string& name, int il, const tensor& t)>;

class causal_lm {
  public:
    virtual ~causal_lm() = default;
    const model_config& config() const { return cfg_; }
    int64_t max_tokens() const { return max_tokens_; }
    dtype act_type() const { return act_; }
    // logits: [n_logits, n_vocab] act dtype on the device, valid until the next forward.
    virtual const tensor& forward(const forward_batch& b, kv_cache& kv) = 0;
    void set_tap(tap_fn fn) { tap_ = std::move(fn); }
    bool has_tap() const { return bool(tap_); }
    // `tetra bench --breakdown` only (model/step_ops.h): the op classes to leave out of the next
    // forwards (bit i: step_op i; 0 = none), and how often each class was reached in the last one.
    // The runner keys its captured graphs by this mask, so a graph is replayed only under its own.
    void set_skip_ops(uint32_t mask) { ops_.skip = mask; }
    const step_ops& ops() const { return ops_; }
    // Forwards whose layers ran as one backend op (backend::decode_layers; dense_decoder::decode_stack).
    int64_t stacked_forwards() const { return stacked_forwards_; }

  protected:
    causal_lm(const model_config& c, backend& be, int64_t max_tokens, dtype act)
        : cfg_(c), be_(be), max_tokens_(max_tokens), act_(act) {}
    model_config cfg_;
    backend& be_;
    int64_t max_tokens_;
    dtype act_;
    tap_fn tap_;
    step_ops ops_;
    int64_t stacked_forwards_ = 0;
};

struct model_options {
    int64_t max_tokens = 512;  // rows per forward (max_num_batched_tokens)
    matmul_mode mode = matmul_mode::AUTO;
    // Activation dtype; unset = the backend's default (f32 on the CPU, bf16 on CUDA). A CPU model
    // with bf16 activations rounds where the GPU rounds: the like-for-like oracle of a GPU run.
    std::optional<dtype> act;
    // Stack q/k/v and gate/up into one matmul each where that is exact (same kind; NVFP4 with the
    // same global and activation scales). Off: one matmul per projection (tests compare the two).
    bool fuse_projections = true;
    // Called after each layer's weights are prepared: (layers done, n_layer). For progress bars.
    std::function<void(int64_t, int64_t)> progress;
};

// The rope parameters of a config (theta, and llama3 scaling when rope_scaling asks for it): what
// rope_inv_freq takes, for the model and for the self-test's rope cases.
rope_params rope_params_of(const rope_config& r);

// The activation dtype a model gets when model_options::act is unset: f32 on the CPU, bf16 on CUDA
// (the self-test and `tetra doctor` check the kernels at the same default).
dtype default_act_type(const device_info& dev);

// Builds the architecture named by cfg.architecture. Weights are prepared for the backend (uploaded,
// re-laid) once; a tensor the architecture needs but the checkpoint lacks is an error naming it.
std::unique_ptr<causal_lm> create_model(const model_config& cfg, model_weights& w, backend& be,
                                        const model_options& opt);

}  // namespace tetra
