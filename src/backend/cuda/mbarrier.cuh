// mbarrier helpers of the sm_90+ kernels that fill shared memory with TMA / bulk copies
// (matmul_nvfp4_w4a16_wgmma_sm90.cu, decode_layers_sm90.cu): init, the producer's arrive with the
// bytes the copies will complete, a consumer's plain arrive, and the parity wait. Defined only where
// the image has them (__CUDA_ARCH__ ≥ 900); the callers guard their use the same way.
#pragma once
#include <cstdint>

namespace tetra {
namespace cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Returns once the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "wait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
#endif

}  // namespace cuda
}  // namespace tetra
