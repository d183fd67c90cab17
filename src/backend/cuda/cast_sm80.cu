// cast_sm80: element-wise f32 ↔ bf16 ↔ f16 conversion through f32 (RNE; NaN stays NaN), the
// dtypes read at run time (uniform branch). Grid-stride over the flattened tensors.
#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {

// src: [numel] st; out: [numel] ot
__global__ void cast_kernel(const void* src, dtype st, void* out, dtype ot, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        store_any(out, ot, i, load_any(src, st, i));
}

static void cast_launch(backend& be, const cast_args& a) {
    int64_t n = a.src.numel();
    if (n == 0) return;
    cast_kernel<<<grid_1d(n, 256), 256, 0, stream_of(be)>>>(a.src.data, a.src.type, a.out.data, a.out.type, n);
    CUDA_CHECK(cudaGetLastError());
}

void register_cast(kernel_registry& r) {
    r.add(make_kernel<cast_args>("cast", "cast_sm80", cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 10,
                                 nullptr, cast_launch));
}

}  // namespace cuda
}  // namespace tetra
