// add_rms_norm_sm80 (fused): residual += x, rounded to the activation dtype as an unfused add
// would (and as the CPU oracle), then out = rms_norm(residual) · w from the rounded values. One
// block per row; each thread re-reads only the residual elements it wrote itself.
#include "backend/cuda/norm_vec.cuh"

namespace tetra {
namespace cuda {

// residual: [n_rows, n] T (in/out); x, out: [n_rows, n] T; w: [n] wt
template <class T>
__global__ void add_rms_norm_kernel(T* residual, const T* x, const void* w, dtype wt, T* out, int64_t n, float eps) {
    T* res = residual + blockIdx.x * n;
    const T* xr = x + blockIdx.x * n;
    T* orow = out + blockIdx.x * n;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        T s = from_f32<T>(to_f32(res[j]) + to_f32(xr[j]));
        res[j] = s;
        float v = to_f32(s);
        ss += v * v;
    }
    ss = block_sum(ss);
    float r = 1.0f / sqrtf(ss / float(n) + eps);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) orow[j] = from_f32<T>(load_any(w, wt, j) * (to_f32(res[j]) * r));
}

static void add_rms_norm_launch(backend& be, const add_rms_norm_args& a) {
    int64_t n = a.residual.dim(-1), n_rows = n ? a.residual.numel() / n : 0;
    if (n_rows == 0) return;
    TETRA_CHECK(n_rows <= 0x7fffffff, "add_rms_norm_sm80: %lld rows exceed the grid limit", (long long)n_rows);
    int threads = n >= 4096 ? 1024 : n >= 1024 ? 256 : n >= 256 ? 128 : 32;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (launch_norm_vec<T, true>(be, a.residual.ptr<T>(), a.x.ptr<const T>(), a.w.data, a.w.type, a.out.ptr<T>(),
                                     n_rows, n, a.eps))
            return;
        add_rms_norm_kernel<T><<<unsigned(n_rows), threads, 0, stream_of(be)>>>(
            a.residual.ptr<T>(), a.x.ptr<const T>(), a.w.data, a.w.type, a.out.ptr<T>(), n, a.eps);
        CUDA_CHECK(cudaGetLastError());
    });
}

void register_add_rms_norm(kernel_registry& r) {
    r.add(make_kernel<add_rms_norm_args>("add_rms_norm", "add_rms_norm_sm80",
                                         cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 10, nullptr,
                                         add_rms_norm_launch));
}

}  // namespace cuda
}  // namespace tetra
