// silu_mul_sm80: out = silu(gate) · up = gate / (1 + exp(−gate)) · up in f32 (expf, not __expf:
// the CPU oracle uses std::exp), rounded once to the activation dtype. Grid-stride, flattened; the
// fused form (silu_mul_args::n_ff > 0) reads gate and up as the two halves of each gate_up row
// (rows along the grid's y: no index division per element). Where the rows are whole 16-byte
// vectors (16-byte-aligned pointers, a multiple of 16 / sizeof(T) elements) each thread takes one
// vector of each operand: the same element arithmetic. The 2-byte form moved ~1.3 TB/s at 8192 ×
// 14336 bf16 (the unfused gate/up of prefill chunks above 2048 tokens); with vectors an 8-layer
// Llama-3.1-8B prefill of 8192 tokens in one chunk is 3.8 % faster on an H100 (docs/perf.md,
// session 28).
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

// Both forms on 16-byte vectors (V = 16 / sizeof(T) elements), out: [rows, fv] vectors. gate_up form:
// gate = the gate_up rows, up = gate + fv, row_stride 2·fv; flat form: rows = 1, fv = n / V,
// row_stride 0.
template <class T>
__global__ void silu_mul_vec_kernel(const uint4* gate, const uint4* up, uint4* out, int64_t rows, int64_t fv,
                                    int64_t row_stride) {
    constexpr int V = 16 / sizeof(T);
    pdl_wait();
    pdl_trigger();
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const uint4* g = gate + r * row_stride;
        const uint4* u = up + r * row_stride;
        for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < fv; j += int64_t(gridDim.x) * blockDim.x) {
            const uint4 gv = g[j], uv = u[j];
            uint4 ov;
            const T* ge = reinterpret_cast<const T*>(&gv);
            const T* ue = reinterpret_cast<const T*>(&uv);
            T* oe = reinterpret_cast<T*>(&ov);
#pragma unroll
            for (int i = 0; i < V; ++i) oe[i] = silu_times(ge[i], ue[i]);
            out[r * fv + j] = ov;
        }
    }
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

static void silu_mul_launch(backend& be, const silu_mul_args& a) {
    int64_t n = a.out.numel();
    if (n == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int V = 16 / sizeof(T);
        const bool vec = aligned16(a.gate.data) && aligned16(a.out.data) && (a.n_ff > 0 || aligned16(a.up.data));
        if (vec && a.n_ff > 0 && a.n_ff % V == 0) {
            const int64_t rows = n / a.n_ff, fv = a.n_ff / V;
            const uint4* gu = a.gate.ptr<const uint4>();
            dim3 grid(grid_1d(fv, 256), unsigned(std::min<int64_t>(rows, 65535)));
            launch_pdl(be, silu_mul_vec_kernel<T>, grid, dim3(256), 0, gu, gu + fv, a.out.ptr<uint4>(), rows, fv, 2 * fv);
        } else if (vec && a.n_ff == 0 && n % V == 0) {
            launch_pdl(be, silu_mul_vec_kernel<T>, dim3(grid_1d(n / V, 256)), dim3(256), 0, a.gate.ptr<const uint4>(),
                       a.up.ptr<const uint4>(), a.out.ptr<uint4>(), int64_t(1), n / V, int64_t(0));
        } else if (a.n_ff > 0) {
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
