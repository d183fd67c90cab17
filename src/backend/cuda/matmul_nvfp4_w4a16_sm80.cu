// matmul_nvfp4_w4a16_sm80: W4A16 NVFP4 on mma.sync m16n8k16 bf16 (sm_80+), swap-AB: 16 weight
// rows are the A operand, up to 64 activation rows the B operand (n8 tiles). Weights stream once
// (16-B cp.async into a per-warp shared-memory ring) from an offline re-layout (w4a16_sm80_pack) in
// which each lane's 16 B are exactly its A registers for 4 MMAs; e2m1 → bf16 by bit placement
// (v·2^-126, 9 integer ops per 4 registers: decode_word), × bf16(e4m3 · 2^118) — exact
// (kernels.md §3.3) — and scale_global · 2^8 in the f32 epilogue. Two grids for M ≤ 16, picked per
// shape: v1 (row block × split-K over 512-k groups) and v2 (equal runs of (row block, group) units
// over one wave); split row blocks are reduced in a fixed order by the last CTA (integer counter;
// no float atomics). 17..64 rows: v1. M > 64: matmul_nvfp4_w4a16_large_sm80.cu (dequant +
// cuBLASLt). Also "matmul_silu" (the fused gate/up stage, m ≤ 16): version 1 with gate and up
// tiles paired in one CTA and silu(gate) · up in the epilogue (docs/cuda-backend.md). Measurements
// and what limits it: docs/perf.md. The prepare step and registry entries: matmul_nvfp4_w4a16_glue.cpp.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>

#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/matmul_launch.h"
#include "backend/cuda/matmul_nvfp4_w4a16_device.cuh"

namespace tetra {
namespace cuda {

namespace {

constexpr int WARPS = 8, THREADS = WARPS * 32, ROWS_PER_CTA = WARPS * 16;
using w4a16::CHUNK_K;
using w4a16::GROUP_CHUNKS;
using w4a16::GROUP_K;
constexpr int RING_BYTES = WARPS * 8 * 32 * 16;             // per-warp rings of 8 chunk slots
constexpr int X_SMEM_MAX = RING_BYTES + 2 * 64 * (512 + 8) * 2;  // + two x slots at m = 64
constexpr int X_PAD = 8;                  // bf16 per smem row: staggers rows across banks
static_assert(RING_BYTES == W4A16_SMALL_RING_BYTES && X_SMEM_MAX == w4a16_small_smem(64) && X_PAD == 8,
              "w4a16_small_smem (w4a16_layout.h) must describe this file's shared memory");

// A device attribute of the current device, asked once per device (cache: 0 = not asked yet).
int64_t attr_here(cudaDeviceAttr attr, std::atomic<int> (&cache)[64]) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    const bool cached = dev >= 0 && dev < 64;
    int v = cached ? cache[dev].load(std::memory_order_relaxed) : 0;
    if (v > 0) return v;
    CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, dev));
    if (cached) cache[dev].store(v, std::memory_order_relaxed);
    return v;
}
// Static shared memory the small-M kernels may have beside their dynamic rings and x slots (they
// have 16 B, s_last; launch_small / launch_run_kernel check it against their attribute).
constexpr int64_t SMALL_STATIC_SMEM_MAX = 64;
// The rows the small-M kernels take within the device's opt-in shared memory per block
// (w4a16_small_m_fit: 64 on H100, 32 on 99-KB devices).
int64_t small_m_max_here() {
    return w4a16_small_m_fit(smem_optin_here() - SMALL_STATIC_SMEM_MAX, W4A16_SM80_SMALL_M_MAX);
}

// The dynamic shared memory a small-M instance asks for as its maximum: what m = 64 needs, within
// the device (opt-in less the instance's static bytes; at least what small_m_max_here() rows need).
int small_dynamic_max(const void* kern) {
    return int(std::min<int64_t>(X_SMEM_MAX, dynamic_smem_cap(kern, SMALL_STATIC_SMEM_MAX, "matmul_nvfp4_w4a16_sm80")));
}

// ---- packed layout: w4a16_layout.h (the packer: w4a16_layout.cpp) ------------------------------

// ---- device helpers: matmul_nvfp4_w4a16_device.cuh ----------------------------------------------
using namespace w4a16;

struct small_params {
    const uint4* codes;
    const uint4* scales;
    const __nv_bfloat16* x;  // [m, k]
    __nv_bfloat16* out;      // [m, n]
    float* partial;          // [splits][n_tiles·16][m rounded up to 4]
    int* counters;           // [row blocks]
    int m, n, k, n_tiles, k_chunks, k_groups, gps, splits;
    int units, len, early;   // version 2: (row block, group) units, units per run (CTA), early signal
    float alpha;             // scale_global · 2^8
    int n_ff;                // matmul_silu (version 1, SILU instances): n = 2·n_ff stacked [gate; up]
                             // rows, out [m, n_ff] = silu(gate) · up
};

// Accumulator sets per n8 tile: two (even/odd chunks) break the dependent HMMA chain where the
// registers allow. Both m ≤ 8 and m ≤ 16 use two, so their per-row summation order is the same.
template <int NT> struct acc_sets { static constexpr int value = NT <= 2 ? 2 : 1; };


// x[:, grp·512 .. +512) → one smem slot [m][512 + X_PAD] (zero-filled beyond k). Not committed:
// the copies join the caller's next commit group.
__device__ __forceinline__ void stage_x(const small_params& p, int grp, __nv_bfloat16* slot) {
    for (int v = threadIdx.x; v < p.m * (GROUP_K / 8); v += THREADS) {
        int r = v / (GROUP_K / 8), kk = (v % (GROUP_K / 8)) * 8, kg = grp * GROUP_K + kk;
        const __nv_bfloat16* src = p.x + size_t(r) * p.k + (kg < p.k ? kg : 0);
        cp_async16(smem_u32(slot + r * (GROUP_K + X_PAD) + kk), src, kg < p.k ? 16 : 0);
    }
}

// One chunk (16 rows × 64 k) of one warp: 4 MMAs per n8 tile. q: the lane's 16 code bytes;
// two: the chunk's two e4m3 scales (row g, row g+8); xr[u]: this lane's x row 8u+g in the group's
// slot at k 16t (row 0 for rows ≥ m: a B column only reaches its own D column, and columns ≥ m are
// never stored, so no zeros and no branch are needed); i: the chunk within the group.
template <int NT>
__device__ __forceinline__ void compute_chunk(const uint4& q, uint32_t two, const uint4* const (&xr)[NT], int i,
                                              float (&acc)[NT][4]) {
    uint32_t s0, s1;
    scales_to_bf16x2(two, s0, s1);
    uint4 blo[NT], bhi[NT];
#pragma unroll
    for (int u = 0; u < NT; ++u) {
        blo[u] = xr[u][i * (CHUNK_K / 8)];
        bhi[u] = xr[u][i * (CHUNK_K / 8) + 1];
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        uint32_t a[4];
        a_regs(q, j, s0, s1, a);
#pragma unroll
        for (int u = 0; u < NT; ++u) {
            const uint4& b = j < 2 ? blo[u] : bhi[u];
            uint32_t b0 = (j & 1) ? b.z : b.x, b1 = (j & 1) ? b.w : b.y;
            mma16816<__nv_bfloat16>(acc[u], a[0], a[1], a[2], a[3], b0, b1);
        }
    }
}

// cp.async of this lane's 16 B of a chunk into ring slot `slot` (zeros when !ok: past the last
// chunk or an idle warp; the source is then not read, the pointer is clamped anyway).
__device__ __forceinline__ void fetch_chunk(const small_params& p, bool ok, const uint4* src, uint32_t slot) {
    cp_async16_w(slot, ok ? src : p.codes, ok ? 16 : 0);
}

// The inner loop of both small-M kernels: one 512-k group of one warp's 16-row tile. Chunks go in
// pairs: both are awaited together (each chunk is one commit group; 8 are in flight, so waiting
// until ≤ 6 remain lands the pair), their loads and decodes interleave, and each ring slot is
// refilled with the next group's chunk (cnext, n_next valid) as soon as it is consumed, x of the
// next group (grp_next into x_next) joining chunk 0's commit group. Chunk i accumulates into
// acc[i % A] and the MMAs of one set stay in chunk order (data dependencies), so the per-row sums
// are those of one chunk at a time. first: the CTA's first group (its x commit group is the newest:
// wait for all); at_barrier(): every thread, right after the group's barrier.
template <int NT, int A, class AtBarrier>
__device__ __forceinline__ void group_step(const small_params& p, const uint4* ring, uint32_t ring_sa, bool first,
                                           int n_cur, const __nv_bfloat16* xg, const uint4& s_cur, bool more,
                                           const uint4* cnext, int n_next, int grp_next, __nv_bfloat16* x_next,
                                           float (&acc)[A][NT][4], AtBarrier&& at_barrier) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint4* xr[NT];
#pragma unroll
    for (int u = 0; u < NT; ++u)
        xr[u] = reinterpret_cast<const uint4*>(xg + (8 * u + g < p.m ? 8 * u + g : 0) * (GROUP_K + X_PAD) + 16 * t);
#pragma unroll
    for (int i = 0; i < GROUP_CHUNKS; i += 2) {
        if (first && i == 0) cp_async_wait_all();
        else asm volatile("cp.async.wait_group %0;" ::"n"(GROUP_CHUNKS - 2) : "memory");  // chunks i, i+1 landed
        if (i == 0) {
            __syncthreads();  // x of this group visible; every warp is done with the previous x slot
            at_barrier();
        }
        const uint32_t two = word_of(s_cur, i >> 1);  // low half: chunk i, high half: chunk i + 1
        if (i + 1 < n_cur) {  // one basic block, so the two chunks' loads and decodes interleave
            compute_chunk<NT>(ring[32 * i], two, xr, i, acc[i % A]);
            compute_chunk<NT>(ring[32 * (i + 1)], two >> 16, xr, i + 1, acc[(i + 1) % A]);
        } else if (i < n_cur) {
            compute_chunk<NT>(ring[32 * i], two, xr, i, acc[i % A]);
        }
#pragma unroll
        for (int c = i; c < i + 2; ++c) {
            if (more) {
                fetch_chunk(p, c < n_next, cnext + 32 * c, ring_sa + 512 * c);  // slot c consumed above
                if (c == 0) stage_x(p, grp_next, x_next);
            }
            cp_async_commit();  // possibly empty: keeps one group per chunk
        }
    }
}

// Rows n, m0 .. m0 + 3 of the split-K partials summed over the splits in order 0..splits−1 (loads
// issued 8 splits at a time so the L2 round trips overlap).
__device__ __forceinline__ float4 sum_splits(const small_params& p, int n, int m0, int n_pad, int mp) {
    const float4* src = reinterpret_cast<const float4*>(p.partial + size_t(n) * mp + m0);
    const size_t stride = size_t(n_pad) * mp / 4;
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int sp = 0; sp < p.splits; sp += 8) {
        float4 v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = sp + u < p.splits ? __ldcg(src + (sp + u) * stride) : make_float4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 8; ++u)
            if (sp + u < p.splits) sum.x += v[u].x, sum.y += v[u].y, sum.z += v[u].z, sum.w += v[u].w;
    }
    return sum;
}

// matmul_silu, one split: each up warp (WARPS/2 ..) rounds its rows as the matmul stores them and
// hands them through its own ring (every cp.async group has landed) to the gate warp of the same
// rows, whose lane holds the same fragment positions; the gate warp writes silu(gate) · up (the
// two-step result's bits: silu_times on the same bf16 values). n0: the lane's first gate row.
template <int NT>
__device__ __forceinline__ void silu_pairs(const small_params& p, const float (&acc)[NT][4], uint4* smem_raw, int warp,
                                           int lane, int n0, bool active) {
    constexpr int WORDS = GROUP_CHUNKS * 32;  // uint4 of one warp's ring
    static_assert(NT * 4 * 32 * 2 <= WORDS * 16, "matmul_silu: the up rows must fit one ring");
    if (warp >= WARPS / 2) {
        __nv_bfloat16* own = reinterpret_cast<__nv_bfloat16*>(smem_raw + warp * WORDS);
#pragma unroll
        for (int u = 0; u < NT; ++u)
#pragma unroll
            for (int e = 0; e < 4; ++e) own[(u * 4 + e) * 32 + lane] = __float2bfloat16_rn(acc[u][e] * p.alpha);
    }
    __syncthreads();
    if (warp >= WARPS / 2 || !active) return;
    const __nv_bfloat16* up = reinterpret_cast<const __nv_bfloat16*>(smem_raw + (warp + WARPS / 2) * WORDS);
    const int t = lane & 3;
#pragma unroll
    for (int u = 0; u < NT; ++u)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int n = n0 + 8 * (e >> 1), m = 8 * u + 2 * t + (e & 1);
            if (m < p.m)
                p.out[size_t(m) * p.n_ff + n] =
                    silu_times(__float2bfloat16_rn(acc[u][e] * p.alpha), up[(u * 4 + e) * 32 + lane]);
        }
}

template <int NT> struct ctas_per_sm { static constexpr int value = NT <= 2 ? 3 : NT == 4 ? 2 : 1; };

// grid (row blocks of 128 rows, splits); 8 warps, one 16-row tile each. Weights stream through a
// per-warp ring of 8 chunk slots in shared memory (cp.async, one commit group per chunk, refilled
// with the next group's chunk as soon as a slot is consumed: 7–8 chunks = 3.5–4 KB in flight per
// warp without holding registers); x goes through two group slots; one barrier per group.
// SILU: matmul_silu (a separate instance, so the plain kernel's code is unchanged by it).
template <int NT, bool SILU>
__global__ void __launch_bounds__(THREADS, ctas_per_sm<NT>::value) matmul_nvfp4_w4a16_small_kernel(small_params p) {
    extern __shared__ uint4 smem_raw[];
    __shared__ int s_last;
    constexpr int A = acc_sets<NT>::value;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint4* ring = smem_raw + warp * GROUP_CHUNKS * 32 + lane;  // slot i at ring[32 i]
    const uint32_t ring_sa = smem_u32(ring);
    __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem_raw + WARPS * GROUP_CHUNKS * 32);
    const int slot_elems = p.m * (GROUP_K + X_PAD);
    const int split = blockIdx.y;
    const int g0 = split * p.gps, g1 = min(p.k_groups, g0 + p.gps);
    // matmul_silu: warps 0..3 take gate tiles 4·b .. 4·b + 3, warps 4..7 the up tiles of the same rows
    // (n_ff / 16 further on), so the CTA holds both halves of its 64 output columns.
    const int pair = blockIdx.x * (WARPS / 2) + (warp & (WARPS / 2 - 1));
    const int tile = !SILU ? blockIdx.x * WARPS + warp : pair + (warp < WARPS / 2 ? 0 : p.n_ff / 16);
    const bool active = !SILU ? tile < p.n_tiles : pair < p.n_ff / 16;
    const uint4* cbase = p.codes + chunk_index(tile, 0, p.n_tiles) * 32 + lane;  // group 0's chunks of the tile
    const size_t gstride = group_stride_u4(p.n_tiles);
    const uint4* sbase = p.scales + size_t(tile) * p.k_groups * 32 + lane;

    // Prologue: commit group (g0, i) = chunk i of g0; the weights (and scales) do not depend on the
    // previous kernel, so they stream before pdl_wait() (programmatic dependent launch: this part
    // overlaps the previous kernel's tail); then x of g0 in a ninth group, awaited in full at the
    // first chunk.
#pragma unroll
    for (int i = 0; i < GROUP_CHUNKS; ++i) {
        fetch_chunk(p, active && g0 * GROUP_CHUNKS + i < p.k_chunks, cbase + size_t(g0) * gstride + 32 * i,
                    ring_sa + 512 * i);
        cp_async_commit();
    }
    uint4 s_cur = active ? ld_stream_w(sbase + size_t(g0) * 32) : make_uint4(0, 0, 0, 0), s_next = s_cur;
    pdl_wait();
    // matmul_silu is followed directly by a matmul (down), whose CTAs, launched early, would stream
    // their weights on the SMs this grid still needs (the busiest carry two of its CTAs): it lets the
    // next kernel launch only after its own loop (8-layer Llama-3.1-8B: batch 1 −1.8 %, batch 8
    // −5.7 % against the two-step path; with the early trigger batch 1 was +2 %).
    if (!SILU) pdl_trigger();
    stage_x(p, g0, xs);
    cp_async_commit();

    float acc[A][NT][4];
#pragma unroll
    for (int a = 0; a < A; ++a)
#pragma unroll
        for (int u = 0; u < NT; ++u) acc[a][u][0] = acc[a][u][1] = acc[a][u][2] = acc[a][u][3] = 0.0f;
    const uint4* cnext = cbase + size_t(g0 + 1) * gstride;  // next group's chunks (loop-carried:
    for (int grp = g0; grp < g1; ++grp, cnext += gstride) {  // kept in a register, not recomputed)
        const bool more = grp + 1 < g1;
        const int n_next = active ? min(GROUP_CHUNKS, p.k_chunks - (grp + 1) * GROUP_CHUNKS) : 0;
        const int n_cur = active ? min(GROUP_CHUNKS, p.k_chunks - grp * GROUP_CHUNKS) : 0;
        const __nv_bfloat16* xg = xs + ((grp - g0) & 1) * slot_elems;
        group_step<NT, A>(p, ring, ring_sa, grp == g0, n_cur, xg, s_cur, more, cnext, n_next, grp + 1,
                          xs + ((grp + 1 - g0) & 1) * slot_elems, acc, [&] {
                              if (active && more) s_next = ld_stream_w(sbase + size_t(grp + 1) * 32);
                          });
        s_cur = s_next;
    }
    cp_async_wait_all();
    if (SILU) pdl_trigger();
    if (A == 2) {
#pragma unroll
        for (int u = 0; u < NT; ++u)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[0][u][e] += acc[A - 1][u][e];
    }

    const int n0 = tile * 16 + g;
    if (p.splits == 1) {
        if (SILU) {
            silu_pairs<NT>(p, acc[0], smem_raw, warp, lane, n0, active);
            return;
        }
        if (!active) return;
#pragma unroll
        for (int u = 0; u < NT; ++u)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int n = n0 + 8 * (e >> 1), m = 8 * u + 2 * t + (e & 1);
                if (n < p.n && m < p.m) p.out[size_t(m) * p.n + n] = __float2bfloat16_rn(acc[0][u][e] * p.alpha);
            }
        return;
    }
    const int n_pad = p.n_tiles * 16, mp = (p.m + 3) & ~3;  // partial rows padded to float4
    if (active) {
#pragma unroll
        for (int u = 0; u < NT; ++u)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int n = n0 + 8 * (e >> 1), m = 8 * u + 2 * t + (e & 1);
                if (m < p.m) p.partial[(size_t(split) * n_pad + n) * mp + m] = acc[0][u][e];
            }
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(&p.counters[blockIdx.x], 1) == p.splits - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    // Last CTA of this row block: sum the splits in order 0..splits-1 (deterministic). One item =
    // 4 adjacent m of one row (float4); matmul_silu: of one output column, its gate and up rows.
    const int mq = mp / 4;
    if (SILU) {
        const int half = ROWS_PER_CTA / 2, nb = blockIdx.x * half;
        for (int e = threadIdx.x; e < half * mq; e += THREADS) {
            int n = nb + e / mq, m0 = 4 * (e % mq);
            if (n >= p.n_ff) continue;
            const float4 sg = sum_splits(p, n, m0, n_pad, mp), su = sum_splits(p, p.n_ff + n, m0, n_pad, mp);
            const float rg[4] = {sg.x, sg.y, sg.z, sg.w}, ru[4] = {su.x, su.y, su.z, su.w};
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (m0 + j < p.m)
                    p.out[size_t(m0 + j) * p.n_ff + n] =
                        silu_times(__float2bfloat16_rn(rg[j] * p.alpha), __float2bfloat16_rn(ru[j] * p.alpha));
        }
    } else {
        const int nb = blockIdx.x * ROWS_PER_CTA;
        for (int e = threadIdx.x; e < ROWS_PER_CTA * mq; e += THREADS) {
            int n = nb + e / mq, m0 = 4 * (e % mq);
            if (n >= p.n) continue;
            const float4 sum = sum_splits(p, n, m0, n_pad, mp);
            const float r[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (m0 + j < p.m) p.out[size_t(m0 + j) * p.n + n] = __float2bfloat16_rn(r[j] * p.alpha);
        }
    }
    if (threadIdx.x == 0) p.counters[blockIdx.x] = 0;  // ready for the next launch / graph replay
}

struct small_plan {
    int gps = 1, splits = 1, row_blocks = 1;
    size_t smem = 0;
};

// Split-K: of the split counts whose grid fits one wave of 3 CTAs per SM (in the memory-bound
// regime a partial second wave costs more than longer CTAs; every CTA has the same work), the one
// whose busiest SM carries the fewest 512-k groups (CTAs spread breadth-first over the SMs). Ties
// go to more splits: a CTA's first group streams before its PDL wait, so shorter CTAs overlap more
// of their weights with the previous kernel (o_proj 4096×4096 as 4 splits of 2 groups: faster
// alone, but Llama-3.1-8B batch 8 +2.3 % against 8 splits of 1). Llama-3.1-8B's down (28 groups,
// 32 row blocks, 132 SMs): 4 splits of 7 groups (busiest SM 7) instead of 10 of 3 (busiest 9; the
// rule before 2026-11-23 took the most splits that fit one wave). The plan depends only on the
// weight shape and the SM count, so every row of a batch is summed in the same order whatever m is
// (m ≤ 16 rows are bit-identical to a batch of one).
small_plan plan_small(int64_t m, const w4a16_sm80_dims& d, int sm_count, int gps_force = 0) {
    small_plan pl;
    pl.row_blocks = int((d.n_tiles + WARPS - 1) / WARPS);
    const int64_t sms = std::max(1, sm_count), slots = 3 * sms;  // resident CTAs of the m ≤ 16 kernels
    int64_t best = -1;
    for (int64_t gps = 1; gps <= d.k_groups; ++gps) {
        const int64_t splits = (d.k_groups + gps - 1) / gps, ctas = int64_t(pl.row_blocks) * splits;
        if (gps > 1 && splits == (d.k_groups + gps - 2) / (gps - 1)) continue;  // same split count, longer CTAs
        if (ctas > slots && splits > 1) continue;                                  // never more than one wave
        const int64_t busiest = gps * ((ctas + sms - 1) / sms);
        if (best < 0 || busiest < best) best = busiest, pl.gps = int(gps), pl.splits = int(splits);
    }
    if (gps_force > 0) {  // a forced split (bench, tests)
        pl.gps = int(std::min<int64_t>(gps_force, d.k_groups));
        pl.splits = int((d.k_groups + pl.gps - 1) / pl.gps);
    }
    pl.smem = size_t(w4a16_small_smem(m));  // weight rings + two x slots
    return pl;
}

// The shared memory a version-1 launch requests: the plan's, or, where the grid has no more CTAs
// than the device has SMs, at least half an SM's, so that no two CTAs can share an SM. The plan
// spreads such a grid one CTA per SM, and the block scheduler does too when every SM is free; but a
// grid launched early (PDL) behind one whose last CTAs still hold some SMs (the sweep kernel's
// many-CTA grids) landed two CTAs on an SM, and that SM's doubled work set the kernel's time:
// Llama-3.1-8B's down after the sweep gate/up, 23.4 → 17.0 µs in the decode step (docs/perf.md,
// session 19). The padding is never read.
size_t launch_smem(const small_plan& pl, int sm_count, int dyn_max) {
    if (int64_t(pl.row_blocks) * pl.splits > sm_count) return pl.smem;
    const size_t half_sm = size_t(smem_per_sm_here() / 2);
    return std::max(pl.smem, std::min(half_sm, size_t(dyn_max)));
}

template <int NT, bool SILU = false>
void launch_small(const small_params& p, const small_plan& pl, int sm_count, cudaStream_t s, bool pdl) {
    auto kern = matmul_nvfp4_w4a16_small_kernel<NT, SILU>;
    static int dyn_max = 0;  // per template instance; the attribute is per-function
    if (!dyn_max) {  // what the instance may need, within the device's limit (small_m_max_here)
        dyn_max = small_dynamic_max(reinterpret_cast<const void*>(kern));
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn_max));
    }
    const size_t smem = launch_smem(pl, sm_count, dyn_max);
    TETRA_CHECK(smem <= size_t(dyn_max), "matmul_nvfp4_w4a16_sm80: m = %d needs %zu B of shared memory per CTA, the "
                "device allows %d", p.m, smem, dyn_max);
    launch_on(kern, dim3(unsigned(pl.row_blocks), unsigned(pl.splits)), dim3(THREADS), smem, s, pdl, p);
}

// ---- balanced-run kernel (version 2: m ≤ 16, picked per shape by small_version) ---------------
// The units (128-row block rb, 512-k group), rb-major, are cut into equal runs of `len` units, one
// run per CTA of a single wave (the plan picks CTAs per SM and len so that the busiest SM carries
// as few units as possible: gate+up's 224 row blocks no longer leave 40 SMs with half the work).
// The inner loop is version 1's (8-slot cp.async ring per warp, x per group in two slots, one
// barrier per group); a run may continue into the next row block (k wraps to group 0). A row block
// covered by one run is written directly; otherwise each run writes its segment's f32 partial
// (slot 2·cta for the run's first segment, 2·cta + 1 for its last) and the last CTA to arrive
// (integer counter) sums the runs in CTA order — deterministic and m-independent (the plan
// depends only on the shape and the SM count).

// End of a segment of row block rb: the two accumulator sets summed, then bf16 out (whole) or the
// f32 partial into `slot` ([slot][128 rows][m rounded up to 4]).
template <int NT>
__device__ __forceinline__ void flush_segment(const small_params& p, const float (&acc)[2][NT][4], int rb, bool whole,
                                              int slot, int warp, int lane) {
    const int g = lane >> 2, t = lane & 3, mp = (p.m + 3) & ~3;
    if (rb * WARPS + warp >= p.n_tiles) return;
#pragma unroll
    for (int u = 0; u < NT; ++u)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = warp * 16 + g + 8 * (e >> 1), m = 8 * u + 2 * t + (e & 1), n = rb * ROWS_PER_CTA + r;
            const float v = acc[0][u][e] + acc[1][u][e];
            if (m >= p.m) continue;
            if (whole) {
                if (n < p.n) p.out[size_t(m) * p.n + n] = __float2bfloat16_rn(v * p.alpha);
            } else {
                __stcg(p.partial + (size_t(slot) * ROWS_PER_CTA + r) * mp + m, v);
            }
        }
}

// The partial slot of CTA c's segment of row block rb (its first segment, or its last).
__device__ __forceinline__ int run_slot(const small_params& p, int c, int rb) {
    return 2 * c + (int((int64_t(c) * p.len) / p.k_groups) == rb ? 0 : 1);
}

// Last CTA of row block rb: sums the partials of CTAs c_lo..c_hi in that order (fixed) into out.
__device__ __forceinline__ void reduce_row_block(const small_params& p, int rb, int c_lo, int c_hi) {
    const int mp = (p.m + 3) & ~3, mq = mp / 4;
    for (int e = threadIdx.x; e < ROWS_PER_CTA * mq; e += THREADS) {
        const int r = e / mq, m0 = 4 * (e % mq), n = rb * ROWS_PER_CTA + r;
        if (n >= p.n) continue;
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int c = c_lo; c <= c_hi; c += 8) {
            float4 v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u)
                v[u] = c + u <= c_hi ? __ldcg(reinterpret_cast<const float4*>(
                                           p.partial + (size_t(run_slot(p, c + u, rb)) * ROWS_PER_CTA + r) * mp + m0))
                                     : make_float4(0, 0, 0, 0);
#pragma unroll
            for (int u = 0; u < 8; ++u)
                if (c + u <= c_hi) sum.x += v[u].x, sum.y += v[u].y, sum.z += v[u].z, sum.w += v[u].w;
        }
        const float r4[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (m0 + j < p.m) p.out[size_t(m0 + j) * p.n + n] = __float2bfloat16_rn(r4[j] * p.alpha);
    }
}

// early (variant): the counter of the run's first (split) segment is bumped at the barrier of the
// next unit instead of after the loop, so that handshake overlaps the rest of the run.
template <int NT>
__global__ void __launch_bounds__(THREADS, 2) matmul_nvfp4_w4a16_run_kernel(small_params p) {
    extern __shared__ uint4 smem_raw[];
    __shared__ int s_last;
    static_assert(NT <= 2, "the balanced-run kernel takes m ≤ 16 (two accumulator sets)");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint4* ring = smem_raw + warp * GROUP_CHUNKS * 32 + lane;  // slot i at ring[32 i]
    const uint32_t ring_sa = smem_u32(ring);
    __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem_raw + WARPS * GROUP_CHUNKS * 32);
    const int slot_elems = p.m * (GROUP_K + X_PAD);
    const int u0 = blockIdx.x * p.len, u1 = min(u0 + p.len, p.units);
    int rb = u0 / p.k_groups, grp = u0 - rb * p.k_groups;  // the unit being computed
    const int tile = rb * WARPS + warp;
    bool active = tile < p.n_tiles;

    // Prologue: commit group (u0, i) = chunk i of u0, plus x of u0 in group (u0, 0).
    const size_t gstride = group_stride_u4(p.n_tiles);
    const uint4* ccur = p.codes + chunk_index(tile, size_t(grp) * GROUP_CHUNKS, p.n_tiles) * 32 + lane;  // unit u's chunks
    {
        const uint4* c0 = ccur;
        const int n0 = active ? min(GROUP_CHUNKS, p.k_chunks - grp * GROUP_CHUNKS) : 0;
#pragma unroll
        for (int i = 0; i < GROUP_CHUNKS; ++i) {
            fetch_chunk(p, i < n0, c0 + 32 * i, ring_sa + 512 * i);
            cp_async_commit();
        }
    }
    uint4 s_cur =
        active ? ld_stream_w(p.scales + (size_t(tile) * p.k_groups + grp) * 32 + lane) : make_uint4(0, 0, 0, 0);
    pdl_wait();  // as the small kernel: weights before, x (and every write) after
    pdl_trigger();
    stage_x(p, grp, xs);
    cp_async_commit();
    uint4 s_next = s_cur;

    float acc[2][NT][4];
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int u = 0; u < NT; ++u) acc[a][u][0] = acc[a][u][1] = acc[a][u][2] = acc[a][u][3] = 0.0f;
    bool seg_first = true, seg_whole = grp == 0;
    int pend0 = -1, pend1 = -1;  // row blocks this CTA left partial (its first and last segments)
    bool signal = false, counted0 = false;  // early: bump pend0's counter at the next barrier / done
    int first_old = 0;                      // early: thread 0's counter value for pend0
    for (int u = u0; u < u1; ++u) {
        const bool more = u + 1 < u1;
        const int grp_n = grp + 1 == p.k_groups ? 0 : grp + 1, rb_n = grp_n == 0 ? rb + 1 : rb;
        const int tile_n = rb_n * WARPS + warp;
        const bool active_n = more && tile_n < p.n_tiles;
        const uint4* cnext =  // loop-carried (kept in a register): the next group, or a new row block's first
            grp_n == 0 ? p.codes + chunk_index(tile_n, 0, p.n_tiles) * 32 + lane : ccur + gstride;
        const int n_next = active_n ? min(GROUP_CHUNKS, p.k_chunks - grp_n * GROUP_CHUNKS) : 0;
        const int n_cur = active ? min(GROUP_CHUNKS, p.k_chunks - grp * GROUP_CHUNKS) : 0;
        const __nv_bfloat16* xg = xs + ((u - u0) & 1) * slot_elems;
        group_step<NT, 2>(p, ring, ring_sa, u == u0, n_cur, xg, s_cur, more, cnext, n_next, grp_n,
                          xs + ((u + 1 - u0) & 1) * slot_elems, acc, [&] {
                              if (signal) {  // every warp's pend0 partial is written and fenced
                                  if (threadIdx.x == 0) first_old = atomicAdd(&p.counters[pend0], 1);
                                  signal = false, counted0 = true;
                              }
                              if (active_n)
                                  s_next = ld_stream_w(p.scales + (size_t(tile_n) * p.k_groups + grp_n) * 32 + lane);
                          });
        if (grp == p.k_groups - 1 || !more) {  // end of a segment (uniform over the CTA)
            const bool whole = seg_whole && grp == p.k_groups - 1;
            flush_segment<NT>(p, acc, rb, whole, 2 * blockIdx.x + (seg_first ? 0 : 1), warp, lane);
            if (!whole) {
                if (pend0 < 0) {
                    pend0 = rb;
                    if (p.early && more) {
                        __threadfence();
                        signal = true;
                    }
                } else {
                    pend1 = rb;
                }
            }
#pragma unroll
            for (int a = 0; a < 2; ++a)
#pragma unroll
                for (int v = 0; v < NT; ++v) acc[a][v][0] = acc[a][v][1] = acc[a][v][2] = acc[a][v][3] = 0.0f;
            seg_first = false, seg_whole = true;
        }
        s_cur = s_next, grp = grp_n, rb = rb_n, active = tile_n < p.n_tiles, ccur = cnext;
    }
    cp_async_wait_all();
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        const int rbq = q ? pend1 : pend0;  // the same in every warp of the CTA
        if (rbq < 0) continue;
        const int c_lo = int((int64_t(rbq) * p.k_groups) / p.len);
        const int c_hi = int((int64_t(rbq + 1) * p.k_groups - 1) / p.len);
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
            const int old = q == 0 && counted0 ? first_old : atomicAdd(&p.counters[rbq], 1);
            s_last = old == c_hi - c_lo;
        }
        __syncthreads();
        if (s_last) {
            __threadfence();
            reduce_row_block(p, rbq, c_lo, c_hi);
            if (threadIdx.x == 0) p.counters[rbq] = 0;  // ready for the next launch / graph replay
        }
        __syncthreads();  // s_last is reused
    }
}

struct run_plan {
    int64_t units = 0, len = 0, grid = 0, row_blocks = 0;
    int busiest = 0;  // units on the busiest SM (CTAs spread breadth-first over the SMs)
};

// Runs of len units over at most SMs × ctas_per_sm CTAs (one wave). Default: of 1–2 CTAs per SM
// (3, with 24 warps per SM, measured slower on every shape), the one whose busiest SM carries the
// fewest units (len × CTAs on it), ties to 2 (more warps in flight). Depends only on the shape,
// the SM count and the config (never on m).
run_plan plan_runs(const w4a16_sm80_dims& d, int sm_count, const w4a16_small_config& cfg) {
    run_plan pl;
    pl.row_blocks = (d.n_tiles + WARPS - 1) / WARPS;
    pl.units = pl.row_blocks * d.k_groups;
    const int64_t sms = std::max(1, sm_count), min_len = std::max(1, cfg.min_len);
    int64_t best = -1;
    for (int cps = 2; cps >= 1; --cps) {
        if (cfg.ctas_per_sm > 0 && cps != cfg.ctas_per_sm) continue;
        const int64_t len = std::max<int64_t>(min_len, (pl.units + sms * cps - 1) / (sms * cps));
        const int64_t grid = (pl.units + len - 1) / len, busiest = len * ((grid + sms - 1) / sms);
        if (best < 0 || busiest < best) best = busiest, pl.len = len, pl.grid = grid;
    }
    pl.busiest = int(std::min<int64_t>(best, INT32_MAX));
    return pl;
}

size_t run_partial_bytes(const run_plan& pl, int64_t m) { return size_t(2 * pl.grid) * ROWS_PER_CTA * ((m + 3) & ~3) * 4; }

// Version 0 (auto) → 1 or 2 for m ≤ 16, from the shape and the SM count only (rows of a batch stay
// bit-identical to the same row alone). Version 2 splits more row blocks over CTAs, whose partial
// sums and end-of-run handshakes cost ~15–20 % on H100 (2026-11-22: gate+up with 14 units on the
// busiest SM against version 1's 16 was slower; down with 7 against version 1's then 9 faster): so
// version 2 only where its busiest SM carries < 0.85 × version 1's units. Since version 1's plan
// minimises its busiest SM too (2026-11-23), no Llama or Qwen shape picks version 2 on an H100.
int small_version(const w4a16_sm80_dims& d, int sm_count, const w4a16_small_config& cfg) {
    if (cfg.version != 0) return cfg.version;
    small_plan p1 = plan_small(1, d, sm_count);
    const int64_t sms = std::max(1, sm_count);
    const int64_t busiest1 = int64_t(p1.gps) * ((int64_t(p1.row_blocks) * p1.splits + sms - 1) / sms);
    return int64_t(plan_runs(d, sm_count, cfg).busiest) * 20 < busiest1 * 17 ? 2 : 1;
}

template <int NT>
void launch_run_kernel(const small_params& p, int64_t grid, size_t smem, cudaStream_t s, bool pdl) {
    auto kern = matmul_nvfp4_w4a16_run_kernel<NT>;
    static int dyn_max = 0;  // per template instance; the attribute is per-function
    if (!dyn_max) {
        dyn_max = small_dynamic_max(reinterpret_cast<const void*>(kern));
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn_max));
    }
    TETRA_CHECK(smem <= size_t(dyn_max), "matmul_nvfp4_w4a16_sm80: m = %d needs %zu B of shared memory per CTA, the "
                "device allows %d", p.m, smem, dyn_max);
    launch_on(kern, dim3(unsigned(grid)), dim3(THREADS), smem, s, pdl, p);
}

void run_launch(small_params p, const run_plan& pl, bool early, cudaStream_t s, bool pdl) {
    p.units = int(pl.units), p.len = int(pl.len), p.early = early ? 1 : 0;
    const size_t smem = size_t(w4a16_small_smem(p.m));  // weight rings + two x slots
    if (p.m <= 8) launch_run_kernel<1>(p, pl.grid, smem, s, pdl);
    else launch_run_kernel<2>(p, pl.grid, smem, s, pdl);
}

}  // namespace

int64_t smem_optin_here() {
    static std::atomic<int> cache[64];
    return attr_here(cudaDevAttrMaxSharedMemoryPerBlockOptin, cache);
}
int64_t smem_per_sm_here() {
    static std::atomic<int> cache[64];
    return attr_here(cudaDevAttrMaxSharedMemoryPerMultiprocessor, cache);
}

int64_t static_smem_bytes(const void* kern, int64_t allowance, const char* who) {
    cudaFuncAttributes fa{};
    CUDA_CHECK(cudaFuncGetAttributes(&fa, kern));
    TETRA_CHECK(int64_t(fa.sharedSizeBytes) <= allowance, "%s: %lld B of static shared memory (at most %lld planned for)",
                who, (long long)fa.sharedSizeBytes, (long long)allowance);
    return int64_t(fa.sharedSizeBytes);
}

int64_t dynamic_smem_cap(const void* kern, int64_t allowance, const char* who) {
    return smem_optin_here() - static_smem_bytes(kern, allowance, who);
}

int w4a16_sm80_small_version(int64_t n, int64_t k, int sm_count) {
    return small_version(w4a16_sm80_dims_of(n, k), sm_count, {});
}

w4a16_sm80_workspace w4a16_sm80_workspace_need(int64_t m_max, int64_t n, int64_t k, int sm_count,
                                               const w4a16_small_config& cfg) {
    w4a16_sm80_dims d = w4a16_sm80_dims_of(n, k);
    w4a16_sm80_workspace ws;
    // Version 1's splits and row blocks do not depend on m, and both partial sizes grow with m: the
    // largest m each kernel takes sizes them.
    const int64_t m_fit = small_m_max_here();
    const int64_t m_small = std::min(m_max, m_fit), m_run = std::min(m_small, W4A16_RUN_M_MAX);
    if (m_small >= 1) {
        const small_plan pl = plan_small(m_small, d, sm_count, cfg.gps);
        if (pl.splits > 1) ws.partial_bytes = size_t(pl.splits) * d.n_tiles * 16 * ((m_small + 3) & ~3) * 4;
        ws.counter_count = size_t(pl.row_blocks);
        if (m_run >= 1 && small_version(d, sm_count, cfg) == 2)
            ws.partial_bytes = std::max(ws.partial_bytes, run_partial_bytes(plan_runs(d, sm_count, cfg), m_run));
    }
    if (m_max > m_fit) {
        // the whole bf16 weight if it takes ≤ 128 MB (one pass), else two 64-MB ping-pong buffers
        const size_t whole = size_t(n) * size_t(k) * 2, cap = size_t(128) << 20;
        const int64_t rows = std::max<int64_t>(256, (int64_t(64) << 20) / (k * 2) / 256 * 256);
        ws.dequant_bytes = whole <= cap ? (whole + 255) / 256 * 256 : 2 * ((size_t(rows) * k * 2 + 255) / 256 * 256);
        ws.cublas_bytes = CUBLASLT_WORKSPACE_BYTES;
    }
    return ws;
}

void matmul_nvfp4_w4a16_sm80_small_launch(const void* x, int64_t m, const w4a16_sm80_weight& w, void* out,
                                          const w4a16_sm80_workspace& ws, int sm_count, cudaStream_t s,
                                          const w4a16_small_config& cfg) {
    TETRA_CHECK(cfg.version >= 0 && cfg.version <= 2 && cfg.ctas_per_sm >= 0 && cfg.ctas_per_sm <= 2 && cfg.gps >= 0,
                "matmul_nvfp4_w4a16_sm80: small-M config version %d (0, 1 or 2), ctas_per_sm %d (0, 1 or 2), gps %d (>= 0)",
                cfg.version, cfg.ctas_per_sm, cfg.gps);
    const int64_t m_fit = small_m_max_here();
    TETRA_CHECK(m >= 1 && m <= m_fit,
                "matmul_nvfp4_w4a16_sm80: small-M kernel takes 1..%lld rows on this device (%lld bytes of shared "
                "memory per block); got %lld",
                (long long)m_fit, (long long)smem_optin_here(), (long long)m);
    w4a16_sm80_dims d = w4a16_sm80_dims_of(w.n, w.k);
    small_plan pl = plan_small(m, d, sm_count, cfg.gps);
    small_params p;
    p.codes = static_cast<const uint4*>(w.codes);
    p.scales = static_cast<const uint4*>(w.scales);
    p.x = static_cast<const __nv_bfloat16*>(x);
    p.out = static_cast<__nv_bfloat16*>(out);
    p.partial = static_cast<float*>(ws.partial);
    p.counters = ws.counters;
    p.m = int(m), p.n = int(w.n), p.k = int(w.k);
    p.n_tiles = int(d.n_tiles), p.k_chunks = int(d.k_chunks), p.k_groups = int(d.k_groups);
    p.gps = pl.gps, p.splits = pl.splits;
    p.units = p.len = p.early = 0;  // version 2's (run_launch)
    p.n_ff = int(cfg.silu_n_ff);
    p.alpha = w.scale_global * 256.0f;
    TETRA_CHECK(cfg.silu_n_ff == 0 || (cfg.silu_n_ff > 0 && cfg.silu_n_ff % 16 == 0 && w.n == 2 * cfg.silu_n_ff &&
                                       cfg.version != 2 && m <= W4A16_SILU_M_MAX),
                "matmul_nvfp4_w4a16_sm80: matmul_silu takes a stacked [2·n_ff, k] weight with n_ff %% 16 == 0 on "
                "version 1, m <= %lld; got n = %lld, n_ff = %lld, version %d, m = %lld",
                (long long)W4A16_SILU_M_MAX, (long long)w.n, (long long)cfg.silu_n_ff, cfg.version, (long long)m);
    if (p.n_ff == 0 && m <= W4A16_RUN_M_MAX && small_version(d, sm_count, cfg) == 2) {  // the balanced-run kernel
        const run_plan rp = plan_runs(d, sm_count, cfg);
        TETRA_CHECK(rp.units < INT32_MAX && ws.partial_bytes >= run_partial_bytes(rp, m) && ws.counters &&
                        ws.counter_count >= size_t(rp.row_blocks),
                    "matmul_nvfp4_w4a16_sm80: workspace too small for [%lld x %lld] x [%lld x %lld]ᵀ "
                    "(size it with w4a16_sm80_workspace_need)",
                    (long long)m, (long long)w.k, (long long)w.n, (long long)w.k);
        run_launch(p, rp, cfg.early_signal != 0, s, cfg.pdl != 0);
        return;
    }
    if (pl.splits > 1) {
        TETRA_CHECK(ws.partial_bytes >= size_t(pl.splits) * d.n_tiles * 16 * ((m + 3) & ~3) * 4 && ws.counters &&
                        ws.counter_count >= size_t(pl.row_blocks),
                    "matmul_nvfp4_w4a16_sm80: workspace too small for [%lld x %lld] x [%lld x %lld]ᵀ "
                    "(size it with w4a16_sm80_workspace_need)",
                    (long long)m, (long long)w.k, (long long)w.n, (long long)w.k);
    }
    const bool pdl = cfg.pdl != 0;
    if (p.n_ff > 0) {
        if (m <= 8) launch_small<1, true>(p, pl, sm_count, s, pdl);
        else launch_small<2, true>(p, pl, sm_count, s, pdl);
        return;
    }
    if (m <= 8) launch_small<1>(p, pl, sm_count, s, pdl);
    else if (m <= 16) launch_small<2>(p, pl, sm_count, s, pdl);
    else if (m <= 32) launch_small<4>(p, pl, sm_count, s, pdl);
    else launch_small<8>(p, pl, sm_count, s, pdl);
}

void matmul_nvfp4_w4a16_sm80_launch(const void* x, int64_t m, const w4a16_sm80_weight& w, void* out,
                                    const w4a16_sm80_workspace& ws, int sm_count, cudaStream_t s,
                                    const w4a16_small_config& cfg) {
    if (m <= small_m_max_here()) matmul_nvfp4_w4a16_sm80_small_launch(x, m, w, out, ws, sm_count, s, cfg);
    else matmul_nvfp4_w4a16_sm80_large_launch(x, m, w, out, ws, s);
}

}  // namespace cuda
}  // namespace tetra
