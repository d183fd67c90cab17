// cast_cpu: element-wise conversion between f32, bf16 and f16 (RNE; NaN stays NaN; overflow to
// f16 gives Inf).
#include "backend/cpu/cpu_kernels.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cpu {

// src, out: same numel, f32|bf16|f16 each
static void cast_cpu(backend&, const cast_args& a) {
    parallel_for_grain(a.src.numel(), 16384, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) act_store(a.out.data, a.out.type, i, act_load(a.src.data, a.src.type, i));
    });
}

void register_cast(kernel_registry& r) { r.add(make_kernel<cast_args>("cast", "cast_cpu", plain_req(), 0, nullptr, cast_cpu)); }

}  // namespace cpu
}  // namespace tetra
