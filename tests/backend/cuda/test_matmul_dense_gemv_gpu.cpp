// matmul_dense_bf16_gemv_sm80 (the router-sized bf16 GEMV with programmatic dependent launch)
// through the CUDA backend against the CPU backend's reference kernel matmul_dense_cpu (bf16 weight
// and x widened to f32, f32 sums in k order): odd shapes (n 1..500, k 16..7168, k not a multiple of
// 256, m 1..300 with row groups partly filled), vocabulary projections at decode batches, guarded
// outputs, NaN/±Inf parity, rows alone and in batches of every launch geometry bit for bit, and the
// registry's choice (by weight shape; for vocabulary projections also by m).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/gpu_harness.h"
#include "backend/ops.h"

using namespace tetra;
using namespace tetra_test;

namespace {

const char* const k_gemv = "matmul_dense_bf16_gemv_sm80";
// The kernel takes vocabulary projections (n ≥ 16384) at m ≤ this (matmul_dense_gemv_sm80.cu).
constexpr int64_t k_vocab_m_max = 2;

linear_weight dense_linear(const tensor& w) {
    linear_weight lw;
    lw.kind = linear_kind::DENSE, lw.n_out = w.dim(0), lw.n_in = w.dim(1), lw.dense = w;
    return lw;
}

// The oracle: the CPU backend's plain kernel (forced, so an AVX2 twin never stands in for it).
tensor run_cpu(const tensor& x, const tensor& w) {
    force_kernel fk("matmul_dense", "matmul_dense_cpu");
    tensor out = tensor::alloc(dtype::BF16, {x.dim(0), w.dim(0)});
    cpu_be().matmul(x, dense_linear(w), out, matmul_mode::AUTO);
    return out;
}

// x: host bf16 [m, k]; dev: the prepared weight. forced: TETRA_KERNEL names the GEMV kernel (else
// the registry chooses). Checks the guard bytes.
tensor run_gpu(const tensor& x, const linear_weight& dev, bool forced, const std::string& what) {
    gpu_guarded out = make_gpu_guarded(dtype::BF16, {x.dim(0), dev.n_out});
    tensor xd = to_gpu(x);
    if (forced) {
        force_kernel fk("matmul_dense", k_gemv);
        gpu_be().matmul(xd, dev, out.view, matmul_mode::AUTO);
    } else {
        gpu_be().matmul(xd, dev, out.view, matmul_mode::AUTO);
    }
    bool ok = false;
    tensor got = out.result(&ok);
    EXPECT_TRUE(ok) << "guard bytes overwritten: " << what;
    return got;
}

// Tolerance against the CPU oracle. Both sides sum the same bf16 products in f32, in different
// orders (k order vs per-lane chains + a 32-lane tree): each is within k·2^-24·Σ|x·w| of the exact
// sum (the f32 summation bound), then each rounds to bf16 (RNE, half an ulp: ≤ 2^-8 relative). So
// |gpu − cpu| ≤ 2^-8·(|gpu| + |cpu|) + 2·k·2^-24·Σ|x·w| per element (Σ|x·w| in double here), and
// NMSE ≤ 1e-4, the self-test's bf16 matmul tolerance (engine/selftest_cases.cpp). Non-finite
// outputs must match exactly (NaN where the oracle has NaN, ±Inf of the same sign). A wrong row,
// column, segment or dropped tail is orders of magnitude above both.
void expect_matches(const tensor& got, const tensor& cpu, const tensor& x, const tensor& w, const std::string& what) {
    const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
    const uint16_t *xb = x.ptr<uint16_t>(), *wb = w.ptr<uint16_t>();
    std::vector<float> xf(size_t(m * k)), wf(size_t(n * k));
    for (size_t i = 0; i < xf.size(); ++i) xf[i] = std::fabs(bf16_to_f32(xb[i]));
    for (size_t i = 0; i < wf.size(); ++i) wf[i] = std::fabs(bf16_to_f32(wb[i]));
    double num = 0, den = 0;
    int bad = 0;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            const double g = read_elem(got, i * n + j), c = read_elem(cpu, i * n + j);
            if (std::isnan(g) || std::isnan(c) || std::isinf(g) || std::isinf(c)) {
                if (!(std::isnan(g) && std::isnan(c)) && g != c && bad++ < 5)
                    ADD_FAILURE() << what << ": non-finite mismatch at [" << i << ", " << j << "]: got " << g
                                  << ", cpu " << c;
                continue;
            }
            double mag = 0;
            for (int64_t e = 0; e < k; ++e) mag += double(xf[size_t(i * k + e)]) * wf[size_t(j * k + e)];
            const double tol = std::ldexp(std::fabs(g) + std::fabs(c), -8) + 2.0 * double(k) * std::ldexp(mag, -24);
            if (std::fabs(g - c) > tol && bad++ < 5)
                ADD_FAILURE() << what << ": [" << i << ", " << j << "]: got " << g << ", cpu " << c << " (tol " << tol
                              << ")";
            num += (g - c) * (g - c), den += c * c;
        }
    EXPECT_EQ(bad, 0) << what;
    if (den > 0) EXPECT_LE(num / den, 1e-4) << what << ": NMSE";
}

bool same_bits(const tensor& a, const uint8_t* b, size_t bytes) { return std::memcmp(a.data, b, bytes) == 0; }

}  // namespace

TEST(matmul_dense_gemv_gpu, matches_cpu_on_odd_shapes) {
    rng r(611);
    int cases = 0;
    for (int64_t n : {1, 7, 128, 500})
        for (int64_t k : {16, 1000, 2048, 7168}) {
            tensor w = random_tensor(r, dtype::BF16, {n, k});
            linear_weight dev = gpu_be().prepare_linear(dense_linear(w));
            for (int64_t m : {1, 3, 8, 64, 300}) {
                const std::string what = "n=" + std::to_string(n) + " k=" + std::to_string(k) + " m=" + std::to_string(m);
                tensor x = random_tensor(r, dtype::BF16, {m, k});
                tensor cpu = run_cpu(x, w);
                expect_matches(run_gpu(x, dev, true, what), cpu, x, w, what);
                if (n == 128 && k == 2048)  // the router shape through the registry's own choice
                    expect_matches(run_gpu(x, dev, false, what + " (selected)"), cpu, x, w, what + " (selected)");
                ++cases;
            }
        }
    EXPECT_EQ(cases, 80);
}

// Vocabulary projections (lm_head-sized: n ≥ 16384) at decode batches (m ≤ k_vocab_m_max): through
// the registry's own choice, against the oracle, and every row equal to itself alone bit for bit.
TEST(matmul_dense_gemv_gpu, vocab_projection_at_decode) {
    rng r(613);
    int cases = 0;
    for (int64_t n : {16384, 49157})
        for (int64_t k : {576, 2048}) {
            tensor w = random_tensor(r, dtype::BF16, {n, k});
            linear_weight dev = gpu_be().prepare_linear(dense_linear(w));
            tensor x = random_tensor(r, dtype::BF16, {k_vocab_m_max, k});
            const std::string base = "n=" + std::to_string(n) + " k=" + std::to_string(k);
            const tensor all = run_gpu(x, dev, false, base);
            expect_matches(all, run_cpu(x, w), x, w, base + " m=" + std::to_string(k_vocab_m_max));
            for (int64_t row = 0; row < k_vocab_m_max; ++row) {
                tensor one = tensor::alloc(dtype::BF16, {1, k});
                std::memcpy(one.data, x.ptr<uint16_t>() + row * k, size_t(k) * 2);
                const std::string what = base + " row " + std::to_string(row) + " alone";
                EXPECT_TRUE(same_bits(run_gpu(one, dev, false, what), all.ptr<uint8_t>() + size_t(row * n) * 2,
                                      size_t(n) * 2))
                    << what;
            }
            ++cases;
        }
    EXPECT_EQ(cases, 4);
}

// NaN in x, ±Inf in x and w: NaN rows, ±Inf columns, Inf − Inf = NaN where both signs meet; the same
// positions as the oracle whatever the summation order.
TEST(matmul_dense_gemv_gpu, nan_inf_parity) {
    rng r(612);
    for (int64_t k : {2048, 1000}) {
        const int64_t n = 128, m = 8;
        tensor w = random_tensor(r, dtype::BF16, {n, k}), x = random_tensor(r, dtype::BF16, {m, k});
        write_elem(x, 2 * k + 100, NAN);             // row 2: all NaN
        write_elem(x, 4 * k + k - 8, INFINITY);      // row 4: ±Inf by the sign of w[:, k-8] (tail segment)
        write_elem(w, 5 * k + 7, INFINITY);          // column 5: ±Inf by the sign of x[:, 7]
        write_elem(w, 9 * k + 3, INFINITY);          // column 9: +Inf and −Inf terms: NaN
        write_elem(w, 9 * k + 300, -INFINITY);
        write_elem(w, 11 * k + k - 1, -INFINITY);    // column 11: the last k
        linear_weight dev = gpu_be().prepare_linear(dense_linear(w));
        tensor cpu = run_cpu(x, w);
        int nan = 0, inf = 0;
        for (int64_t i = 0; i < m * n; ++i) nan += std::isnan(read_elem(cpu, i)), inf += std::isinf(read_elem(cpu, i));
        EXPECT_GT(nan, int(n)) << "the case must hold NaN rows and columns";
        EXPECT_GT(inf, int(m)) << "the case must hold ±Inf outputs";
        const std::string what = "nan/inf k=" + std::to_string(k);
        expect_matches(run_gpu(x, dev, true, what), cpu, x, w, what);
    }
}

// A row's bits do not depend on m or on the other rows: the first m' rows of a batch run as their
// own batch, and single rows alone, equal the batch's rows. The m's cross every launch geometry
// (1 vs 4 rows per warp, 1..4 warps, 1..8 columns per CTA, 1 or 4 row groups per warp).
TEST(matmul_dense_gemv_gpu, rows_alone_equal_rows_in_a_batch) {
    rng r(613);
    struct shape { int64_t n, k, m; };
    // 128 x 2048 at m = 4096: 8 columns per CTA; 500 x 1000 at m = 2048: 8 columns and 4 row groups per warp.
    for (shape s : {shape{128, 2048, 4096}, shape{500, 1000, 2048}, shape{1, 2048, 300}, shape{500, 7168, 300},
                    shape{7, 1000, 300}}) {
        tensor w = random_tensor(r, dtype::BF16, {s.n, s.k}), x = random_tensor(r, dtype::BF16, {s.m, s.k});
        linear_weight dev = gpu_be().prepare_linear(dense_linear(w));
        const std::string base = "n=" + std::to_string(s.n) + " k=" + std::to_string(s.k);
        tensor all = run_gpu(x, dev, true, base + " m=" + std::to_string(s.m));
        const size_t row_bytes = size_t(s.n) * 2;
        for (int64_t m : {1, 2, 3, 4, 5, 8, 63, 64, 65, 300}) {
            tensor part = tensor::alloc(dtype::BF16, {m, s.k});
            std::memcpy(part.data, x.data, size_t(m * s.k) * 2);
            const std::string what = base + " first " + std::to_string(m) + " rows";
            EXPECT_TRUE(same_bits(run_gpu(part, dev, true, what), all.ptr<uint8_t>(), size_t(m) * row_bytes)) << what;
        }
        for (int64_t row : {int64_t(0), int64_t(37), int64_t(299), s.m - 1}) {
            tensor one = tensor::alloc(dtype::BF16, {1, s.k});
            std::memcpy(one.data, x.ptr<uint16_t>() + row * s.k, size_t(s.k) * 2);
            const std::string what = base + " row " + std::to_string(row) + " alone";
            EXPECT_TRUE(same_bits(run_gpu(one, dev, true, what), all.ptr<uint8_t>() + size_t(row) * row_bytes, row_bytes))
                << what;
        }
    }
}

// The registry picks the GEMV for router-sized weights at every m (the rule reads the weight's
// shape only), for vocabulary projections (n ≥ 16384, k ≤ 16384) at m ≤ k_vocab_m_max, and never
// for another large weight, which keeps cuBLASLt with the reason given.
TEST(matmul_dense_gemv_gpu, registry_chooses_by_weight_shape) {
    struct shape { int64_t n, k; bool gemv, vocab; };
    const shape shapes[] = {{128, 2048, true, false},    {1, 2048, true, false},      {1, 7168, true, false},
                            {512, 7168, true, false},    {256, 7168, true, false},    {500, 1000, true, false},
                            {4096, 4096, false, false},  {49152, 576, false, true},   {1024, 256, false, false},
                            {513, 2048, false, false},   {128, 65536, false, false},  {16383, 4096, false, false},
                            {16384, 4096, false, true},  {151936, 2048, false, true}, {128256, 4096, false, true},
                            {128256, 16385, false, false}};
    for (const shape& s : shapes) {
        linear_weight lw;  // accepts() reads the kind, dtype and shape, never the bytes
        lw.kind = linear_kind::DENSE, lw.n_out = s.n, lw.n_in = s.k;
        lw.dense.type = dtype::BF16, lw.dense.shape = {s.n, s.k}, lw.dense.device = device_kind::CUDA;
        for (int64_t m : {1, 2, 3, 4, 5, 8, 16, 64, 65, 300, 8192, 65536}) {
            matmul_args a;
            a.act = dtype::BF16, a.align = 256;
            a.x.type = a.out.type = dtype::BF16, a.x.shape = {m, s.k}, a.out.shape = {m, s.n};
            a.x.device = a.out.device = device_kind::CUDA;
            a.w = &lw, a.m = m, a.n = s.n, a.k = s.k;
            const std::string what = "[" + std::to_string(s.n) + ", " + std::to_string(s.k) + "] m=" + std::to_string(m);
            const std::string sel = kernel_registry::instance().select("matmul_dense", gpu_be().device(), a).name;
            const bool gemv = s.gemv || (s.vocab && m <= k_vocab_m_max);
            EXPECT_EQ(sel, gemv ? k_gemv : "matmul_dense_bf16_cublaslt") << what;
            for (const kernel_candidate& c : kernel_registry::instance().candidates("matmul_dense", gpu_be().device(), &a))
                if (c.kernel->name == k_gemv && !gemv)
                    EXPECT_NE(c.why_not.find("not router-sized"), std::string::npos) << what << ": " << c.why_not;
        }
    }
}
