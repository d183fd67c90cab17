// E2M1 and E4M3 scalar codecs (reference/nvfp4-format.md §1, §2), exact and branch-light.
// Encoders round to nearest even on |x| and saturate (satfinite); decoders are table lookups.
// Proven equal to independent formulations on all 2^32 fp32 inputs (tests/nvfp4/*_slow.cpp).
#include <cmath>
#include <cstring>
#include <limits>

#include "nvfp4/nvfp4.h"

namespace tetra {

namespace {

inline uint32_t bits_of(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float float_of(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// |x| → magnitude code 0..7 by the RNE threshold ladder of §1.2: ties at 0.25, 1.25, 2.5 and 5.0
// go down (to the even codes 0, 2, 4, 6), ties at 0.75, 1.75 and 3.5 go up (to 2, 4, 6); so the
// "down" thresholds are strict (>) and the "up" ones inclusive (>=). |x| > 5 (incl. +Inf) → 7.
// NaN compares false everywhere and yields 0; the callers map it to 0x7.
inline uint8_t e2m1_magnitude(float a) {
    return uint8_t((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                   (a >= 3.5f) + (a > 5.0f));
}

constexpr float k_e2m1_values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// 2^e for small |e| by repeated exact doubling/halving (constexpr, no libm).
constexpr float pow2(int e) {
    float v = 1.0f;
    for (; e > 0; --e) v *= 2.0f;
    for (; e < 0; ++e) v *= 0.5f;
    return v;
}

struct e4m3_table {
    float v[256];
    constexpr e4m3_table() : v() {
        for (int b = 0; b < 256; ++b) {
            int e = (b >> 3) & 15, m = b & 7;
            float mag = e == 0 ? float(m) * pow2(-9) : float(8 + m) * pow2(e - 10);
            if ((b & 0x7F) == 0x7F) mag = std::numeric_limits<float>::quiet_NaN();
            v[b] = (b & 0x80) ? -mag : mag;
        }
    }
};
// constexpr so the table exists before any static initializer elsewhere can call e4m3_decode.
constexpr e4m3_table k_e4m3;

}  // namespace

uint8_t e2m1_encode(float x) {
    uint32_t u = bits_of(x);
    float a = float_of(u & 0x7FFFFFFFu);
    bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
    uint8_t sign = uint8_t((u >> 28) & 0x8);  // sign bit kept, so −0 and −tiny → 0x8 (PTX cvt)
    return nan ? uint8_t(0x7) : uint8_t(sign | e2m1_magnitude(a));  // NaN → +6 per cuda_fp4.hpp
}

uint8_t e2m1_encode_modelopt(float x) {
    // ModelOpt _cast_fp4: sign = (x < 0), so −0 → 0x0. Its NaN result is undefined; we use 0x7.
    float a = std::fabs(x);
    uint8_t sign = x < 0.0f ? uint8_t(0x8) : uint8_t(0);
    return x != x ? uint8_t(0x7) : uint8_t(sign | e2m1_magnitude(a));
}

float e2m1_decode(uint8_t code) { return k_e2m1_values[code & 0xF]; }

uint8_t e4m3_encode(float x) {
    uint32_t u = bits_of(x);
    uint32_t s = (u >> 24) & 0x80u;
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0x7F;               // NaN (sign dropped, as cvt's canonical NaN)
    if (a > 0x43E00000u) return uint8_t(s | 0x7E);  // |x| > 448 incl. Inf → ±448 (satfinite)
    if (a >= 0x3C800000u) {
        // Normal (|x| >= 2^-6): RNE of the 23-bit mantissa to 3 bits; a carry into the exponent
        // is the correct result. Rebias 127 → 7. |x| <= 448 keeps the result <= 0x7E.
        uint32_t r = a + 0x7FFFFu + ((a >> 20) & 1u);
        return uint8_t(s | ((r >> 20) - (120u << 3)));
    }
    // Subnormal: value = m·2^-9, m = RNE(|x|·512) in [0, 8]; m = 8 is byte 0x08 = 2^-6, the
    // smallest normal. |x|·512 is exact; adding 2^23 rounds it to an integer with RNE.
    float t = float_of(a) * 512.0f + 8388608.0f;
    return uint8_t(s | (bits_of(t) - 0x4B000000u));
}

float e4m3_decode(uint8_t b) { return k_e4m3.v[b]; }

}  // namespace tetra
