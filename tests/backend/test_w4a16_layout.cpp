// The packed W4A16 layout of the sm80 kernels (backend/cuda/w4a16_layout.h), checked on the host:
// every packed word, decoded with the kernels' own decode_word, holds the canonical codes of the
// (row, k) positions the layout assigns to its MMA registers, as bf16 bit patterns of value · 2^-126;
// every scale byte is the canonical scale of its (row, block); the padding (rows past n, k past
// the weight, the last group's chunks) is zero; chunk_index is group-major and addresses every
// packed chunk once. Expected values come from the e2m1 value table and the canonical row-major
// bytes, not from the packer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/w4a16_layout.h"

namespace {

using namespace tetra::cuda;
using namespace tetra::cuda::w4a16;

float bf16_bits_to_f32(uint32_t bits) {
    uint32_t u = bits << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

float e2m1_value(uint8_t code) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return (code & 8) ? -mag[code & 7] : mag[code & 7];
}

struct shape { int64_t n, k; };
const shape k_shapes[] = {{16, 16}, {1, 16}, {33, 80}, {100, 208}, {257, 1040}, {61, 4112}, {300, 576}};

TEST(w4a16_layout, packed_words_decode_to_the_canonical_codes_and_scales) {
    std::mt19937 rng(7);
    for (const shape& s : k_shapes) {
        const w4a16_sm80_dims d = w4a16_sm80_dims_of(s.n, s.k);
        ASSERT_EQ(d.n_tiles, (s.n + 15) / 16);
        ASSERT_EQ(d.k_chunks, (s.k + 63) / 64);
        ASSERT_EQ(d.k_groups, (d.k_chunks + 7) / 8);
        ASSERT_EQ(d.codes_bytes, size_t(d.n_tiles * d.k_groups) * 8 * 512);
        ASSERT_EQ(d.scales_bytes, size_t(d.n_tiles * d.k_groups) * 512);
        std::vector<uint8_t> codes(size_t(s.n * s.k / 2)), scales(size_t(s.n * s.k / 16));
        for (auto& b : codes) b = uint8_t(rng());
        for (auto& b : scales) b = uint8_t(rng());
        // Garbage first: the packer must write every byte (padding included).
        std::vector<uint8_t> pc(d.codes_bytes, 0xAB), ps(d.scales_bytes, 0xCD);
        w4a16_sm80_pack(codes.data(), scales.data(), s.n, s.k, pc.data(), ps.data());
        auto code = [&](int64_t row, int64_t col) -> uint8_t {  // canonical: row-major, even k in the low nibble
            if (row >= s.n || col >= s.k) return 0;
            const uint8_t b = codes[size_t(row * (s.k / 2) + col / 2)];
            return (col & 1) ? uint8_t(b >> 4) : uint8_t(b & 0xF);
        };
        auto scale = [&](int64_t row, int64_t blk) -> uint8_t {
            return row < s.n && blk < s.k / 16 ? scales[size_t(row * (s.k / 16) + blk)] : uint8_t(0);
        };
        std::vector<int> visits(d.codes_bytes / 512, 0);
        int bad = 0;
        for (int64_t tile = 0; tile < d.n_tiles; ++tile)
            for (int64_t ch = 0; ch < d.k_groups * GROUP_CHUNKS; ++ch) {
                const size_t slot = chunk_index(tile, ch, d.n_tiles);
                ASSERT_LT(slot, visits.size());
                ++visits[slot];
                for (int lane = 0; lane < 32; ++lane) {
                    const int g = lane / 4, t = lane % 4;
                    const uint8_t* src = pc.data() + (slot * 32 + size_t(lane)) * 16;
                    for (int j = 0; j < 4; ++j) {
                        uint32_t w, a[4];
                        std::memcpy(&w, src + 4 * j, 4);
                        if (ch >= d.k_chunks && w != 0 && bad++ < 5)
                            ADD_FAILURE() << "padding chunk " << ch << " of tile " << tile << " is not zero";
                        decode_word(w, a);
                        for (int i = 0; i < 4; ++i)
                            for (int h = 0; h < 2; ++h) {
                                const int64_t row = tile * 16 + g + 8 * (i & 1);
                                const int64_t col = ch * CHUNK_K + 16 * t + 4 * j + 2 * (i >> 1) + h;
                                const uint32_t bits = (a[i] >> (16 * h)) & 0xFFFFu;
                                const float got = std::ldexp(bf16_bits_to_f32(bits), 126);
                                const float want = e2m1_value(code(row, col));
                                if ((got != want || std::signbit(got) != std::signbit(want)) && bad++ < 5)
                                    ADD_FAILURE() << "n=" << s.n << " k=" << s.k << " row " << row << " k " << col
                                                  << ": packed " << got << ", canonical " << want;
                            }
                    }
                }
            }
        for (size_t i = 0; i < visits.size(); ++i)
            if (visits[i] != 1 && bad++ < 5) ADD_FAILURE() << "packed chunk slot " << i << " addressed " << visits[i] << " times";
        for (int64_t tile = 0; tile < d.n_tiles; ++tile)
            for (int64_t grp = 0; grp < d.k_groups; ++grp)
                for (int lane = 0; lane < 32; ++lane) {
                    const int g = lane / 4, t = lane % 4;
                    const uint8_t* src = ps.data() + ((size_t(tile * d.k_groups + grp) * 32) + size_t(lane)) * 16;
                    for (int c = 0; c < GROUP_CHUNKS; ++c) {
                        const int64_t blk = 4 * (grp * GROUP_CHUNKS + c) + t;
                        if ((src[2 * c] != scale(tile * 16 + g, blk) || src[2 * c + 1] != scale(tile * 16 + g + 8, blk)) &&
                            bad++ < 5)
                            ADD_FAILURE() << "scale of tile " << tile << " group " << grp << " lane " << lane << " chunk " << c;
                    }
                }
        EXPECT_EQ(bad, 0) << "n=" << s.n << " k=" << s.k;
    }
}

TEST(w4a16_layout, chunk_index_is_group_major) {
    const int64_t n_tiles = 5;
    for (int64_t grp = 0; grp < 3; ++grp)
        for (int64_t tile = 0; tile < n_tiles; ++tile) {
            const int64_t c0 = grp * GROUP_CHUNKS;
            EXPECT_EQ(chunk_index(tile, c0, n_tiles), size_t((grp * n_tiles + tile) * GROUP_CHUNKS));
            for (int64_t i = 1; i < GROUP_CHUNKS; ++i)  // a tile's chunks of one group are consecutive
                EXPECT_EQ(chunk_index(tile, c0 + i, n_tiles), chunk_index(tile, c0, n_tiles) + size_t(i));
            // the next group of the same tile is one group stride (in uint4 = 32 per chunk) further
            EXPECT_EQ(32 * (chunk_index(tile, c0 + GROUP_CHUNKS, n_tiles) - chunk_index(tile, c0, n_tiles)),
                      group_stride_u4(n_tiles));
        }
    // all tiles' group g, then group g + 1
    EXPECT_EQ(chunk_index(0, GROUP_CHUNKS, n_tiles), chunk_index(n_tiles - 1, GROUP_CHUNKS - 1, n_tiles) + 1);
}

// The small-M kernels' shared memory: 32 KB of weight rings + two x slots of m rows × 520 bf16; the
// rows that fit a device's opt-in limit per block (sizes from cudaDeviceProp.sharedMemPerBlockOptin:
// H100 232448, A100 166912, sm_86/89/120/121 101376). Expected rows worked out by hand from that
// layout: 32768 + 2080·m ≤ limit.
TEST(w4a16_layout, small_m_rows_that_fit_the_device) {
    EXPECT_EQ(w4a16_small_smem(1), 32768 + 2080);
    EXPECT_EQ(w4a16_small_smem(64), 32768 + 133120);
    EXPECT_EQ(w4a16_small_m_fit(232448, 64), 64);   // H100: every small m
    EXPECT_EQ(w4a16_small_m_fit(166912, 64), 64);   // A100: 165888 fits
    EXPECT_EQ(w4a16_small_m_fit(101376, 64), 32);   // 99 KB: 99328 fits, 33 rows need 101408
    EXPECT_EQ(w4a16_small_m_fit(101376 - 64, 64), 32);  // less the kernels' static bytes (small_m_max_here)
    EXPECT_EQ(w4a16_small_m_fit(49152, 64), 7);     // 48 KB: 47328 fits, 8 rows need 49408
    EXPECT_EQ(w4a16_small_m_fit(34847, 64), 0);     // not even one row (34848)
    EXPECT_EQ(w4a16_small_m_fit(232448, 16), 16);   // the cap
}

// The sweep decode kernel's plan on a device with 99 KB of shared memory per block (sm_86 / 89 / 120 /
// 121: 101376 B opt-in). Before the limit was passed to the plan, plans that stage x for k = 4096 at
// m = 3 and 4 asked for more than those devices allow, and the launch failed. By hand for matmul_silu
// on a stacked 8192 × 4096 weight (n_ff = 4096: 256 gate/up tile pairs, x staged to m = 4; 8 groups,
// 2 per warp: S = 4, T = 2): weights 8 warps × 2 units × 4608 B = 73728, group sums 8 warps × 2 units
// × 16 × 8 × 4 B = 8192, x staged 3 rows × (4096 + 8) × 2 B = 24624.
TEST(w4a16_sweep_plan, staged_x_past_the_device_limit_reads_x_through_l1) {
    const int64_t kSmem99 = 101376 - W4A16_SWEEP_STATIC_SMEM_MAX;  // what the registry passes there
    w4a16_sweep_config silu;
    silu.silu_n_ff = 4096;
    w4a16_sweep_plan free_plan = w4a16_sweep_plan_of(8192, 4096, 3, silu);
    EXPECT_EQ(free_plan.T, 2);
    EXPECT_FALSE(free_plan.x_direct);
    EXPECT_EQ(free_plan.smem, size_t(73728 + 24624 + 8192));
    w4a16_sweep_config cfg = silu;
    cfg.smem_limit = kSmem99;
    w4a16_sweep_plan pl = w4a16_sweep_plan_of(8192, 4096, 3, cfg);
    EXPECT_EQ(pl.T, 2);
    EXPECT_TRUE(pl.x_direct);
    EXPECT_EQ(pl.smem, size_t(73728 + 8192));
    EXPECT_EQ(w4a16_sweep_why_not(pl, 3, kSmem99), "");
    // the caller's own plan and x path are kept, and refused with the sizes (m = 4: x 4 × 4104 × 2 = 32832)
    w4a16_sweep_config own;
    own.T = 2, own.G = 8, own.S = 4, own.x_direct = 0, own.smem_limit = kSmem99;
    pl = w4a16_sweep_plan_of(6144, 4096, 4, own);
    EXPECT_EQ(pl.T, 2);
    EXPECT_FALSE(pl.x_direct);
    EXPECT_EQ(pl.smem, size_t(73728 + 32832 + 8192));
    const std::string why = w4a16_sweep_why_not(pl, 4, kSmem99);
    EXPECT_NE(why.find("114752 B"), std::string::npos) << why;
    EXPECT_NE(why.find(std::to_string(kSmem99)), std::string::npos) << why;
    EXPECT_EQ(w4a16_sweep_why_not(pl, 4), "");  // no limit given: only the plan's own rules
}

// The default plans (docs/perf.md session 23): a plain matmul puts one group per warp on one tile per
// CTA and reads x through L1 at every m; matmul_silu keeps its gate / up tile pair (T = 2), two groups
// per warp where k has an even number of groups, and stages x to m = 4 (m = 2 on ≥ 1024 tiles). The
// G groups of a CTA — all of k, the arithmetic — never change with m.
TEST(w4a16_sweep_plan, default_plans_by_m) {
    struct shape { int64_t n, k; int G; };
    for (const shape& sh : {shape{6144, 4096, 8}, shape{4096, 4096, 8}, shape{5120, 2048, 4}, shape{1000, 1552, 4},
                            shape{3072, 3584, 7}}) {
        for (int64_t m = 1; m <= W4A16_SWEEP_M_MAX; ++m) {
            const w4a16_sweep_plan pl = w4a16_sweep_plan_of(sh.n, sh.k, m);
            const std::string what = std::to_string(sh.n) + "x" + std::to_string(sh.k) + " m=" + std::to_string(m);
            EXPECT_EQ(pl.G, sh.G) << what;
            EXPECT_EQ(pl.S, sh.G) << what;
            // two tiles per warp at m > 8 on 8 groups of ≥ 256 tiles (6144 and 4096 rows at k = 4096)
            const int tw = m > 8 && sh.G == 8 && sh.n >= 4096 ? 2 : 1;
            EXPECT_EQ(pl.tw, tw) << what;
            EXPECT_EQ(pl.T, tw) << what;
            EXPECT_TRUE(pl.x_direct) << what;
            EXPECT_EQ(w4a16_sweep_why_not(pl, m), "") << what;
        }
    }
    for (int64_t n_ff : {int64_t(4096), int64_t(14336)})  // 512 and 1792 tiles of the stacked weight
        for (int64_t m = 1; m <= 8; ++m) {
            w4a16_sweep_config silu;
            silu.silu_n_ff = n_ff;
            const w4a16_sweep_plan pl = w4a16_sweep_plan_of(2 * n_ff, 4096, m, silu);
            const std::string what = "silu n_ff=" + std::to_string(n_ff) + " m=" + std::to_string(m);
            EXPECT_TRUE(pl.T == 2 && pl.S == 4 && pl.G == 8) << what;
            EXPECT_EQ(pl.x_direct, m >= 5 || (m >= 3 && n_ff == 14336)) << what;
            EXPECT_EQ(w4a16_sweep_why_not(pl, m), "") << what;
        }
}

// Two tiles per warp (tw = 2) only where the kernel has it: m > 8, a plain matmul, x through L1, all
// of k in one CTA; the reason names the rule.
TEST(w4a16_sweep_plan, two_tiles_per_warp_only_where_the_kernel_has_it) {
    w4a16_sweep_config c;
    c.T = 2, c.G = 8, c.S = 8, c.tw = 2;
    EXPECT_EQ(w4a16_sweep_why_not(w4a16_sweep_plan_of(6144, 4096, 16, c), 16), "");
    const std::string why_m = w4a16_sweep_why_not(w4a16_sweep_plan_of(6144, 4096, 8, c), 8);
    EXPECT_NE(why_m.find("tw = 2"), std::string::npos) << why_m;
    w4a16_sweep_config split = c;
    split.G = 4, split.S = 4;  // two group ranges over the CTAs
    const w4a16_sweep_plan ps = w4a16_sweep_plan_of(6144, 4096, 16, split);
    ASSERT_EQ(ps.n_gr, 2);
    EXPECT_NE(w4a16_sweep_why_not(ps, 16).find("group ranges"), std::string::npos);
    w4a16_sweep_config odd = c;
    odd.T = 3;  // not a multiple of the tiles per warp
    EXPECT_NE(w4a16_sweep_why_not(w4a16_sweep_plan_of(6144, 4096, 16, odd), 16).find("multiple"), std::string::npos);
}

// Every default plan the registry can ask for (k ≤ 4096; m > 8 only for n ≤ 8192; plain and
// matmul_silu) fits 99 KB, and on an H100 (232448 B) the limit changes no plan: the plans measured
// there (docs/perf.md) stay as they were.
TEST(w4a16_sweep_plan, default_plans_fit_99kb_and_are_unchanged_on_h100) {
    struct shape { int64_t n, k; };
    const shape shapes[] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {5120, 2048}, {2048, 4096},
                            {576, 576}, {3072, 1024}, {24576, 4096}, {4096, 2560}, {1000, 1552}};
    std::vector<std::string> limited;
    for (const shape& sh : shapes)
        for (int64_t m = 1; m <= W4A16_SWEEP_M_MAX; ++m)
            for (bool silu : {false, true}) {
                if (m > 8 && sh.n > W4A16_SWEEP_WIDE_N_MAX) continue;
                if (silu && (sh.n % 32 != 0 || m > 8)) continue;
                w4a16_sweep_config c99, c_h100, c_none;
                c99.smem_limit = 101376 - W4A16_SWEEP_STATIC_SMEM_MAX;
                c_h100.smem_limit = 232448 - W4A16_SWEEP_STATIC_SMEM_MAX;
                if (silu) c99.silu_n_ff = c_h100.silu_n_ff = c_none.silu_n_ff = sh.n / 2;
                const std::string what = std::to_string(sh.n) + "x" + std::to_string(sh.k) + " m=" +
                                         std::to_string(m) + (silu ? " silu" : "");
                const w4a16_sweep_plan p99 = w4a16_sweep_plan_of(sh.n, sh.k, m, c99);
                const w4a16_sweep_plan ph = w4a16_sweep_plan_of(sh.n, sh.k, m, c_h100);
                const w4a16_sweep_plan p0 = w4a16_sweep_plan_of(sh.n, sh.k, m, c_none);
                if (!w4a16_sweep_why_not(p0, m).empty()) continue;  // not a plan the registry runs
                EXPECT_EQ(w4a16_sweep_why_not(p99, m, c99.smem_limit), "") << what;
                EXPECT_LE(p99.smem, size_t(c99.smem_limit)) << what;
                EXPECT_EQ(p99.G, p0.G) << what;  // the arithmetic's split of k never changes
                EXPECT_EQ(p99.S, p0.S) << what;
                EXPECT_TRUE(ph.T == p0.T && ph.x_direct == p0.x_direct && ph.smem == p0.smem) << what;
                if (p99.x_direct != p0.x_direct || p99.T != p0.T) limited.push_back(what);
            }
    // matmul_silu stages x at m = 3 and 4 where k = 4096 and the stacked weight has < 1024 tiles (n <
    // 16384), two tiles per CTA: 73728 + 8192 + m · 8208 > 101312 B; the plain plans read x through L1
    const std::vector<std::string> expected = {"6144x4096 m=3 silu", "6144x4096 m=4 silu", "4096x4096 m=3 silu",
                                               "4096x4096 m=4 silu", "2048x4096 m=3 silu", "2048x4096 m=4 silu"};
    EXPECT_EQ(limited, expected);
}

}  // namespace
