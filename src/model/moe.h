// The sparse MoE feed-forward block of Qwen3-MoE (and, with a shared expert, Qwen2-MoE/Qwen3-Next):
// router logits → top-k → permutation → gather → grouped gate/up/down → weighted combine
// (+ sigmoid-gated shared expert). Used by the dense decoder (layers.cpp) for the layers where
// model_config::is_moe_layer(il); the op sequence per step is fixed (no host sync, no allocation).
// Ops: backend/moe.h. Config keys and checkpoint names: docs/moe.md.
#pragma once
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/moe.h"
#include "io/weights.h"
#include "model/mlp.h"
#include "model/model_config.h"
#include "model/step_ops.h"

namespace tetra {

struct moe_layer_weights {
    linear_weight router;                       // mlp.gate: [n_expert, n_embd] (dense in every known checkpoint)
    std::vector<linear_weight> gate, up, down;  // n_expert each: [n_ff_exp, n_embd] ×2, [n_embd, n_ff_exp]
    bool has_shared = false;                    // n_ff_shexp > 0
    gate_up_weights shared;                     // shared expert gate/up: [n_ff_shexp, n_embd] (fused where exact)
    linear_weight shared_down;                  // [n_embd, n_ff_shexp]
    linear_weight shared_expert_gate;                   // [1, n_embd] (dense)
    // Fused form (one grouped matmul instead of two, then silu_mul_gate_up on the halves), used
    // instead of gate/up when every expert's pair stacks exactly (layers.h stack_rows: ModelOpt
    // shares weight_scale_2 across an expert's gate and up):
    bool fused_gate_up = false;
    std::vector<linear_weight> gate_up;  // n_expert: rows [gate_e | up_e]: [2·n_ff_exp, n_embd]
};

// Reads "<prefix>mlp.gate", "<prefix>mlp.experts.<e>.{gate,up,down}_proj" and, with a shared expert,
// "<prefix>mlp.shared_expert.{gate,up,down}_proj" and "<prefix>mlp.shared_expert_gate"; checks
// shapes against the config and prepares them on the backend. prefix: "model.layers.<il>."
// fuse: stack each expert's gate/up (and the shared expert's) into one weight where exact.
moe_layer_weights load_moe_layer(const model_config& c, model_weights& w, backend& be, const std::string& prefix,
                                 bool fuse = true);

// Buffers for max_tokens rows (allocated once) and the block's forward.
class moe_ffn {
  public:
    moe_ffn(const model_config& c, backend& be, int64_t max_tokens, dtype act);
    // h: [n_tokens, n_embd] act (the post-attention norm output); out: [n_tokens, n_embd] act
    // ops: the model's step_ops (the MoE classes are counted and skipped there). norm: the next
    // add_rms_norm, folded into the combine (moe_combine_norm; h may be its output: the combine is the
    // block's last reader of h). front: the post-attention add_rms_norm that makes h, folded into the
    // route (moe_route_front; its router is set here), or null when the caller ran it. Returns
    // whether it ran (false: the combine class was skipped).
    bool forward(const moe_layer_weights& L, const tensor& h, const tensor& out, matmul_mode mode, step_ops& ops,
                 const moe_combine_norm* norm = nullptr, const moe_route_front* front = nullptr);
    // The last forward's routed experts: i32 [n_tokens, n_expert_used] on the device (first n rows).
    tensor topk_ids(int64_t n) const { return tensor_rows(ids_, 0, n); }

  private:
    model_config c_;
    backend& be_;
    // gu_: [rows, 2·n_ff_exp], the fused gate/up output (unfused: its first rows·n_ff_exp elements
    // hold the up output). g_: [rows, n_ff_exp], the unfused gate output; the silu_mul output.
    tensor logits_, ids_, weights_, counts_, offsets_, sorted_, dest_, xs_, gu_, g_, ys_;
    tensor sh_gu_, sh_g_, sh_y_, sh_gate_;
};

}  // namespace tetra
