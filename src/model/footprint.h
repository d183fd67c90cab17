// footprint: what one decode step must read from memory — the roofline's numerator. Weights:
// every linear (NVFP4 codes + scales, or dense bytes) and the lm_head, read once per step whatever
// the batch (MoE: the router, top-k experts and the shared expert: the active bytes of one
// token); KV: per sequence, 2 · n_layer · n_head_kv · head_dim · dtype bytes per cached token.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "io/weights.h"
#include "model/model_config.h"
#include "model/step_ops.h"

namespace tetra {

struct model_footprint {
    int64_t weight_bytes = 0;        // read per decode step (all layers' linears + lm_head)
    int64_t lm_head_bytes = 0;       // part of weight_bytes
    int64_t kv_bytes_per_token = 0;  // per cached token of one sequence, read by attention each step
    int64_t n_params = 0;            // parameters of the linears (for reporting)
    // MoE: per layer, one routed expert's gate + up + down bytes (0 in dense layers). weight_bytes
    // counts n_expert_used of them per layer (one token); a batch reads each distinct expert once.
    std::vector<int64_t> expert_bytes;
    // weight_bytes by the op class that reads them (model/step_ops.h: qkv, o_proj, gate_up, down,
    // router, expert_gate_up, expert_down, shared_expert, lm_head; one token's experts).
    std::array<int64_t, k_step_op_count> op_bytes{};
};

// kv_dtype_bytes: bytes per KV element (2 for bf16, 4 for f32).
model_footprint decode_footprint(const model_config& c, model_weights& w, int kv_dtype_bytes);

}  // namespace tetra
