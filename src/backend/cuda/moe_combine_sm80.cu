// moe_combine_sm80: out[t] = Σ_s w[t, s] · y[dest[t, s]] in ascending slot order, then
// + sigmoid(g[t]) · shared[t], all in f32 with the CPU oracle's operation order and no contraction
// (__fmul_rn/__fadd_rn: moe_combine_cpu is compiled without FMA), sigmoid's exp rounded from a
// double exp (≈ glibc expf). One CTA per token, each thread its own columns: no atomics, a token's
// row never depends on the other tokens. Equal to the CPU bit for bit on the same inputs.
#include "backend/cuda/cuda_device.cuh"
#include "backend/moe.h"

namespace tetra {
namespace cuda {

namespace {

constexpr int THREADS = 256;

// y: [n_rows, n] T; dest: i32 [n_tokens, k]; w: f32 [n_tokens, k]; out: [n_tokens, n] T;
// shared: [n_tokens, n] T or null; gate: [n_tokens] T or null
template <class T>
__global__ void __launch_bounds__(THREADS) moe_combine_kernel(const T* y, const int32_t* dest, const float* w, T* out,
                                                              const T* shared, const T* gate, int n, int k) {
    const int64_t t = blockIdx.x;
    float g = 1.0f;
    if (gate) g = __fdiv_rn(1.0f, __fadd_rn(1.0f, float(exp(double(-to_f32(gate[t]))))));
    for (int j = threadIdx.x; j < n; j += THREADS) {
        float acc = 0.0f;
        for (int s = 0; s < k; ++s) {
            const int64_t r = dest[t * k + s];
            acc = __fadd_rn(acc, __fmul_rn(w[t * k + s], to_f32(y[r * n + j])));
        }
        if (shared) acc = __fadd_rn(acc, __fmul_rn(g, to_f32(shared[t * n + j])));
        out[t * n + j] = from_f32<T>(acc);
    }
}

}  // namespace

static void moe_combine_launch(backend& be, const moe_combine_args& a) {
    if (a.n_tokens == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* shared = a.shared.empty() ? nullptr : a.shared.ptr<const T>();
        const T* gate = a.shared_gate.empty() ? nullptr : a.shared_gate.ptr<const T>();
        moe_combine_kernel<T><<<unsigned(a.n_tokens), THREADS, 0, stream_of(be)>>>(
            a.y.ptr<const T>(), a.dest_rows.ptr<const int32_t>(), a.topk_weights.ptr<const float>(), a.out.ptr<T>(),
            shared, gate, int(a.n), int(a.k));
        CUDA_CHECK(cudaGetLastError());
    });
}

static std::string moe_combine_accepts(const moe_combine_args& a) {
    if (a.n > INT32_MAX / 2 || a.n_tokens > INT32_MAX / 2) return "shape too large for int indexing";
    return "";
}

void register_moe_combine_sm80(kernel_registry& r) {
    r.add(make_kernel<moe_combine_args>("moe_combine", "moe_combine_sm80",
                                        cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 10, moe_combine_accepts,
                                        moe_combine_launch));
}

}  // namespace cuda
}  // namespace tetra
