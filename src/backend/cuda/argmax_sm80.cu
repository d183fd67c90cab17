// argmax_sm80: index of the row maximum, first index on ties, a NaN beats every number (the
// first NaN wins) — torch.argmax and the CPU oracle. Each thread keeps the best (value, index) of
// its strided slice, then a warp/block reduction with the same order. Short rows: one block per
// row. Vocabulary-sized rows (≥ 16384): grid (rows, chunks of 4096), the chunks' winners go to
// scratch and one warp per row merges them in chunk order (one block took ~60 µs for a 128k row).
#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {

// Whether candidate (v, i) beats (bv, bi): NaN > any number; among NaNs or equal values the
// lower index wins.
__device__ __forceinline__ bool argmax_better(float v, int64_t i, float bv, int64_t bi) {
    bool vn = v != v, bn = bv != bv;
    if (vn || bn) return vn && (!bn || i < bi);
    return v > bv || (v == bv && i < bi);
}

// (bv, bi) ← the better of itself and every other lane's of the warp; `none`: no element.
__device__ __forceinline__ void warp_argmax(float& bv, int64_t& bi, int64_t none) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi != none && (bi == none || argmax_better(ov, oi, bv, bi))) bv = ov, bi = oi;
    }
}

// The best (value, index) of xr[lo, hi) over the block, valid on thread 0; bi == n when the range is
// empty. Each thread scans a strided slice, then the warps, then thread 0 over the warps in order.
template <class T>
__device__ __forceinline__ void block_argmax(const T* xr, int64_t lo, int64_t hi, int64_t n, float& bv, int64_t& bi) {
    bv = -INFINITY;
    bi = n;  // sentinel: loses to any real element
#pragma unroll 4
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        float v = to_f32(xr[j]);
        if (bi == n || argmax_better(v, j, bv, bi)) bv = v, bi = j;
    }
    warp_argmax(bv, bi, n);
    __shared__ float sv[32];
    __shared__ int64_t si[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int w = 1; w < int(blockDim.x >> 5); ++w)
            if (si[w] != n && (bi == n || argmax_better(sv[w], si[w], bv, bi))) bv = sv[w], bi = si[w];
}

// x: [n_rows, n] T; out: i32 [n_rows]
template <class T>
__global__ void argmax_kernel(const T* x, int32_t* out, int64_t n) {
    float bv;
    int64_t bi;
    block_argmax(x + blockIdx.x * n, 0, n, n, bv, bi);
    if (threadIdx.x == 0) out[blockIdx.x] = int32_t(bi == n ? 0 : bi);
}

// Phase 1 of the long-row path: the best (value, index) of x[row, c·chunk .. +chunk) → part[row, c].
template <class T>
__global__ void argmax_chunk_kernel(const T* x, float2* part, int64_t n, int64_t chunk) {
    pdl_wait();
    pdl_trigger();
    const int64_t row = blockIdx.y, c = blockIdx.x, lo = c * chunk;
    float bv;
    int64_t bi;
    block_argmax(x + row * n, lo, min(n, lo + chunk), n, bv, bi);
    if (threadIdx.x == 0) part[row * gridDim.x + c] = make_float2(bv, __int_as_float(int(bi == n ? -1 : bi)));
}

// Phase 2: one warp per row merges its chunks' winners (each lane a strided set, then xor shuffles).
__global__ void argmax_merge_kernel(const float2* part, int n_chunks, int32_t* out) {
    pdl_wait();
    pdl_trigger();
    const int64_t row = blockIdx.x;
    const int64_t none = INT64_MAX;
    float bv = -INFINITY;
    int64_t bi = none;
    for (int c = threadIdx.x; c < n_chunks; c += 32) {
        float2 p = part[row * n_chunks + c];
        int64_t i = __float_as_int(p.y);
        if (i >= 0 && (bi == none || argmax_better(p.x, i, bv, bi))) bv = p.x, bi = i;
    }
    warp_argmax(bv, bi, none);
    if (threadIdx.x == 0) out[row] = int32_t(bi == none ? 0 : bi);
}

static void argmax_launch(backend& be, const argmax_args& a) {
    int64_t n_rows = a.x.dim(0), n = a.x.dim(1);
    if (n_rows == 0) return;
    TETRA_CHECK(n_rows <= 0x7fffffff, "argmax_sm80: %lld rows exceed the grid limit", (long long)n_rows);
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        constexpr int64_t chunk = 4096;
        if (n >= 4 * chunk && n_rows <= 65535) {
            const int64_t n_chunks = (n + chunk - 1) / chunk;
            float2* part = static_cast<float2*>(scratch(be, size_t(n_rows * n_chunks) * sizeof(float2)));
            launch_pdl(be, argmax_chunk_kernel<T>, dim3(unsigned(n_chunks), unsigned(n_rows)), dim3(256), 0,
                       a.x.ptr<const T>(), part, n, chunk);
            launch_pdl(be, argmax_merge_kernel, dim3(unsigned(n_rows)), dim3(32), 0, static_cast<const float2*>(part),
                       int(n_chunks), a.out.ptr<int32_t>());
            return;
        }
        argmax_kernel<T><<<unsigned(n_rows), n >= 8192 ? 1024 : 256, 0, stream_of(be)>>>(a.x.ptr<const T>(),
                                                                                      a.out.ptr<int32_t>(), n);
        CUDA_CHECK(cudaGetLastError());
    });
}

void register_argmax(kernel_registry& r) {
    r.add(make_kernel<argmax_args>("argmax", "argmax_sm80", cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 10,
                                   nullptr, argmax_launch));
}

}  // namespace cuda
}  // namespace tetra
