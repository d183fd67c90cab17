// core/dtype: bf16/f16 <-> f32 conversions. bf16 checked exhaustively against an independent
// formulation (exact midpoint comparison in double); f16 exhaustively round-tripped and checked
// against the hardware-independent definition on all 2^16 codes.
#include <gtest/gtest.h>

#include <atomic>

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/env.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

using namespace tetra;

// Value of an f16 code by the IEEE definition (independent of the bit-twiddling decoder).
static double f16_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

TEST(dtype, f16_decode_all_codes) {
    for (uint32_t h = 0; h < 65536; ++h) {
        int e = (h >> 10) & 31;
        float f = f16_to_f32(uint16_t(h));
        if (e == 31) {
            if (h & 1023) EXPECT_TRUE(std::isnan(f)) << h;
            else EXPECT_TRUE(std::isinf(f)) << h;
            continue;
        }
        ASSERT_EQ(double(f), f16_value(uint16_t(h))) << "code " << h;
        ASSERT_EQ(std::signbit(f), bool(h & 0x8000)) << h;
        ASSERT_EQ(f32_to_f16(f), h) << "round trip " << h;
    }
}

TEST(dtype, f16_encode_rne_midpoints) {
    // For each pair of adjacent finite positive f16 values, the midpoint must round to the even one
    // and values just beside it to the nearer one.
    for (uint32_t h = 0; h < 0x7bff; ++h) {
        double lo = f16_value(uint16_t(h)), hi = f16_value(uint16_t(h + 1));
        double mid = (lo + hi) / 2;
        float fm = float(mid);
        ASSERT_EQ(double(fm), mid);  // midpoints of f16 values are exact in f32
        uint16_t want = (h & 1) ? uint16_t(h + 1) : uint16_t(h);
        ASSERT_EQ(f32_to_f16(fm), want) << "midpoint above code " << h;
        ASSERT_EQ(f32_to_f16(std::nextafter(fm, 0.0f)), h);
        ASSERT_EQ(f32_to_f16(std::nextafter(fm, 1e9f)), h + 1);
    }
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);       // rounds to Inf
    EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);
    EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
}

TEST(dtype, bf16_encode_rne) {
    for (uint32_t hi = 0; hi < 0x7f80; ++hi) {
        uint32_t lo_bits = hi << 16, mid_bits = lo_bits | 0x8000;
        uint16_t want = (hi & 1) ? uint16_t(hi + 1) : uint16_t(hi);
        ASSERT_EQ(f32_to_bf16(f32_from_bits(mid_bits)), want);
        ASSERT_EQ(f32_to_bf16(f32_from_bits(mid_bits - 1)), hi);
        ASSERT_EQ(f32_to_bf16(f32_from_bits(mid_bits + 1)), hi + 1);
        ASSERT_EQ(f32_to_bf16(bf16_to_f32(uint16_t(hi))), hi);
    }
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(dtype, safetensors_names) {
    dtype t;
    ASSERT_TRUE(dtype_from_safetensors("F8_E4M3", &t));
    EXPECT_EQ(t, dtype::E4M3);
    EXPECT_FALSE(dtype_from_safetensors("F4", &t));
    EXPECT_STREQ(dtype_safetensors_name(dtype::BF16), "BF16");
    EXPECT_EQ(dtype_size(dtype::I64), 8u);
}

TEST(core, parallel_for_covers_range_once) {
    for (int64_t n : {1, 2, 3, 7, 1000}) {
        std::vector<int> hits(size_t(n), 0);
        parallel_for(n, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) hits[size_t(i)]++; });
        for (int h : hits) ASSERT_EQ(h, 1);
    }
}

// Many back-to-back regions of varying size on an oversubscribed pool (16 threads on a 2-core CI
// machine): workers wake late, between regions, while the next one is being set up. Every index
// of every region must run exactly once, and only inside its own region (the first version of
// the work-sharing pool let a late worker claim a chunk against the next region's chunk count).
TEST(core, parallel_for_many_regions_oversubscribed) {
    set_num_threads(16);
    std::vector<std::atomic<int>> hits(64);
    for (int it = 0; it < 20000; ++it) {
        const int64_t n = 1 + (it * 7) % 40;
        for (int64_t i = 0; i < n; ++i) hits[size_t(i)].store(0);
        std::atomic<int> live{1};
        parallel_for(n, [&](int64_t b, int64_t e) {
            ASSERT_EQ(live.load(), 1) << "a chunk ran after its region returned";
            for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
        });
        live.store(0);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "region " << it << " index " << i;
    }
    set_num_threads(0);
}

TEST(core, env_rejects_unknown_tetra_variable) {
    setenv("TETRA_NO_SUCH_THING", "1", 1);
    try {
        env_validate();
        FAIL() << "no error";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("TETRA_NO_SUCH_THING"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("TETRA_NUM_THREADS"), std::string::npos);
    }
    unsetenv("TETRA_NO_SUCH_THING");
    EXPECT_NO_THROW(env_validate());
}

TEST(core, tensor_alloc_shape) {
    tensor t = tensor::alloc(dtype::BF16, {3, 5});
    EXPECT_EQ(t.numel(), 15);
    EXPECT_EQ(t.nbytes(), 30u);
    EXPECT_EQ(t.shape_str(), "[3, 5]");
    EXPECT_THROW(tensor::alloc(dtype::F32, {-1}), error);
}
