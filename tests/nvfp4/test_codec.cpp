// nvfp4 codec: the §10 test vectors T1–T7 of reference/nvfp4-format.md (hand-derived there, copied
// here verbatim), E2M1/E4M3 decode of every code against the bit definitions, encode near every
// rounding threshold against tests/nvfp4/nvfp4_reference.h, both recipes and the activation
// quantizer against the spec formulas, and round-trip error bounds. Swizzle (T8): test_swizzle.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "nvfp4/nvfp4.h"
#include "nvfp4/nvfp4_reference.h"

using namespace tetra;

namespace {

std::string hex(const std::vector<uint8_t>& v) {
    std::string s;
    char buf[4];
    for (size_t i = 0; i < v.size(); ++i) {
        snprintf(buf, sizeof buf, i ? " %02x" : "%02x", v[i]);
        s += buf;
    }
    return s;
}

struct quantized {
    std::vector<uint8_t> codes, scales;
};

quantized quant_modelopt(const std::vector<float>& w, int64_t rows, float s) {
    int64_t cols = int64_t(w.size()) / rows;
    quantized q{std::vector<uint8_t>(rows * cols / 2), std::vector<uint8_t>(rows * cols / 16)};
    nvfp4_quantize_modelopt(w.data(), rows, cols, s, q.codes.data(), q.scales.data());
    return q;
}

quantized quant_ct(const std::vector<float>& w, int64_t rows, float g) {
    int64_t cols = int64_t(w.size()) / rows;
    quantized q{std::vector<uint8_t>(rows * cols / 2), std::vector<uint8_t>(rows * cols / 16)};
    nvfp4_quantize_ct(w.data(), rows, cols, g, q.codes.data(), q.scales.data());
    return q;
}

quantized quant_act(const std::vector<float>& x, float g) {
    quantized q{std::vector<uint8_t>(x.size() / 2), std::vector<uint8_t>(x.size() / 16)};
    nvfp4_quantize_activation_row(x.data(), int64_t(x.size()), g, q.codes.data(), q.scales.data());
    return q;
}

std::vector<float> dequant(const quantized& q, int64_t rows, float s) {
    int64_t cols = int64_t(q.codes.size()) * 2 / rows;
    std::vector<float> out(rows * cols);
    nvfp4_dequantize(q.codes.data(), q.scales.data(), s, rows, cols, out.data());
    return out;
}

}  // namespace

// ---- decode tables ----------------------------------------------------------------------------

TEST(nvfp4_codec, e2m1_decode_all_codes) {
    const float table[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};  // §1.1
    for (int c = 0; c < 16; ++c) {
        float v = e2m1_decode(uint8_t(c));
        EXPECT_EQ(double(v), ref::e2m1_value(c)) << "code " << c;
        EXPECT_EQ(std::fabs(v), table[c & 7]) << "code " << c;
        EXPECT_EQ(std::signbit(v), (c & 8) != 0) << "code " << c;
        EXPECT_EQ(e2m1_decode(uint8_t(c | 0xF0)), v) << "decode must mask to the low nibble";
    }
}

TEST(nvfp4_codec, e4m3_decode_all_bytes) {
    for (int b = 0; b < 256; ++b) {
        float v = e4m3_decode(uint8_t(b));
        if ((b & 0x7F) == 0x7F) {
            EXPECT_TRUE(std::isnan(v)) << "byte " << b;
            continue;
        }
        EXPECT_EQ(double(v), ref::e4m3_value(b)) << "byte " << b;
        EXPECT_EQ(std::signbit(v), (b & 0x80) != 0) << "byte " << b;
        EXPECT_EQ(e4m3_encode(v), b) << "encode(decode(b)) must be b";
    }
    // §2.1 useful bytes.
    EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
    EXPECT_EQ(e4m3_decode(0x01), 0.001953125f);
    EXPECT_EQ(e4m3_decode(0x07), 7.0f / 512.0f);
    EXPECT_EQ(e4m3_decode(0x08), 1.0f / 64.0f);
    EXPECT_EQ(e4m3_decode(0x38), 1.0f);
    EXPECT_EQ(e4m3_decode(0x20), 0.125f);
    EXPECT_EQ(e4m3_decode(0x30), 0.5f);
    EXPECT_EQ(e4m3_decode(0x4C), 6.0f);
    EXPECT_EQ(e4m3_decode(0x3D), 1.625f);
    EXPECT_EQ(e4m3_decode(0x6E), 112.0f);
    EXPECT_EQ(e4m3_decode(0x77), 240.0f);
}

// ---- T1: fp32 → E2M1 -------------------------------------------------------------------------

TEST(nvfp4_codec, t1_e2m1_encode_vectors) {
    const float inf = std::numeric_limits<float>::infinity();
    struct { float x; uint8_t code; } cases[] = {
        {0.0f, 0x0}, {0.1f, 0x0}, {-0.1f, 0x8}, {0.25f, 0x0}, {ref::from_bits(0x3E800001), 0x1},
        {0.5f, 0x1}, {0.74f, 0x1}, {0.75f, 0x2}, {1.0f, 0x2}, {1.25f, 0x2}, {1.26f, 0x3},
        {1.5f, 0x3}, {1.75f, 0x4}, {2.0f, 0x4}, {2.5f, 0x4}, {2.6f, 0x5}, {3.0f, 0x5},
        {3.5f, 0x6}, {4.0f, 0x6}, {5.0f, 0x6}, {ref::from_bits(0x40A00001), 0x7}, {5.5f, 0x7},
        {6.0f, 0x7}, {7.0f, 0x7}, {100.0f, 0x7}, {inf, 0x7}, {-100.0f, 0xF}, {-inf, 0xF},
        {-0.75f, 0xA}, {-3.5f, 0xE}, {-5.0f, 0xE}, {-6.0f, 0xF},
    };
    for (auto& c : cases) {
        EXPECT_EQ(e2m1_encode(c.x), c.code) << "x=" << c.x;
        EXPECT_EQ(e2m1_encode_modelopt(c.x), c.code) << "modelopt x=" << c.x;
    }
    EXPECT_EQ(e2m1_encode(-0.0f), 0x8);
    EXPECT_EQ(e2m1_encode_modelopt(-0.0f), 0x0);
    const float qnan = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(e2m1_encode(qnan), 0x7);
    EXPECT_EQ(e2m1_encode(-qnan), 0x7) << "NaN → +6, sign dropped";
    EXPECT_EQ(e2m1_encode_modelopt(qnan), 0x7);
    EXPECT_EQ(e2m1_encode_modelopt(-qnan), 0x7);
}

// Both neighbours of every rounding threshold and of every representable value, both signs.
TEST(nvfp4_codec, e2m1_encode_near_thresholds) {
    const float points[] = {0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f,
                            3.0f,  3.5f, 4.0f,  5.0f, 6.0f,  1e-45f, 1e30f};
    for (float p : points) {
        for (float x : {std::nextafter(p, 0.0f), p, std::nextafter(p, 1e38f)}) {
            for (float sx : {x, -x}) {
                EXPECT_EQ(e2m1_encode(sx), ref::e2m1_encode(sx, false)) << "x=" << sx;
                EXPECT_EQ(e2m1_encode_modelopt(sx), ref::e2m1_encode(sx, true)) << "x=" << sx;
            }
        }
    }
}

// ---- T2: packing -----------------------------------------------------------------------------

TEST(nvfp4_codec, t2_pair_packing) {
    EXPECT_EQ(e2m1_pack(e2m1_encode(1.0f), e2m1_encode(-3.0f)), 0xD2);
    EXPECT_EQ(e2m1_pack(0x12, 0x34), 0x42) << "only the low nibble of each code is used";
    // A 16-element block through the quantizer: byte j holds elements 2j (low) and 2j+1 (high).
    std::vector<float> w = {1.0f, -3.0f, 0.5f, 6.0f, -0.5f, 2.0f, 0, 0, 0, 0, 0, 0, 0, 0, 4.0f, -1.5f};
    auto q = quant_ct(w, 1, 448.0f);  // G = 448: local = 448·1 = 448 → 0x7E, divisor 1.0
    EXPECT_EQ(hex(q.codes), "d2 71 49 00 00 00 00 b6");
    EXPECT_EQ(q.scales[0], 0x7E);
}

// ---- T3: fp32 → E4M3 -------------------------------------------------------------------------

TEST(nvfp4_codec, t3_e4m3_encode_vectors) {
    const float inf = std::numeric_limits<float>::infinity();
    struct { float x; uint8_t b; } cases[] = {
        {0.0009765625f, 0x00}, {0.0009765625f * 1.0001f, 0x01}, {0.0029296875f, 0x02},
        {0.015625f, 0x08}, {0.125f, 0x20}, {1.0f, 0x38}, {1.0625f, 0x38}, {1.6666666f, 0x3D},
        {6.0f, 0x4C}, {112.0f, 0x6E}, {240.0f, 0x77}, {448.0f, 0x7E}, {450.0f, 0x7E},
        {464.0f, 0x7E}, {465.0f, 0x7E}, {480.0f, 0x7E}, {1e9f, 0x7E}, {inf, 0x7E},
    };
    for (auto& c : cases) {
        EXPECT_EQ(e4m3_encode(c.x), c.b) << "x=" << c.x;
        EXPECT_EQ(e4m3_encode(-c.x), c.b | 0x80) << "x=" << -c.x;
    }
    EXPECT_EQ(e4m3_encode(std::numeric_limits<float>::quiet_NaN()), 0x7F);
    EXPECT_EQ(e4m3_encode(-std::numeric_limits<float>::quiet_NaN()), 0x7F);
    EXPECT_EQ(e4m3_encode(-0.0f), 0x80);
}

// Every grid value, every midpoint between neighbours and their fp32 neighbours, both signs.
TEST(nvfp4_codec, e4m3_encode_at_every_midpoint) {
    ref::e4m3_grid g;
    for (int b = 0; b < 127; ++b) {
        std::vector<float> xs = {float(g.v[b])};
        if (b < 126) xs.push_back(float(0.5 * (g.v[b] + g.v[b + 1])));  // exact in fp32
        std::vector<float> all;
        for (float x : xs)
            for (float y : {std::nextafter(x, 0.0f), x, std::nextafter(x, 1e38f)})
                all.insert(all.end(), {y, -y});
        for (float x : all) EXPECT_EQ(e4m3_encode(x), ref::e4m3_encode(x, g)) << "x=" << x;
    }
}

// ---- global scales -----------------------------------------------------------------------------

TEST(nvfp4_codec, global_scales) {
    EXPECT_EQ(ref::bits(nvfp4_scale_global_modelopt(3.0f)), 0x3A924925u);  // T6
    EXPECT_EQ(nvfp4_scale_global_modelopt(2688.0f), 1.0f);                 // T4
    EXPECT_EQ(ref::bits(nvfp4_global_scale_ct(3.0f)), 0x44600000u);        // 896.0, T6
    EXPECT_EQ(nvfp4_global_scale_ct(2688.0f), 1.0f);
    // 2688 / FLT_MIN overflows fp32 → Inf → 1.0; denormal and zero amax clamp to FLT_MIN first.
    EXPECT_EQ(nvfp4_global_scale_ct(0.0f), 1.0f);
    EXPECT_EQ(nvfp4_global_scale_ct(1e-40f), 1.0f);
    EXPECT_EQ(nvfp4_global_scale_ct(std::numeric_limits<float>::quiet_NaN()), 1.0f);
    EXPECT_EQ(nvfp4_global_scale_ct(1e-30f), 2688.0f / 1e-30f);  // finite: kept
    // fp32 reciprocals are not bit-identical round trips (§4.2). Bits from numpy float32:
    // amax 5: f32(5/2688) = 0x3AF3CF3D, f32(2688/5) = 0x44066666, f32(1/that) = 0x3AF3CF3E.
    // (§4.2's example amax 3 is not one: 1/896 rounds to the same 0x3A924925.)
    EXPECT_EQ(ref::bits(nvfp4_scale_global_modelopt(5.0f)), 0x3AF3CF3Du);
    EXPECT_EQ(ref::bits(nvfp4_global_scale_ct(5.0f)), 0x44066666u);
    EXPECT_EQ(ref::bits(nvfp4_ct_to_dequant(nvfp4_global_scale_ct(5.0f))), 0x3AF3CF3Eu);
    EXPECT_EQ(ref::bits(nvfp4_ct_to_dequant(896.0f)), 0x3A924925u);
}

// ---- T4: exact grid block ------------------------------------------------------------------

TEST(nvfp4_codec, t4_block_a_exact_grid) {
    const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    std::vector<float> w;
    for (int i = 0; i < 8; ++i) w.push_back(448.0f * e2m1[i]);
    for (int i = 0; i < 8; ++i) w.push_back(i == 0 ? -0.0f : -448.0f * e2m1[i]);
    auto mo = quant_modelopt(w, 1, nvfp4_scale_global_modelopt(2688.0f));
    auto ct = quant_ct(w, 1, nvfp4_global_scale_ct(2688.0f));
    EXPECT_EQ(mo.scales[0], 0x7E);
    EXPECT_EQ(ct.scales[0], 0x7E);
    EXPECT_EQ(hex(mo.codes), "10 32 54 76 90 ba dc fe");
    EXPECT_EQ(hex(ct.codes), "10 32 54 76 98 ba dc fe");
    auto d = dequant(mo, 1, 1.0f);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(d[i], w[i]) << i;
}

// ---- T5: e4m3-rounded scale, every RNE tie ---------------------------------------------------

static const std::vector<float> k_block_b = {10, 5, -2.4375f, 1.21875f, 0.40625f, 2.84375f,
                                             4.0625f, 5.6875f, 8.125f, 2.03125f, -0.09375f, 0,
                                             -10, 0.8125f, 1.625f, -6.5f};

TEST(nvfp4_codec, t5_block_b_ties) {
    const char* packed = "57 2b 40 64 26 08 1f e2";
    auto mo = quant_modelopt(k_block_b, 1, 1.0f);
    auto ct = quant_ct(k_block_b, 1, 1.0f);
    auto act = quant_act(k_block_b, 1.0f);
    EXPECT_EQ(mo.scales[0], 0x3D);
    EXPECT_EQ(ct.scales[0], 0x3D);
    EXPECT_EQ(act.scales[0], 0x3D);
    EXPECT_EQ(hex(mo.codes), packed);
    EXPECT_EQ(hex(ct.codes), packed);
    EXPECT_EQ(hex(act.codes), packed) << "exact-division activation path";
    const float expect[16] = {9.75f, 4.875f, -2.4375f, 1.625f, 0, 3.25f, 3.25f, 6.5f,
                              6.5f,  1.625f, -0.0f,    0,      -9.75f, 0.8125f, 1.625f, -6.5f};
    auto d = dequant(mo, 1, 1.0f);
    for (int i = 0; i < 16; ++i) {
        EXPECT_EQ(d[i], expect[i]) << i;
        EXPECT_EQ(std::signbit(d[i]), std::signbit(expect[i])) << i;
    }
}

// ---- T6: realistic global scale (tensor amax 3.0) ---------------------------------------------

TEST(nvfp4_codec, t6_blocks_c_d_realistic_global) {
    std::vector<float> w = {3.0f, -1.5f, 0.75f, -0.375f, 0.1875f, 0, 2.25f, -2.625f,  // block C
                            1.125f, 0.5625f, -0.28125f, 1.3125f, -0.09375f, 2.0f, -3.0f, 0.046875f,
                            0.75f, -0.5f, 0.25f, 0.125f, -0.0625f, 0.375f, 0.625f, -0.6875f,  // D
                            0.3125f, 0.4375f, -0.1875f, 0, 0.5625f, -0.75f, 0.03125f, 0.09375f};
    const char* packed = "d7 a3 01 f6 24 59 68 0f e7 24 59 f6 64 0b f6 20";
    const float s = nvfp4_scale_global_modelopt(3.0f);
    const float g = nvfp4_global_scale_ct(3.0f);
    auto mo = quant_modelopt(w, 1, s);
    auto ct = quant_ct(w, 1, g);
    auto act = quant_act(w, g);  // activation with G = 896: same scale bytes and codes
    for (auto* q : {&mo, &ct, &act}) {
        EXPECT_EQ(q->scales[0], 0x7E);
        EXPECT_EQ(q->scales[1], 0x6E);
        EXPECT_EQ(hex(q->codes), packed);
    }
    // f32(448·S) = 0.5 and f32(112·S) = 0.125 exactly, so dequant = e2m1 · {0.5, 0.125}.
    auto d = dequant(mo, 1, s);
    for (int i = 0; i < 32; ++i) {
        uint8_t code = (mo.codes[i / 2] >> (4 * (i % 2))) & 0xF;
        EXPECT_EQ(d[i], e2m1_decode(code) * (i < 16 ? 0.5f : 0.125f)) << i;
    }
}

// ---- T7: all-zero block --------------------------------------------------------------------

TEST(nvfp4_codec, t7_all_zero_block) {
    std::vector<float> z(16, 0.0f), nz(16, -0.0f);
    auto mo = quant_modelopt(z, 1, 1.0f);
    auto ct = quant_ct(z, 1, 1.0f);
    auto act = quant_act(z, 1.0f);
    EXPECT_EQ(mo.scales[0], 0x38);
    EXPECT_EQ(ct.scales[0], 0x20);
    EXPECT_EQ(act.scales[0], 0x00);
    for (auto* q : {&mo, &ct, &act}) EXPECT_EQ(hex(q->codes), "00 00 00 00 00 00 00 00");
    // −0.0 inputs: ModelOpt sign = (x < 0) → 0x0; CT signbit → 0x8; activation x·0 = −0 → 0x8.
    EXPECT_EQ(hex(quant_modelopt(nz, 1, 1.0f).codes), "00 00 00 00 00 00 00 00");
    EXPECT_EQ(hex(quant_ct(nz, 1, 1.0f).codes), "88 88 88 88 88 88 88 88");
    EXPECT_EQ(hex(quant_act(nz, 1.0f).codes), "88 88 88 88 88 88 88 88");
}

// ---- input errors ----------------------------------------------------------------------------

TEST(nvfp4_codec, bad_inputs_throw) {
    std::vector<float> w(32, 1.0f);
    std::vector<uint8_t> c(16), s(2);
    EXPECT_THROW(nvfp4_quantize_modelopt(w.data(), 1, 24, 1.0f, c.data(), s.data()), tetra::error);
    EXPECT_THROW(nvfp4_quantize_ct(w.data(), 2, 8, 1.0f, c.data(), s.data()), tetra::error);
    EXPECT_THROW(nvfp4_dequantize(c.data(), s.data(), 1.0f, 1, 17, w.data()), tetra::error);
    EXPECT_THROW(nvfp4_quantize_activation_row(w.data(), 20, 1.0f, c.data(), s.data()),
                 tetra::error);
    const float bad[] = {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN()};
    for (float b : bad) {
        EXPECT_THROW(nvfp4_quantize_modelopt(w.data(), 1, 32, b, c.data(), s.data()), tetra::error);
        EXPECT_THROW(nvfp4_quantize_ct(w.data(), 1, 32, b, c.data(), s.data()), tetra::error);
        EXPECT_THROW(nvfp4_quantize_activation_row(w.data(), 32, b, c.data(), s.data()),
                     tetra::error);
    }
    try {
        nvfp4_quantize_modelopt(w.data(), 1, 24, 1.0f, c.data(), s.data());
    } catch (const tetra::error& e) {
        EXPECT_NE(std::string(e.what()).find("24"), std::string::npos) << e.what();
    }
}

// ---- activations (§3.5, exact-division variant) -------------------------------------------------

TEST(nvfp4_codec, activation_saturating_and_underflowing_scales) {
    // G = 1000: SF = 1000·10/6 = 1666.7 saturates to 448 (0x7E); elements beyond 6·0.448 clip.
    auto sat = quant_act(k_block_b, 1000.0f);
    EXPECT_EQ(sat.scales[0], 0x7E);
    const float div = 448.0f / 1000.0f;
    for (int i = 0; i < 16; ++i) {
        uint8_t code = (sat.codes[i / 2] >> (4 * (i % 2))) & 0xF;
        EXPECT_EQ(code, ref::e2m1_encode(k_block_b[i] / div, false)) << i;
    }
    EXPECT_EQ(sat.codes[0] & 0xF, 0x7) << "10/0.448 = 22.3 clips to +6";
    // G = 1e-6: SF = 1.7e-6 < 2^-10 rounds to 0x00 (no replacement); codes = e2m1(x·0) = sign only.
    auto under = quant_act(k_block_b, 1e-6f);
    EXPECT_EQ(under.scales[0], 0x00);
    EXPECT_EQ(hex(under.codes), "00 08 00 00 00 08 08 80");
}

// ---- recipes on random data against the spec formulas with the reference codecs ----------------

namespace {

// Rows of N(0,1) scaled by 2^U(-12,12) per row, with some all-zero blocks, single outliers and
// −0.0 elements: exercises every scale-byte range including subnormal e4m3 scales.
std::vector<float> random_weights(int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    std::uniform_real_distribution<float> u(-12.0f, 12.0f);
    std::vector<float> w(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
        float row_scale = std::exp2(u(rng));
        for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = n01(rng) * row_scale;
    }
    for (int64_t b = 0; b < rows * cols / 16; ++b) {
        uint32_t k = rng() % 16;
        if (k == 0) std::fill(w.begin() + b * 16, w.begin() + b * 16 + 16, 0.0f);
        if (k == 1) w[b * 16 + rng() % 16] *= 50.0f;
        if (k == 2) w[b * 16 + rng() % 16] = -0.0f;
    }
    return w;
}

float tensor_amax(const std::vector<float>& w) {
    float m = 0;
    for (float x : w) m = std::max(m, std::fabs(x));
    return m;
}

uint8_t code_at(const quantized& q, int64_t i) { return (q.codes[i / 2] >> (4 * (i % 2))) & 0xF; }

struct shape_case {
    int64_t rows, cols;
    uint32_t seed;
    std::string vars() const {
        return "rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
               " seed=" + std::to_string(seed);
    }
};
const shape_case k_shapes[] = {{1, 16, 1}, {3, 48, 2}, {7, 160, 3}, {64, 256, 4}, {130, 64, 5}};

}  // namespace

TEST(nvfp4_codec, modelopt_recipe_matches_spec_formulas) {
    ref::e4m3_grid g;
    for (const auto& sc : k_shapes) {
        auto w = random_weights(sc.rows, sc.cols, sc.seed);
        const float s = nvfp4_scale_global_modelopt(tensor_amax(w));
        ASSERT_EQ(s, tensor_amax(w) / 2688.0f) << sc.vars();
        auto q = quant_modelopt(w, sc.rows, s);
        for (int64_t b = 0; b < sc.rows * sc.cols / 16; ++b) {
            float amax = 0;
            for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(w[b * 16 + i]));
            float sb = amax / (6.0f * s);
            if (sb == 0.0f) sb = 1.0f;
            uint8_t byte = ref::e4m3_encode(sb, g);
            ASSERT_EQ(q.scales[b], byte) << sc.vars() << " block " << b;
            const float d = float(ref::e4m3_value(byte)) * s;
            for (int i = 0; i < 16; ++i) {
                float x = w[b * 16 + i];
                ASSERT_EQ(code_at(q, b * 16 + i), ref::e2m1_encode(x / d, true))
                    << sc.vars() << " element " << b * 16 + i << " x=" << x;
            }
        }
    }
}

TEST(nvfp4_codec, ct_recipe_matches_spec_formulas) {
    ref::e4m3_grid g;
    for (const auto& sc : k_shapes) {
        auto w = random_weights(sc.rows, sc.cols, sc.seed + 100);
        const float gs = nvfp4_global_scale_ct(tensor_amax(w));
        ASSERT_EQ(gs, 2688.0f / tensor_amax(w)) << sc.vars();
        auto q = quant_ct(w, sc.rows, gs);
        for (int64_t b = 0; b < sc.rows * sc.cols / 16; ++b) {
            float amax = 0;
            for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(w[b * 16 + i]));
            float local = std::min(gs * (amax / 6.0f), 448.0f);
            uint8_t byte = ref::e4m3_encode(local, g);
            if (ref::e4m3_value(byte) == 0.0) byte = 0x20;
            ASSERT_EQ(q.scales[b], byte) << sc.vars() << " block " << b;
            const float d = float(ref::e4m3_value(byte)) / gs;
            for (int i = 0; i < 16; ++i) {
                float x = w[b * 16 + i];
                float qx = std::max(-6.0f, std::min(6.0f, x / d));
                ASSERT_EQ(code_at(q, b * 16 + i), ref::e2m1_encode(qx, false))
                    << sc.vars() << " element " << b * 16 + i << " x=" << x;
            }
        }
    }
}

TEST(nvfp4_codec, activation_matches_spec_formulas) {
    ref::e4m3_grid g;
    for (const auto& sc : k_shapes) {
        auto x = random_weights(1, sc.rows * sc.cols, sc.seed + 200);
        // Calibrated amax a quarter of the runtime one, so some block scales saturate at 448.
        const float gq = 2688.0f / (0.25f * tensor_amax(x));
        auto q = quant_act(x, gq);
        for (int64_t b = 0; b < int64_t(x.size()) / 16; ++b) {
            float amax = 0;
            for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[b * 16 + i]));
            uint8_t byte = ref::e4m3_encode(gq * (amax / 6.0f), g);
            ASSERT_EQ(q.scales[b], byte) << sc.vars() << " block " << b;
            const float sf = float(ref::e4m3_value(byte));
            for (int i = 0; i < 16; ++i) {
                float xi = x[b * 16 + i];
                float qx = sf == 0.0f ? xi * 0.0f : xi / (sf / gq);
                ASSERT_EQ(code_at(q, b * 16 + i), ref::e2m1_encode(qx, false))
                    << sc.vars() << " element " << b * 16 + i;
            }
        }
    }
}

TEST(nvfp4_codec, dequantize_matches_definition_and_rows) {
    for (const auto& sc : k_shapes) {
        auto w = random_weights(sc.rows, sc.cols, sc.seed + 300);
        const float s = nvfp4_scale_global_modelopt(tensor_amax(w));
        auto q = quant_modelopt(w, sc.rows, s);
        auto d = dequant(q, sc.rows, s);
        std::vector<float> row(sc.cols);
        for (int64_t r = 0; r < sc.rows; ++r) {
            nvfp4_dequantize_row(q.codes.data() + r * sc.cols / 2, q.scales.data() + r * sc.cols / 16,
                                 s, sc.cols, row.data());
            for (int64_t c = 0; c < sc.cols; ++c) {
                int64_t i = r * sc.cols + c;
                // §3.3 in ModelOpt's order: (f32(e4m3) · S) first, then · e2m1.
                float expect = float(ref::e2m1_value(code_at(q, i))) *
                               (float(ref::e4m3_value(q.scales[i / 16])) * s);
                ASSERT_EQ(d[i], expect) << sc.vars() << " element " << i;
                ASSERT_EQ(row[c], d[i]) << sc.vars() << " element " << i;
            }
        }
    }
}

// The row-parallel matrix entry points must equal row-at-a-time calls (no cross-row state).
TEST(nvfp4_codec, matrix_equals_row_by_row) {
    const int64_t rows = 301, cols = 96;
    auto w = random_weights(rows, cols, 11);
    const float s = nvfp4_scale_global_modelopt(tensor_amax(w));
    const float gs = nvfp4_global_scale_ct(tensor_amax(w));
    auto mo = quant_modelopt(w, rows, s);
    auto ct = quant_ct(w, rows, gs);
    for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> one(w.begin() + r * cols, w.begin() + (r + 1) * cols);
        auto mo1 = quant_modelopt(one, 1, s);
        auto ct1 = quant_ct(one, 1, gs);
        ASSERT_TRUE(std::equal(mo1.codes.begin(), mo1.codes.end(), mo.codes.begin() + r * cols / 2));
        ASSERT_TRUE(std::equal(mo1.scales.begin(), mo1.scales.end(), mo.scales.begin() + r * cols / 16));
        ASSERT_TRUE(std::equal(ct1.codes.begin(), ct1.codes.end(), ct.codes.begin() + r * cols / 2));
        ASSERT_TRUE(std::equal(ct1.scales.begin(), ct1.scales.end(), ct.scales.begin() + r * cols / 16));
    }
}

// ---- round-trip error bounds ------------------------------------------------------------------

// Half the gap between the E2M1 neighbours around |q| (q in block-scale units): gaps are 0.5 on
// [0, 2], 1 on [2, 4], 2 on [4, 6]; beyond 6 (q can reach 6·(1 + 2^-4) when the e4m3 scale rounds
// down by its half-ulp 2^-4) the clipping error is at most 0.375 < 1.
static float half_gap(float a) { return a <= 2.0f ? 0.25f : a <= 4.0f ? 0.5f : 1.0f; }

TEST(nvfp4_codec, round_trip_error_bounds) {
    for (int recipe = 0; recipe < 2; ++recipe) {
        for (const auto& sc : k_shapes) {
            auto w = random_weights(sc.rows, sc.cols, sc.seed + 400);
            const float amax = tensor_amax(w);
            const float s = recipe == 0 ? nvfp4_scale_global_modelopt(amax)
                                        : nvfp4_ct_to_dequant(nvfp4_global_scale_ct(amax));
            auto q = recipe == 0 ? quant_modelopt(w, sc.rows, s)
                                 : quant_ct(w, sc.rows, nvfp4_global_scale_ct(amax));
            auto d = dequant(q, sc.rows, s);
            for (size_t i = 0; i < w.size(); ++i) {
                float bs = e4m3_decode(q.scales[i / 16]) * s;  // block step unit
                // Scale bytes below 2^-6 (subnormal e4m3, tiny blocks) keep only 1–3 bits, so q
                // can exceed 6 by far; those blocks are bounded by their amax instead.
                float a = std::fabs(w[i]) / bs;
                float bound = a <= 6.375f ? half_gap(a) * bs * (1 + 1e-6f) + 1e-6f * std::fabs(w[i])
                                          : std::fabs(w[i]);
                ASSERT_LE(std::fabs(d[i] - w[i]), bound)
                    << (recipe ? "ct " : "modelopt ") << sc.vars() << " element " << i
                    << " w=" << w[i] << " deq=" << d[i] << " scale byte " << int(q.scales[i / 16]);
            }
        }
    }
}

TEST(nvfp4_codec, round_trip_nmse_gaussian) {
    // Pure N(0,1), 256x1024, both recipes. Reason for the band: NVFP4 with the *exact* scale
    // amax/6 and RNE on N(0,1) blocks of 16 has NMSE 0.00886 (numpy Monte Carlo, 3.2M samples);
    // rounding the scale to e4m3 adds ~2% (this seed measures 0.00905). A wrong grid, a scale off
    // by a factor, swapped nibbles or no clipping leave [0.0085, 0.0095]; ties have measure zero
    // here and are covered by the vectors above.
    const int64_t rows = 256, cols = 1024;
    std::mt19937 rng(1234);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    std::vector<float> w(rows * cols);
    for (auto& x : w) x = n01(rng);
    const float amax = tensor_amax(w);
    for (int recipe = 0; recipe < 2; ++recipe) {
        const float s = recipe == 0 ? nvfp4_scale_global_modelopt(amax)
                                    : nvfp4_ct_to_dequant(nvfp4_global_scale_ct(amax));
        auto q = recipe == 0 ? quant_modelopt(w, rows, s) : quant_ct(w, rows, nvfp4_global_scale_ct(amax));
        auto d = dequant(q, rows, s);
        double err = 0, ref2 = 0;
        for (size_t i = 0; i < w.size(); ++i) {
            err += double(d[i] - w[i]) * (d[i] - w[i]);
            ref2 += double(w[i]) * w[i];
        }
        double nmse = err / ref2;
        RecordProperty(recipe ? "nmse_ct" : "nmse_modelopt", std::to_string(nmse));
        EXPECT_LT(nmse, 0.0095) << (recipe ? "ct" : "modelopt");
        EXPECT_GT(nmse, 0.0085) << (recipe ? "ct" : "modelopt");
    }
}
