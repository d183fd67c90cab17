// silu_mul_cpu: out = silu(gate) · up = gate / (1 + exp(−gate)) · up, element-wise in f32.
#include <cmath>

#include "backend/cpu/cpu_kernels.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cpu {

// gate, up, out: [n_rows, n_ff] act (flattened)
static void silu_mul_cpu(backend&, const silu_mul_args& a) {
    dtype t = a.gate.type;
    parallel_for_grain(a.gate.numel(), 16384, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            float g = act_load(a.gate.data, t, i);
            float s = g / (1.0f + std::exp(-g));
            act_store(a.out.data, t, i, s * act_load(a.up.data, t, i));
        }
    });
}

void register_silu_mul(kernel_registry& r) {
    r.add(make_kernel<silu_mul_args>("silu_mul", "silu_mul_cpu", plain_req(), 0, nullptr, silu_mul_cpu));
}

}  // namespace cpu
}  // namespace tetra
