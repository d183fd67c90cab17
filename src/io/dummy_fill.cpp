// The dummy generator's inner loops (dummy_fill.h). Values are defined by the scalar code; the
// AVX2 code performs the same IEEE operations in the same order: every multiply that feeds an add
// is an explicit fma in both paths (so -ffp-contract cannot make them differ), divisions and
// square roots are correctly rounded, int → float conversions are exact (< 2^24).
// Normal: Box-Muller. Per 16-block of a row, lane i < 8 hashes column 16b+i for u1 (radius) and
// column 16b+8+i for u2 (angle); z(16b+i) = r·cos θ, z(16b+8+i) = r·sin θ. |z| ≤ 5.9 (u1 ≥ 2^-25).
#include "io/dummy_fill.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "nvfp4/nvfp4.h"

namespace tetra {

namespace {

#define TETRA_AVX2 __attribute__((target("avx2,fma")))

uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A 32-bit integer finalizer with full avalanche (multiply-xorshift, as in "hash prospector").
inline uint32_t mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}
inline uint32_t hash32(uint32_t c, uint32_t k0, uint32_t k1) { return mix32(mix32(c ^ k0) + k1); }

struct row_key {
    uint32_t k0, k1;
};
row_key key_of_row(uint64_t tensor_key, int64_t row) {
    uint64_t k = splitmix64(tensor_key ^ splitmix64(uint64_t(row)));
    return {uint32_t(k), uint32_t(k >> 32)};
}

inline float as_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t as_u32(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// Constants shared by both paths (one definition, so both round them identically).
constexpr float k_u24 = 1.0f / 16777216.0f;                    // 2^-24
constexpr float k_angle_step = 1.57079632679489662f / 4194304;  // (π/2)·2^-22
constexpr float k_neg_pi_4 = -0.785398163397448310f;
constexpr float k_ln2_hi = 0.693145751953125f;     // ln 2 split: hi has 16 significant bits, so
constexpr float k_ln2_lo = 1.42860676533018708e-06f;  // e·hi is exact for |e| ≤ 128
constexpr uint32_t k_sqrt2_bits = 0x3FB504F3u;     // √2 as f32
// ln m = 2·atanh(s), s = (m−1)/(m+1), |s| ≤ 0.1716: 2s(1 + s²/3 + s⁴/5 + s⁶/7 + s⁸/9), rel. err < 3e-9.
constexpr float k_l3 = 1.0f / 3, k_l5 = 1.0f / 5, k_l7 = 1.0f / 7, k_l9 = 1.0f / 9;
// Taylor on |t| ≤ π/4: sin to t⁹ (err < 2e-9), cos to t¹⁰ (err < 2e-10).
constexpr float k_s3 = -1.0f / 6, k_s5 = 1.0f / 120, k_s7 = -1.0f / 5040, k_s9 = 1.0f / 362880;
constexpr float k_c2 = -0.5f, k_c4 = 1.0f / 24, k_c6 = -1.0f / 720, k_c8 = 1.0f / 40320, k_c10 = -1.0f / 3628800;

// ---- scalar path (the definition) ----------------------------------------------------------------

float log_unit(float u) {  // ln u for normal u in (0, 1)
    uint32_t bits = as_u32(u);
    int32_t e = int32_t(bits >> 23) - 127;
    uint32_t mb = (bits & 0x7FFFFFu) | 0x3F800000u;
    float m = as_f32(mb);
    if (mb > k_sqrt2_bits) m = m * 0.5f, e += 1;  // m in [√½, √2]
    float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
    float p = std::fma(s2, k_l9, k_l7);
    p = std::fma(s2, p, k_l5);
    p = std::fma(s2, p, k_l3);
    float lnm = (s + s) * std::fma(s2, p, 1.0f);
    return std::fma(float(e), k_ln2_hi, std::fma(float(e), k_ln2_lo, lnm));
}

inline float bf16_round(float v) {  // RNE to bf16, kept as f32 (v finite)
    uint32_t u = as_u32(v);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return as_f32(u & 0xFFFF0000u);
}

// Block of 16 at column c0 (a multiple of 16): out[16].
void normal_block_scalar(uint32_t c0, row_key k, float sigma, float mean, float* out) {
    for (uint32_t i = 0; i < 8; ++i) {
        uint32_t ha = hash32(c0 + i, k.k0, k.k1), hb = hash32(c0 + 8 + i, k.k0, k.k1);
        float u1 = (float(ha >> 8) + 0.5f) * k_u24;
        float r = std::sqrt(-2.0f * log_unit(u1));
        uint32_t q = hb >> 30;
        float t = std::fma(float((hb >> 8) & 0x3FFFFFu) + 0.5f, k_angle_step, k_neg_pi_4), t2 = t * t;
        float ps = std::fma(t2, k_s9, k_s7);
        ps = std::fma(t2, ps, k_s5);
        ps = std::fma(t2, ps, k_s3);
        float sn = std::fma(t * t2, ps, t);
        float pc = std::fma(t2, k_c10, k_c8);
        pc = std::fma(t2, pc, k_c6);
        pc = std::fma(t2, pc, k_c4);
        pc = std::fma(t2, pc, k_c2);
        float cs = std::fma(t2, pc, 1.0f);
        // Rotate (cos t, sin t) by q quarter turns: θ = t + q·π/2 is uniform on the circle.
        float x = (q & 1) ? sn : cs, y = (q & 1) ? cs : sn;
        if ((q ^ (q >> 1)) & 1) x = -x;
        if (q >> 1) y = -y;
        out[i] = bf16_round(std::fma(sigma, r * x, mean));
        out[8 + i] = bf16_round(std::fma(sigma, r * y, mean));
    }
}

// ---- AVX2 path (same operations, 8 lanes) -----------------------------------------------------------

TETRA_AVX2 inline __m256i mix32_v(__m256i x) {
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(int32_t(0x7FEB352Du)));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(int32_t(0x846CA68Bu)));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

TETRA_AVX2 inline __m256i hash32_v(__m256i c, __m256i k0, __m256i k1) {
    return mix32_v(_mm256_add_epi32(mix32_v(_mm256_xor_si256(c, k0)), k1));
}

TETRA_AVX2 inline __m256 log_unit_v(__m256 u) {
    __m256i bits = _mm256_castps_si256(u);
    __m256i e = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(127));
    __m256i mb = _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFF)), _mm256_set1_epi32(0x3F800000));
    __m256i big = _mm256_cmpgt_epi32(mb, _mm256_set1_epi32(int32_t(k_sqrt2_bits)));  // both positive
    __m256 m = _mm256_castsi256_ps(mb);
    m = _mm256_blendv_ps(m, _mm256_mul_ps(m, _mm256_set1_ps(0.5f)), _mm256_castsi256_ps(big));
    e = _mm256_sub_epi32(e, big);  // big = −1 where m was halved
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 s = _mm256_div_ps(_mm256_sub_ps(m, one), _mm256_add_ps(m, one)), s2 = _mm256_mul_ps(s, s);
    __m256 p = _mm256_fmadd_ps(s2, _mm256_set1_ps(k_l9), _mm256_set1_ps(k_l7));
    p = _mm256_fmadd_ps(s2, p, _mm256_set1_ps(k_l5));
    p = _mm256_fmadd_ps(s2, p, _mm256_set1_ps(k_l3));
    __m256 lnm = _mm256_mul_ps(_mm256_add_ps(s, s), _mm256_fmadd_ps(s2, p, one));
    __m256 ef = _mm256_cvtepi32_ps(e);
    return _mm256_fmadd_ps(ef, _mm256_set1_ps(k_ln2_hi), _mm256_fmadd_ps(ef, _mm256_set1_ps(k_ln2_lo), lnm));
}

TETRA_AVX2 inline __m256 bf16_round_v(__m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    u = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb);
    return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32(int32_t(0xFFFF0000u))));
}

TETRA_AVX2 void normal_block_avx2(uint32_t c0, row_key k, float sigma, float mean, float* out) {
    const __m256i k0 = _mm256_set1_epi32(int32_t(k.k0)), k1 = _mm256_set1_epi32(int32_t(k.k1));
    const __m256i ca = _mm256_add_epi32(_mm256_set1_epi32(int32_t(c0)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i ha = hash32_v(ca, k0, k1), hb = hash32_v(_mm256_add_epi32(ca, _mm256_set1_epi32(8)), k0, k1);
    __m256 u1 = _mm256_mul_ps(_mm256_add_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(ha, 8)), _mm256_set1_ps(0.5f)),
                              _mm256_set1_ps(k_u24));
    __m256 r = _mm256_sqrt_ps(_mm256_mul_ps(_mm256_set1_ps(-2.0f), log_unit_v(u1)));
    __m256i q = _mm256_srli_epi32(hb, 30);
    __m256 f = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(hb, 8), _mm256_set1_epi32(0x3FFFFF)));
    __m256 t = _mm256_fmadd_ps(_mm256_add_ps(f, _mm256_set1_ps(0.5f)), _mm256_set1_ps(k_angle_step),
                               _mm256_set1_ps(k_neg_pi_4));
    __m256 t2 = _mm256_mul_ps(t, t);
    __m256 ps = _mm256_fmadd_ps(t2, _mm256_set1_ps(k_s9), _mm256_set1_ps(k_s7));
    ps = _mm256_fmadd_ps(t2, ps, _mm256_set1_ps(k_s5));
    ps = _mm256_fmadd_ps(t2, ps, _mm256_set1_ps(k_s3));
    __m256 sn = _mm256_fmadd_ps(_mm256_mul_ps(t, t2), ps, t);
    __m256 pc = _mm256_fmadd_ps(t2, _mm256_set1_ps(k_c10), _mm256_set1_ps(k_c8));
    pc = _mm256_fmadd_ps(t2, pc, _mm256_set1_ps(k_c6));
    pc = _mm256_fmadd_ps(t2, pc, _mm256_set1_ps(k_c4));
    pc = _mm256_fmadd_ps(t2, pc, _mm256_set1_ps(k_c2));
    __m256 cs = _mm256_fmadd_ps(t2, pc, _mm256_set1_ps(1.0f));
    const __m256i one = _mm256_set1_epi32(1);
    __m256 swap = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(q, one), one));
    __m256 x = _mm256_blendv_ps(cs, sn, swap), y = _mm256_blendv_ps(sn, cs, swap);
    __m256i negx = _mm256_slli_epi32(_mm256_and_si256(_mm256_xor_si256(q, _mm256_srli_epi32(q, 1)), one), 31);
    __m256i negy = _mm256_slli_epi32(_mm256_srli_epi32(q, 1), 31);
    x = _mm256_xor_ps(x, _mm256_castsi256_ps(negx));
    y = _mm256_xor_ps(y, _mm256_castsi256_ps(negy));
    const __m256 sg = _mm256_set1_ps(sigma), mu = _mm256_set1_ps(mean);
    _mm256_storeu_ps(out, bf16_round_v(_mm256_fmadd_ps(sg, _mm256_mul_ps(r, x), mu)));
    _mm256_storeu_ps(out + 8, bf16_round_v(_mm256_fmadd_ps(sg, _mm256_mul_ps(r, y), mu)));
}

// nvfp4_quantize_modelopt's row loop (quantize_row_modelopt in nvfp4/quantize.cpp), 8 lanes:
// the block amax (max is exact in any order), the scalar e4m3 scale via the codec, q = w / divisor
// with IEEE division, and e2m1_encode_modelopt as the codec's threshold sum (RNE ties included;
// NaN → 0x7).
TETRA_AVX2 void quantize_row_avx2(const float* w, int64_t cols, float scale_global, uint8_t* codes, uint8_t* scales) {
    const float six_s = 6.0f * scale_global;
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), zero = _mm256_setzero_ps();
    const float th[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    for (int64_t b = 0; b < cols / 16; ++b) {
        __m256 a = _mm256_loadu_ps(w + 16 * b), c = _mm256_loadu_ps(w + 16 * b + 8);
        __m256 mx = _mm256_max_ps(_mm256_and_ps(a, abs_mask), _mm256_and_ps(c, abs_mask));
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
        float s_b = _mm_cvtss_f32(m) / six_s;
        if (s_b == 0.0f) s_b = 1.0f;
        uint8_t byte = e4m3_encode(s_b);
        scales[b] = byte;
        const __m256 divisor = _mm256_set1_ps(e4m3_decode(byte) * scale_global);
        for (int h = 0; h < 2; ++h) {
            __m256 qv = _mm256_div_ps(h ? c : a, divisor), aq = _mm256_and_ps(qv, abs_mask);
            __m256i code = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(qv, zero, _CMP_LT_OQ)), _mm256_set1_epi32(8));
            for (int i = 0; i < 7; ++i) {  // thresholds alternate > and ≥ (ties to the even code)
                __m256 hit = (i & 1) ? _mm256_cmp_ps(aq, _mm256_set1_ps(th[i]), _CMP_GE_OQ)
                                     : _mm256_cmp_ps(aq, _mm256_set1_ps(th[i]), _CMP_GT_OQ);
                code = _mm256_sub_epi32(code, _mm256_castps_si256(hit));  // hit = −1
            }
            // NaN (0/0 when the block scale byte is 0x00) → 0x7, as the codec.
            __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(qv, qv, _CMP_UNORD_Q));
            code = _mm256_blendv_epi8(code, _mm256_set1_epi32(7), nan);
            // Pairs (even, odd) of 32-bit codes → even | odd << 4 in the low byte of each 64-bit lane.
            alignas(32) uint64_t pk[4];
            _mm256_store_si256(reinterpret_cast<__m256i*>(pk), _mm256_or_si256(code, _mm256_srli_epi64(code, 28)));
            uint8_t* out = codes + 8 * b + 4 * h;
            for (int j = 0; j < 4; ++j) out[j] = uint8_t(pk[j]);
        }
    }
}

}  // namespace

bool dummy_simd_available() {
    static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return ok;
}

uint64_t dummy_tensor_key(uint64_t seed, const std::string& name) {
    uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a 64 of the name
    for (unsigned char ch : name) h = (h ^ ch) * 0x100000001B3ull;
    return splitmix64(splitmix64(seed) ^ h);
}

void dummy_normal_row(uint64_t tensor_key, int64_t row, int64_t cols, float sigma, float mean, float* out, bool simd) {
    TETRA_ASSERT(cols >= 0 && cols < (int64_t(1) << 32) && std::isfinite(sigma) && std::isfinite(mean));
    const row_key k = key_of_row(tensor_key, row);
    const bool v = simd && dummy_simd_available();
    const int64_t full = cols / 16;
    for (int64_t b = 0; b < full; ++b) {
        if (v) normal_block_avx2(uint32_t(16 * b), k, sigma, mean, out + 16 * b);
        else normal_block_scalar(uint32_t(16 * b), k, sigma, mean, out + 16 * b);
    }
    if (cols % 16) {  // tail: the first cols % 16 values of the next block
        float tmp[16];
        if (v) normal_block_avx2(uint32_t(16 * full), k, sigma, mean, tmp);
        else normal_block_scalar(uint32_t(16 * full), k, sigma, mean, tmp);
        std::memcpy(out + 16 * full, tmp, size_t(cols % 16) * sizeof(float));
    }
}

void dummy_quantize_row_modelopt(const float* w, int64_t cols, float scale_global, uint8_t* codes, uint8_t* scales,
                                 bool simd) {
    TETRA_CHECK(cols % 16 == 0, "dummy weights: NVFP4 row of %lld columns; expected a multiple of 16", (long long)cols);
    TETRA_CHECK(std::isfinite(scale_global) && scale_global > 0.0f,
                "dummy weights: global scale %g; expected finite and > 0", double(scale_global));
    if (simd && dummy_simd_available()) quantize_row_avx2(w, cols, scale_global, codes, scales);
    else nvfp4_quantize_modelopt(w, 1, cols, scale_global, codes, scales);
}

}  // namespace tetra
