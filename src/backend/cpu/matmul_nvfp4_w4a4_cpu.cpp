// matmul_nvfp4_w4a4_cpu: the oracle of the native FP4 (W4A4) path (reference/nvfp4-format.md
// §3.5): every activation row is quantized per 16-block with the weight's input_global_quant G
// (nvfp4_quantize_activation_row: SF = e4m3(G·amax/6), exact division), dequantized to
// e2m1(code)·SF/G, then multiplied like W4A16 (weights dequantized exactly, f32 accumulation).
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "core/thread_pool.h"
#include "nvfp4/nvfp4.h"

namespace tetra {
namespace cpu {

void w4a4_dequant_activations(const tensor& x, int64_t m_rows, int64_t k_in, float g, float* out) {
    parallel_for(m_rows, [&](int64_t b, int64_t e) {
        std::vector<float> row(static_cast<size_t>(k_in));
        std::vector<uint8_t> codes(static_cast<size_t>(k_in / 2)), sf(static_cast<size_t>(k_in / 16));
        for (int64_t m = b; m < e; ++m) {
            for (int64_t k = 0; k < k_in; ++k) row[size_t(k)] = act_load(x.data, x.type, m * k_in + k);
            nvfp4_quantize_activation_row(row.data(), k_in, g, codes.data(), sf.data());
            for (int64_t k = 0; k < k_in; ++k) {
                uint8_t c = uint8_t(codes[size_t(k / 2)] >> (4 * (k % 2)));
                out[m * k_in + k] = (e2m1_decode(c) * e4m3_decode(sf[size_t(k / 16)])) / g;
            }
        }
    });
}

// x: [M, K] act; w: NVFP4 [N, K] with input_global_quant; out: [M, N] act
static void matmul_nvfp4_w4a4_cpu(backend&, const matmul_args& a) {
    std::vector<float> xq(size_t(a.m * a.k));
    w4a4_dequant_activations(a.x, a.m, a.k, a.w->input_global_quant, xq.data());
    nvfp4_matmul_plain(xq.data(), dtype::F32, a.m, *a.w, a.out);
}

void register_matmul_nvfp4_w4a4(kernel_registry& r) {
    r.add(make_kernel<matmul_args>("matmul_nvfp4_w4a4", "matmul_nvfp4_w4a4_cpu", plain_req(), 0, nullptr,
                                   matmul_nvfp4_w4a4_cpu));
    r.add(matmul_nvfp4_w4a4_avx2_entry());
}

}  // namespace cpu
}  // namespace tetra
