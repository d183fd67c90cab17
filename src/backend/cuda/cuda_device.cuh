// Device-side helpers of the CUDA kernels (include from .cu files only): f32 conversion of the
// activation types (RNE on store, as the CPU oracle's f32_to_bf16/f32_to_f16), loads of a
// dtype known only at run time, warp/block reductions, and the host act-dtype dispatch.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "backend/cuda/cuda_kernels.h"

namespace tetra {
namespace cuda {

template <class T> __device__ __forceinline__ float to_f32(T v);
template <> __device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }

template <class T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// silu(gate) · up = gate / (1 + exp(−gate)) · up in f32 (expf, not __expf: the CPU oracle uses
// std::exp), rounded once to T: silu_mul_sm80's element and the fused matmul_silu epilogues', so a
// fused result equals the two-step one bit for bit wherever the two matmuls sum k in the same order.
template <class T>
__device__ __forceinline__ T silu_times(T gate, T up) {
    float g = to_f32(gate);
    return from_f32<T>(g / (1.0f + expf(-g)) * to_f32(up));
}

// 8 bf16 (16 bytes) → f32, two shift/mask ops per pair (bf16 is the high half of an f32).
__device__ __forceinline__ void bf16x8_to_f32(const uint4& q, float (&f)[8]) {
    const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) f[2 * e] = __uint_as_float(u[e] << 16), f[2 * e + 1] = __uint_as_float(u[e] & 0xFFFF0000u);
}

// Element i of a f32|bf16|f16 buffer whose dtype is a run-time value (uniform across the grid,
// so the switch does not diverge).
__device__ __forceinline__ float load_any(const void* p, dtype t, int64_t i) {
    switch (t) {
        case dtype::F32: return static_cast<const float*>(p)[i];
        case dtype::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
        default: return __half2float(static_cast<const __half*>(p)[i]);
    }
}

__device__ __forceinline__ void store_any(void* p, dtype t, int64_t i, float v) {
    switch (t) {
        case dtype::F32: static_cast<float*>(p)[i] = v; break;
        case dtype::BF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
        default: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // part[] may still be read by a previous call
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < n_warps ? part[lane] : 0.0f;
    return warp_sum(v);
}

template <class T> struct type_tag { using type = T; };

// Calls f(type_tag<T>{}) with T = float | __nv_bfloat16 | __half for act dtype t.
template <class F> void dispatch_act(dtype t, F&& f) {
    switch (t) {
        case dtype::F32: f(type_tag<float>{}); break;
        case dtype::BF16: f(type_tag<__nv_bfloat16>{}); break;
        case dtype::F16: f(type_tag<__half>{}); break;
        default: TETRA_FAIL("cuda: activation dtype %s is not f32|bf16|f16", dtype_name(t));
    }
}

// ---- tensor cores (sm_80+) ----------------------------------------------------------------------
// d += A·B, mma.sync m16n8k16 with T (bf16 | f16) operands and f32 accumulators. Not volatile: the
// accumulator operands carry the order, and the scheduler may interleave independent chains
// (another accumulator set, another chunk's decode) around it.
template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
#define TETRA_MMA_OPERANDS                                                                                 \
    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1)
    if constexpr (std::is_same<T, __half>::value)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};" TETRA_MMA_OPERANDS);
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};" TETRA_MMA_OPERANDS);
#undef TETRA_MMA_OPERANDS
}

// ---- L2 policy of weight reads (sm_80+) -----------------------------------------------------------
// Weights are read once per step, and a step reads far more of them than L2 holds: their copies carry
// an L2 evict_first policy, so they do not push out what the step reads again on its critical path
// (activations, norm weights, KV rows, kernel code): Llama-3.1-8B (8 layers) / Qwen3-30B-A3B (12
// layers) batch 1 −3.2 % / −2.7 % on an H100 (docs/perf.md, session 25). Used by the W4A16 decode
// kernels (matmul_nvfp4_w4a16_device.cuh), the bf16 GEMV and decode_layers_persistent_sm90.
__device__ __forceinline__ uint64_t weight_policy() {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}
// A 16-byte weight copy global → shared (cp.async, sm_80+) with weight_policy(): the bf16 GEMV's
// weight tile and moe_route_front_sm90's router slice.
__device__ __forceinline__ void cp_async16_weight(void* smem, const void* gmem) {
    const uint32_t sa = uint32_t(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(sa), "l"(gmem),
                 "l"(weight_policy())
                 : "memory");
}

// ---- programmatic dependent launch (sm_90+) ------------------------------------------------------
// A kernel launched with launch_pdl() may start while the previous kernel on the stream is still
// finishing (its launch and prologue overlap that kernel's tail; in CUDA graphs too). Every such
// kernel must call pdl_wait() before it writes global memory and before it reads anything a kernel
// of the step may have written: it returns once the previous grid has completed and its writes are
// visible. When a PDL kernel starts, the kernel two places before it has completed (the previous
// one waited for it before triggering), and so has everything before that in stream order. So
// before pdl_wait() a kernel may read only what no kernel of the step writes: prepared weights, the
// step's metadata (positions, slot mapping, block tables: uploaded before the step's first
// kernel), and KV rows of earlier positions (the W4A16 matmuls stream their weights, the decode
// attention prefetches its K/V rows and qkv_rope_store builds its cos/sin table there) — and what a
// caller promises was written two or more launches back (moe_matmul_args::offsets_early: the
// grouped matmuls find their work items there).
// pdl_trigger() lets the next PDL kernel start launching (call it right after pdl_wait(): the next
// kernel waits in turn; a kernel may first issue its own loads, which the next kernel's weight
// copies would otherwise queue ahead of on the SM — norm_vec and moe_combine_norm do). Never before
// it: that would break the two-launches rule above, which moe_matmul_args::offsets_early relies on
// for correctness, not only for speed. Not earlier: triggering first thing lets a matmul launch
// while the previous matmul still fills the SMs, and its CTAs land unevenly (measured: Llama-3.1-8B batch 1 15 %
// slower; the decode attention, the norms or qkv_rope_store triggering first: 1–8 % slower;
// docs/perf.md). Both are no-ops below sm_90 and when the kernel was launched without the
// attribute.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, s>>>(args...), with programmatic stream serialization when `pdl`; such a
// kernel must follow the pdl_wait() rule above.
template <class... KArgs, class... Args>
void launch_on(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, bool pdl, Args&&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr, cfg.numAttrs = pdl ? 1 : 0;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// launch_on() on backend be's stream, with PDL when pdl_enabled(be).
template <class... KArgs, class... Args>
void launch_pdl(backend& be, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
    launch_on(kernel, grid, block, smem, stream_of(be), pdl_enabled(be), std::forward<Args>(args)...);
}

// launch_pdl() of a kernel in thread block clusters of cluster_x CTAs along x (sm_90+; the grid's x a
// multiple of cluster_x; above 8 the caller sets cudaFuncAttributeNonPortableClusterSizeAllowed).
template <class... KArgs, class... Args>
void launch_cluster_pdl(backend& be, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, unsigned cluster_x,
                        Args&&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = stream_of(be);
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster_x, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;  // the pdl_wait() rule above
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr, cfg.numAttrs = pdl_enabled(be) ? 2 : 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// ---- exp for d <= 0 (backend/sampling.h sampler_exp, step by step: the host's bit tricks are
// selects, the result is the same bits). Used by sample_rows and moe_route, whose CPU oracles call
// sampler_exp, so exp is tetra's own arithmetic on both sides rather than a libm's.
__device__ __forceinline__ float sampler_exp_dev(float d) {
    if (d < -87.0f) return 0.0f;  // incl. -inf
    const float t = __fmul_rn(d, 1.44269504f);
    const float k = __fsub_rn(__fadd_rn(t, 12582912.0f), 12582912.0f);
    float r = __fsub_rn(d, __fmul_rn(k, 0.693359375f));
    r = __fsub_rn(r, __fmul_rn(k, -2.12194440e-4f));
    float p = __uint_as_float(0x39500d01u);               // float(1/5040)
    p = __fadd_rn(__fmul_rn(p, r), __uint_as_float(0x3ab60b61u));  // 1/720
    p = __fadd_rn(__fmul_rn(p, r), __uint_as_float(0x3c088889u));  // 1/120
    p = __fadd_rn(__fmul_rn(p, r), __uint_as_float(0x3d2aaaabu));  // 1/24
    p = __fadd_rn(__fmul_rn(p, r), __uint_as_float(0x3e2aaaabu));  // 1/6
    p = __fadd_rn(__fmul_rn(p, r), 0.5f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    return __fmul_rn(p, __int_as_float((int(k) + 127) << 23));
}

// ---- rope (rope_sm80.cu, qkv_rope_store_sm80.cu: one arithmetic, so the two agree bit for bit) ------
// cs[i] = cos, cs[half + i] = sin of the f32 angle pos · inv_freq[i], evaluated in double and rounded
// to f32 (the CPU oracle's std::cos/std::sin to the ulp). Block-strided: the caller syncs after it.
__device__ __forceinline__ void rope_table(float* cs, float pos, const float* inv_freq, int half) {
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double s, c;
        sincos(double(pos * inv_freq[i]), &s, &c);
        cs[i] = float(c), cs[half + i] = float(s);
    }
}
// rotate_half of the pair (x1 = x[i], x2 = x[i + half]) without contraction, as the oracle's separate
// products and sums: new x[i] = x1·c − x2·s, new x[i + half] = x2·c + x1·s.
__device__ __forceinline__ float rope_first(float x1, float x2, float c, float s) {
    return __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
}
__device__ __forceinline__ float rope_second(float x1, float x2, float c, float s) {
    return __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

inline unsigned grid_1d(int64_t n, int threads, int64_t cap = 65535LL * 16) {
    int64_t g = (n + threads - 1) / threads;
    return unsigned(g < 1 ? 1 : g > cap ? cap : g);
}

}  // namespace cuda
}  // namespace tetra
