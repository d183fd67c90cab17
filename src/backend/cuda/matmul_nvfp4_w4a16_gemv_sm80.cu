// matmul_nvfp4_w4a16_gemv_sm80: the decode (m ≤ 8) W4A16 NVFP4 kernel on the w4a16_sm80_pack
// layout (one prepared weight serves it and the sm80 kernel). Stream-K: the (16-row tile, 64-k
// chunk) items, tile-major (a tile's chunks are contiguous bytes within each 512-k group of the
// group-major packed layout, chunk_index) — are cut into equal runs of
// `per` chunks, one run per warp of a single full wave, so every SM streams the same bytes. x
// ([m, k], ≤ W4A16_GEMV_X_SMEM_MAX bytes) is staged once per CTA in shared memory (per-warp x
// fetches from L2 measured 1.8–2.9× slower: every SM hammers the same few lines). A warp keeps S
// chunks (codes + scales) in flight through a shared-memory ring filled by cp.async, decodes with
// decode_word, multiplies by the block scale in bf16 (exact) and runs mma.sync m16n8k16 with f32
// accumulation. A tile covered by one warp is written directly; otherwise each warp writes its
// segment's f32 partial and the last one to arrive (integer counter) sums the segments in warp
// order — deterministic, and independent of m (rows of a batch equal the m = 1 result bitwise).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/matmul_launch.h"
#include "backend/cuda/matmul_nvfp4_w4a16_device.cuh"

namespace tetra {
namespace cuda {

namespace {

using namespace w4a16;

constexpr int GV_WARPS = 8, GV_THREADS = GV_WARPS * 32;
constexpr int SLOT_FLOATS = 16 * 8;  // one partial: 16 rows × 8 m
constexpr int X_PAD = 8;              // bf16 per staged x row: rows g and g+1 land in different banks

struct gemv_params {
    const uint4* codes;
    const uint8_t* scales;
    const __nv_bfloat16* x;  // [m, k]
    __nv_bfloat16* out;      // [m, n]
    float* partial;          // [warps][2][16][8]
    int* counters;           // [n_tiles], zero between launches
    int m, n, k, n_tiles, k_chunks, k_groups, per, total;
    float alpha;             // scale_global · 2^8
};

// Per-warp ring slot (uint4 units): codes [32 lanes], then scale words [32 lanes] (4 B each: the
// word holding the chunk's pair of e4m3 scales).
constexpr int SLOT_SC = 32, SLOT = SLOT_SC + 8;

__device__ __forceinline__ void cp_async16_stream(uint32_t dst, const void* src, bool ok) {  // weights: 256-B L2 prefetch
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(ok ? 4 : 0) : "memory");
}

// Issues (and commits, as one group) the copies of item (tile, ch) into ring slot `slot`;
// an empty group when !ok. Sources of skipped copies are clamped to valid addresses (not read).
__device__ __forceinline__ void issue_item(const gemv_params& p, const uint4* slot, bool ok, int tile, int ch,
                                           int lane) {
    const uint32_t base = smem_u32(slot);
    cp_async16_stream(base + 16 * lane, ok ? p.codes + chunk_index(tile, ch, p.n_tiles) * 32 + lane : p.codes, ok);
    const uint8_t* sp = p.scales + ((size_t(tile) * p.k_groups + (ch >> 3)) * 32 + lane) * 16 + 4 * ((ch & 7) >> 1);
    cp_async4(base + 16 * SLOT_SC + 4 * lane, ok ? sp : p.scales, ok);
    cp_async_commit();
}

// One chunk: x of lane (g, t) = row g, k 16t .. 16t+15 of the chunk from the staged rows (zeros
// past m or k: the pad and the bytes past k are never read).
__device__ __forceinline__ void compute_slot(const gemv_params& p, const uint4* slot, const __nv_bfloat16* xs, int ch,
                                             int lane, float (&acc)[4]) {
    const int g = lane >> 2, t = lane & 3, kk = ch * CHUNK_K + 16 * t;
    const uint4 q = slot[lane];
    const uint32_t sw = reinterpret_cast<const uint32_t*>(slot + SLOT_SC)[lane];
    uint4 xl = make_uint4(0, 0, 0, 0), xh = xl;
    if (g < p.m && kk < p.k) {
        const uint4* xp = reinterpret_cast<const uint4*>(xs + g * (p.k + X_PAD) + kk);
        xl = xp[0], xh = xp[1];
    }
    uint32_t s0, s1;
    scales_to_bf16x2((ch & 1) ? sw >> 16 : sw, s0, s1);
    chunk_mma_n8(q, s0, s1, xl, xh, acc);
}

// Partial slot of warp w's segment of tile T (a run has at most two split segments, its first
// and its last tile): 2w + (T is not the tile the run starts in).
__device__ __forceinline__ int slot_of(const gemv_params& p, int w, int tile) {
    return 2 * w + ((w * p.per) / p.k_chunks != tile ? 1 : 0);
}

// The warps whose runs cover tile T: first..last.
__device__ __forceinline__ int tile_first_warp(const gemv_params& p, int tile) { return (tile * p.k_chunks) / p.per; }
__device__ __forceinline__ int tile_last_warp(const gemv_params& p, int tile) {
    return ((tile + 1) * p.k_chunks - 1) / p.per;
}

// Last contributor of a tile: sums the segments of warps first..last in warp order (fixed) into
// out, 16 rows × m outputs spread over the lanes; leaves the tile's counter zero.
__device__ __forceinline__ void reduce_tile(const gemv_params& p, int tile) {
    const int lane = threadIdx.x & 31, first = tile_first_warp(p, tile), last = tile_last_warp(p, tile);
    __threadfence();
    for (int e = lane; e < SLOT_FLOATS; e += 32) {
        const int r = e >> 3, m = e & 7, n = tile * 16 + r;
        if (m >= p.m || n >= p.n) continue;
        float sum = 0.0f;
        int w = first;
        for (; w + 4 <= last + 1; w += 4) {
            float v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) v[u] = __ldcg(p.partial + size_t(slot_of(p, w + u, tile)) * SLOT_FLOATS + e);
#pragma unroll
            for (int u = 0; u < 4; ++u) sum += v[u];
        }
        for (; w <= last; ++w) sum += __ldcg(p.partial + size_t(slot_of(p, w, tile)) * SLOT_FLOATS + e);
        p.out[size_t(m) * p.n + n] = __float2bfloat16_rn(sum * p.alpha);
    }
    if (lane == 0) p.counters[tile] = 0;  // ready for the next launch / graph replay
}

// End of a segment: a whole tile goes straight to out; otherwise the f32 partial goes to the
// warp's slot, and the last of the tile's warps notes the tile in `pending` (a run has at most two
// split segments) to reduce it after its main loop (no call with live pipeline registers).
__device__ __forceinline__ void flush(const gemv_params& p, int warp, int tile, bool whole, const float (&acc)[4],
                                      int (&pending)[2]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (whole) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int n = tile * 16 + g + 8 * (e >> 1), m = 2 * t + (e & 1);
            if (n < p.n && m < p.m) p.out[size_t(m) * p.n + n] = __float2bfloat16_rn(acc[e] * p.alpha);
        }
        return;
    }
    float* slot = p.partial + size_t(slot_of(p, warp, tile)) * SLOT_FLOATS;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const int r = g + 8 * (e >> 1), m = 2 * t + (e & 1);
        if (m < p.m) __stcg(slot + r * 8 + m, acc[e]);
    }
    __threadfence();
    __syncwarp();
    const int first = tile_first_warp(p, tile), last = tile_last_warp(p, tile);
    int old = 0;
    if (lane == 0) old = atomicAdd(&p.counters[tile], 1);
    old = __shfl_sync(0xFFFFFFFFu, old, 0);
    if (old == last - first) (pending[0] < 0 ? pending[0] : pending[1]) = tile;
}

// One warp = one run of `per` consecutive (tile, chunk) items through its ring of S slots: the
// copies of item i+S are issued as soon as item i has been read out of its slot. Dynamic shared
// memory: the rings, then x as m rows of k + X_PAD bf16.
template <int S, int CPS>
__global__ void __launch_bounds__(GV_THREADS, CPS) w4a16_gemv_kernel(gemv_params p) {
    extern __shared__ uint4 gv_smem[];
    const int lane = threadIdx.x & 31;
    const int warp = blockIdx.x * GV_WARPS + (threadIdx.x >> 5);
    const int r0 = warp * p.per, r1 = min(r0 + p.per, p.total);
    const uint4* ring = gv_smem + (threadIdx.x >> 5) * S * SLOT;
    __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(gv_smem + GV_WARPS * S * SLOT);
    int tile_c = r0 / p.k_chunks, ch_c = r0 - tile_c * p.k_chunks;  // item being computed
    int tile_l = tile_c, ch_l = ch_c;                                // item being loaded
    // Weights first (S groups), then x (one group for the whole CTA); all waited for before the loop.
#pragma unroll
    for (int u = 0; u < S; ++u) {
        issue_item(p, ring + u * SLOT, r0 + u < r1, tile_l, ch_l, lane);
        if (++ch_l == p.k_chunks) ch_l = 0, ++tile_l;
    }
    const int row_vecs = p.k / 8;  // 16-B pieces per x row
    for (int e = threadIdx.x; e < p.m * row_vecs; e += GV_THREADS) {
        const int r = e / row_vecs, c = 8 * (e - r * row_vecs);
        cp_async16(smem_u32(xs + r * (p.k + X_PAD) + c), p.x + size_t(r) * p.k + c, 16);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    if (r0 >= r1) return;
    bool whole = ch_c == 0;  // the current segment started at the tile's first chunk
    int pending[2] = {-1, -1};  // split tiles this warp completed last: reduced after the loop
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int slot = 0;
    for (int idx = r0; idx < r1; ++idx) {
        cp_async_wait<S - 1>();  // item idx landed (each lane reads only what it copied)
        const uint4* sl = ring + slot * SLOT;
        compute_slot(p, sl, xs, ch_c, lane, acc);
        const bool end_tile = ch_c == p.k_chunks - 1;
        if (end_tile || idx == r1 - 1) {
            flush(p, warp, tile_c, whole && end_tile, acc, pending);
            acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
            whole = true;
        }
        if (++ch_c == p.k_chunks) ch_c = 0, ++tile_c;
        issue_item(p, sl, idx + S < r1, tile_l, ch_l, lane);
        if (++ch_l == p.k_chunks) ch_l = 0, ++tile_l;
        slot = slot + 1 == S ? 0 : slot + 1;
    }
    cp_async_wait<0>();
    if (pending[0] >= 0) reduce_tile(p, pending[0]);
    if (pending[1] >= 0) reduce_tile(p, pending[1]);
}

template <int S>
constexpr size_t ring_bytes() { return size_t(GV_WARPS) * S * SLOT * 16; }

template <int S, int CPS>
void launch_gemv(const gemv_params& p, int grid, cudaStream_t s) {
    auto kern = w4a16_gemv_kernel<S, CPS>;
    static int dyn_max = 0;  // per template instance; the attribute is per-function
    if (!dyn_max) {  // what the largest x needs, within the device (opt-in less the static bytes)
        dyn_max = int(std::min<int64_t>(int64_t(ring_bytes<S>()) + W4A16_GEMV_X_SMEM_MAX,
                                        dynamic_smem_cap(reinterpret_cast<const void*>(kern), 0,
                                                         "matmul_nvfp4_w4a16_gemv")));
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn_max));
    }
    const size_t smem = ring_bytes<S>() + size_t(p.m) * (p.k + X_PAD) * 2;
    TETRA_CHECK(smem <= size_t(dyn_max), "matmul_nvfp4_w4a16_gemv: x [%d, %d] with %d ring slots per warp needs %zu B "
                "of shared memory per CTA, the device allows %d", p.m, p.k, S, smem, dyn_max);
    kern<<<unsigned(grid), GV_THREADS, smem, s>>>(p);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

int64_t w4a16_gemv_smem(int64_t m, int64_t k, const w4a16_gemv_config& cfg) {
    const int64_t slots = cfg.ctas_per_sm == 1 ? 16 : cfg.ctas_per_sm == 2 ? 8 : 4;
    return int64_t(GV_WARPS) * slots * SLOT * 16 + m * (k + X_PAD) * 2;
}

bool w4a16_gemv_fits(int64_t m, int64_t k) {
    return m >= 1 && m <= W4A16_GEMV_M_MAX && k > 0 && m * (k + X_PAD) * 2 <= W4A16_GEMV_X_SMEM_MAX;
}

w4a16_gemv_plan w4a16_gemv_plan_of(int64_t n, int64_t k, int sm_count, const w4a16_gemv_config& cfg) {
    w4a16_sm80_dims d = w4a16_sm80_dims_of(n, k);
    w4a16_gemv_plan pl;
    pl.total = d.n_tiles * d.k_chunks;
    TETRA_CHECK(pl.total < (int64_t(1) << 30), "w4a16_gemv: weight [%lld, %lld] too large for the gemv kernel",
                (long long)n, (long long)k);
    int64_t warps_cap = int64_t(sm_count) * cfg.ctas_per_sm * GV_WARPS;
    pl.per = std::max<int64_t>(cfg.min_chunks, (pl.total + warps_cap - 1) / warps_cap);
    int64_t warps = (pl.total + pl.per - 1) / pl.per;
    pl.grid = (warps + GV_WARPS - 1) / GV_WARPS;
    pl.partial_bytes = size_t(pl.grid) * GV_WARPS * 2 * SLOT_FLOATS * sizeof(float);
    pl.counter_count = size_t(d.n_tiles);
    return pl;
}

void matmul_nvfp4_w4a16_gemv_launch(const void* x, int64_t m, const w4a16_sm80_weight& w, void* out,
                                    const w4a16_sm80_workspace& ws, int sm_count, cudaStream_t s,
                                    const w4a16_gemv_config& cfg) {
    TETRA_CHECK(w4a16_gemv_fits(m, w.k),
                "matmul_nvfp4_w4a16_gemv: x [%lld, %lld]: takes 1..%lld rows of at most %lld bytes together (x is "
                "staged in shared memory)",
                (long long)m, (long long)w.k, (long long)W4A16_GEMV_M_MAX, (long long)W4A16_GEMV_X_SMEM_MAX);
    w4a16_sm80_dims d = w4a16_sm80_dims_of(w.n, w.k);
    w4a16_gemv_plan pl = w4a16_gemv_plan_of(w.n, w.k, sm_count, cfg);
    TETRA_CHECK(ws.partial_bytes >= pl.partial_bytes && ws.counters && ws.counter_count >= pl.counter_count,
                "matmul_nvfp4_w4a16_gemv: workspace too small for a [%lld x %lld] weight (size it with "
                "w4a16_gemv_plan_of)",
                (long long)w.n, (long long)w.k);
    gemv_params p;
    p.codes = static_cast<const uint4*>(w.codes);
    p.scales = static_cast<const uint8_t*>(w.scales);
    p.x = static_cast<const __nv_bfloat16*>(x);
    p.out = static_cast<__nv_bfloat16*>(out);
    p.partial = static_cast<float*>(ws.partial);
    p.counters = ws.counters;
    p.m = int(m), p.n = int(w.n), p.k = int(w.k);
    p.n_tiles = int(d.n_tiles), p.k_chunks = int(d.k_chunks), p.k_groups = int(d.k_groups);
    p.per = int(pl.per), p.total = int(pl.total);
    p.alpha = w.scale_global * 256.0f;
    const int grid = int(pl.grid);
    switch (cfg.ctas_per_sm) {
    case 1: launch_gemv<16, 1>(p, grid, s); break;
    case 2: launch_gemv<8, 2>(p, grid, s); break;
    case 3: launch_gemv<4, 3>(p, grid, s); break;
    default: TETRA_CHECK(false, "matmul_nvfp4_w4a16_gemv: ctas_per_sm %d (1, 2 or 3)", cfg.ctas_per_sm);
    }
}

}  // namespace cuda
}  // namespace tetra
