// matmul_nvfp4_w4a16_avx2: the fast CPU W4A16 kernel, tuned for decode (M small). Per 16-element
// block: 8 code bytes → nibbles in element order (and/shift/unpack) → int8 2·e2m1 through a
// pshufb LUT → two 8-wide f32 vectors; block partial Σ w·x by FMA, then acc += partial ·
// (e4m3 scale / 2) (the halving is exact); scale_global once per output. Up to 4 activation rows
// share each decoded block. Napkin math (SmolLM2-135M decode): ~106 M weight MACs → ~60 MB of
// codes+scales per token; ~10 uops per 16 MACs, so 2 cores decode a token's weights in a few ms.
#include <immintrin.h>

#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "nvfp4/nvfp4.h"

namespace tetra {
namespace cpu {

// e4m3 byte → value / 2 (pairs with the LUT holding 2·e2m1).
static const float* half_e4m3_table() {
    static const std::vector<float> t = [] {
        std::vector<float> v(256);
        for (int b = 0; b < 256; ++b) v[size_t(b)] = e4m3_decode(uint8_t(b)) * 0.5f;
        return v;
    }();
    return t.data();
}

#define TETRA_AVX2 __attribute__((target("avx2,fma,f16c")))

TETRA_AVX2 static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// 16 codes (8 bytes, even element in the low nibble) → 2·e2m1 as f32 in w0 (elements 0..7), w1 (8..15).
TETRA_AVX2 static inline void decode16(const uint8_t* c, __m128i lut, __m256& w0, __m256& w1) {
    const __m128i mask = _mm_set1_epi8(0x0F);
    __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c));
    __m128i lo = _mm_and_si128(v, mask), hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
    __m128i q = _mm_shuffle_epi8(lut, _mm_unpacklo_epi8(lo, hi));
    w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
    w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)));
}

// Rows [n0, n1) of W against MT activation rows x[0..MT) (row stride k); out row stride n_out.
template <int MT>
TETRA_AVX2 static void nvfp4_rows(const float* x, int64_t k, const linear_weight& w, int64_t n0, int64_t n1,
                                  float* out, int64_t n_out) {
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const float* st = half_e4m3_table();
    const int64_t nkb = k / 16;
    for (int64_t n = n0; n < n1; ++n) {
        const uint8_t* cr = w.codes.ptr<uint8_t>() + n * (k / 2);
        const uint8_t* sr = static_cast<const uint8_t*>(w.scales.data) + n * nkb;
        __m256 acc[MT][2];
        for (int mt = 0; mt < MT; ++mt) acc[mt][0] = acc[mt][1] = _mm256_setzero_ps();
        int64_t kb = 0;
        for (; kb + 1 < nkb; kb += 2) {  // two blocks per step: independent accumulator chains
            for (int u = 0; u < 2; ++u) {
                __m256 w0, w1;
                decode16(cr + (kb + u) * 8, lut, w0, w1);
                __m256 s = _mm256_set1_ps(st[sr[kb + u]]);
                for (int mt = 0; mt < MT; ++mt) {
                    const float* xp = x + mt * k + (kb + u) * 16;
                    __m256 p = _mm256_mul_ps(w0, _mm256_loadu_ps(xp));
                    p = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xp + 8), p);
                    acc[mt][u] = _mm256_fmadd_ps(p, s, acc[mt][u]);
                }
            }
        }
        for (; kb < nkb; ++kb) {
            __m256 w0, w1;
            decode16(cr + kb * 8, lut, w0, w1);
            __m256 s = _mm256_set1_ps(st[sr[kb]]);
            for (int mt = 0; mt < MT; ++mt) {
                const float* xp = x + mt * k + kb * 16;
                __m256 p = _mm256_mul_ps(w0, _mm256_loadu_ps(xp));
                p = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xp + 8), p);
                acc[mt][0] = _mm256_fmadd_ps(p, s, acc[mt][0]);
            }
        }
        for (int mt = 0; mt < MT; ++mt)
            out[mt * n_out + n] = hsum(_mm256_add_ps(acc[mt][0], acc[mt][1])) * w.scale_global;
    }
}

void nvfp4_matmul_avx2_f32(const float* x, int64_t m, const linear_weight& w, float* out) {
    TETRA_ASSERT(cpu_features() & FEAT_CPU_AVX2_FMA_F16C);
    int64_t k = w.n_in, n_out = w.n_out;
    parallel_for(n_out, [&](int64_t n0, int64_t n1) {
        for (int64_t m0 = 0; m0 < m; m0 += 4) {
            const float* xm = x + m0 * k;
            float* om = out + m0 * n_out;
            switch (std::min<int64_t>(4, m - m0)) {
                case 1: nvfp4_rows<1>(xm, k, w, n0, n1, om, n_out); break;
                case 2: nvfp4_rows<2>(xm, k, w, n0, n1, om, n_out); break;
                case 3: nvfp4_rows<3>(xm, k, w, n0, n1, om, n_out); break;
                default: nvfp4_rows<4>(xm, k, w, n0, n1, om, n_out); break;
            }
        }
    });
}

// x: [M, K] f32; w: NVFP4 [N, K]; out: [M, N] f32
static void matmul_nvfp4_w4a16_avx2(backend&, const matmul_args& a) {
    nvfp4_matmul_avx2_f32(a.x.ptr<float>(), a.m, *a.w, a.out.ptr<float>());
}

kernel_entry matmul_nvfp4_w4a16_avx2_entry() {
    kernel_req req;
    req.device = device_kind::CPU;
    req.features = FEAT_CPU_AVX2_FMA_F16C;
    req.act_dtypes = {dtype::F32};
    return make_kernel<matmul_args>("matmul_nvfp4_w4a16", "matmul_nvfp4_w4a16_avx2", req, 10, nullptr,
                                    matmul_nvfp4_w4a16_avx2);
}

}  // namespace cpu
}  // namespace tetra
