// rms_norm_cpu: out = x · 1/sqrt(mean(x²) + eps) · w per row, f32 accumulation, in the order of
// HF LlamaRMSNorm (normalise, then multiply by the weight). out may alias x.
#include <cmath>

#include "backend/cpu/cpu_kernels.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cpu {

// One row: x[n] act → out[n] act; w[n] f32|bf16|f16.
void rms_norm_row(const void* x, const void* w, void* out, dtype xt, dtype wt, int64_t row, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
        float v = act_load(x, xt, row * n + j);
        ss += v * v;
    }
    float r = 1.0f / std::sqrt(ss / float(n) + eps);
    for (int64_t j = 0; j < n; ++j)
        act_store(out, xt, row * n + j, act_load(w, wt, j) * (act_load(x, xt, row * n + j) * r));
}

// x: [n_rows, n] act; w: [n]; out: [n_rows, n] act
static void rms_norm_cpu(backend&, const rms_norm_args& a) {
    int64_t n = a.x.dim(-1), n_rows = n ? a.x.numel() / n : 0;
    parallel_for(n_rows, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) rms_norm_row(a.x.data, a.w.data, a.out.data, a.x.type, a.w.type, i, n, a.eps);
    });
}

void register_rms_norm(kernel_registry& r) {
    r.add(make_kernel<rms_norm_args>("rms_norm", "rms_norm_cpu", plain_req(), 0, nullptr, rms_norm_cpu));
}

}  // namespace cpu
}  // namespace tetra
