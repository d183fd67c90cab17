// An MLP's gate/up stage (mlp.h).
#include "model/mlp.h"

#include <optional>

#include "model/layers.h"

namespace tetra {

gate_up_weights load_gate_up_weights(model_weights& w, backend& be, const std::string& prefix, int64_t n_ff,
                                     int64_t n_embd, bool fuse) {
    gate_up_weights r;
    const linear_weight& g = host_linear(w, prefix + "gate_proj", n_ff, n_embd);
    const linear_weight& u = host_linear(w, prefix + "up_proj", n_ff, n_embd);
    if (auto f = fuse ? stack_rows({&g, &u}) : std::nullopt) {
        r.gate_up = be.prepare_linear(*f);
        r.fused = true;
    } else {
        r.gate = be.prepare_linear(g), r.up = be.prepare_linear(u);
    }
    return r;
}

void gate_up_silu(backend& be, const gate_up_weights& w, const tensor& h, const tensor& gu, const tensor& up,
                  const tensor& out, matmul_mode mode) {
    if (w.fused) {
        be.matmul_silu(h, w.gate_up, gu, out, mode);  // one kernel where the backend fuses them
    } else {
        be.matmul(h, w.gate, out, mode);
        be.matmul(h, w.up, up, mode);
        be.silu_mul(out, up, out);
    }
}

}  // namespace tetra
