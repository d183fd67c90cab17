// Device code of the router (moe_route_sm80.cu) shared with the fused router + permutation
// (moe_permute_sm80.cu) and the fused norm + router GEMV + route + permutation
// (moe_route_front_sm90.cu): one warp per token, mirroring moe_route_cpu's f32 operation order (see
// moe_route_sm80.cu); the one-warp permutation of a decode batch.
#pragma once
#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {
namespace route {

constexpr unsigned FULL = 0xffffffffu;

// exp(l − max) as moe_route_cpu computes it: NaN → NaN + NaN (the quiet NaN the CPU gets), else
// sampler_exp (d ≤ 0 here: l ≤ max for every number) — tetra's own f32 arithmetic on both sides.
__device__ __forceinline__ float route_exp(float d) { return isnan(d) ? __fadd_rn(d, d) : sampler_exp_dev(d); }

// The CPU scan's preference (a number beats a NaN, a larger p beats a smaller one, then the lower
// index wins; -0 = +0) as one integer order: a beats b iff key(a) > key(b). High word: p mapped to
// an order-preserving u32 (NaN 0, the lowest); low word: ~e. Keys of distinct experts differ, and
// every key is > 0 (the key of an absent entry).
__device__ __forceinline__ uint64_t order_key(float p, int e) {
    uint32_t b = __float_as_uint(p), hi;
    if (isnan(p))
        hi = 0;
    else if (b >> 31)
        hi = 0x80000000u - (b & 0x7fffffffu);
    else
        hi = 0x80000000u + b;
    return (uint64_t(hi) << 32) | uint64_t(~uint32_t(e));
}

// ((0 + v[0]) + v[1]) + … + v[n4 - 1] in f32, one add at a time; v: shared, 16-byte aligned, n4 % 4 == 0.
// Loads run one 32-value chunk ahead of the adds.
__device__ __forceinline__ float sequential_sum(const float* v, int n4) {
    const float4* q = reinterpret_cast<const float4*>(v);
    const int n = n4 >> 2;
    float4 cur[8], nxt[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) cur[u] = u < n ? q[u] : make_float4(0, 0, 0, 0);
    float s = 0.0f;
    for (int i = 0; i < n; i += 8) {
#pragma unroll
        for (int u = 0; u < 8; ++u) nxt[u] = i + 8 + u < n ? q[i + 8 + u] : make_float4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 8; ++u)
            if (i + u < n) {
                s = __fadd_rn(s, cur[u].x), s = __fadd_rn(s, cur[u].y);
                s = __fadd_rn(s, cur[u].z), s = __fadd_rn(s, cur[u].w);
            }
#pragma unroll
        for (int u = 0; u < 8; ++u) cur[u] = nxt[u];
    }
    return s;
}

// Shared memory per warp, in 4-byte words: p [n4] (n4 = ne rounded up to 4), candidates u64 [cap]
// (cap = min(k·EPL, ne)), slot weights f32 [k], slot ids i32 [k]; rounded up to 4 words.
__host__ __device__ inline int route_words(int ne, int k, int epl) {
    int n4 = (ne + 3) & ~3, cap = min(k * epl, ne);
    return (n4 + 2 * cap + 2 * k + 3) & ~3;
}

// logits: [n_tokens, ne] T; ids: i32 [n_tokens, k]; w: f32 [n_tokens, k]. Lane l holds experts
// l + 32·j, j < EPL (ne ≤ 32·EPL), in registers. Top-k: the k-th best of the 32 lane maxima is a
// threshold every top-k expert reaches (k distinct experts reach it); the experts at or above it
// (≤ k·EPL) are ranked against each other, and rank r < k is slot r.
// One warp routes token t with `ps` (route_words floats of shared memory) as its scratch; sid (the
// fused kernel's staged ids, or nullptr) gets the token's k ids too.
template <class T, int EPL>
__device__ __forceinline__ void route_token(const T* __restrict__ logits, int32_t* __restrict__ ids,
                                            float* __restrict__ w, int t, int ne, int k, bool renorm, float* ps,
                                            int32_t* sid) {
    const int lane = threadIdx.x & 31;
    const int n4 = (ne + 3) & ~3, cap = min(k * EPL, ne);
    uint64_t* cand = reinterpret_cast<uint64_t*>(ps + n4);
    float* slot_w = ps + n4 + 2 * cap;
    int* slot_id = reinterpret_cast<int*>(slot_w + k);

    const T* row = logits + size_t(t) * size_t(ne);
    float v[EPL];
#pragma unroll
    for (int j = 0; j < EPL; ++j) v[j] = lane + 32 * j < ne ? to_f32(row[lane + 32 * j]) : -INFINITY;
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < EPL; ++j) mx = fmaxf(mx, v[j]);
    mx = warp_max(mx);
    const float l0 = __shfl_sync(FULL, v[0], 0);
    if (isnan(l0)) mx = l0;  // the CPU's running max starts at logit 0 and never leaves a NaN
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
        const int e = lane + 32 * j;
        const float ex = route_exp(__fsub_rn(v[j], mx));
        v[j] = e < ne ? ex : 0.0f;
        if (e < n4) ps[e] = v[j];  // zero padding: s + 0 = s for every s ≥ +0 or NaN
    }
    __syncwarp();
    float sum = lane == 0 ? sequential_sum(ps, n4) : 0.0f;
    sum = __shfl_sync(FULL, sum, 0);
    __syncwarp();
    uint64_t best = 0;
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
        const int e = lane + 32 * j;
        if (e < ne) {
            v[j] = __fdiv_rn(v[j], sum);
            ps[e] = v[j];
            const uint64_t key = order_key(v[j], e);
            best = key > best ? key : best;
        }
    }
    int r = 0;  // this lane's maximum's rank among the lane maxima (absent lanes: 0, rank ≥ k)
#pragma unroll
    for (int i = 0; i < 32; ++i) r += __shfl_sync(FULL, best, i) > best ? 1 : 0;
    const unsigned kth = __ballot_sync(FULL, r == k - 1);
    const uint64_t thr = __shfl_sync(FULL, best, __ffs(int(kth)) - 1);
    const unsigned below = (1u << lane) - 1u;
    int n_cand = 0;
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
        const int e = lane + 32 * j;
        const uint64_t key = e < ne ? order_key(v[j], e) : 0;
        const bool c = key >= thr;
        const unsigned bal = __ballot_sync(FULL, c);
        if (c) cand[n_cand + __popc(bal & below)] = key;
        n_cand += __popc(bal);
    }
    __syncwarp();
    if (n_cand <= 32) {  // one candidate per lane: the ranks from registers (shuffles), not shared memory
        const uint64_t kc = lane < n_cand ? cand[lane] : 0;
        int rank = 0;
        for (int i = 0; i < n_cand; ++i) rank += __shfl_sync(FULL, kc, i) > kc ? 1 : 0;
        if (lane < n_cand && rank < k) {
            const int e = int(~uint32_t(kc));
            slot_id[rank] = e;
            slot_w[rank] = ps[e];
        }
    } else {
        for (int c = lane; c < n_cand; c += 32) {
            const uint64_t kc = cand[c];
            int rank = 0;
            for (int i = 0; i < n_cand; ++i) rank += cand[i] > kc ? 1 : 0;
            if (rank < k) {
                const int e = int(~uint32_t(kc));
                slot_id[rank] = e;
                slot_w[rank] = ps[e];
            }
        }
    }
    __syncwarp();
    const float xw = lane < k ? slot_w[lane] : 0.0f;
    float s = 0.0f;  // the selected weights summed in slot order, from registers (k ≤ 32: one per lane)
    if (renorm)
        for (int i = 0; i < k; ++i) s = __fadd_rn(s, __shfl_sync(FULL, xw, i));
    if (lane < k) {
        const float x = renorm ? __fdiv_rn(xw, s) : xw;
        ids[size_t(t) * size_t(k) + size_t(lane)] = slot_id[lane];
        w[size_t(t) * size_t(k) + size_t(lane)] = x;
        if (sid) sid[t * k + lane] = slot_id[lane];
    }
}

// The same permutation by one warp where the assignments fit its lanes (n ≤ 32: decode, k ≤ 8 and
// ≤ 4 tokens): ids in shared memory (sid); assignment i of expert e goes to row offsets[e] + the
// number of earlier assignments of e — the stable order of moe_permute_sm80's counting sort, with no block
// barrier (the route + permute kernels' critical path at batch 1: docs/perf.md, session 20). The ids
// reach every lane by shuffles (lane j holds assignment j) and lane l counts experts l, l + 32, …
// in registers (ne ≤ PERM_EXPERTS: the fused launch's bound), not by reloading the ids from shared
// memory per expert (docs/perf.md, session 26).
constexpr int PERM_EXPERTS = 256;
__device__ __forceinline__ void permute_warp(const int32_t* sid, int32_t* counts, int32_t* offsets, int32_t* sorted,
                                             int32_t* dest, int n, int ne, int k) {
    constexpr int PER = PERM_EXPERTS / 32;
    const int lane = threadIdx.x & 31;
    const int e = lane < n ? sid[lane] : -1;
    const bool valid = lane < n && e >= 0 && e < ne;
    const unsigned vmask = __ballot_sync(FULL, valid);
    int rank = 0, c[PER] = {}, o[PER] = {};
    for (int j = 0; j < n; ++j) {
        const int ej = __shfl_sync(FULL, e, j);
        const bool vj = (vmask >> j) & 1u;
        rank += vj && (ej < e || (ej == e && j < lane));
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int x = lane + 32 * i;
            c[i] += vj && ej == x;
            o[i] += vj && ej < x;
        }
    }
    if (valid) {
        dest[lane] = rank;
        sorted[rank] = lane / k;
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int x = lane + 32 * i;
        if (x < ne) counts[x] = c[i], offsets[x] = o[i];
    }
    if (lane == 0) offsets[ne] = __popc(vmask);
}

template <class T, int EPL>
__global__ void __launch_bounds__(128) moe_route_kernel(const T* __restrict__ logits, int32_t* __restrict__ ids,
                                                        float* __restrict__ w, int n_tokens, int ne, int k, bool renorm,
                                                        int words) {
    extern __shared__ __align__(16) float smem[];
    pdl_wait();
    pdl_trigger();
    const int warp = threadIdx.x >> 5, t = blockIdx.x * int(blockDim.x >> 5) + warp;
    if (t >= n_tokens) return;
    route_token<T, EPL>(logits, ids, w, t, ne, k, renorm, smem + size_t(warp) * size_t(words), nullptr);
}

// Experts per lane: the smallest of 1, 2, 4, 8, 64 with 32·EPL ≥ ne (ne ≤ 2048).
template <class F> void with_epl(int64_t ne, F&& f) {
    if (ne <= 32)
        f(std::integral_constant<int, 1>{});
    else if (ne <= 64)
        f(std::integral_constant<int, 2>{});
    else if (ne <= 128)
        f(std::integral_constant<int, 4>{});
    else if (ne <= 256)
        f(std::integral_constant<int, 8>{});
    else
        f(std::integral_constant<int, 64>{});
}

}  // namespace route
}  // namespace cuda
}  // namespace tetra
