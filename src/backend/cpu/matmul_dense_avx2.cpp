// matmul_dense_avx2: the fast CPU dense matmul (the lm_head in decode): weights bf16 (shift into
// f32), f16 (F16C) or f32, 8-wide FMA with two accumulator chains per activation row, up to 4
// activation rows per weight row load. Memory-bound for the lm_head: SmolLM2's 49152×576 bf16
// head is 56.6 MB per decoded token.
#include <immintrin.h>

#include "backend/cpu/cpu_kernels.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cpu {

#define TETRA_AVX2 __attribute__((target("avx2,fma,f16c")))

TETRA_AVX2 static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

template <dtype WT>
TETRA_AVX2 static inline __m256 load8(const void* w, int64_t i) {
    if (WT == dtype::F32) return _mm256_loadu_ps(static_cast<const float*>(w) + i);
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
    if (WT == dtype::F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <dtype WT, int MT>
TETRA_AVX2 static void dense_rows(const float* x, int64_t k, const void* w, int64_t n0, int64_t n1, float* out,
                                  int64_t n_out) {
    const size_t wsize = WT == dtype::F32 ? 4 : 2;
    for (int64_t n = n0; n < n1; ++n) {
        const void* wr = static_cast<const char*>(w) + size_t(n * k) * wsize;
        __m256 acc[MT][2];
        for (int mt = 0; mt < MT; ++mt) acc[mt][0] = acc[mt][1] = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 16 <= k; i += 16) {
            __m256 w0 = load8<WT>(wr, i), w1 = load8<WT>(wr, i + 8);
            for (int mt = 0; mt < MT; ++mt) {
                acc[mt][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + mt * k + i), acc[mt][0]);
                acc[mt][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + mt * k + i + 8), acc[mt][1]);
            }
        }
        for (; i + 8 <= k; i += 8) {
            __m256 w0 = load8<WT>(wr, i);
            for (int mt = 0; mt < MT; ++mt)
                acc[mt][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + mt * k + i), acc[mt][0]);
        }
        for (int mt = 0; mt < MT; ++mt) {
            float s = hsum8(_mm256_add_ps(acc[mt][0], acc[mt][1]));
            for (int64_t j = i; j < k; ++j) s += x[mt * k + j] * act_load(w, WT, n * k + j);
            out[mt * n_out + n] = s;
        }
    }
}

template <dtype WT>
static void dense_all(const float* x, int64_t m, int64_t k, const void* w, int64_t n_out, float* out) {
    parallel_for(n_out, [&](int64_t n0, int64_t n1) {
        for (int64_t m0 = 0; m0 < m; m0 += 4) {
            const float* xm = x + m0 * k;
            float* om = out + m0 * n_out;
            switch (std::min<int64_t>(4, m - m0)) {
                case 1: dense_rows<WT, 1>(xm, k, w, n0, n1, om, n_out); break;
                case 2: dense_rows<WT, 2>(xm, k, w, n0, n1, om, n_out); break;
                case 3: dense_rows<WT, 3>(xm, k, w, n0, n1, om, n_out); break;
                default: dense_rows<WT, 4>(xm, k, w, n0, n1, om, n_out); break;
            }
        }
    });
}

// x: [M, K] f32; w.dense: [N, K] bf16|f16|f32; out: [M, N] f32
static void matmul_dense_avx2(backend&, const matmul_args& a) {
    TETRA_ASSERT(cpu_features() & FEAT_CPU_AVX2_FMA_F16C);
    const float* x = a.x.ptr<float>();
    float* out = a.out.ptr<float>();
    const void* w = a.w->dense.data;
    switch (a.w->dense.type) {
        case dtype::BF16: dense_all<dtype::BF16>(x, a.m, a.k, w, a.n, out); break;
        case dtype::F16: dense_all<dtype::F16>(x, a.m, a.k, w, a.n, out); break;
        default: dense_all<dtype::F32>(x, a.m, a.k, w, a.n, out); break;
    }
}

kernel_entry matmul_dense_avx2_entry() {
    kernel_req req;
    req.device = device_kind::CPU;
    req.features = FEAT_CPU_AVX2_FMA_F16C;
    req.act_dtypes = {dtype::F32};
    return make_kernel<matmul_args>("matmul_dense", "matmul_dense_avx2", req, 10, nullptr, matmul_dense_avx2);
}

}  // namespace cpu
}  // namespace tetra
