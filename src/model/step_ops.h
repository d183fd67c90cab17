// step_ops: the op classes of one forward step (each one or more backend ops at one place of the
// forward), which `tetra bench --breakdown` leaves out one at a time: a skipped class issues no op, so
// the step without it, against a full step, gives its marginal cost inside the decode graph
// (docs/perf.md). Timing only: with a class skipped the model computes garbage (its outputs keep
// stale values, or for some paths read other stale buffers: always in bounds and finite).
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace tetra {

enum class step_op : int {
    EMBEDDING,       // token embedding rows
    ATTN_NORM,       // the layer's first norm (layer 0: rms_norm; then the residual add + rms_norm)
    QKV,             // the q/k/v projection(s)
    ROPE_KV,         // qk-norm, rope, k/v into the cache
    ATTENTION,       // attention over the cache (with its split merge)
    O_PROJ,          // the attention output projection
    FFN_NORM,        // residual add + rms_norm before the FFN
    GATE_UP,         // dense FFN: gate/up projection(s) and silu · up
    DOWN,            // dense FFN: down projection
    ROUTER,          // MoE: router logits
    ROUTE,           // MoE: softmax, top-k, the token → expert permutation
    GATHER,          // MoE: the routed token rows gathered per expert
    EXPERT_GATE_UP,  // MoE: grouped gate/up matmul(s) and silu · up
    EXPERT_DOWN,     // MoE: grouped down matmul
    SHARED_EXPERT,   // MoE: the shared expert (gate/up, down) and its gate
    COMBINE,         // MoE: weighted sum of the expert rows (+ shared expert)
    OUTPUT_NORM,     // residual add + final rms_norm
    LM_HEAD,         // the logit rows and the output projection
};
constexpr int k_step_op_count = int(step_op::LM_HEAD) + 1;

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
        return runs(o);
    }
    // Whether the class will run, without counting it (an op folded into an earlier class's kernel).
    bool runs(step_op o) const { return !((skip >> int(o)) & 1u); }
};

}  // namespace tetra
