// silu_mul_sm80: out = silu(gate) · up = gate / (1 + exp(−gate)) · up in f32 (expf, not __expf:
// the CPU oracle uses std::exp), rounded once to the activation dtype. Grid-stride, flattened.
#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {

// gate, up, out: [numel] T
template <class T>
__global__ void silu_mul_kernel(const T* gate, const T* up, T* out, int64_t n) {
    pdl_wait();
    pdl_trigger();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        float g = to_f32(gate[i]);
        out[i] = from_f32<T>(g / (1.0f + expf(-g)) * to_f32(up[i]));
    }
}

static void silu_mul_launch(backend& be, const silu_mul_args& a) {
    int64_t n = a.gate.numel();
    if (n == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        launch_pdl(be, silu_mul_kernel<T>, dim3(grid_1d(n, 256)), dim3(256), 0, a.gate.ptr<const T>(),
                   a.up.ptr<const T>(), a.out.ptr<T>(), n);
    });
}

void register_silu_mul(kernel_registry& r) {
    r.add(make_kernel<silu_mul_args>("silu_mul", "silu_mul_sm80", cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}),
                                     10, nullptr, silu_mul_launch));
}

}  // namespace cuda
}  // namespace tetra
