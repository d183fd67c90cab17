// norm_vec: the vectorised rms_norm / add_rms_norm for 16-bit activations (rms_norm_sm80.cu,
// add_rms_norm_sm80.cu). Each thread owns one 16-B vector (8 elements) of a row, loaded once and
// kept in registers, so a decode row costs one memory round trip instead of a strided loop per
// pass (the scalar kernels took 5–7 µs for one 4096-wide row on an H100). Rows of ≤ 256 elements
// (per-head qk-norm) share a warp: a power-of-two group of lanes per row, reduced by xor shuffles.
// Same arithmetic as the scalar kernels (f32 sum of squares, 1/sqrt, w · (x · r)); only the
// summation order differs.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {

template <class T> __device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = to_f32(e[i]);
}

template <class T> __device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
    uint4 u;
    T* e = reinterpret_cast<T*>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = from_f32<T>(f[i]);
    return u;
}

// The norm's arithmetic, shared with qkv_rope_store_sm80 (whose q/k norm must equal this kernel's bit
// for bit): a lane's sum of squares of its 8 values, in order; the xor-shuffle sum over a group of gp
// lanes (every lane of the warp must call it); the scale; out = w · (x · r).
__device__ __forceinline__ float sum_sq8(const float (&v)[8]) {
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) ss += v[i] * v[i];
    return ss;
}
__device__ __forceinline__ float group_sum(float x, int gp) {
    for (int o = gp / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float rms_scale(float ss, int n, float eps) { return 1.0f / sqrtf(ss / float(n) + eps); }
__device__ __forceinline__ void scale8(const float (&v)[8], const float (&w)[8], float r, float (&out)[8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = w[i] * (v[i] * r);
}

// ADD: res += x (rounded to T, stored), then the norm of res. gp > 0: rows of gp lanes (power of
// two ≤ 32), blockDim/gp rows per block; gp == 0: one row per block. n % 8 == 0, n/8 ≤ lanes of a row.
// res, x, out: [n_rows, n] T (out may alias x); w: [n] wt, a prepared weight (no kernel of the step
// writes it), so it is read before pdl_wait(): at decode the 4096-wide rows' weight is not in L2
// after a layer's matmuls, and reading it after the residual's store put a second, DRAM-latency
// round trip on the step's critical path (docs/perf.md, session 19).
template <class T, bool ADD>
__global__ void norm_vec_kernel(T* res, const T* x, const void* w, dtype wt, T* out, int64_t n_rows, int n, float eps,
                                int gp) {
    const int vecs = n / 8;
    const int64_t row = gp ? int64_t(blockIdx.x) * (blockDim.x / gp) + threadIdx.x / gp : int64_t(blockIdx.x);
    const int j = gp ? int(threadIdx.x) % gp : int(threadIdx.x);
    const bool on = row < n_rows && j < vecs;
    float v[8] = {}, wv[8] = {};
    if (on)
#pragma unroll
        for (int i = 0; i < 8; ++i) wv[i] = load_any(w, wt, int64_t(j) * 8 + i);
    pdl_wait();
    // This row's x and residual are requested before the trigger: the next kernel (at decode, a
    // matmul whose CTAs request their whole weight share on launch) would otherwise queue megabytes
    // of copies on this SM ahead of them (docs/perf.md, session 19).
    uint4 xq = make_uint4(0, 0, 0, 0), rq = make_uint4(0, 0, 0, 0);
    uint4* rp = reinterpret_cast<uint4*>(res + row * n) + j;
    if (on) {
        xq = reinterpret_cast<const uint4*>(x + row * n)[j];
        if (ADD) rq = *rp;
    }
    pdl_trigger();
    if (on) {
        unpack8<T>(xq, v);
        if (ADD) {
            float r8[8];
            unpack8<T>(rq, r8);
#pragma unroll
            for (int i = 0; i < 8; ++i) r8[i] = r8[i] + v[i];
            uint4 s = pack8<T>(r8);
            *rp = s;
            unpack8<T>(s, v);
        }
    }
    const float ss = gp ? group_sum(sum_sq8(v), gp) : block_sum(sum_sq8(v));
    const float r = rms_scale(ss, n, eps);
    if (!on) return;
    float o8[8];
    scale8(v, wv, r, o8);
    reinterpret_cast<uint4*>(out + row * n)[j] = pack8<T>(o8);
}

// Whether launch_norm_vec takes n_rows rows of n elements of elem bytes at the given addresses
// (16-bit elements, n % 8 == 0, n ≤ 8192, 16-B aligned rows), and whether it runs them one row per
// block (more than 32 vectors of 8). A kernel that repeats that form's sums bit for bit
// (moe_combine_norm_kernel) takes exactly the rows both say yes to.
inline bool norm_vec_takes(size_t elem, int64_t n, int64_t n_rows, std::initializer_list<const void*> rows) {
    if (elem != 2 || n % 8 != 0 || n > 8192 || n_rows > 0x7fffffffLL) return false;
    for (const void* p : rows)
        if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
    return true;
}
inline bool norm_vec_row_per_block(int64_t n) { return n / 8 > 32; }

// Launches norm_vec_kernel when the shape fits (norm_vec_takes); false: the caller runs its scalar
// kernel.
template <class T, bool ADD>
bool launch_norm_vec(backend& be, T* res, const T* x, const void* w, dtype wt, T* out, int64_t n_rows, int64_t n,
                     float eps) {
    if constexpr (sizeof(T) != 2) {
        return false;
    } else {
    if (!norm_vec_takes(sizeof(T), n, n_rows, {res, x, out})) return false;
    const int vecs = int(n / 8);
    if (!norm_vec_row_per_block(n)) {
        int gp = 1;
        while (gp < vecs) gp *= 2;
        const int threads = 256, rows_per_block = threads / gp;
        launch_pdl(be, norm_vec_kernel<T, ADD>, dim3(unsigned((n_rows + rows_per_block - 1) / rows_per_block)),
                   dim3(threads), 0, res, x, w, wt, out, n_rows, int(n), eps, gp);
    } else {
        launch_pdl(be, norm_vec_kernel<T, ADD>, dim3(unsigned(n_rows)), dim3((vecs + 31) / 32 * 32), 0, res, x, w, wt,
                   out, n_rows, int(n), eps, 0);
    }
    return true;
    }
}

}  // namespace cuda
}  // namespace tetra
