// matmul_nvfp4_w4a16_sweep_sm80: a decode (m ≤ 8) W4A16 NVFP4 kernel shaped like the bf16 GEMV
// (matmul_dense_gemv_sm80.cu) rather than like the one-wave small-M kernels: a grid of many short
// CTAs (thousands for the large shapes), each copying its whole share of the weight — T 16-row tiles
// × G 512-k groups, 4.5 KB per (tile, group) with the scales — to shared memory by cp.async before
// its PDL wait, then decoding it with the small-M kernels' arithmetic (decode_word, the bf16 block
// scale, mma.sync m16n8k16, f32 sums). The hardware block scheduler replaces a CTA as soon as it
// ends, so the resident CTAs of an SM are at different phases (copying, computing) and the weight
// streams with far more bytes in flight than a one-wave ring (docs/perf.md, session 18).
// Warps: T tiles × S warps per tile, each warp GS = G / S groups of its tile. A tile's S warp sums
// are added in warp order in shared memory; where G < k_groups the CTA writes f32 partials and the
// last CTA of its tile block (integer counter) adds the group ranges in order — deterministic, and
// the plan depends on the weight shape alone, so the rows of a batch equal the m = 1 result bitwise.
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

constexpr int SW_MAX_WARPS = 8;
constexpr int UNIT_U4 = GROUP_CHUNKS * 32 + 32;  // one (tile, group): 8 chunks of codes, then its scales
constexpr int X_PAD = 8;                         // bf16 per staged x row: staggers rows across banks

struct sweep_params {
    const uint4* codes;
    const uint4* scales;
    const __nv_bfloat16* x;  // [m, k]
    __nv_bfloat16* out;      // [m, n]
    float* partial;          // [n_gr][n_tiles · 16][m]
    int* counters;           // [n_tb], zero between launches
    int m, n, k, n_tiles, k_groups;
    int T, G, S, n_tb, n_gr;
    float alpha;  // scale_global · 2^8
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool ok) {
    const uint32_t sa = uint32_t(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sa), "l"(gmem), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// One chunk: lane (g, t)'s 16 code bytes q, its two e4m3 scales (rows g, g+8), x row g (row 0 for
// rows ≥ m: a B column reaches only its own D column, never stored) at k 16t of the chunk.
__device__ __forceinline__ void sweep_chunk(const uint4& q, uint32_t two, const uint4* xr, float (&acc)[4]) {
    uint32_t s0, s1;
    scales_to_bf16x2(two, s0, s1);
    const uint4 blo = xr[0], bhi = xr[1];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        uint32_t a[4];
        a_regs(q, j, s0, s1, a);
        const uint4& b = j < 2 ? blo : bhi;
        mma16816<__nv_bfloat16>(acc, a[0], a[1], a[2], a[3], (j & 1) ? b.z : b.x, (j & 1) ? b.w : b.y);
    }
}

// Shared memory (uint4 units): [warps][GS units][UNIT_U4] weights, then x [m][G·512 + X_PAD] bf16,
// then [warps][16 rows][8 m] f32 warp sums.
__host__ __device__ constexpr size_t sweep_x_off(int warps, int gs) { return size_t(warps) * gs * UNIT_U4; }
__host__ __device__ constexpr size_t sweep_red_off(int warps, int gs, int m, int G) {
    return sweep_x_off(warps, gs) + (size_t(m) * (G * GROUP_K + X_PAD) * 2 + 15) / 16;
}
__host__ __device__ constexpr size_t sweep_smem(int warps, int gs, int m, int G) {
    return (sweep_red_off(warps, gs, m, G) + size_t(warps) * 16 * 8 / 4) * 16;
}

// MATH = false: the same copies and waits without the decode and MMAs (the access pattern's own
// ceiling, for the bench).
template <int GS, bool MATH>
__global__ void __launch_bounds__(SW_MAX_WARPS * 32) sweep_kernel(sweep_params p) {
    extern __shared__ uint4 smem[];
    __shared__ int s_last;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int W = p.T * p.S;
    const int gr = blockIdx.x / p.n_tb, tb = blockIdx.x % p.n_tb;  // group range major: address order for G = 1
    const int ti = warp / p.S, s = warp % p.S, tile = tb * p.T + ti;
    const int gw0 = gr * p.G + s * GS;  // the warp's first group
    const bool active = tile < p.n_tiles;
    uint4* wu = smem + size_t(warp) * GS * UNIT_U4;

    // The weight share: independent of the previous kernel, so before pdl_wait(). One commit group
    // per unit, awaited unit by unit below.
#pragma unroll
    for (int u = 0; u < GS; ++u) {
        const int grp = gw0 + u;
        const bool ok = active && grp < p.k_groups;
        const uint4* src = ok ? p.codes + chunk_index(tile, int64_t(grp) * GROUP_CHUNKS, p.n_tiles) * 32 + lane : p.codes;
#pragma unroll
        for (int c = 0; c < GROUP_CHUNKS; ++c) cp_async16(wu + u * UNIT_U4 + c * 32 + lane, src + c * 32, ok);
        const uint4* ssrc = ok ? p.scales + (size_t(tile) * p.k_groups + grp) * 32 + lane : p.scales;
        cp_async16(wu + u * UNIT_U4 + GROUP_CHUNKS * 32 + lane, ssrc, ok);
        cp_async_commit();
    }
    pdl_wait();
    pdl_trigger();

    // x of the CTA's groups (zeros past k), by every thread; then one barrier.
    const int xrow = p.G * GROUP_K + X_PAD, kx0 = gr * p.G * GROUP_K;
    __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem + sweep_x_off(W, GS));
    for (int v = threadIdx.x; v < p.m * p.G * (GROUP_K / 8); v += blockDim.x) {
        const int r = v / (p.G * (GROUP_K / 8)), kk = (v % (p.G * (GROUP_K / 8))) * 8, kg = kx0 + kk;
        const uint4 val = kg < p.k ? __ldg(reinterpret_cast<const uint4*>(p.x + size_t(r) * p.k + kg)) : make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(xs + r * xrow + kk) = val;
    }
    __syncthreads();

    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    const __nv_bfloat16* xw = xs + (g < p.m ? g : 0) * xrow + s * GS * GROUP_K + 16 * t;
    uint32_t sink = 0;
#pragma unroll
    for (int u = 0; u < GS; ++u) {
        if (u == 0) cp_async_wait<GS - 1>();
        else if (u == 1) cp_async_wait<(GS > 1 ? GS - 2 : 0)>();
        else if (u == 2) cp_async_wait<(GS > 2 ? GS - 3 : 0)>();
        else cp_async_wait<0>();
        __syncwarp();
        const uint4* q = wu + u * UNIT_U4 + lane;
        const uint4 sc = q[GROUP_CHUNKS * 32];
        const uint4* xr = reinterpret_cast<const uint4*>(xw + u * GROUP_K);
#pragma unroll
        for (int i = 0; i < GROUP_CHUNKS; i += 2) {
            const uint32_t two = word_of(sc, i >> 1);
            if (MATH) {
                sweep_chunk(q[32 * i], two, xr + i * (CHUNK_K / 8), acc[0]);
                sweep_chunk(q[32 * (i + 1)], two >> 16, xr + (i + 1) * (CHUNK_K / 8), acc[1]);
            } else {
                const uint4 a = q[32 * i], b = q[32 * (i + 1)];
                sink ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ two;
            }
        }
    }
    if (!MATH) acc[0][0] = sink == 0x9E3779B9u ? 1.0f : 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[0][e] += acc[1][e];

    // Warp sums → shared memory; a tile's S warps added in warp order.
    float* red = reinterpret_cast<float*>(smem + sweep_red_off(W, GS, p.m, p.G));
#pragma unroll
    for (int e = 0; e < 4; ++e) red[(warp * 16 + g + 8 * (e >> 1)) * 8 + 2 * t + (e & 1)] = acc[0][e];
    __syncthreads();
    const int rows = p.T * 16, n_pad = p.n_tiles * 16;
    const int row0 = tb * rows;
    if (p.n_gr == 1) {
        for (int v = threadIdx.x; v < rows * p.m; v += blockDim.x) {
            const int r = v / p.m, c = v % p.m, ti2 = r / 16, n = row0 + r;
            float sum = 0.0f;
            for (int s2 = 0; s2 < p.S; ++s2) sum += red[((ti2 * p.S + s2) * 16 + r % 16) * 8 + c];
            if (n < p.n) p.out[size_t(c) * p.n + n] = __float2bfloat16_rn(sum * p.alpha);
        }
        return;
    }
    for (int v = threadIdx.x; v < rows * p.m; v += blockDim.x) {
        const int r = v / p.m, c = v % p.m, ti2 = r / 16, n = row0 + r;
        float sum = 0.0f;
        for (int s2 = 0; s2 < p.S; ++s2) sum += red[((ti2 * p.S + s2) * 16 + r % 16) * 8 + c];
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

template <int GS, bool MATH>
void launch_gs(const sweep_params& p, size_t smem, cudaStream_t s, bool pdl) {
    auto kern = sweep_kernel<GS, MATH>;
    static bool attr_set = false;
    if (!attr_set) {
        int dev = 0, optin = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        cudaFuncAttributes fa{};
        CUDA_CHECK(cudaFuncGetAttributes(&fa, kern));
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        optin - int(fa.sharedSizeBytes)));
        attr_set = true;
    }
    launch_on(kern, dim3(unsigned(p.n_tb * p.n_gr)), dim3(unsigned(32 * p.T * p.S)), smem, s, pdl, p);
}

}  // namespace

w4a16_sweep_plan w4a16_sweep_plan_of(int64_t n, int64_t k, int64_t m_max, const w4a16_sweep_config& cfg) {
    const w4a16_sm80_dims d = w4a16_sm80_dims_of(n, k);
    w4a16_sweep_plan pl;
    if (cfg.T > 0) {
        pl.T = cfg.T, pl.G = int(std::min<int64_t>(cfg.G, d.k_groups)), pl.S = std::min(cfg.S, pl.G);
    } else {
        // The default (docs/perf.md, session 18): every group of k in one CTA (no cross-CTA sum: the
        // split plans measured slower on every shape), 8 warps. Two groups per warp and two tiles
        // per CTA where the grid is small (o_proj, qkv: 5.9 / 8.2 µs against 6.4 / 8.5 with one
        // group per warp), one group per warp on one tile for the large ones (gate+up).
        pl.G = int(d.k_groups);
        const int gs = (pl.G % 2 == 0 && pl.G >= 4 && d.n_tiles < 1024) ? 2 : 1;
        pl.S = std::min(SW_MAX_WARPS, pl.G / gs);
        if (pl.S * gs != pl.G) pl.S = pl.G;  // odd or > 8 groups: one group per warp (may exceed 8: why_not)
        pl.T = std::max(1, SW_MAX_WARPS / pl.S);
    }
    pl.n_tb = int((d.n_tiles + pl.T - 1) / pl.T);
    pl.n_gr = int((d.k_groups + pl.G - 1) / pl.G);
    const int gs = pl.S > 0 ? std::max(1, pl.G / pl.S) : 1;
    pl.smem = sweep_smem(pl.T * pl.S, gs, int(std::max<int64_t>(m_max, 1)), pl.G);
    pl.partial_bytes = pl.n_gr > 1 ? size_t(pl.n_gr) * size_t(d.n_tiles) * 16 * size_t(m_max) * 4 : 0;
    pl.counter_count = pl.n_gr > 1 ? size_t(pl.n_tb) : 0;
    return pl;
}

std::string w4a16_sweep_why_not(const w4a16_sweep_plan& pl, int64_t m) {
    if (m < 1 || m > W4A16_SWEEP_M_MAX)
        return strfmt("m = %lld: the sweep kernel takes 1..%lld rows", (long long)m, (long long)W4A16_SWEEP_M_MAX);
    if (pl.T < 1 || pl.S < 1 || pl.T * pl.S > SW_MAX_WARPS)
        return strfmt("plan T = %d tiles x S = %d warps per tile: at most %d warps per CTA", pl.T, pl.S, SW_MAX_WARPS);
    if (pl.G % pl.S != 0) return strfmt("plan G = %d groups is not a multiple of S = %d warps per tile", pl.G, pl.S);
    const int gs = pl.G / pl.S;
    if (gs != 1 && gs != 2 && gs != 4) return strfmt("plan G / S = %d groups per warp: 1, 2 or 4 only", gs);
    return "";
}

void matmul_nvfp4_w4a16_sweep_launch(const void* x, int64_t m, const w4a16_sm80_weight& w, void* out,
                                     const w4a16_sm80_workspace& ws, cudaStream_t s, const w4a16_sweep_config& cfg) {
    const w4a16_sm80_dims d = w4a16_sm80_dims_of(w.n, w.k);
    const w4a16_sweep_plan pl = w4a16_sweep_plan_of(w.n, w.k, m, cfg);
    const std::string why = w4a16_sweep_why_not(pl, m);
    TETRA_CHECK(why.empty(), "matmul_nvfp4_w4a16_sweep: weight [%lld, %lld]: %s", (long long)w.n, (long long)w.k,
                why.c_str());
    TETRA_CHECK(pl.n_gr == 1 || (ws.partial_bytes >= pl.partial_bytes && ws.counter_count >= pl.counter_count),
                "matmul_nvfp4_w4a16_sweep: workspace of %zu partial bytes / %zu counters, the plan needs %zu / %zu",
                ws.partial_bytes, ws.counter_count, pl.partial_bytes, pl.counter_count);
    sweep_params p;
    p.codes = static_cast<const uint4*>(w.codes), p.scales = static_cast<const uint4*>(w.scales);
    p.x = static_cast<const __nv_bfloat16*>(x), p.out = static_cast<__nv_bfloat16*>(out);
    p.partial = static_cast<float*>(ws.partial), p.counters = ws.counters;
    p.m = int(m), p.n = int(w.n), p.k = int(w.k), p.n_tiles = int(d.n_tiles), p.k_groups = int(d.k_groups);
    p.T = pl.T, p.G = pl.G, p.S = pl.S, p.n_tb = pl.n_tb, p.n_gr = pl.n_gr;
    p.alpha = w.scale_global * 256.0f;
    const bool pdl = cfg.pdl != 0, math = cfg.no_math == 0;
    switch (pl.G / pl.S) {
        case 1: math ? launch_gs<1, true>(p, pl.smem, s, pdl) : launch_gs<1, false>(p, pl.smem, s, pdl); break;
        case 2: math ? launch_gs<2, true>(p, pl.smem, s, pdl) : launch_gs<2, false>(p, pl.smem, s, pdl); break;
        default: math ? launch_gs<4, true>(p, pl.smem, s, pdl) : launch_gs<4, false>(p, pl.smem, s, pdl); break;
    }
}

}  // namespace cuda
}  // namespace tetra
