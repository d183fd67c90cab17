// The host side of the packed W4A16 layout (w4a16_layout.h): sizes and the packer. Plain C++:
// the CPU build compiles it too, so the layout is checked without a GPU.
#include "backend/cuda/w4a16_layout.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cuda {

using namespace w4a16;

namespace {

// The canonical code / scale at (row, col) / (row, block); zero past the weight (the padding).
uint8_t code_at(const uint8_t* codes, int64_t n, int64_t k, int64_t row, int64_t col) {
    if (row >= n || col >= k) return 0;
    uint8_t b = codes[row * (k / 2) + col / 2];
    return (col & 1) ? uint8_t(b >> 4) : uint8_t(b & 0xF);
}

uint8_t scale_at(const uint8_t* scales, int64_t n, int64_t k, int64_t row, int64_t blk) {
    if (row >= n || blk >= k / 16) return 0;
    return scales[row * (k / 16) + blk];
}

}  // namespace

w4a16_sm80_dims w4a16_sm80_dims_of(int64_t n, int64_t k) {
    TETRA_CHECK(n > 0 && k > 0 && k % 16 == 0, "w4a16_sm80: weight [%lld, %lld]: expected n > 0 and k a multiple of 16",
                (long long)n, (long long)k);
    w4a16_sm80_dims d;
    d.n = n, d.k = k;
    d.n_tiles = (n + 15) / 16;
    d.k_chunks = (k + CHUNK_K - 1) / CHUNK_K;
    d.k_groups = (d.k_chunks + GROUP_CHUNKS - 1) / GROUP_CHUNKS;
    d.codes_bytes = size_t(d.n_tiles * d.k_groups) * GROUP_CHUNKS * 32 * 16;  // group-major, last group padded
    d.scales_bytes = size_t(d.n_tiles * d.k_groups) * 32 * 16;
    return d;
}

void w4a16_sm80_pack(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k, uint8_t* pc,
                     uint8_t* ps) {
    w4a16_sm80_dims d = w4a16_sm80_dims_of(n, k);
    // Tiles are independent: pack them on every pool thread (an 8B model's weights in seconds).
    auto pack_tiles = [&](int64_t tile0, int64_t tile1) {
    for (int64_t tile = tile0; tile < tile1; ++tile)
        for (int64_t ch = 0; ch < d.k_groups * GROUP_CHUNKS; ++ch)  // chunks past k_chunks: the zero padding
            for (int lane = 0; lane < 32; ++lane) {
                int g = lane / 4, t = lane % 4;
                uint8_t* dst = pc + (chunk_index(tile, ch, d.n_tiles) * 32 + lane) * 16;
                for (int j = 0; j < 4; ++j) {
                    uint32_t w = 0;
                    for (int i = 0; i < 4; ++i) {
                        int64_t row = tile * 16 + g + 8 * (i & 1), col = ch * CHUNK_K + 16 * t + 4 * j + 2 * (i >> 1);
                        uint32_t lo = code_at(codes, n, k, row, col), hi = code_at(codes, n, k, row, col + 1);
                        // register i = bf16x2 {lo, hi}: code bits s,e1,e0,m → bf16 bits 15,8,7,6 (+16 for hi)
                        const int dst_bit[4] = {6, 7, 8, 15};
                        for (int b = 0; b < 4; ++b) {
                            w |= ((lo >> b) & 1u) << w4a16_bit_src(i, dst_bit[b]);
                            w |= ((hi >> b) & 1u) << w4a16_bit_src(i, dst_bit[b] + 16);
                        }
                    }
                    std::memcpy(dst + 4 * j, &w, 4);
                }
            }
    for (int64_t tile = tile0; tile < tile1; ++tile)
        for (int64_t grp = 0; grp < d.k_groups; ++grp)
            for (int lane = 0; lane < 32; ++lane) {
                int g = lane / 4, t = lane % 4;
                uint8_t* dst = ps + ((tile * d.k_groups + grp) * 32 + lane) * 16;
                for (int c = 0; c < GROUP_CHUNKS; ++c) {
                    int64_t blk = 4 * (grp * GROUP_CHUNKS + c) + t;
                    dst[2 * c] = scale_at(scales, n, k, tile * 16 + g, blk);
                    dst[2 * c + 1] = scale_at(scales, n, k, tile * 16 + g + 8, blk);
                }
            }
    };
    parallel_for(d.n_tiles, pack_tiles);
}

// ---- the sweep kernel's plan ------------------------------------------------------------------------

w4a16_sweep_plan w4a16_sweep_plan_of(int64_t n, int64_t k, int64_t m, const w4a16_sweep_config& cfg) {
    const w4a16_sm80_dims d = w4a16_sm80_dims_of(n, k);
    w4a16_sweep_plan pl;
    const bool chosen = cfg.T > 0 && cfg.silu_n_ff == 0;  // the caller's T, G, S
    if (chosen) {
        pl.T = cfg.T, pl.G = int(std::min<int64_t>(cfg.G, d.k_groups)), pl.S = std::min(cfg.S, pl.G), pl.tw = cfg.tw;
    } else {
        // The default (bench_matmul --sweep and tetra bench on an H100, docs/perf.md sessions 18 and
        // 23): all of k in one CTA (the plans that split k over CTAs measured slower on every shape).
        // A plain matmul: one group per warp on one tile per CTA, x read through L1, at every m (the
        // fastest plan or within 3 % of it at m = 1-16 on the 8B and 30B shapes under the kernel's
        // launch bounds, but 8B qkv at m = 1, 8 % behind; 8-layer 8B batch 4 -2.4 %, 12-layer 30B
        // batch 1 / 4 / 8 -1.6 / -3.0 / -2.0 %, the other batches within ±1 %).
        // matmul_silu: a gate tile and its up tile per CTA (T = 2), two groups per warp where k has an
        // even number of groups, x staged per CTA for m <= 4 (or m <= 2 on a grid of >= 1024 tiles).
        // T, S and the x path depend on m, the arithmetic only on G (the kernel adds a tile's group
        // sums in group order), so a row's sums are the same in every plan.
        pl.G = int(d.k_groups);
        if (cfg.silu_n_ff > 0) {
            pl.S = pl.G % 2 == 0 ? pl.G / 2 : pl.G;
            pl.T = 2, pl.silu_n_ff = cfg.silu_n_ff;
        } else {
            // (G > 8 warps, down's k: refused by why_not; the bench splits k over CTAs there)
            pl.S = pl.G <= W4A16_SWEEP_MAX_WARPS ? pl.G : pl.G % 2 == 0 ? pl.G / 2 : pl.G;
            pl.T = 1;
            // m > 8 on 8 groups and ≥ 256 tiles: two tiles per warp (tw = 2, T = 2), so each x load
            // serves two tiles: 8B qkv at m = 16 −15 %, o_proj −5 % (bench_matmul --sweep-tw, H100,
            // docs/perf.md session 28). Fewer tiles (Qwen3-30B-A3B's o_proj: 128) would leave half
            // the SMs without a CTA; on 4 groups (its qkv, k = 2048) it measured +2 %.
            if (m > 8 && pl.G == W4A16_SWEEP_MAX_WARPS && d.n_tiles >= 256) pl.T = 2, pl.tw = 2;
        }
    }
    // x staged per CTA (matmul_silu, the caller's plans) costs m rows × all of k per CTA: from m = 5
    // (or m = 3 on a grid of ≥ 1024 tiles) each lane reads its x from global memory through L1.
    const bool staged_rule = pl.silu_n_ff > 0 || chosen;
    pl.x_direct = cfg.x_direct >= 0 ? cfg.x_direct != 0
                  : !staged_rule    ? true
                                    : (m >= 5 || (m >= 3 && d.n_tiles >= 1024));
    const int64_t rows = std::max<int64_t>(m, 1);
    auto size = [&] {
        pl.n_tb = pl.silu_n_ff > 0 ? int(pl.silu_n_ff / 16) : int((d.n_tiles + pl.T - 1) / pl.T);
        pl.n_gr = int((d.k_groups + pl.G - 1) / pl.G);
        const int gs = pl.S > 0 ? std::max(1, pl.G / pl.S) : 1;
        pl.smem = w4a16_sweep_smem(pl.T * pl.S, gs, pl.x_direct ? 0 : int(rows), pl.G, m > 8 ? 2 : 1);
    };
    size();
    // A device with less shared memory per block than the plan (99 KB: sm_86 / 89 / 120 / 121; the
    // default matmul_silu plan for k = 4096 at m = 3-4 stages 106-115 KB): x through L1 where the
    // caller left the x path to the plan.
    if (cfg.smem_limit > 0 && int64_t(pl.smem) > cfg.smem_limit && !pl.x_direct && cfg.x_direct < 0)
        pl.x_direct = true, size();
    pl.partial_bytes = pl.n_gr > 1 ? size_t(pl.n_gr) * size_t(d.n_tiles) * 16 * size_t(rows) * 4 : 0;
    pl.counter_count = pl.n_gr > 1 ? size_t(pl.n_tb) : 0;
    return pl;
}

std::string w4a16_sweep_why_not(const w4a16_sweep_plan& pl, int64_t m, int64_t smem_limit) {
    if (m < 1 || m > W4A16_SWEEP_M_MAX)
        return strfmt("m = %lld: the sweep kernel takes 1..%lld rows", (long long)m, (long long)W4A16_SWEEP_M_MAX);
    if (pl.tw != 1 && pl.tw != 2) return strfmt("plan tw = %d tiles per warp: 1 or 2", pl.tw);
    if (pl.T < 1 || pl.S < 1 || pl.T % pl.tw != 0 || pl.T / pl.tw * pl.S > W4A16_SWEEP_MAX_WARPS)
        return strfmt("plan T = %d tiles (%d per warp) x S = %d warps per tile: T a multiple of the tiles per warp, "
                      "at most %d warps per CTA", pl.T, pl.tw, pl.S, W4A16_SWEEP_MAX_WARPS);
    if (pl.tw == 2 && (m <= 8 || pl.silu_n_ff > 0 || !pl.x_direct || pl.n_gr != 1))
        return strfmt("plan tw = 2 tiles per warp: plain matmuls of m > 8 with x through L1 and all of k in a CTA "
                      "only (m = %lld, %d group ranges)", (long long)m, pl.n_gr);
    if (pl.G % pl.S != 0) return strfmt("plan G = %d groups is not a multiple of S = %d warps per tile", pl.G, pl.S);
    const int gs = pl.G / pl.S;
    if (gs != 1 && gs != 2 && gs != 4) return strfmt("plan G / S = %d groups per warp: 1, 2 or 4 only", gs);
    if (m > 8 && !pl.x_direct)
        return strfmt("m = %lld > 8: x rows 8 .. 15 are read through L1 (x_direct)", (long long)m);
    if (pl.silu_n_ff > 0 && (pl.n_gr != 1 || pl.T != 2))
        return strfmt("matmul_silu: a CTA holds all of k and a gate/up tile pair; plan T = %d, %d group ranges", pl.T,
                      pl.n_gr);
    if (smem_limit > 0 && int64_t(pl.smem) > smem_limit)
        return strfmt("plan T = %d, G = %d, x %s: %zu B of shared memory per CTA, the device allows %lld", pl.T, pl.G,
                      pl.x_direct ? "through L1" : "staged", pl.smem, (long long)smem_limit);
    return "";
}

}  // namespace cuda
}  // namespace tetra
