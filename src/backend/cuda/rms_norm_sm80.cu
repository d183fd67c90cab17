// rms_norm_sm80: out = w · (x · 1/sqrt(mean(x²) + eps)) per row, in the order of HF LlamaRMSNorm
// and the CPU oracle; f32 sum of squares reduced over the block (a different summation order
// than the oracle's sequential sum: NMSE, not bit-exact). One block per row; out may alias x
// (each element is read and written by the same thread, after the reduction).
#include "backend/cuda/norm_vec.cuh"

namespace tetra {
namespace cuda {

// x, out: [n_rows, n] T; w: [n] wt
template <class T>
__global__ void rms_norm_kernel(const T* x, const void* w, dtype wt, T* out, int64_t n, float eps) {
    const T* xr = x + blockIdx.x * n;
    T* orow = out + blockIdx.x * n;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float v = to_f32(xr[j]);
        ss += v * v;
    }
    ss = block_sum(ss);
    float r = 1.0f / sqrtf(ss / float(n) + eps);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) orow[j] = from_f32<T>(load_any(w, wt, j) * (to_f32(xr[j]) * r));
}

// Threads per row: enough for 4+ elements per thread on wide rows, at least one warp.
inline int row_threads(int64_t n) { return n >= 4096 ? 1024 : n >= 1024 ? 256 : n >= 256 ? 128 : 32; }

static void rms_norm_launch(backend& be, const rms_norm_args& a) {
    int64_t n = a.x.dim(-1), n_rows = n ? a.x.numel() / n : 0;
    if (n_rows == 0) return;
    TETRA_CHECK(n_rows <= 0x7fffffff, "rms_norm_sm80: %lld rows exceed the grid limit", (long long)n_rows);
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (launch_norm_vec<T, false>(be, nullptr, a.x.ptr<const T>(), a.w.data, a.w.type, a.out.ptr<T>(), n_rows, n,
                                      a.eps))
            return;
        rms_norm_kernel<T><<<unsigned(n_rows), row_threads(n), 0, stream_of(be)>>>(
            a.x.ptr<const T>(), a.w.data, a.w.type, a.out.ptr<T>(), n, a.eps);
        CUDA_CHECK(cudaGetLastError());
    });
}

void register_rms_norm(kernel_registry& r) {
    r.add(make_kernel<rms_norm_args>("rms_norm", "rms_norm_sm80", cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}),
                                     10, nullptr, rms_norm_launch));
}

}  // namespace cuda
}  // namespace tetra
