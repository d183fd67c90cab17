// add_rms_norm_cpu: residual += x (rounded to the activation dtype, as an unfused add would),
// then out = rms_norm(residual) · w. Row-parallel; each row is read and written by one thread.
#include "backend/cpu/cpu_kernels.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cpu {

// residual: [n_rows, n] act (in/out); x: [n_rows, n] act; w: [n]; out: [n_rows, n] act
static void add_rms_norm_cpu(backend&, const add_rms_norm_args& a) {
    int64_t n = a.residual.dim(-1), n_rows = n ? a.residual.numel() / n : 0;
    dtype t = a.residual.type;
    parallel_for(n_rows, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            for (int64_t j = 0; j < n; ++j) {
                int64_t idx = i * n + j;
                act_store(a.residual.data, t, idx, act_load(a.residual.data, t, idx) + act_load(a.x.data, t, idx));
            }
            rms_norm_row(a.residual.data, a.w.data, a.out.data, t, a.w.type, i, n, a.eps);
        }
    });
}

void register_add_rms_norm(kernel_registry& r) {
    r.add(make_kernel<add_rms_norm_args>("add_rms_norm", "add_rms_norm_cpu", plain_req(), 0, nullptr,
                                         add_rms_norm_cpu));
}

}  // namespace cpu
}  // namespace tetra
