// silu_mul_sm80: out = silu(gate) · up = gate / (1 + exp(−gate)) · up in f32 (expf, not __expf:
// the CPU oracle uses std::exp), rounded once to the activation dtype. Grid-stride, flattened; the
// fused form (silu_mul_args::n_ff > 0) reads gate and up as the two halves of each gate_up row.
// Where the rows are whole 16-byte vectors (16-byte-aligned pointers, a multiple of 16 / sizeof(T)
// elements) each thread takes one vector of each operand: the same element arithmetic. The 2-byte
// form moved ~1.3 TB/s at 8192 × 14336 bf16 (the unfused gate/up of prefill chunks above 2048
// tokens); with vectors an 8-layer Llama-3.1-8B prefill of 8192 tokens in one chunk is 3.8 % faster
// on an H100 (docs/perf.md, session 28).
#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {

// The element's arithmetic (silu_times, cuda_device.cuh) is shared with the fused matmul_silu kernel.

// One kernel for both forms and both access units U (T itself, or a 16-byte uint4 of 16 / sizeof(T)
// elements): out: [rows, cols] units; gate row r at gate + r·row_stride, up row r at up + r·row_stride.
// gate_up form: gate = the gate_up rows, up = gate + cols, row_stride 2·cols; flat form: rows = 1,
// row_stride 0. Rows along grid y, columns along x (grid-stride both: no index division per element).
template <class T, class U>
__global__ void silu_mul_kernel(const U* gate, const U* up, U* out, int64_t rows, int64_t cols, int64_t row_stride) {
    constexpr int V = sizeof(U) / sizeof(T);
    pdl_wait();
    pdl_trigger();
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const U* g = gate + r * row_stride;
        const U* u = up + r * row_stride;
        for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < cols;
             j += int64_t(gridDim.x) * blockDim.x) {
            const U gv = g[j], uv = u[j];
            U ov;
            const T* ge = reinterpret_cast<const T*>(&gv);
            const T* ue = reinterpret_cast<const T*>(&uv);
            T* oe = reinterpret_cast<T*>(&ov);
#pragma unroll
            for (int i = 0; i < V; ++i) oe[i] = silu_times(ge[i], ue[i]);
            out[r * cols + j] = ov;
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
        const bool vec = aligned16(a.gate.data) && aligned16(a.out.data) &&
                         (a.n_ff > 0 ? a.n_ff % V == 0 : aligned16(a.up.data) && n % V == 0);
        // rows and columns (elements); the up operand's offset and the row stride, in units, in go()
        const int64_t rows = a.n_ff > 0 ? n / a.n_ff : 1, cols = a.n_ff > 0 ? a.n_ff : n;
        auto go = [&](auto unit) {
            using U = decltype(unit);
            constexpr int64_t W = sizeof(U) / sizeof(T);
            const U* gate = a.gate.ptr<const U>();
            const U* up = a.n_ff > 0 ? gate + cols / W : a.up.ptr<const U>();
            dim3 grid(grid_1d(cols / W, 256), unsigned(std::min<int64_t>(rows, 65535)));
            launch_pdl(be, silu_mul_kernel<T, U>, grid, dim3(256), 0, gate, up, a.out.ptr<U>(), rows, cols / W,
                       a.n_ff > 0 ? 2 * cols / W : int64_t(0));
        };
        if (vec) go(uint4{});
        else go(T{});
    });
}

void register_silu_mul(kernel_registry& r) {
    r.add(make_kernel<silu_mul_args>("silu_mul", "silu_mul_sm80", cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}),
                                     10, nullptr, silu_mul_launch));
}

}  // namespace cuda
}  // namespace tetra
