// step_ops: the op classes of one forward step, for `tetra bench --breakdown` (docs/perf.md).
// Each class is one or more backend ops at one place of the forward (qkv: the fused matmul, or the
// q, k and v matmuls; rope_kv: qk-norm, rope and the KV store, fused or not). A class can be
// skipped: its ops are not issued and their outputs keep what they held, so the time of a step
// without the class, against a full step, is the class's marginal cost inside the captured decode
// graph (launch, its share of the kernel chain, what overlaps it). Timing only: a model with any
// class skipped computes garbage, and nothing but the bench sets a skip mask.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace tetra {

enum class step_op : int {
    embedding,       // token embedding rows
    attn_norm,       // the layer's first norm (layer 0: rms_norm; then the residual add + rms_norm)
    qkv,             // the q/k/v projection(s)
    rope_kv,         // qk-norm, rope, k/v into the cache
    attention,       // attention over the cache (with its split merge)
    o_proj,          // the attention output projection
    ffn_norm,        // residual add + rms_norm before the FFN
    gate_up,         // dense FFN: gate/up projection(s) and silu · up
    down,            // dense FFN: down projection
    router,          // MoE: router logits
    route,           // MoE: softmax, top-k, the token → expert permutation
    gather,          // MoE: the routed token rows gathered per expert
    expert_gate_up,  // MoE: grouped gate/up matmul(s) and silu · up
    expert_down,     // MoE: grouped down matmul
    shared_expert,   // MoE: the shared expert (gate/up, down) and its gate
    combine,         // MoE: weighted sum of the expert rows (+ shared expert)
    output_norm,     // residual add + final rms_norm
    lm_head,         // the logit rows and the output projection
};
constexpr int k_step_op_count = int(step_op::lm_head) + 1;

// "attn_norm", ...; step_op_of: the class of a name, false if none.
const char* step_op_name(step_op o);
bool step_op_of(const std::string& name, step_op& out);

// A model's skip mask and the number of times each class was reached in its last forward.
struct step_ops {
    using counts = std::array<int, k_step_op_count>;
    uint32_t skip = 0;  // bit i: class i is skipped
    counts calls{};
    void begin_step() { calls.fill(0); }
    // Counts the class; true when its ops run.
    bool run(step_op o) {
        ++calls[size_t(o)];
        return !((skip >> int(o)) & 1u);
    }
};

}  // namespace tetra
