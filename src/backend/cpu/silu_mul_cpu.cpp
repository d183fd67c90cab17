// silu_mul_cpu: out = silu(gate) · up = gate / (1 + exp(−gate)) · up, element-wise in f32; also the
// fused form (silu_mul_args::n_ff > 0), reading gate and up as the two halves of each gate_up row.
#include <cmath>

#include "backend/cpu/cpu_kernels.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cpu {

// n_ff == 0: gate, up, out: [n_rows, n_ff] act (flattened). n_ff > 0: gate = gate_up [n_rows, 2·n_ff],
// out [n_rows, n_ff]. Element i of out reads gate element gi and up element ui; the arithmetic is the
// same in both forms.
static void silu_mul_cpu(backend&, const silu_mul_args& a) {
    dtype t = a.gate.type;
    const int64_t ff = a.n_ff;
    const void* up = ff > 0 ? a.gate.data : a.up.data;
    parallel_for_grain(a.out.numel(), 16384, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            const int64_t gi = ff > 0 ? i + (i / ff) * ff : i, ui = ff > 0 ? gi + ff : i;
            float g = act_load(a.gate.data, t, gi);
            float s = g / (1.0f + std::exp(-g));
            act_store(a.out.data, t, i, s * act_load(up, t, ui));
        }
    });
}

void register_silu_mul(kernel_registry& r) {
    r.add(make_kernel<silu_mul_args>("silu_mul", "silu_mul_cpu", plain_req(), 0, nullptr, silu_mul_cpu));
}

}  // namespace cpu
}  // namespace tetra
