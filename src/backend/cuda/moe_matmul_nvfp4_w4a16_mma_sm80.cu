// moe_matmul_nvfp4_w4a16_mma_sm80: the grouped W4A16 matmul on mma.sync m16n8k16 (sm_80+), swap-AB
// as the dense small-M kernel (matmul_nvfp4_w4a16_sm80.cu): 16 weight rows of one expert are the A
// operand, up to 8·NT of that expert's permuted rows the B operand, so each weight tile is read once
// for all the rows of a pass. Grid (groups of 8/KS tiles, work items): a work item is (expert, pass of 8·NT
// rows), found on the device from expert_offsets (no host sync; the grid is sized by the host bound
// j + (rows − j) / (8·NT) with j = min(n_expert, rows): k items for one token; surplus CTAs exit).
// 8 warps = 8/KS tiles × KS k-slices (KS 1, 2 or 4 per call: ks_for); with 4 slices, within each
// 512-k group warp slice s takes chunks s and s+4. Codes and scales stream through a per-warp
// cp.async ring 8 chunks deep, x through a shared k-window (the first window's x before the weights). Deterministic by construction: an
// element's sum order (per virtual slice c % 4: chunks ascending, MMAs j∈{0,2} and {1,3} in two
// accumulators; then slices 0..3 in order) depends only on k, whatever KS, and an MMA column
// depends only on its own B column.
// Launched with programmatic dependent launch (sm_90+): the CTAs are resident before the previous
// kernel (the gather, the gate/up matmul) ends; x depends on it, so x is read after the wait, and so
// are the offsets unless the caller promises they are older (offsets_early: then the work item, its
// expert and the first weight steps are found and requested before the wait). Also "moe_matmul_silu" (SILU instances): gate and up tiles of the same rows paired in one
// CTA, silu(gate) · up written from the slice reduction; bit-identical to the two-step path.
#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/matmul_launch.h"
#include "backend/cuda/matmul_nvfp4_w4a16_device.cuh"
#include "backend/cuda/moe_expert_table_sm80.h"
#include "backend/cuda/moe_items.cuh"
#include "backend/moe.h"

namespace tetra {
namespace cuda {

namespace {

using namespace w4a16;

constexpr int WARPS = 8, THREADS = WARPS * 32;
constexpr int DEPTH = 8;                       // code ring slots per warp (DEPTH / CPG groups ahead)
constexpr int X_PAD = 8;                       // bf16 per smem x row: staggers rows across banks
constexpr int RING_BYTES = WARPS * DEPTH * 32 * 16;
// The CTA's split of its 8 warps: KS warps share a tile's k (chunk ci of a group → warp ci % KS),
// so a CTA covers WT = 8 / KS tiles; chosen per call from the grid size (ks_for).
template <int KS> struct split {
    static constexpr int WT = WARPS / KS;              // weight tiles (16 rows) per CTA
    static constexpr int CPG = GROUP_CHUNKS / KS;      // chunks per group per warp (steps per group)
    static constexpr int SQ = DEPTH / CPG + 1;         // scale ring slots per warp (one group more: see fetch)
    static constexpr int SW = KS == 4 ? 2 : 4;         // scale words per slot: the lane's words of its chunks
    static constexpr int SCALE_BYTES = WARPS * SQ * 32 * SW * 4;
};
constexpr int cmax(int a, int b) { return a > b ? a : b; }
constexpr int SCALE_BYTES_MAX = cmax(split<4>::SCALE_BYTES, cmax(split<2>::SCALE_BYTES, split<1>::SCALE_BYTES));
constexpr int X_BUDGET_MAX = 96 * 1024;        // x window bytes at most (2 CTAs per SM on H100 at NT = 4)

struct mma_params {
    const __nv_bfloat16* x;  // [n_rows, k]
    __nv_bfloat16* out;      // [n_rows, n]
    const int32_t* offsets;  // [ne + 1]
    const moe_expert_ptrs* table;
    int ne, n, k, n_tiles, k_chunks, k_groups, win_groups;
    int n_ff;  // SILU instances (moe_matmul_silu): n = 2·n_ff stacked [gate; up] rows, out [n_rows, n_ff]
    int early; // offsets were written ≥ 2 launches before this one (moe_matmul_args::offsets_early)
    int x_rows; // rows of the x window (8·NT, or fewer: plan_window); a pass with more stops with a trap
};

__device__ __forceinline__ void cp_async4(uint32_t smem, const void* gmem) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem), "l"(gmem) : "memory");
}


// x rows [r0, r0 + nr) × k [k0, k0 + kw) → smem rows of `stride` bf16; k past the end is
// zero-filled (cp.async with 0 source bytes reads nothing). Only the nr real rows: the MMA lanes of
// rows nr.. read row 0 instead (compute_chunk). Not committed.
__device__ __forceinline__ void stage_x(const __nv_bfloat16* x, int k, int r0, int nr, int k0, int kw,
                                        __nv_bfloat16* xs, int stride) {
    const int per_row = kw / 8;
    for (int v = threadIdx.x; v < nr * per_row; v += THREADS) {
        const int r = v / per_row, kk = (v - r * per_row) * 8, kg = k0 + kk;
        const bool ok = kg < k;
        cp_async16(smem_u32(xs + r * stride + kk), ok ? x + size_t(r0 + r) * k + kg : x, ok ? 16 : 0);
    }
}

// One chunk (16 weight rows × 64 k) of one warp against nu n8 tiles of x. q: the lane's 16 code
// bytes; two: the chunk's e4m3 scales (row g, row g+8); xk: the window at this chunk's k + 16t;
// xoff[u]: the offset of x row 8u + g in it (row 0 for rows ≥ nr: a B column reaches only its own D
// column, and those columns are never stored). MMA j goes to accumulator j & 1 (the same for every
// NT: the per-element order is fixed).
template <int NT>
__device__ __forceinline__ void compute_chunk(const uint4& q, uint32_t two, const __nv_bfloat16* xk,
                                              const int (&xoff)[NT], int nu, float (&acc)[2][NT][4]) {
    uint32_t s0, s1;
    scales_to_bf16x2(two, s0, s1);
    uint32_t a[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) a_regs(q, j, s0, s1, a[j]);
#pragma unroll
    for (int u = 0; u < NT; ++u) {
        if (u >= nu) break;
        const uint4* xr = reinterpret_cast<const uint4*>(xk + xoff[u]);
        const uint4 lo = xr[0], hi = xr[1];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint4& b = j < 2 ? lo : hi;
            mma16816<__nv_bfloat16>(acc[j & 1][u], a[j][0], a[j][1], a[j][2], a[j][3], (j & 1) ? b.z : b.x,
                                    (j & 1) ? b.w : b.y);
        }
    }
}

// grid (ceil(n_tiles / WT), work items); dynamic smem: code rings | scale rings | x window.
// SILU: moe_matmul_silu — the CTA's first WT/2 tile slots take gate tiles, the others the matching
// up tiles (n_ff / 16 further on); the gate slots' writers apply silu_times to both rounded sums.
template <int NT, int KS, bool SILU>
__global__ void __launch_bounds__(THREADS) moe_w4a16_mma_kernel(mma_params p) {
    extern __shared__ uint4 smem_raw[];
    constexpr int RB = 8 * NT, WT = split<KS>::WT, CPG = split<KS>::CPG, SQ = split<KS>::SQ, SW = split<KS>::SW;
    constexpr int VS = 4 / KS;  // virtual k-slices per warp (see acc)
    static_assert(VS * 2 * NT <= 8, "accumulators: KS = 1 only with NT = 1, KS = 2 with NT ≤ 2");
    constexpr int SCALE_BYTES = split<KS>::SCALE_BYTES;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int ks = warp % KS, slot = warp / KS, pair = blockIdx.x * (WT / 2) + slot % (WT / 2);
    const int tile = !SILU ? blockIdx.x * WT + slot : pair + (slot < WT / 2 ? 0 : p.n_ff / 16);
    int e, r0, nr;
    // Programmatic dependent launch: the CTAs become resident during the previous kernel's tail.
    // x depends on it, so x is read after pdl_wait(). The offsets too, unless p.early: then they were
    // written by a kernel two or more launches back, which has completed when this kernel starts
    // (cuda_device.cuh's rule), so the work item, its expert and the first DEPTH weight steps are
    // found and requested before the wait, overlapping the previous kernel (12-layer Qwen3-30B-A3B:
    // batch 8 −4.4 %, batch 1 unchanged; docs/moe.md).
    if (!p.early) {
        pdl_wait();
        pdl_trigger();
    }
    if (!find_item(p.offsets, p.ne, RB, blockIdx.y, lane, e, r0, nr)) return;  // uniform over the CTA
    const moe_expert_ptrs ex = p.table[e];
    const bool active = !SILU ? tile < p.n_tiles : pair < p.n_ff / 16;
    const int nu = (nr + 7) / 8, steps = p.k_groups * CPG;

    uint8_t* sm = reinterpret_cast<uint8_t*>(smem_raw);
    const uint4* ring = reinterpret_cast<const uint4*>(sm) + warp * DEPTH * 32 + lane;  // slot i at ring[32 i]
    const uint32_t ring_sa = smem_u32(ring);
    const uint32_t* sring = reinterpret_cast<const uint32_t*>(sm + RING_BYTES) + (warp * SQ * 32 + lane) * SW;
    const uint32_t sring_sa = smem_u32(sring);
    __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(sm + RING_BYTES + SCALE_BYTES);
    const int stride = p.win_groups * GROUP_K + X_PAD;

    const uint4* codes = static_cast<const uint4*>(ex.a) + size_t(active ? tile : 0) * GROUP_CHUNKS * 32 + lane;
    const size_t gstride = group_stride_u4(p.n_tiles);  // group-major packed codes
    // KS = 4: words ks/2 and ks/2 + 2 of the lane's 16 scale bytes, chunks ks and ks + 4 (half ks & 1);
    // otherwise all four words (chunk c: word (c % 8) / 2, half c & 1).
    const uint32_t* scales = static_cast<const uint32_t*>(ex.b) + (size_t(active ? tile : 0) * p.k_groups * 32 + lane) * 4 +
                             (KS == 4 ? (ks >> 1) : 0);
    // Step s = (group s / CPG, chunk ks + KS·(s % CPG)) into code slot s % DEPTH; the first step of
    // a group also brings its scales into scale slot group % SQ. Issued DEPTH steps ahead, so the
    // scales of group G arrive in the commit group of step (G − DEPTH/CPG)·CPG, which SQ = DEPTH/CPG
    // + 1 slots keep clear of the group being read.
    auto fetch = [&](int s) {
        if (!active || s >= steps) return;
        const int grp = s / CPG, i = s % CPG, c = grp * GROUP_CHUNKS + ks + KS * i;
        if (c < p.k_chunks)
            cp_async16_w(ring_sa + (s % DEPTH) * 512, codes + size_t(grp) * gstride + 32 * (c % GROUP_CHUNKS), 16);
        if (i == 0) {
            const uint32_t* sc = scales + size_t(grp) * 32 * 4;
            const uint32_t dst = sring_sa + (grp % SQ) * 32 * SW * 4;
            if (KS == 4) {
                cp_async4(dst, sc);
                cp_async4(dst + 4, sc + 2);
            } else {
                cp_async16_w(dst, sc, 16);
            }
        }
    };
    // x of the first window in the oldest commit group, then the first DEPTH steps: compute starts
    // once x and its own step have landed, not after every copy in flight. p.early: the steps
    // first (before the wait), x last.
    if (p.early) {
#pragma unroll
        for (int s = 0; s < DEPTH; ++s) {
            fetch(s);
            cp_async_commit();
        }
        pdl_wait();
        pdl_trigger();
    }
    stage_x(p.x, p.k, r0, nr, 0, min(p.k_groups, p.win_groups) * GROUP_K, xs, stride);
    cp_async_commit();
    if (!p.early) {
#pragma unroll
        for (int s = 0; s < DEPTH; ++s) {
            fetch(s);
            cp_async_commit();
        }
    }

    // Virtual slices: chunk c of a group always accumulates in slice c % 4 (this warp holds VS of
    // them: slices ks, ks + KS, …), so the per-element order is the same for every KS.
    float acc[VS][2][NT][4];
    int xoff[NT];
#pragma unroll
    for (int u = 0; u < NT; ++u) xoff[u] = (8 * u + g < nr ? 8 * u + g : 0) * stride;
#pragma unroll
    for (int l = 0; l < VS; ++l)
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int u = 0; u < NT; ++u) acc[l][a][u][0] = acc[l][a][u][1] = acc[l][a][u][2] = acc[l][a][u][3] = 0.0f;

    // x in windows of win_groups groups (one window when it fits: every decode shape). A later
    // window's boundary waits for every copy in flight (codes DEPTH steps ahead included).
    for (int g0 = 0; g0 < p.k_groups; g0 += p.win_groups) {
        const int g1 = min(p.k_groups, g0 + p.win_groups);
        if (g0 > 0) {
            __syncthreads();  // every warp is done reading the previous window
            stage_x(p.x, p.k, r0, nr, g0 * GROUP_K, (g1 - g0) * GROUP_K, xs, stride);
            cp_async_commit();
            cp_async_wait_all();
        } else if (p.early) {
            cp_async_wait_all();  // x (the newest group) landed, and the steps requested before it
        } else {
            asm volatile("cp.async.wait_group %0;" ::"n"(DEPTH) : "memory");  // x landed; the steps may not have
        }
        __syncthreads();
        for (int grp = g0; grp < g1; ++grp) {
#pragma unroll
            for (int i = 0; i < CPG; ++i) {  // step s = grp·CPG + i: chunk c, virtual slice c % 4 = ks + KS·(i % VS)
                const int s = grp * CPG + i, c = grp * GROUP_CHUNKS + ks + KS * i;
                asm volatile("cp.async.wait_group %0;" ::"n"(DEPTH - 1) : "memory");  // step s landed
                if (active && c < p.k_chunks) {
                    const uint4 q = ring[32 * (s % DEPTH)];
                    const uint32_t* sw = sring + 32 * SW * (grp % SQ);
                    const uint32_t two = KS == 4 ? sw[i] >> (16 * (ks & 1)) : sw[(c & 7) >> 1] >> (16 * (c & 1));
                    const __nv_bfloat16* xk = xs + (c - g0 * GROUP_CHUNKS) * CHUNK_K + 16 * t;
                    compute_chunk<NT>(q, two, xk, xoff, nu, acc[i % VS]);
                }
                fetch(s + DEPTH);  // into the slot just read
                cp_async_commit();
            }
        }
    }
    cp_async_wait_all();
    // A broken rows_per_expert_max promise (more rows than the window holds): a device error, not
    // output. Checked here rather than up front, where the test cost the batch-1 instance 13 registers.
    if (nr > p.x_rows) __trap();

    // Virtual slices summed in order 0..3 through shared memory (the rings are free now).
    __syncthreads();
    float* red = reinterpret_cast<float*>(sm) + slot * 4 * NT * 4 * 32;  // this tile's [4 slices][NT·4][32]
#pragma unroll
    for (int l = 0; l < VS; ++l)
#pragma unroll
        for (int u = 0; u < NT; ++u)
#pragma unroll
            for (int v = 0; v < 4; ++v)
                red[((ks + KS * l) * NT * 4 + u * 4 + v) * 32 + lane] = acc[l][0][u][v] + acc[l][1][u][v];
    __syncthreads();
    if (ks != 0 || !active) return;
    if (SILU) {
        if (slot >= WT / 2) return;
        const float* red_up = red + (WT / 2) * 4 * NT * 4 * 32;  // the up tile of the same rows
#pragma unroll
        for (int u = 0; u < NT; ++u) {
            if (u >= nu) break;
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                float sg = red[(u * 4 + v) * 32 + lane], su = red_up[(u * 4 + v) * 32 + lane];
#pragma unroll
                for (int sl = 1; sl < 4; ++sl)
                    sg += red[(sl * NT * 4 + u * 4 + v) * 32 + lane], su += red_up[(sl * NT * 4 + u * 4 + v) * 32 + lane];
                const int row = tile * 16 + g + 8 * (v >> 1), m = 8 * u + 2 * t + (v & 1);
                if (m < nr)
                    p.out[size_t(r0 + m) * p.n_ff + row] =
                        silu_times(__float2bfloat16_rn(sg * ex.alpha), __float2bfloat16_rn(su * ex.alpha));
            }
        }
        return;
    }
#pragma unroll
    for (int u = 0; u < NT; ++u) {
        if (u >= nu) break;
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            float sum = red[(u * 4 + v) * 32 + lane];
#pragma unroll
            for (int sl = 1; sl < 4; ++sl) sum += red[(sl * NT * 4 + u * 4 + v) * 32 + lane];
            const int row = tile * 16 + g + 8 * (v >> 1), m = 8 * u + 2 * t + (v & 1);
            if (row < p.n && m < nr) p.out[size_t(r0 + m) * p.n + row] = __float2bfloat16_rn(sum * ex.alpha);
        }
    }
}

// Rows per pass: the host's bound on the mean rows per non-empty expert (rows / min(ne, rows)).
int nt_for(int64_t n_rows, int64_t ne) {
    int64_t mean = (n_rows + std::min(ne, n_rows) - 1) / std::min(ne, n_rows);
    return mean <= 8 ? 1 : mean <= 16 ? 2 : 4;
}

// The most work items (passes of rb = 8·nt rows) n_rows rows can make: with j non-empty experts,
// Σ ceil(c_e / rb) ≤ j + (n_rows − j) / rb, largest at j = min(ne, n_rows). One token's k distinct
// experts: exactly k items, so the grid is one wave (a surplus item row used to spill past it).
int64_t items_for(int64_t n_rows, int64_t ne, int nt) {
    const int64_t j = std::min(ne, n_rows);
    return j + (n_rows - j) / (8 * nt);
}

int x_budget(const device_info& dev) {
    return int(std::min<int64_t>(X_BUDGET_MAX, dev.smem_per_block - RING_BYTES - SCALE_BYTES_MAX));
}

// Warps per tile (KS): the fewest (longest k runs per warp, more bytes per CTA) that still give the
// grid ≥ 1.5 CTAs per SM; 4 when none does. KS = 1 only at NT = 1 and 2 at NT ≤ 2 (a warp holds 4 / KS
// virtual slices of accumulators). The choice may depend on the batch: every KS sums each element in
// the same order (virtual slices), so a row's bits do not. Measured on Qwen3-30B-A3B (H100,
// docs/moe.md): batch 1 picks 4 for gate/up (96 × 8 items at KS 1 is under one CTA per SM) and 2 for
// down; batch ≥ 8 and prefill pick 1.
int ks_for(int64_t n_tiles, int64_t items, int nt, int sm_count) {
    for (int ks : {1, 2}) {
        if ((ks == 1 && nt > 1) || (ks == 2 && nt > 2)) continue;
        const int64_t wt = WARPS / ks, ctas = (n_tiles + wt - 1) / wt * items;
        if (2 * ctas >= 3 * int64_t(std::max(1, sm_count))) return ks;
    }
    return 4;
}

// A call's shape: rows per pass (NT), the grid's work items, warps per tile (KS).
struct mma_plan {
    int nt;
    int64_t items;
    int ks;
};
mma_plan plan_of(int64_t n_tiles, int64_t n_rows, int64_t n_expert, int sm_count) {
    const int nt = nt_for(n_rows, n_expert);
    const int64_t items = items_for(n_rows, n_expert, nt);
    return {nt, items, ks_for(n_tiles, items, nt, sm_count)};
}

// The x window of a launch: rows (of a pass), groups of k, and the kernel's dynamic shared memory.
struct x_window {
    int rows, groups;
    size_t smem;
};
template <int NT, int KS>
x_window window_of(int rows, int64_t k_groups, int budget) {
    x_window w;
    w.rows = rows;
    const int64_t row_bytes = int64_t(rows) * 2;  // one group of k for all rows of a pass, per bf16 k
    w.groups = int(std::max<int64_t>(1, std::min<int64_t>(k_groups, budget / (row_bytes * (GROUP_K + X_PAD)))));
    w.smem = RING_BYTES + split<KS>::SCALE_BYTES + size_t(rows) * (w.groups * GROUP_K + X_PAD) * 2;
    return w;
}

// The instance's maximum dynamic shared memory, set once (the attribute is per function): before
// its first launch and before an occupancy query, which counts 0 CTAs for sizes above the default.
template <int NT, int KS, bool SILU>
void set_smem_attr(int budget) {
    static bool attr_set = false;
    if (attr_set) return;
    CUDA_CHECK(cudaFuncSetAttribute(moe_w4a16_mma_kernel<NT, KS, SILU>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    RING_BYTES + split<KS>::SCALE_BYTES + budget));
    attr_set = true;
}

// Resident CTAs per SM of kernel `kern` with `smem` bytes (cached per instance and size; the
// kernel's maximum dynamic shared memory set).
int ctas_per_sm(const void* kern, size_t smem) {
    static std::mutex mu;
    static std::map<std::pair<const void*, size_t>, int> cache;
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find({kern, smem});
    if (it != cache.end()) return it->second;
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, THREADS, smem));
    return cache[{kern, smem}] = n;
}

// The window of a call: 8·NT rows (a pass's most), or the caller's bound on the rows of an expert
// (moe_matmul_args::rows_per_expert_max) where that is smaller and puts the grid in fewer waves.
// Measured on Qwen3-30B-A3B (H100, 12 layers, docs/perf.md session 24): batch 2's gate/up (384 CTAs
// of 77 KB: two per SM, two waves) in one wave with a 2-row window, −1.8 % per step; smaller windows
// where the grid already fit (batch 1: the gate/up and down CTAs then share SMs) were 2–4 % slower.
template <int NT, int KS, bool SILU>
x_window plan_window(int64_t n_tiles, int64_t items, int64_t k_groups, int budget, int64_t rows_max, int sm_count) {
    const x_window full = window_of<NT, KS>(8 * NT, k_groups, budget);
    if (rows_max <= 0 || rows_max >= 8 * NT) return full;
    const x_window small = window_of<NT, KS>(int(rows_max), k_groups, budget);
    const int64_t ctas = (n_tiles + split<KS>::WT - 1) / split<KS>::WT * items;
    const void* kern = reinterpret_cast<const void*>(moe_w4a16_mma_kernel<NT, KS, SILU>);
    set_smem_attr<NT, KS, SILU>(budget);
    auto waves = [&](const x_window& w) {
        const int64_t slots = int64_t(ctas_per_sm(kern, w.smem)) * std::max(1, sm_count);
        return slots > 0 ? (ctas + slots - 1) / slots : INT64_MAX;
    };
    return waves(small) < waves(full) ? small : full;
}

template <int NT, int KS, bool SILU>
void launch_nt(const mma_params& p, const w4a16_sm80_dims& d, int64_t items, const x_window& w, int budget,
               cudaStream_t s, bool pdl) {
    set_smem_attr<NT, KS, SILU>(budget);
    mma_params q = p;
    q.x_rows = w.rows, q.win_groups = w.groups;
    dim3 grid(unsigned((d.n_tiles + split<KS>::WT - 1) / split<KS>::WT), unsigned(items));
    launch_on(moe_w4a16_mma_kernel<NT, KS, SILU>, grid, dim3(THREADS), w.smem, s, pdl, q);
}

// f(NT, KS) as integral constants for a plan's (nt, ks).
template <class F> void with_instance(int nt, int ks, F&& f) {
    using std::integral_constant;
    if (nt == 1 && ks == 1) f(integral_constant<int, 1>{}, integral_constant<int, 1>{});
    else if (nt == 1 && ks == 2) f(integral_constant<int, 1>{}, integral_constant<int, 2>{});
    else if (nt == 1) f(integral_constant<int, 1>{}, integral_constant<int, 4>{});
    else if (nt == 2 && ks == 2) f(integral_constant<int, 2>{}, integral_constant<int, 2>{});
    else if (nt == 2) f(integral_constant<int, 2>{}, integral_constant<int, 4>{});
    else f(integral_constant<int, 4>{}, integral_constant<int, 4>{});
}

// Call a's plan on this device (d: its dims): f(NT and KS as integral constants, the plan, its x
// window). The launcher and the tests' query (moe_w4a16_mma_x_rows) both plan through it.
template <bool SILU, class F>
void with_call_plan(backend& be, const moe_matmul_args& a, const w4a16_sm80_dims& d, F&& f) {
    const int sms = be.device().sm_count, budget = x_budget(be.device());
    const mma_plan pl = plan_of(d.n_tiles, a.n_rows, int64_t(a.experts->size()), sms);
    with_instance(pl.nt, pl.ks, [&](auto nt, auto ks) {
        constexpr int NT = decltype(nt)::value, KS = decltype(ks)::value;
        f(nt, ks, pl, plan_window<NT, KS, SILU>(d.n_tiles, pl.items, d.k_groups, budget, a.rows_per_expert_max, sms));
    });
}

// The grouped matmul a (n_ff 0) or moe_matmul_silu's fused form into out ([n_rows, n_ff]).
template <bool SILU>
void mma_launch(backend& be, const moe_matmul_args& a, void* out, int64_t n_ff) {
    if (a.n_rows == 0) return;
    cudaStream_t s = stream_of(be);
    const std::vector<linear_weight>& ex = *a.experts;
    const moe_expert_ptrs* table = moe_expert_table(ex, s, moe_w4a16_ptrs);
    const w4a16_sm80_dims d = w4a16_sm80_dims_of(a.n, a.k);
    mma_params p;
    p.x = a.x.ptr<const __nv_bfloat16>(), p.out = static_cast<__nv_bfloat16*>(out), p.n_ff = int(n_ff);
    p.early = a.offsets_early ? 1 : 0;
    p.offsets = a.expert_offsets.ptr<const int32_t>(), p.table = table;
    p.ne = int(ex.size()), p.n = int(a.n), p.k = int(a.k);
    p.n_tiles = int(d.n_tiles), p.k_chunks = int(d.k_chunks), p.k_groups = int(d.k_groups), p.win_groups = 1;
    const int budget = x_budget(be.device());
    const bool pdl = pdl_enabled(be);
    with_call_plan<SILU>(be, a, d, [&](auto nt, auto ks, const mma_plan& pl, const x_window& w) {
        launch_nt<decltype(nt)::value, decltype(ks)::value, SILU>(p, d, pl.items, w, budget, s, pdl);
    });
}

void moe_w4a16_mma_launch(backend& be, const moe_matmul_args& a) { mma_launch<false>(be, a, a.out.data, 0); }

// As the CUDA-core kernel's accepts: bf16, int-sized shapes, the experts in the sm80 packed layout
// (asked of the dense kernel's accepts() for the first and last expert), plus the grid.y bound.
std::string moe_w4a16_mma_accepts(const moe_matmul_args& a) {
    std::string why = moe_w4a16_bf16_why_not(a);
    if (!why.empty()) return why;
    const int64_t ne = int64_t(a.experts->size());
    if (items_for(a.n_rows, ne, 1) > 65535)
        return "more than 65535 work items (" + std::to_string(items_for(a.n_rows, ne, 1)) + " passes of 8 rows at most)";
    return moe_w4a16_experts_why_not(a);
}

// moe_matmul_silu fused: W4A16, the grouped kernel's conditions, n_ff a multiple of 16 (the up half
// starts on a tile).
std::string moe_silu_mma_accepts(const moe_matmul_silu_args& a) {
    return moe_silu_fused_why_not(a, moe_w4a16_mma_accepts);
}

void moe_silu_mma_launch(backend& be, const moe_matmul_silu_args& a) { mma_launch<true>(be, a.mm, a.out.data, a.n_ff); }

}  // namespace

int moe_w4a16_mma_ks(int64_t n, int64_t k, int64_t n_rows, int64_t n_expert, int sm_count) {
    return plan_of(w4a16_sm80_dims_of(n, k).n_tiles, n_rows, n_expert, sm_count).ks;
}

int moe_w4a16_mma_x_rows(backend& be, const moe_matmul_args& a, bool silu) {
    const w4a16_sm80_dims d = w4a16_sm80_dims_of(a.n, a.k);
    int rows = 0;
    auto take = [&](auto, auto, const mma_plan&, const x_window& w) { rows = w.rows; };
    if (silu) with_call_plan<true>(be, a, d, take);
    else with_call_plan<false>(be, a, d, take);
    return rows;
}

// Priority 20: above the CUDA-core moe_matmul_nvfp4_w4a16_sm80 (10), kept as the fallback and the
// cross-check (TETRA_KERNEL=moe_matmul_nvfp4_w4a16:moe_matmul_nvfp4_w4a16_sm80).
void register_moe_matmul_nvfp4_w4a16_mma_sm80(kernel_registry& r) {
    kernel_req req = cuda_req(80, {dtype::BF16});
    req.align = 16;
    req.smem = RING_BYTES + SCALE_BYTES_MAX + 8 * (GROUP_K + X_PAD) * 2;  // the x window of NT = 1, one group
    r.add(make_kernel<moe_matmul_args>("moe_matmul_nvfp4_w4a16", "moe_matmul_nvfp4_w4a16_mma_sm80", req, 20,
                                       moe_w4a16_mma_accepts, moe_w4a16_mma_launch));
    // "moe_matmul_silu": the same kernel with silu in its epilogue, and the two-step fallback.
    r.add(make_kernel<moe_matmul_silu_args>("moe_matmul_silu", "moe_matmul_silu_nvfp4_w4a16_mma_sm80", req, 10,
                                            moe_silu_mma_accepts, moe_silu_mma_launch));
    r.add(make_kernel<moe_matmul_silu_args>("moe_matmul_silu", "moe_matmul_silu_two_step_cuda",
                                            cuda_req(0, {dtype::F32, dtype::BF16, dtype::F16}), 0, nullptr,
                                            moe_matmul_silu_two_step));
}

}  // namespace cuda
}  // namespace tetra
