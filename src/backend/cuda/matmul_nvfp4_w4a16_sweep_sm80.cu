// matmul_nvfp4_w4a16_sweep_sm80: a decode (m ≤ 16) W4A16 NVFP4 kernel shaped like the bf16 GEMV
// (matmul_dense_gemv_sm80.cu) rather than like the one-wave small-M kernels: a grid of many short
// CTAs (thousands for the large shapes), each copying its whole share of the weight — T 16-row tiles
// × G 512-k groups, 4.5 KB per (tile, group) with the scales — to shared memory by cp.async before
// its PDL wait, then decoding it with the small-M kernels' arithmetic (decode_word, the bf16 block
// scale, mma.sync m16n8k16, f32 sums). The hardware block scheduler replaces a CTA as soon as it
// ends, so the resident CTAs of an SM are at different phases (copying, computing) and the weight
// streams with far more bytes in flight than a one-wave ring (docs/perf.md, session 18).
// Warps: T tiles × S warps per tile, each warp GS = G / S groups of its tile. Each group's sums go to
// shared memory and a tile's G group sums are added in group order, so the bits depend on G alone:
// T and S may follow m (more warps per tile where x is read through L1) and the rows of a batch still
// equal the m = 1 result bitwise. Where G < k_groups (bench / tests only) the CTA writes f32 partials
// and the last CTA of its tile block (integer counter) adds the group ranges in order.
// matmul_silu (SILU instances, stacked [gate; up] weight, k whole in the CTA): T = 2, CTA b holds gate
// tile b and up tile b + n_ff / 16, and writes silu(gate) · up from the two tiles' sums, each rounded
// to bf16 first: the bits of this kernel's plain matmul followed by silu_mul_gate_up.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/matmul_launch.h"
#include "backend/cuda/matmul_nvfp4_w4a16_device.cuh"

namespace tetra {
namespace cuda {

namespace {

using namespace w4a16;

constexpr int SW_MAX_WARPS = W4A16_SWEEP_MAX_WARPS;
// Launch bounds: 8 warps, at least 4 CTAs per SM, so at most 64 registers. Left free, the instances
// that read x through L1 hoist its loads and take 85-132 registers: 2 CTAs of 8 warps per SM, and
// this latency-bound loop then ran up to 25 % slower at m = 2-8 (bench_matmul --sweep under five
// bounds in one call, docs/perf.md session 23; the 4-12 B of spills at 64 cost less than the lost
// CTAs). Under (256, 4) one group per warp with x through L1 is the fastest plan, or within 3 % of
// it, at every m on the 8B and 30B shapes but one (8B qkv at m = 1: 8 % behind two tiles per CTA with
// x staged, neutral in the step): the default plan for a plain matmul.
constexpr int SW_MIN_CTAS = 4;
constexpr int UNIT_U4 = W4A16_SWEEP_UNIT_U4;  // one (tile, group): 8 chunks of codes, then its scales
constexpr int X_PAD = W4A16_SWEEP_X_PAD;      // bf16 per staged x row: staggers rows across banks

struct sweep_params {
    const uint4* codes;
    const uint4* scales;
    const __nv_bfloat16* x;  // [m, k]
    __nv_bfloat16* out;      // [m, n]
    float* partial;          // [n_gr][n_tiles · 16][m]
    int* counters;           // [n_tb], zero between launches
    int m, n, k, n_tiles, k_groups;
    int T, G, S, n_tb, n_gr;
    int n_ff;     // matmul_silu: out is [m, n_ff]; 0: plain
    float alpha;  // scale_global · 2^8
};

// One chunk: lane (g, t)'s 16 code bytes q, its two e4m3 scales (rows g, g+8), x row g (row 0 for
// rows ≥ m: a B column reaches only its own D column, never stored) at k 16t .. 16t+15 of the chunk
// (blo, bhi).
__device__ __forceinline__ void sweep_chunk(const uint4& q, uint32_t two, const uint4& blo, const uint4& bhi,
                                            float (&acc)[4]) {
    uint32_t s0, s1;
    scales_to_bf16x2(two, s0, s1);
    chunk_mma_n8(q, s0, s1, blo, bhi, acc);
}

// The same for x rows 8 .. 15 too (NB = 2: m ≤ 16): the chunk decoded once, its 4 MMAs into each
// column tile in chunk_mma_n8's order, so tile 0's sums are the NB = 1 sums bit for bit.
__device__ __forceinline__ void sweep_chunk2(const uint4& q, uint32_t two, const uint4 (&b)[4], float (&acc0)[4],
                                             float (&acc1)[4]) {
    uint32_t s0, s1;
    scales_to_bf16x2(two, s0, s1);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        uint32_t a[4];
        a_regs(q, j, s0, s1, a);
        const uint4& b0 = j < 2 ? b[0] : b[1];
        const uint4& b1 = j < 2 ? b[2] : b[3];
        mma16816<__nv_bfloat16>(acc0, a[0], a[1], a[2], a[3], (j & 1) ? b0.z : b0.x, (j & 1) ? b0.w : b0.y);
        mma16816<__nv_bfloat16>(acc1, a[0], a[1], a[2], a[3], (j & 1) ? b1.z : b1.x, (j & 1) ? b1.w : b1.y);
    }
}

// Shared memory: w4a16_sweep_x_off / w4a16_sweep_red_off / w4a16_sweep_smem (w4a16_layout.h).

// x of the CTA's groups (zeros past k) into shared memory by every thread, up to 4 loads in flight
// per thread before their stores (a load-then-store loop left the L2 round trips of m rows serial).
__device__ __forceinline__ void stage_x(const sweep_params& p, __nv_bfloat16* xs, int xrow, int kx0) {
    const int xv = p.G * (GROUP_K / 8), total = p.m * xv;
    for (int v0 = threadIdx.x; v0 < total; v0 += 4 * blockDim.x) {
        uint4 val[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int v = v0 + j * blockDim.x, r = v / xv, kg = kx0 + (v - r * xv) * 8;
            val[j] = v < total && kg < p.k ? __ldg(reinterpret_cast<const uint4*>(p.x + size_t(r) * p.k + kg))
                                           : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int v = v0 + j * blockDim.x, r = v / xv;
            if (v < total) *reinterpret_cast<uint4*>(xs + r * xrow + (v - r * xv) * 8) = val[j];
        }
    }
}

// This lane's x (blo, bhi) for chunks i and i + 1 of a unit, from xr: staged in shared memory, or
// (XD) read through L1, zeros past k (k0: the lane's k in chunk 0 of the unit).
template <bool XD>
__device__ __forceinline__ void chunk_pair_x(const uint4* xr, int i, int k0, int k, uint4 (&xq)[4]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        // k is a multiple of 16: a lane's 16 k of a chunk are all in or all out
        const bool in = !XD || k0 + (i + h) * CHUNK_K < k;
        const uint4* xc = xr + (i + h) * (CHUNK_K / 8);
        xq[2 * h] = in ? (XD ? __ldg(xc) : xc[0]) : make_uint4(0, 0, 0, 0);
        xq[2 * h + 1] = in ? (XD ? __ldg(xc + 1) : xc[1]) : make_uint4(0, 0, 0, 0);
    }
}

// Row r (0..15) and x row c of tile ti's sums: its G group sums (shared memory `red`, [warp][GS][16][cw]
// = [tile][group][16][cw], cw = 8·NB) added in group order. The order depends on G alone, so every
// plan that holds the same groups in a CTA — any T, any S × GS — gives the same bits.
__device__ __forceinline__ float tile_sum(const float* red, int G, int ti, int r, int c, int cw) {
    float sum = 0.0f;
    for (int q = 0; q < G; ++q) sum += red[((ti * G + q) * 16 + r) * cw + c];
    return sum;
}

// The CTA's sums out (red: its group sums, [tile][group][16][cw]): silu(gate) · up (SILU), the rows
// (all of k in the CTA), or f32 partials of its group range, the last CTA of the tile block adding
// the ranges in order (integer counter, left zero).
template <bool SILU>
__device__ __forceinline__ void sweep_write(const sweep_params& p, const float* red, int cw, int tb, int gr) {
    __shared__ int s_last;
    const int rows = p.T * 16, n_pad = p.n_tiles * 16;
    const int row0 = tb * rows;
    if (SILU) {  // n_gr == 1: the gate tile's group sums (ti 0), then the up tile's (ti 1), in group order
        for (int v = threadIdx.x; v < 16 * p.m; v += blockDim.x) {
            const int r = v / p.m, c = v % p.m, n = tb * 16 + r;
            const float sg = tile_sum(red, p.G, 0, r, c, cw), su = tile_sum(red, p.G, 1, r, c, cw);
            if (n < p.n_ff)
                p.out[size_t(c) * p.n_ff + n] =
                    silu_times(__float2bfloat16_rn(sg * p.alpha), __float2bfloat16_rn(su * p.alpha));
        }
        return;
    }
    if (p.n_gr == 1) {
        for (int v = threadIdx.x; v < rows * p.m; v += blockDim.x) {
            const int r = v / p.m, c = v % p.m, n = row0 + r;
            const float sum = tile_sum(red, p.G, r / 16, r % 16, c, cw);
            if (n < p.n) p.out[size_t(c) * p.n + n] = __float2bfloat16_rn(sum * p.alpha);
        }
        return;
    }
    for (int v = threadIdx.x; v < rows * p.m; v += blockDim.x) {
        const int r = v / p.m, c = v % p.m, n = row0 + r;
        const float sum = tile_sum(red, p.G, r / 16, r % 16, c, cw);
        if (n < n_pad) p.partial[(size_t(gr) * n_pad + n) * p.m + c] = sum;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(&p.counters[tb], 1) == p.n_gr - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    for (int v = threadIdx.x; v < rows * p.m; v += blockDim.x) {  // the last CTA: group ranges in order
        const int r = v / p.m, c = v % p.m, n = row0 + r;
        if (n >= p.n) continue;
        const float* src = p.partial + size_t(n) * p.m + c;
        const size_t stride = size_t(n_pad) * p.m;
        float sum = 0.0f;
        for (int q0 = 0; q0 < p.n_gr; q0 += 8) {
            float vals[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) vals[u] = q0 + u < p.n_gr ? __ldcg(src + (q0 + u) * stride) : 0.0f;
#pragma unroll
            for (int u = 0; u < 8; ++u)
                if (q0 + u < p.n_gr) sum += vals[u];
        }
        p.out[size_t(c) * p.n + n] = __float2bfloat16_rn(sum * p.alpha);
    }
    if (threadIdx.x == 0) p.counters[tb] = 0;  // ready for the next launch / graph replay
}

// MATH = false: the same copies and waits without the decode and MMAs (the access pattern's own
// ceiling, for the bench). XD: x read by each lane from global memory (L1) in the chunk loop
// instead of staged in shared memory. TW = 2 (plain, m > 8, XD): each warp takes tiles 2·ti and
// 2·ti + 1 of its groups and applies each x load to both (half the x traffic through L1 per weight
// byte); each tile's sums are the TW = 1 sums (the same chunk order and accumulators), so the bits do
// not change. Launch bounds: 4 CTAs per SM (64 registers) for TW = 1, 2 for TW = 2 (two tiles' sums).
template <int GS, bool MATH, bool XD, bool SILU, int NB, int TW = 1>
__global__ void __launch_bounds__(SW_MAX_WARPS * 32, TW == 1 ? SW_MIN_CTAS : 2) sweep_kernel(sweep_params p) {
    static_assert(NB == 1 || (MATH && XD), "x rows 8 .. 15 are read through L1");
    static_assert(TW == 1 || (NB == 2 && !SILU), "two tiles per warp: plain matmuls of m > 8 only");
    constexpr int CW = 8 * NB;  // columns of a warp's sums
    extern __shared__ uint4 smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int U = p.T * p.S;  // unit rows of the shared layout: [T · S][GS] = [T][G] units
    const int gr = blockIdx.x / p.n_tb, tb = blockIdx.x % p.n_tb;  // group range major: address order for G = 1
    const int ti = warp / p.S, s = warp % p.S;  // the warp's tiles: TW·ti .. TW·ti + TW − 1 of the CTA
    int tile[TW];
#pragma unroll
    for (int j = 0; j < TW; ++j) tile[j] = SILU ? tb + ti * (p.n_ff / 16) : tb * p.T + ti * TW + j;
    const int gw0 = gr * p.G + s * GS;  // the warp's first group
    bool active[TW];
#pragma unroll
    for (int j = 0; j < TW; ++j) active[j] = SILU ? tb < p.n_ff / 16 : tile[j] < p.n_tiles;
    uint4* wu = smem + size_t(warp) * TW * GS * UNIT_U4;  // [TW][GS] units

    // The weight share: independent of the previous kernel, so before pdl_wait(). One commit group
    // per unit u (both tiles' unit u for TW = 2), awaited unit by unit below.
#pragma unroll
    for (int u = 0; u < GS; ++u) {
        const int grp = gw0 + u;
#pragma unroll
        for (int j = 0; j < TW; ++j) {
            const bool ok = active[j] && grp < p.k_groups;
            const uint4* src =
                ok ? p.codes + chunk_index(tile[j], int64_t(grp) * GROUP_CHUNKS, p.n_tiles) * 32 + lane : p.codes;
            uint4* dst = wu + (j * GS + u) * UNIT_U4;
#pragma unroll
            for (int c = 0; c < GROUP_CHUNKS; ++c)
                cp_async16_w(smem_u32(dst + c * 32 + lane), src + c * 32, ok ? 16 : 0);
            const uint4* ssrc = ok ? p.scales + (size_t(tile[j]) * p.k_groups + grp) * 32 + lane : p.scales;
            cp_async16_w(smem_u32(dst + GROUP_CHUNKS * 32 + lane), ssrc, ok ? 16 : 0);
        }
        cp_async_commit();
    }
    pdl_wait();
    pdl_trigger();

    const int xrow = p.G * GROUP_K + X_PAD, row = g < p.m ? g : 0, row2 = g + 8 < p.m ? g + 8 : 0;
    __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem + w4a16_sweep_x_off(U, GS));
    if (!XD) {
        stage_x(p, xs, xrow, gr * p.G * GROUP_K);
        __syncthreads();
    }

    // Each unit's (group's) sums → shared memory, [tile][group][16][CW]: a tile's groups in order.
    float* red = reinterpret_cast<float*>(smem + w4a16_sweep_red_off(U, GS, XD ? 0 : p.m, p.G));
#pragma unroll
    for (int u = 0; u < GS; ++u) {
        float acc[TW][2][4] = {};
        float acc2[TW][2][4] = {};  // NB = 2: x rows 8 .. 15
        uint32_t sink = 0;
        if (u == 0) cp_async_wait<GS - 1>();
        else if (u == 1) cp_async_wait<(GS > 1 ? GS - 2 : 0)>();
        else if (u == 2) cp_async_wait<(GS > 2 ? GS - 3 : 0)>();
        else cp_async_wait<0>();
        __syncwarp();
        const uint4* q[TW];
#pragma unroll
        for (int j = 0; j < TW; ++j) q[j] = wu + (j * GS + u) * UNIT_U4 + lane;
        uint4 sc[TW];
#pragma unroll
        for (int j = 0; j < TW; ++j) sc[j] = q[j][GROUP_CHUNKS * 32];
        const int k0 = (gw0 + u) * GROUP_K + 16 * t;  // the lane's k in chunk 0 of the unit
        const uint4* xr = XD ? reinterpret_cast<const uint4*>(p.x + size_t(row) * p.k + (k0 < p.k ? k0 : 0))
                             : reinterpret_cast<const uint4*>(xs + row * xrow + (s * GS + u) * GROUP_K + 16 * t);
        const uint4* xr2 = reinterpret_cast<const uint4*>(p.x + size_t(row2) * p.k + (k0 < p.k ? k0 : 0));
#pragma unroll
        for (int i = 0; i < GROUP_CHUNKS; i += 2) {
            const uint32_t two = word_of(sc[0], i >> 1);
            if (MATH) {
                uint4 xq[4];
                chunk_pair_x<XD>(xr, i, k0, p.k, xq);
                if constexpr (NB == 1) {
                    sweep_chunk(q[0][32 * i], two, xq[0], xq[1], acc[0][0]);
                    sweep_chunk(q[0][32 * (i + 1)], two >> 16, xq[2], xq[3], acc[0][1]);
                } else {
                    uint4 xq2[4];
                    chunk_pair_x<true>(xr2, i, k0, p.k, xq2);
                    const uint4 b0[4] = {xq[0], xq[1], xq2[0], xq2[1]}, b1[4] = {xq[2], xq[3], xq2[2], xq2[3]};
#pragma unroll
                    for (int j = 0; j < TW; ++j) {
                        const uint32_t tj = word_of(sc[j], i >> 1);
                        sweep_chunk2(q[j][32 * i], tj, b0, acc[j][0], acc2[j][0]);
                        sweep_chunk2(q[j][32 * (i + 1)], tj >> 16, b1, acc[j][1], acc2[j][1]);
                    }
                }
            } else {
                const uint4 a = q[0][32 * i], b = q[0][32 * (i + 1)];
                sink ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ two;
            }
        }
        if (!MATH) acc[0][0][0] = sink == 0x9E3779B9u ? 1.0f : 0.0f;
#pragma unroll
        for (int j = 0; j < TW; ++j) {
            // [tile][group]: tile ti·TW + j, group s·GS + u (G = S · GS, warp = ti·S + s)
            float* ru = red + ((warp + (ti * (TW - 1) + j) * p.S) * GS + u) * 16 * CW;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                ru[(g + 8 * (e >> 1)) * CW + 2 * t + (e & 1)] = acc[j][0][e] + acc[j][1][e];
                if (NB == 2) ru[(g + 8 * (e >> 1)) * CW + 8 + 2 * t + (e & 1)] = acc2[j][0][e] + acc2[j][1][e];
            }
        }
    }
    __syncthreads();
    sweep_write<SILU>(p, red, CW, tb, gr);
}

template <int GS, bool MATH, bool XD, bool SILU = false, int NB = 1, int TW = 1>
void launch_gs(const sweep_params& p, size_t smem, cudaStream_t s, bool pdl) {
    auto kern = sweep_kernel<GS, MATH, XD, SILU, NB, TW>;
    static bool attr_set = false;
    if (!attr_set) {
        const int64_t cap = dynamic_smem_cap(reinterpret_cast<const void*>(kern), W4A16_SWEEP_STATIC_SMEM_MAX,
                                             "matmul_nvfp4_w4a16_sweep");
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(cap)));
        attr_set = true;
    }
    launch_on(kern, dim3(unsigned(p.n_tb * p.n_gr)), dim3(unsigned(32 * (p.T / TW) * p.S)), smem, s, pdl, p);
}

template <int GS>
void launch_modes(const sweep_params& p, size_t smem, cudaStream_t s, bool pdl, bool math, bool xd, int tw) {
    if (p.m > 8 && p.n_ff > 0) launch_gs<GS, true, true, true, 2>(p, smem, s, pdl);  // why_not: math, x direct
    else if (p.m > 8 && tw == 2) launch_gs<GS, true, true, false, 2, 2>(p, smem, s, pdl);
    else if (p.m > 8) launch_gs<GS, true, true, false, 2>(p, smem, s, pdl);
    else if (p.n_ff > 0 && xd) launch_gs<GS, true, true, true>(p, smem, s, pdl);
    else if (p.n_ff > 0) launch_gs<GS, true, false, true>(p, smem, s, pdl);
    else if (!math && xd) launch_gs<GS, false, true>(p, smem, s, pdl);  // the plan's smem has no x with xd
    else if (!math) launch_gs<GS, false, false>(p, smem, s, pdl);
    else if (xd) launch_gs<GS, true, true>(p, smem, s, pdl);
    else launch_gs<GS, true, false>(p, smem, s, pdl);
}

}  // namespace

void matmul_nvfp4_w4a16_sweep_launch(const void* x, int64_t m, const w4a16_sm80_weight& w, void* out,
                                     const w4a16_sm80_workspace& ws, cudaStream_t s, const w4a16_sweep_config& cfg) {
    const w4a16_sm80_dims d = w4a16_sm80_dims_of(w.n, w.k);
    const w4a16_sweep_plan pl = w4a16_sweep_plan_of(w.n, w.k, m, cfg);
    const std::string why = w4a16_sweep_why_not(pl, m, w4a16_sweep_smem_limit_here());
    TETRA_CHECK(why.empty(), "matmul_nvfp4_w4a16_sweep: weight [%lld, %lld]: %s", (long long)w.n, (long long)w.k,
                why.c_str());
    TETRA_CHECK(cfg.silu_n_ff == 0 || (cfg.silu_n_ff % 16 == 0 && w.n == 2 * cfg.silu_n_ff && cfg.no_math == 0),
                "matmul_nvfp4_w4a16_sweep: matmul_silu takes a stacked [2·n_ff, k] weight with n_ff %% 16 == 0; got "
                "n = %lld, n_ff = %lld", (long long)w.n, (long long)cfg.silu_n_ff);
    TETRA_CHECK(pl.n_gr == 1 || (ws.partial_bytes >= pl.partial_bytes && ws.counter_count >= pl.counter_count),
                "matmul_nvfp4_w4a16_sweep: workspace of %zu partial bytes / %zu counters, the plan needs %zu / %zu",
                ws.partial_bytes, ws.counter_count, pl.partial_bytes, pl.counter_count);
    sweep_params p;
    p.codes = static_cast<const uint4*>(w.codes), p.scales = static_cast<const uint4*>(w.scales);
    p.x = static_cast<const __nv_bfloat16*>(x), p.out = static_cast<__nv_bfloat16*>(out);
    p.partial = static_cast<float*>(ws.partial), p.counters = ws.counters;
    p.m = int(m), p.n = int(w.n), p.k = int(w.k), p.n_tiles = int(d.n_tiles), p.k_groups = int(d.k_groups);
    p.T = pl.T, p.G = pl.G, p.S = pl.S, p.n_tb = pl.n_tb, p.n_gr = pl.n_gr;
    p.n_ff = int(pl.silu_n_ff);
    p.alpha = w.scale_global * 256.0f;
    TETRA_CHECK(m <= 8 || cfg.no_math == 0, "matmul_nvfp4_w4a16_sweep: the no-math pattern takes m <= 8 (m = %lld)",
                (long long)m);
    const bool pdl = cfg.pdl != 0, math = cfg.no_math == 0;
    switch (pl.G / pl.S) {
        case 1: launch_modes<1>(p, pl.smem, s, pdl, math, pl.x_direct, pl.tw); break;
        case 2: launch_modes<2>(p, pl.smem, s, pdl, math, pl.x_direct, pl.tw); break;
        default: launch_modes<4>(p, pl.smem, s, pdl, math, pl.x_direct, pl.tw); break;
    }
}

}  // namespace cuda
}  // namespace tetra
