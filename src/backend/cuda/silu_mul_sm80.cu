// silu_mul_sm80: out = silu(gate) · up = gate / (1 + exp(−gate)) · up in f32 (expf, not __expf:
// the CPU oracle uses std::exp), rounded once to the activation dtype. Grid-stride, flattened; the
// fused form (silu_mul_args::n_ff > 0) reads gate and up as the two halves of each gate_up row
// (rows along the grid's y: no index division per element).
#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {

// The element's arithmetic (silu_times, cuda_device.cuh) is shared by both forms and by the
// fused matmul_silu kernel.

// gate, up, out: [n] T (flattened). Grid-stride.
template <class T>
__global__ void silu_mul_kernel(const T* gate, const T* up, T* out, int64_t n) {
    pdl_wait();
    pdl_trigger();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        out[i] = silu_times(gate[i], up[i]);
}

// gate_up: [rows, 2·ff] T, out: [rows, ff] T; rows along grid y, columns along x (grid-stride both).
template <class T>
__global__ void silu_mul_gate_up_kernel(const T* gate_up, T* out, int64_t rows, int64_t ff) {
    pdl_wait();
    pdl_trigger();
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const T* g = gate_up + r * 2 * ff;
        for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < ff; j += int64_t(gridDim.x) * blockDim.x)
            out[r * ff + j] = silu_times(g[j], g[ff + j]);
    }
}

static void silu_mul_launch(backend& be, const silu_mul_args& a) {
    int64_t n = a.out.numel();
    if (n == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (a.n_ff > 0) {
            const int64_t rows = n / a.n_ff;
            dim3 grid(grid_1d(a.n_ff, 256), unsigned(std::min<int64_t>(rows, 65535)));
            launch_pdl(be, silu_mul_gate_up_kernel<T>, grid, dim3(256), 0, a.gate.ptr<const T>(), a.out.ptr<T>(), rows,
                       a.n_ff);
        } else {
            launch_pdl(be, silu_mul_kernel<T>, dim3(grid_1d(n, 256)), dim3(256), 0, a.gate.ptr<const T>(),
                       a.up.ptr<const T>(), a.out.ptr<T>(), n);
        }
    });
}

void register_silu_mul(kernel_registry& r) {
    r.add(make_kernel<silu_mul_args>("silu_mul", "silu_mul_sm80", cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}),
                                     10, nullptr, silu_mul_launch));
}

}  // namespace cuda
}  // namespace tetra
