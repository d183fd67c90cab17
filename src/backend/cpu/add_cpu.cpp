// add_cpu: out = a + b element-wise (out may alias a or b: each element is read before written).
#include "backend/cpu/cpu_kernels.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cpu {

// a, b, out: same shape act (flattened)
static void add_cpu(backend&, const add_args& a) {
    dtype t = a.a.type;
    parallel_for_grain(a.a.numel(), 16384, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) act_store(a.out.data, t, i, act_load(a.a.data, t, i) + act_load(a.b.data, t, i));
    });
}

void register_add(kernel_registry& r) { r.add(make_kernel<add_args>("add", "add_cpu", plain_req(), 0, nullptr, add_cpu)); }

}  // namespace cpu
}  // namespace tetra
