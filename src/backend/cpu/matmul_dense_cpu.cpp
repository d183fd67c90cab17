// matmul_dense_cpu: out[m, n] = Σ_k x[m, k] · W[n, k], f32 accumulation in k order. Parallel over
// weight rows: each row is converted to f32 once and reused for every activation row.
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cpu {

// x: [M, K] act; w.dense: [N, K] bf16|f16|f32; out: [M, N] act
static void matmul_dense_cpu(backend&, const matmul_args& a) {
    const tensor& wd = a.w->dense;
    std::vector<float> x(static_cast<size_t>(a.m * a.k));
    act_load_row(a.x.data, a.x.type, 0, a.m * a.k, x.data());
    parallel_for(a.n, [&](int64_t b, int64_t e) {
        std::vector<float> row(static_cast<size_t>(a.k));
        for (int64_t n = b; n < e; ++n) {
            act_load_row(wd.data, wd.type, n * a.k, a.k, row.data());
            for (int64_t m = 0; m < a.m; ++m) {
                float acc = 0.0f;
                for (int64_t k = 0; k < a.k; ++k) acc += x[size_t(m * a.k + k)] * row[size_t(k)];
                act_store(a.out.data, a.out.type, m * a.n + n, acc);
            }
        }
    });
}

void register_matmul_dense(kernel_registry& r) {
    r.add(make_kernel<matmul_args>("matmul_dense", "matmul_dense_cpu", plain_req(), 0, nullptr, matmul_dense_cpu));
    r.add(matmul_dense_avx2_entry());
}

}  // namespace cpu
}  // namespace tetra
