// moe_combine_sm80: out[t] = Σ_s w[t, s] · y[dest[t, s]] in ascending slot order, then
// + sigmoid(g[t]) · shared[t], all in f32 with the CPU oracle's operation order and no contraction
// (__fmul_rn/__fadd_rn: moe_combine_cpu is compiled without FMA), sigmoid's exp rounded from a
// double exp (≈ glibc expf). Grid (token, 256-column blocks), one column per thread; the token's
// dest rows and weights are staged in shared memory first so the k loads of y are independent (one
// round trip instead of k dependent ones per column). No atomics, a token's row never depends on the
// other tokens. Equal to the CPU bit for bit on the same inputs.
#include "backend/cuda/cuda_device.cuh"
#include "backend/moe.h"

namespace tetra {
namespace cuda {

namespace {

constexpr int THREADS = 256;

// y: [n_rows, n] T; dest: i32 [n_tokens, k]; w: f32 [n_tokens, k]; out: [n_tokens, n] T;
// shared: [n_tokens, n] T or null; gate: [n_tokens] T or null. Dynamic smem: k · (4 + 4) bytes.
template <class T>
__global__ void __launch_bounds__(THREADS) moe_combine_kernel(const T* y, const int32_t* dest, const float* w, T* out,
                                                              const T* shared, const T* gate, int n, int k) {
    extern __shared__ int32_t s_dest[];
    pdl_wait();
    pdl_trigger();
    float* s_w = reinterpret_cast<float*>(s_dest + k);
    const int64_t t = blockIdx.x;
    for (int s = threadIdx.x; s < k; s += THREADS) s_dest[s] = dest[t * k + s], s_w[s] = w[t * k + s];
    float g = 1.0f;
    if (gate) g = __fdiv_rn(1.0f, __fadd_rn(1.0f, float(exp(double(-to_f32(gate[t]))))));
    __syncthreads();
    const int j = blockIdx.y * THREADS + threadIdx.x;
    if (j >= n) return;
    float acc = 0.0f;
#pragma unroll 8
    for (int s = 0; s < k; ++s) acc = __fadd_rn(acc, __fmul_rn(s_w[s], to_f32(y[int64_t(s_dest[s]) * n + j])));
    if (shared) acc = __fadd_rn(acc, __fmul_rn(g, to_f32(shared[t * n + j])));
    out[t * n + j] = from_f32<T>(acc);
}

}  // namespace

static void moe_combine_launch(backend& be, const moe_combine_args& a) {
    if (a.n_tokens == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* shared = a.shared.empty() ? nullptr : a.shared.ptr<const T>();
        const T* gate = a.shared_gate.empty() ? nullptr : a.shared_gate.ptr<const T>();
        dim3 grid(unsigned(a.n_tokens), unsigned((a.n + THREADS - 1) / THREADS));
        launch_pdl(be, moe_combine_kernel<T>, grid, dim3(THREADS), size_t(a.k) * 8, a.y.ptr<const T>(),
                   a.dest_rows.ptr<const int32_t>(), a.topk_weights.ptr<const float>(), a.out.ptr<T>(), shared, gate,
                   int(a.n), int(a.k));
    });
}

static std::string moe_combine_accepts(const moe_combine_args& a) {
    if (a.n > INT32_MAX / 2 || a.n_tokens > INT32_MAX / 2) return "shape too large for int indexing";
    if ((a.n + THREADS - 1) / THREADS > 65535) return "n too large for the grid (65535 column blocks)";
    if (a.k > 4096) return "k = " + std::to_string(a.k) + " > 4096 (shared-memory staging)";
    return "";
}

void register_moe_combine_sm80(kernel_registry& r) {
    r.add(make_kernel<moe_combine_args>("moe_combine", "moe_combine_sm80",
                                        cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 10, moe_combine_accepts,
                                        moe_combine_launch));
}

}  // namespace cuda
}  // namespace tetra
