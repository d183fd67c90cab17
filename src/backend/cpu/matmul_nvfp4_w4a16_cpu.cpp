// matmul_nvfp4_w4a16_cpu: the oracle of every W4A16 kernel. Each weight row is dequantized
// exactly as reference/nvfp4-format.md §3.3 (e2m1 · e4m3 · scale_global, nvfp4_dequantize_row),
// then out[m, n] = Σ_k x[m, k] · W[n, k] with f32 accumulation in k order.
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "core/thread_pool.h"
#include "nvfp4/nvfp4.h"

namespace tetra {
namespace cpu {

void nvfp4_matmul_plain(const void* x, dtype xt, int64_t m_rows, const linear_weight& w, const tensor& out) {
    int64_t n_out = w.n_out, k_in = w.n_in;
    const uint8_t* codes = w.codes.ptr<uint8_t>();
    const uint8_t* scales = static_cast<const uint8_t*>(w.scales.data);
    std::vector<float> xf(static_cast<size_t>(m_rows * k_in));
    act_load_row(x, xt, 0, m_rows * k_in, xf.data());
    parallel_for(n_out, [&](int64_t b, int64_t e) {
        std::vector<float> row(static_cast<size_t>(k_in));
        for (int64_t n = b; n < e; ++n) {
            nvfp4_dequantize_row(codes + n * (k_in / 2), scales + n * (k_in / 16), w.scale_global, k_in, row.data());
            for (int64_t m = 0; m < m_rows; ++m) {
                float acc = 0.0f;
                for (int64_t k = 0; k < k_in; ++k) acc += xf[size_t(m * k_in + k)] * row[size_t(k)];
                act_store(out.data, out.type, m * n_out + n, acc);
            }
        }
    });
}

// x: [M, K] act; w: NVFP4 [N, K]; out: [M, N] act
static void matmul_nvfp4_w4a16_cpu(backend&, const matmul_args& a) {
    nvfp4_matmul_plain(a.x.data, a.x.type, a.m, *a.w, a.out);
}

void register_matmul_nvfp4_w4a16(kernel_registry& r) {
    r.add(make_kernel<matmul_args>("matmul_nvfp4_w4a16", "matmul_nvfp4_w4a16_cpu", plain_req(), 0, nullptr,
                                   matmul_nvfp4_w4a16_cpu));
    r.add(matmul_nvfp4_w4a16_avx2_entry());
}

}  // namespace cpu
}  // namespace tetra
