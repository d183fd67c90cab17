// nvfp4 128x4 scale swizzle (reference/nvfp4-format.md §5): the T8 offsets, the offset formula
// against an emulation of vLLM's swizzle_blockscale reshape/permute (an exhaustive bijection on
// padded sizes), and swizzle/unswizzle of odd logical sizes with zero padding.
#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "nvfp4/nvfp4.h"

using namespace tetra;

TEST(nvfp4_swizzle, t8_swizzle_offsets) {
    EXPECT_EQ(nvfp4_swizzle_offset(1, 1, 4), 17);
    EXPECT_EQ(nvfp4_swizzle_offset(32, 0, 4), 4);
    EXPECT_EQ(nvfp4_swizzle_offset(127, 3, 4), 511);
    EXPECT_EQ(nvfp4_swizzle_offset(33, 5, 8), 533);
    EXPECT_EQ(nvfp4_swizzle_offset(130, 0, 8), 1056);
    EXPECT_EQ(nvfp4_swizzle_padded_rows(1), 128);
    EXPECT_EQ(nvfp4_swizzle_padded_rows(128), 128);
    EXPECT_EQ(nvfp4_swizzle_padded_rows(129), 256);
    EXPECT_EQ(nvfp4_swizzle_padded_kblocks(1), 4);
    EXPECT_EQ(nvfp4_swizzle_padded_kblocks(8), 8);
    EXPECT_EQ(nvfp4_swizzle_padded_kblocks(9), 12);
}

// vLLM swizzle_blockscale: padded [M, Kb] → reshape(M/128, 4, 32, Kb/4, 4) → permute(0,3,2,1,4)
// (batch dim dropped) → flatten. Returns the flat index that element (m, kb) lands on.
static int64_t vllm_permute_index(int64_t m, int64_t kb, int64_t kb_pad) {
    int64_t mt = m / 128, a = (m / 32) % 4, b = m % 32, kt = kb / 4, c = kb % 4;
    return (((mt * (kb_pad / 4) + kt) * 32 + b) * 4 + a) * 4 + c;
}

TEST(nvfp4_swizzle, swizzle_offset_is_the_vllm_permutation) {
    for (auto [mp, kp] : {std::pair<int64_t, int64_t>{128, 4}, {256, 8}, {384, 12}, {128, 16}}) {
        std::vector<int> hits(mp * kp, 0);
        for (int64_t m = 0; m < mp; ++m)
            for (int64_t k = 0; k < kp; ++k) {
                int64_t off = nvfp4_swizzle_offset(m, k, kp);
                ASSERT_EQ(off, vllm_permute_index(m, k, kp)) << mp << "x" << kp << " m=" << m
                                                             << " kb=" << k;
                ASSERT_TRUE(off >= 0 && off < mp * kp);
                ++hits[off];
            }
        for (int64_t i = 0; i < mp * kp; ++i) ASSERT_EQ(hits[i], 1) << "offset " << i;
    }
}

TEST(nvfp4_swizzle, swizzle_scales_round_trip_and_zero_padding) {
    std::mt19937 rng(7);
    for (auto [rows, kb] : {std::pair<int64_t, int64_t>{1, 1}, {130, 5}, {128, 4}, {129, 3},
                            {256, 9}, {37, 12}, {0, 4}}) {
        const int64_t mp = nvfp4_swizzle_padded_rows(rows), kp = nvfp4_swizzle_padded_kblocks(kb);
        std::vector<uint8_t> lin(rows * kb), sw(mp * kp, 0xAA), back(rows * kb, 0);
        for (auto& b : lin) b = uint8_t(1 + rng() % 255);  // non-zero, so padding is visible
        nvfp4_swizzle_scales(lin.data(), rows, kb, sw.data());
        std::vector<int> filled(mp * kp, 0);
        for (int64_t m = 0; m < rows; ++m)
            for (int64_t k = 0; k < kb; ++k) {
                int64_t off = vllm_permute_index(m, k, kp);
                ASSERT_EQ(sw[off], lin[m * kb + k]) << rows << "x" << kb << " m=" << m << " kb=" << k;
                filled[off] = 1;
            }
        for (int64_t i = 0; i < mp * kp; ++i)
            if (!filled[i]) ASSERT_EQ(sw[i], 0) << "padding byte " << i << " of " << rows << "x" << kb;
        nvfp4_unswizzle_scales(sw.data(), rows, kb, back.data());
        EXPECT_EQ(back, lin) << rows << "x" << kb;
    }
}
