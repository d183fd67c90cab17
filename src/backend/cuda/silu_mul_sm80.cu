// silu_mul_sm80: out = silu(gate) · up = gate / (1 + exp(−gate)) · up in f32 (expf, not __expf:
// the CPU oracle uses std::exp), rounded once to the activation dtype. Grid-stride, flattened. The
// fused form (silu_mul_args::n_ff > 0) reads gate and up as the two halves of each gate_up row.
#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {

// FUSED false: gate, up, out: [numel] T. FUSED true: gate = gate_up [n / ff, 2·ff] T, up = gate + ff,
// out [n / ff, ff] T. Same arithmetic per element in both forms.
template <class T, bool FUSED>
__global__ void silu_mul_kernel(const T* gate, const T* up, T* out, int64_t n, int64_t ff) {
    pdl_wait();
    pdl_trigger();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t s = FUSED ? i + (i / ff) * ff : i;
        float g = to_f32(gate[s]);
        out[i] = from_f32<T>(g / (1.0f + expf(-g)) * to_f32(up[s]));
    }
}

static void silu_mul_launch(backend& be, const silu_mul_args& a) {
    int64_t n = a.out.numel();
    if (n == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* gate = a.gate.ptr<const T>();
        if (a.n_ff > 0)
            launch_pdl(be, silu_mul_kernel<T, true>, dim3(grid_1d(n, 256)), dim3(256), 0, gate, gate + a.n_ff,
                       a.out.ptr<T>(), n, a.n_ff);
        else
            launch_pdl(be, silu_mul_kernel<T, false>, dim3(grid_1d(n, 256)), dim3(256), 0, gate, a.up.ptr<const T>(),
                       a.out.ptr<T>(), n, int64_t(1));
    });
}

void register_silu_mul(kernel_registry& r) {
    r.add(make_kernel<silu_mul_args>("silu_mul", "silu_mul_sm80", cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}),
                                     10, nullptr, silu_mul_launch));
}

}  // namespace cuda
}  // namespace tetra
