// Device helpers shared by the W4A16 NVFP4 kernels (matmul_nvfp4_w4a16_sm80.cu: mma.sync small-M;
// matmul_nvfp4_w4a16_large_sm80.cu: dequant; matmul_nvfp4_w4a16_gemv_sm80.cu: stream-K decode
// kernel; moe_matmul_nvfp4_w4a16_mma_sm80.cu: grouped mma; the CUDA-core kernels of
// matmul_f32_sm80.cu and moe_matmul_nvfp4_w4a16_sm80.cu). All read the same packed
// layout (w4a16_sm80_pack, group-major: chunk_index): per lane and chunk 16 B = 4 words, word j = the A registers a0..a3 of
// MMA j, each a bf16x2 of two e2m1 codes as bit patterns s·000000e·em·000000 (= value · 2^-126).
// decode_word's rotations/masks are the inverse of the host packer's bit placement (w4a16_bit_src).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/w4a16_layout.h"

namespace tetra {
namespace cuda {
namespace w4a16 {

// CHUNK_K, GROUP_CHUNKS, GROUP_K, chunk_index, group_stride_u4, w4a16_bit_src, decode_word:
// w4a16_layout.h (host and device).

// cp.async helpers of the W4A16 kernels (sm_80+). cp_async16: 16 B global → shared at a shared-space
// address (smem_u32); src_bytes 0 writes zeros and reads nothing (the source must still be a valid
// address).
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void cp_async16(uint32_t smem, const void* gmem, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { cp_async_wait<0>(); }

// Weight copies with weight_policy() (cuda_device.cuh: L2 evict_first).
__device__ __forceinline__ void cp_async16_w(uint32_t smem, const void* gmem, int src_bytes) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(smem), "l"(gmem),
                 "r"(src_bytes), "l"(weight_policy())
                 : "memory");
}
__device__ __forceinline__ uint4 ld_stream_w(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(weight_policy()));
    return v;
}

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
    return d;
}

// Two e4m3 scales (low byte: row g, high byte: row g+8) → bf16x2 {s·2^118, s·2^118} each (exact:
// e4m3 → f16 is exact, and s·2^118 ≤ 448·2^118 fits bf16; NaN stays NaN).
__device__ __forceinline__ void scales_to_bf16x2(uint32_t two, uint32_t& s0, uint32_t& s1) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two & 0xFFFFu), __NV_E4M3);
    const float k2_118 = 3.3230699894622794e35f;  // 2^118
    float f0 = __half2float(__half(__half_raw{h.x})) * k2_118;
    float f1 = __half2float(__half(__half_raw{h.y})) * k2_118;
    __nv_bfloat162 b0 = __floats2bfloat162_rn(f0, f0), b1 = __floats2bfloat162_rn(f1, f1);
    s0 = *reinterpret_cast<uint32_t*>(&b0);
    s1 = *reinterpret_cast<uint32_t*>(&b1);
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The four A registers of MMA j of a chunk (lane's 16 B `q`), scaled: rows g (s0) and g+8 (s1).
__device__ __forceinline__ void a_regs(const uint4& q, int j, uint32_t s0, uint32_t s1, uint32_t (&a)[4]) {
    decode_word(word_of(q, j), a);
    a[0] = bf16x2_mul(a[0], s0);
    a[1] = bf16x2_mul(a[1], s1);
    a[2] = bf16x2_mul(a[2], s0);
    a[3] = bf16x2_mul(a[3], s1);
}

// One chunk's 4 MMAs into one n8 tile: lane (g, t)'s 16 code bytes q, its rows' scales (s0: row g,
// s1: row g+8, from scales_to_bf16x2) and its x row's 16 k of the chunk (blo: k 16t..16t+7, bhi:
// 16t+8..16t+15) as the B operand. The decode kernels (gemv, sweep) of up to 8 rows.
__device__ __forceinline__ void chunk_mma_n8(const uint4& q, uint32_t s0, uint32_t s1, const uint4& blo,
                                             const uint4& bhi, float (&acc)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        uint32_t a[4];
        a_regs(q, j, s0, s1, a);
        const uint4& b = j < 2 ? blo : bhi;
        mma16816<__nv_bfloat16>(acc, a[0], a[1], a[2], a[3], (j & 1) ? b.z : b.x, (j & 1) ? b.w : b.y);
    }
}

// ---- CUDA-core use of a chunk (no mma): the f32-activation and grouped fallback kernels ---------
// This lane's 16 weights of rows g (w0) and g+8 (w1) of a chunk, k 16t … 16t+15 ascending, as f32
// (exact: the bf16 products of a_regs are exact, and bf16 → f32 is exact).
__device__ __forceinline__ void chunk_weights(const uint4& q, uint32_t s0, uint32_t s1, float (&w0)[16],
                                              float (&w1)[16]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        uint32_t a[4];
        a_regs(q, j, s0, s1, a);  // a0/a2: row g, k 4j+{0,1} / {2,3}; a1/a3: row g+8
        w0[4 * j] = __uint_as_float(a[0] << 16), w0[4 * j + 1] = __uint_as_float(a[0] & 0xFFFF0000u);
        w0[4 * j + 2] = __uint_as_float(a[2] << 16), w0[4 * j + 3] = __uint_as_float(a[2] & 0xFFFF0000u);
        w1[4 * j] = __uint_as_float(a[1] << 16), w1[4 * j + 1] = __uint_as_float(a[1] & 0xFFFF0000u);
        w1[4 * j + 2] = __uint_as_float(a[3] << 16), w1[4 * j + 3] = __uint_as_float(a[3] & 0xFFFF0000u);
    }
}

// The two scales of chunk ci (0..7) of a group whose 16 B of scales this lane holds (sc), as bf16x2.
__device__ __forceinline__ void chunk_scales(const uint4& sc, int ci, uint32_t& s0, uint32_t& s1) {
    scales_to_bf16x2(word_of(sc, ci >> 1) >> (16 * (ci & 1)), s0, s1);
}

// 16 consecutive activations (16-B aligned) as f32.
__device__ __forceinline__ void x16_f32(const __nv_bfloat16* p, float (&f)[16]) {
    const uint4* v = reinterpret_cast<const uint4*>(p);
    const uint4 a = __ldg(v), b = __ldg(v + 1);
    const uint32_t u[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) f[2 * i] = __uint_as_float(u[i] << 16), f[2 * i + 1] = __uint_as_float(u[i] & 0xFFFF0000u);
}
__device__ __forceinline__ void x16_f32(const float* p, float (&f)[16]) {
    const float4* v = reinterpret_cast<const float4*>(p);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float4 a = __ldg(v + i);
        f[4 * i] = a.x, f[4 * i + 1] = a.y, f[4 * i + 2] = a.z, f[4 * i + 3] = a.w;
    }
}

// acc += Σ w[i]·x[i], i ascending (one FMA chain: the summation order depends only on k).
__device__ __forceinline__ float dot16(const float (&w)[16], const float (&x)[16], float acc) {
#pragma unroll
    for (int i = 0; i < 16; ++i) acc = fmaf(w[i], x[i], acc);
    return acc;
}

}  // namespace w4a16
}  // namespace cuda
}  // namespace tetra
