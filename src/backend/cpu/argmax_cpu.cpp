// argmax_cpu: index of the row maximum; first index on ties; a NaN counts as larger than any
// number (torch.argmax semantics), so the first NaN wins.
#include <cmath>

#include "backend/cpu/cpu_kernels.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cpu {

// x: [n_rows, n] act; out: i32 [n_rows]
static void argmax_cpu(backend&, const argmax_args& a) {
    int64_t n_rows = a.x.dim(0), n = a.x.dim(1);
    parallel_for(n_rows, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
            int64_t best = 0;
            float bv = act_load(a.x.data, a.x.type, r * n);
            for (int64_t j = 1; j < n && !std::isnan(bv); ++j) {
                float v = act_load(a.x.data, a.x.type, r * n + j);
                if (std::isnan(v) || v > bv) best = j, bv = v;
            }
            a.out.ptr<int32_t>()[r] = int32_t(best);
        }
    });
}

void register_argmax(kernel_registry& r) {
    r.add(make_kernel<argmax_args>("argmax", "argmax_cpu", plain_req(), 0, nullptr, argmax_cpu));
}

}  // namespace cpu
}  // namespace tetra
