// sample_guard_stats_sm80: the output guard's per-row statistics (guard_row_stats) on the device,
// one CTA per row: the first non-finite column (min reduction), min/max, and Σd, Σd² in f64 with
// d = f32(x - x[0]) (each d² exact in f64; only the order of the f64 sums differs from the CPU's,
// ~1e-16 relative). 40 bytes per row come back instead of the row; 0.05 ms for 64 x 151936 bf16 (H100).
#include "backend/cuda/cuda_device.cuh"
#include "backend/sampling.h"

namespace tetra {
namespace cuda {

namespace {

constexpr int k_threads = 512;

// logits: [n_rows, n] T; stats: [n_rows] guard_row_stats
template <class T>
__global__ void __launch_bounds__(k_threads) guard_stats_kernel(const T* logits, guard_row_stats* stats, int n) {
    const T* x = logits + (long long)blockIdx.x * n;
    const float x0 = to_f32(x[0]);
    double sum = 0, sum_sq = 0;
    float lo = x0, hi = x0;
    int first_bad = n;
    constexpr int k_unroll = 4;  // 4 loads in flight per thread: one CTA per row is latency-bound
    for (int j0 = threadIdx.x; j0 < n; j0 += k_unroll * blockDim.x) {
        float v[k_unroll];
#pragma unroll
        for (int u = 0; u < k_unroll; ++u) {
            const int j = j0 + u * int(blockDim.x);
            v[u] = j < n ? to_f32(x[j]) : x0;  // x0 adds d = 0 and leaves min/max
        }
#pragma unroll
        for (int u = 0; u < k_unroll; ++u) {
            if (!isfinite(v[u])) {
                first_bad = min(first_bad, j0 + u * int(blockDim.x));
                continue;
            }
            const double d = double(__fsub_rn(v[u], x0));
            sum = __dadd_rn(sum, d);
            sum_sq = __dadd_rn(sum_sq, __dmul_rn(d, d));
            lo = fminf(lo, v[u]);
            hi = fmaxf(hi, v[u]);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
        sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, o);
        lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
        hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
        first_bad = min(first_bad, __shfl_xor_sync(0xffffffffu, first_bad, o));
    }
    __shared__ double s_sum[32], s_sq[32];
    __shared__ float s_lo[32], s_hi[32];
    __shared__ int s_bad[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) s_sum[warp] = sum, s_sq[warp] = sum_sq, s_lo[warp] = lo, s_hi[warp] = hi, s_bad[warp] = first_bad;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < int(blockDim.x >> 5); ++w) {
            sum += s_sum[w], sum_sq += s_sq[w];
            lo = fminf(lo, s_lo[w]), hi = fmaxf(hi, s_hi[w]);
            first_bad = min(first_bad, s_bad[w]);
        }
        guard_row_stats st;
        st.sum = sum;
        st.sum_sq = sum_sq;
        st.x0 = x0;
        st.lo = lo;
        st.hi = hi;
        st.first_bad = first_bad < n ? first_bad : -1;
        st.bad_value = first_bad < n ? to_f32(x[first_bad]) : 0.0f;
        stats[blockIdx.x] = st;
    }
}

void guard_stats_launch(backend& be, const sample_guard_stats_args& a) {
    if (a.n_rows == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        guard_stats_kernel<T><<<unsigned(a.n_rows), k_threads, 0, stream_of(be)>>>(
            a.logits.ptr<const T>(), a.stats.ptr<guard_row_stats>(), int(a.n_vocab));
        CUDA_CHECK(cudaGetLastError());
    });
}

}  // namespace

void register_sample_guard_stats_cuda(kernel_registry& r) {
    r.add(make_kernel<sample_guard_stats_args>("sample_guard_stats", "sample_guard_stats_sm80",
                                               cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 10, nullptr,
                                               guard_stats_launch));
}

}  // namespace cuda
}  // namespace tetra
