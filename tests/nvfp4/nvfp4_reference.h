// Independent reference formulations of the E2M1/E4M3 codecs for the tests: values from the bit
// definitions (sign, exponent, bias, mantissa) in double, nearest value by distance, exact ties to
// the even mantissa. Deliberately shares no code or thresholds with src/nvfp4/codec.cpp.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ref {

inline uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// E2M1: bit 3 sign, bits 2..1 exponent (bias 1), bit 0 mantissa; e == 0 is subnormal 0.m·2^0.
inline double e2m1_value(int code) {
    int s = (code >> 3) & 1, e = (code >> 1) & 3, m = code & 1;
    double v = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
    return s ? -v : v;
}

// E4M3 (fn): bit 7 sign, bits 6..3 exponent (bias 7), bits 2..0 mantissa; e == 0 → m·2^-9;
// S.1111.111 is NaN; no infinities.
inline double e4m3_value(int b) {
    int s = (b >> 7) & 1, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    double v = e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}

// The 8 non-negative E2M1 magnitudes (codes 0..7) as doubles.
struct e2m1_grid {
    double v[8];
    e2m1_grid() { for (int c = 0; c < 8; ++c) v[c] = e2m1_value(c); }
};

// Nearest of the 8 magnitudes to a (>= 0) by distance in double; an exact tie picks the code
// with mantissa bit 0 clear. Values beyond 6 are nearest to 6 anyway (satfinite), so a is
// clamped to 8 first: for huge a, a − v would round to a for every v and fake a tie (and +Inf
// would give Inf − Inf). Below 8 the differences that can tie are exact in double.
inline int e2m1_nearest_magnitude(double a, const e2m1_grid& g) {
    a = a > 8.0 ? 8.0 : a;
    int best = 0;
    double best_d = std::fabs(a - g.v[0]);
    for (int c = 1; c < 8; ++c) {
        double d = std::fabs(a - g.v[c]);
        if (d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) {
            best = c;
            best_d = d;
        }
    }
    return best;
}

// modelopt = false: sign from the sign bit (−0 → 0x8); true: sign = (x < 0) (−0 → 0x0).
// NaN → 0x7 (+6, sign dropped) in both.
inline uint8_t e2m1_encode(float x, bool modelopt, const e2m1_grid& g) {
    if (std::isnan(x)) return 0x7;
    int mag = e2m1_nearest_magnitude(std::fabs(double(x)), g);
    bool neg = modelopt ? x < 0.0f : std::signbit(x);
    return uint8_t((neg ? 8 : 0) | mag);
}

inline uint8_t e2m1_encode(float x, bool modelopt) {
    static const e2m1_grid g;
    return e2m1_encode(x, modelopt, g);
}

// The 127 finite non-negative E4M3 values (bytes 0x00..0x7E) in increasing order, as doubles.
struct e4m3_grid {
    double v[127];
    e4m3_grid() { for (int b = 0; b < 127; ++b) v[b] = e4m3_value(b); }
};

// RNE to E4M3 by binary search over the grid: the largest grid value <= a, then the midpoint to
// its successor decides; an exact midpoint picks the even byte (= even mantissa). |x| > 448 and
// Inf → ±448, NaN → 0x7F, sign from the sign bit.
inline uint8_t e4m3_encode(float x, const e4m3_grid& g) {
    if (std::isnan(x)) return 0x7F;
    uint8_t s = std::signbit(x) ? 0x80 : 0x00;
    double a = std::fabs(double(x));
    if (a > 448.0) return uint8_t(s | 0x7E);
    int lo = 0, hi = 126;  // invariant: v[lo] <= a <= v[hi]
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (g.v[mid] <= a) lo = mid; else hi = mid;
    }
    int pick;
    if (g.v[lo] == a) pick = lo;
    else if (g.v[hi] == a) pick = hi;
    else {
        double midpoint = 0.5 * (g.v[lo] + g.v[hi]);  // exact in double
        pick = a < midpoint ? lo : a > midpoint ? hi : ((lo & 1) == 0 ? lo : hi);
    }
    return uint8_t(s | pick);
}

}  // namespace ref
