// add_sm80: out = a + b element-wise in f32, rounded once to the activation dtype (as the CPU
// oracle). Grid-stride over the flattened tensors; out may alias a or b (same index read first).
#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {

// a, b, out: [numel] T
template <class T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

static void add_launch(backend& be, const add_args& a) {
    int64_t n = a.a.numel();
    if (n == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        add_kernel<T><<<grid_1d(n, 256), 256, 0, stream_of(be)>>>(a.a.ptr<const T>(), a.b.ptr<const T>(),
                                                                   a.out.ptr<T>(), n);
        CUDA_CHECK(cudaGetLastError());
    });
}

void register_add(kernel_registry& r) {
    r.add(make_kernel<add_args>("add", "add_sm80", cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 10, nullptr,
                                add_launch));
}

}  // namespace cuda
}  // namespace tetra
