// An MLP's gate/up stage, shared by the dense FFN layers (layers.cpp) and the MoE shared expert
// (moe.cpp): the two projections stacked into one weight where that is exact, and
// silu(h·gateᵀ)·(h·upᵀ) from either form.
#pragma once
#include <string>

#include "backend/backend.h"
#include "io/weights.h"

namespace tetra {

// An MLP's gate and up projections ([n_ff, n_embd] each): one stacked [gate; up] weight (rows
// [gate | up]: [2·n_ff, n_embd]) where one matmul computes both exactly (stack_rows), else two.
// Serves the dense FFN layers and the MoE shared expert.
struct gate_up_weights {
    linear_weight gate, up;  // unfused
    linear_weight gate_up;   // fused
    bool fused = false;
};

// Reads "<prefix>gate_proj" and "<prefix>up_proj" ([n_ff, n_embd], checked against the config),
// stacked into one weight when `fuse` and stack_rows allow it, and prepares them on the backend.
gate_up_weights load_gate_up_weights(model_weights& w, backend& be, const std::string& prefix, int64_t n_ff,
                                     int64_t n_embd, bool fuse);

// out = silu(h · gateᵀ) · (h · upᵀ), [n, n_ff]. Fused: backend::matmul_silu (the matmul into gu
// [n, 2·n_ff] and silu_mul_gate_up, one kernel on the CUDA decode path); else gate into out, up
// into `up` [n, n_ff], then silu_mul (in place on out).
void gate_up_silu(backend& be, const gate_up_weights& w, const tensor& h, const tensor& gu, const tensor& up,
                  const tensor& out, matmul_mode mode);

}  // namespace tetra
