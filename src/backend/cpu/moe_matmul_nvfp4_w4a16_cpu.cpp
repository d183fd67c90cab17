// moe_matmul_nvfp4_w4a16_cpu: the W4A16 grouped-matmul oracle (weights dequantized exactly).
// The grouped driver (moe_matmul_dense_cpu.cpp) running matmul_nvfp4_w4a16_cpu on each expert's rows.
#include "backend/cpu/moe_kernels.h"

namespace tetra {
namespace cpu {

// x: [n_rows, K] act; experts: [N, K]; out: [n_rows, N] act
static void moe_matmul_nvfp4_w4a16_cpu(backend& be, const moe_matmul_args& a) {
    moe_matmul_grouped(be, a, "matmul_nvfp4_w4a16_cpu");
}

kernel_entry moe_matmul_nvfp4_w4a16_cpu_entry() {
    return make_kernel<moe_matmul_args>("moe_matmul_nvfp4_w4a16", "moe_matmul_nvfp4_w4a16_cpu", plain_req(), 0, nullptr,
                                        moe_matmul_nvfp4_w4a16_cpu);
}

}  // namespace cpu
}  // namespace tetra
