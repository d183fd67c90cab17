// Registration of the CUDA matmul kernels' tables (owned by the matmul kernels: add one
// register_<file>(r) line per src/backend/cuda/matmul_*.cu file).
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/matmul_launch.h"

namespace tetra {
namespace cuda {

void register_matmul(kernel_registry& r) {
    register_matmul_nvfp4_w4a16_sm80(r);
    register_matmul_nvfp4_w4a16_gemv_sm80(r);
    register_matmul_nvfp4_w4a16_sweep_sm80(r);
    register_matmul_nvfp4_w4a16_wgmma_sm90(r);
    register_matmul_silu_sm80(r);
    register_matmul_dense_bf16_cublaslt(r);
    register_matmul_dense_bf16_gemv_sm80(r);
    register_matmul_f32_sm80(r);
}

}  // namespace cuda
}  // namespace tetra
