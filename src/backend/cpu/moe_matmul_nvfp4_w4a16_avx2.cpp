// moe_matmul_nvfp4_w4a16_avx2: the fast W4A16 grouped matmul (f32 activations).
// The grouped driver (moe_matmul_dense_cpu.cpp) running matmul_nvfp4_w4a16_avx2 on each expert's rows.
#include "backend/cpu/moe_kernels.h"

namespace tetra {
namespace cpu {

// x: [n_rows, K] act; experts: [N, K]; out: [n_rows, N] act
static void moe_matmul_nvfp4_w4a16_avx2(backend& be, const moe_matmul_args& a) {
    moe_matmul_grouped(be, a, "matmul_nvfp4_w4a16_avx2");
}

kernel_entry moe_matmul_nvfp4_w4a16_avx2_entry() {
    return make_kernel<moe_matmul_args>("moe_matmul_nvfp4_w4a16", "moe_matmul_nvfp4_w4a16_avx2", moe_matmul_avx2_req(), 10, nullptr,
                                        moe_matmul_nvfp4_w4a16_avx2);
}

}  // namespace cpu
}  // namespace tetra
