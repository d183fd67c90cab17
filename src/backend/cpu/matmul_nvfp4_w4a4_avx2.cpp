// matmul_nvfp4_w4a4_avx2: W4A4 on the CPU, fast: the activation rows are fake-quantized exactly as
// the oracle does (w4a4_dequant_activations), then multiplied by the AVX2 W4A16 kernel.
#include <vector>

#include "backend/cpu/cpu_kernels.h"

namespace tetra {
namespace cpu {

// x: [M, K] f32; w: NVFP4 [N, K] with input_global_quant; out: [M, N] f32
static void matmul_nvfp4_w4a4_avx2(backend&, const matmul_args& a) {
    std::vector<float> xq(size_t(a.m * a.k));
    w4a4_dequant_activations(a.x, a.m, a.k, a.w->input_global_quant, xq.data());
    nvfp4_matmul_avx2_f32(xq.data(), a.m, *a.w, a.out.ptr<float>());
}

kernel_entry matmul_nvfp4_w4a4_avx2_entry() {
    kernel_req req;
    req.device = device_kind::CPU;
    req.features = FEAT_CPU_AVX2_FMA_F16C;
    req.act_dtypes = {dtype::F32};
    return make_kernel<matmul_args>("matmul_nvfp4_w4a4", "matmul_nvfp4_w4a4_avx2", req, 10, nullptr,
                                    matmul_nvfp4_w4a4_avx2);
}

}  // namespace cpu
}  // namespace tetra
