// The CUDA sampling ops (sample_rows_sm80, sample_guard_stats_sm80) against the CPU kernels (the
// oracles: sample_rows_cpu runs engine/sampler's row_sampler, pinned by numpy goldens and by
// tests/engine/test_sampler_rows.cpp) on the same inputs. Tokens must be identical on thousands of
// random rows: n_vocab 1..151936, f32/bf16/f16, ties, -inf masks, ranges up to 1e37, subnormals,
// ±0, NaN/+inf/all -inf rows (error codes must match too), every parameter combination and sparse
// penalty entries. Statistics: first bad column, x0, min, max exact; f64 sums to 1e-12 relative.
// Outputs are guarded (sentinels around, NaN inside): a stray or missing write fails.
#include <cstring>

#include "backend/cuda/gpu_harness.h"
#include "backend/sampling.h"
#include "backend/sampling_cases.h"

using namespace tetra;
using namespace tetra_test;

namespace {

std::vector<int32_t> cpu_tokens(const sampling_case& c) {
    tensor out = tensor::alloc(dtype::I32, {c.n_rows});
    sample_rows(cpu_be(), c.logits_tensor(), c.rows_tensor(), c.entries_tensor(), out);
    return std::vector<int32_t>(out.ptr<int32_t>(), out.ptr<int32_t>() + c.n_rows);
}

std::vector<int32_t> gpu_tokens(const sampling_case& c, bool no_entries_tensor, bool* intact) {
    gpu_guarded out = make_gpu_guarded(dtype::I32, {c.n_rows});
    tensor entries = no_entries_tensor ? tensor() : to_gpu(c.entries_tensor());
    sample_rows(gpu_be(), to_gpu(c.logits_tensor()), to_gpu(c.rows_tensor()), entries, out.view);
    tensor h = out.result(intact);
    return std::vector<int32_t>(h.ptr<int32_t>(), h.ptr<int32_t>() + c.n_rows);
}

}  // namespace

TEST(sampling_gpu, sample_rows_equals_cpu_bitwise) {
    ASSERT_GT(cuda_device_count(), 0) << "gpu test needs a CUDA device";
    rng r(9001);
    int n_rows_total = 0, n_errors = 0, n_sampled = 0, n_cases = 0;
    struct shape {
        int64_t n_vocab, n_rows, repeats;
    };
    const shape shapes[] = {{1, 64, 2},   {2, 64, 2},    {3, 64, 2},     {7, 64, 2},     {100, 128, 2},
                            {1000, 128, 2}, {1025, 64, 2}, {4099, 64, 2},  {32000, 64, 2}, {49152, 32, 2},
                            {128256, 16, 2}, {151936, 64, 3}};
    for (const shape& sh : shapes)
        for (dtype t : {dtype::F32, dtype::BF16, dtype::F16})
            for (int64_t rep = 0; rep < sh.repeats; ++rep) {
                if (t == dtype::F16 && rep > 0) continue;
                sampling_case c = make_sampling_case(r, sh.n_vocab, sh.n_rows, t);
                const bool no_entries = c.entries.empty() || rep == 1;
                if (no_entries) {  // the same rows without entries, and entries passed as tensor()
                    c.entries.clear();
                    for (auto& row : c.rows) row.entry0 = 0, row.n_entries = 0;
                }
                std::vector<int32_t> want = cpu_tokens(c);
                bool intact = false;
                std::vector<int32_t> got = gpu_tokens(c, no_entries, &intact);
                EXPECT_TRUE(intact) << "n_vocab " << sh.n_vocab << ": a write outside out";
                ++n_cases;
                for (int64_t row = 0; row < c.n_rows; ++row) {
                    EXPECT_EQ(got[size_t(row)], want[size_t(row)]) << c.vars(row);
                    ++n_rows_total;
                    n_errors += want[size_t(row)] < 0;
                    n_sampled += want[size_t(row)] >= 0 && !filter_of(c.rows[size_t(row)]).greedy();
                }
            }
    std::printf("sample_rows: %d cases, %d rows (%d sampled non-greedy, %d error codes)\n", n_cases, n_rows_total,
                n_sampled, n_errors);
    EXPECT_GT(n_rows_total, 2500);
    EXPECT_GT(n_sampled, 1500);
}

// Every parameter combination on one realistic row shape (bf16, Qwen vocab): greedy, temperature
// 0.3-2 x top_k 1/2/50/vocab x top_p 0.1/0.9/1 x min_p 0/0.05, with and without penalties.
TEST(sampling_gpu, sample_rows_every_combination_151936) {
    rng r(77);
    const int64_t n_vocab = 151936;
    const float temps[] = {0.0f, 0.3f, 1.0f, 2.0f};
    const int32_t top_ks[] = {0, 1, 2, 50, int32_t(n_vocab)};
    const float top_ps[] = {0.1f, 0.9f, 1.0f};
    const float min_ps[] = {0.0f, 0.05f};
    for (dtype t : {dtype::BF16, dtype::F32}) {
        sampling_case c;
        c.n_vocab = n_vocab, c.type = t;
        for (float temp : temps)
            for (int32_t k : top_ks)
                for (float tp : top_ps)
                    for (float mp : min_ps)
                        for (int pen = 0; pen < 2; ++pen) {
                            sample_row p;
                            p.temperature = temp, p.top_k = k, p.top_p = tp, p.min_p = mp;
                            p.seed = r.g(), p.step = r.randint(0, 100);
                            if (pen) {
                                p.repetition_penalty = 1.3f, p.frequency_penalty = 0.4f, p.presence_penalty = 0.6f;
                                p.entry0 = int32_t(c.entries.size());
                                for (int e = 0; e < 30; ++e)
                                    c.entries.push_back(sample_entry{int32_t(r.randint(0, 40)) * 3700 + e, e % 3,
                                                                     (e + 1) % 4, e == 7});
                                p.n_entries = 30;
                            }
                            c.rows.push_back(p);
                            c.kinds.push_back(0);
                        }
        c.n_rows = int64_t(c.rows.size());
        c.logits.resize(size_t(c.n_rows * n_vocab));
        for (int64_t row = 0; row < c.n_rows; ++row) {  // a peaked LM-like row: a few strong tokens
            float* x = c.logits.data() + row * n_vocab;
            fill_logits(r, 0, x, n_vocab);
            for (int j = 0; j < 20; ++j) x[r.randint(0, n_vocab - 1)] = float(8 + r.uniform(0, 6));
            for (int64_t i = 0; i < n_vocab; ++i) x[i] = round_to(t, x[i]);
        }
        std::vector<int32_t> want = cpu_tokens(c);
        bool intact = false;
        std::vector<int32_t> got = gpu_tokens(c, false, &intact);
        EXPECT_TRUE(intact);
        for (int64_t row = 0; row < c.n_rows; ++row) EXPECT_EQ(got[size_t(row)], want[size_t(row)]) << c.vars(row);
    }
}

TEST(sampling_gpu, guard_stats_equal_cpu) {
    rng r(31);
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    int n_rows_total = 0, n_bad = 0;
    for (int64_t n : {1, 2, 9, 1003, 4096, 151936})
        for (dtype t : {dtype::F32, dtype::BF16}) {
            sampling_case c = make_sampling_case(r, n, 24, t);
            // crafted rows: NaN at 17, +inf, -inf at 0, constant, near-constant (exact sums)
            const std::vector<float> special = {nan, inf, -inf};
            for (int64_t row = 0; row < 6 && row < c.n_rows; ++row) {
                float* x = c.logits.data() + row * n;
                if (row < 3) x[std::min<int64_t>(row == 2 ? 0 : 17, n - 1)] = special[size_t(row)];
                if (row == 3) std::fill(x, x + n, 5.25f);
                if (row == 4) for (int64_t i = 0; i < n; ++i) x[i] = i % 2 ? 5.0f : 5.0f + 0x1p-7f;
                if (row == 5 && n > 3) x[3] = x[3] * -0.0f;  // a -0 or +0 in a normal row
            }
            tensor lt = c.logits_tensor();
            tensor want = tensor::alloc(dtype::I32, {c.n_rows, guard_stats_words});
            sample_guard_stats(cpu_be(), lt, want);
            gpu_guarded got_buf = make_gpu_guarded(dtype::I32, {c.n_rows, guard_stats_words});
            sample_guard_stats(gpu_be(), to_gpu(lt), got_buf.view);
            bool intact = false;
            tensor got = got_buf.result(&intact);
            EXPECT_TRUE(intact);
            for (int64_t row = 0; row < c.n_rows; ++row) {
                const guard_row_stats& g = got.ptr<const guard_row_stats>()[row];
                const guard_row_stats& w = want.ptr<const guard_row_stats>()[row];
                const std::string vars = c.vars(row);
                ++n_rows_total;
                EXPECT_EQ(g.first_bad, w.first_bad) << vars;
                if (w.first_bad >= 0) {
                    ++n_bad;
                    EXPECT_TRUE(std::isnan(g.bad_value) ? std::isnan(w.bad_value) : g.bad_value == w.bad_value) << vars;
                    continue;  // the other fields are unspecified for such rows
                }
                EXPECT_EQ(g.x0, w.x0) << vars;
                EXPECT_EQ(g.lo, w.lo) << vars;
                EXPECT_EQ(g.hi, w.hi) << vars;
                // f64 sums of the same exact terms in another order: each differs from the exact sum by
                // at most (n - 1)·2^-53·Σ|term| (recursive summation), so the two by twice that;
                // Σ|d| <= sqrt(n·Σd²) (Cauchy-Schwarz).
                const double eps = 0x1p-53 * 2.0 * double(n);
                EXPECT_NEAR(g.sum, w.sum, eps * std::sqrt(double(n) * w.sum_sq)) << vars;
                EXPECT_NEAR(g.sum_sq, w.sum_sq, eps * w.sum_sq) << vars;
            }
        }
    EXPECT_GT(n_bad, 20);
    std::printf("guard stats: %d rows (%d with NaN/Inf)\n", n_rows_total, n_bad);
}

// One Qwen-sized decode batch: the device op's time per step (information; median of 20).
TEST(sampling_gpu, time_64_rows_151936) {
    rng r(5);
    sampling_case c = make_sampling_case(r, 151936, 64, dtype::BF16);
    for (int64_t row = 0; row < c.n_rows; ++row) {  // realistic rows: finite, one sampler setting
        fill_logits(r, 0, c.logits.data() + row * c.n_vocab, c.n_vocab);
        for (int64_t i = 0; i < c.n_vocab; ++i)
            c.logits[size_t(row * c.n_vocab + i)] = round_to(dtype::BF16, c.logits[size_t(row * c.n_vocab + i)]);
        c.rows[size_t(row)] = sample_row{};
        c.rows[size_t(row)].temperature = 0.7f, c.rows[size_t(row)].top_k = 50, c.rows[size_t(row)].top_p = 0.9f;
        c.rows[size_t(row)].seed = uint64_t(row);
    }
    c.entries.clear();
    tensor l = to_gpu(c.logits_tensor()), rows = to_gpu(c.rows_tensor()), out = gpu_be().alloc(dtype::I32, {64});
    tensor st = gpu_be().alloc(dtype::I32, {64, guard_stats_words});
    std::vector<double> ms_s, ms_g;
    for (int i = 0; i < 21; ++i) {
        ms_s.push_back(gpu_be().time_op([&] { sample_rows(gpu_be(), l, rows, tensor(), out); }));
        ms_g.push_back(gpu_be().time_op([&] { sample_guard_stats(gpu_be(), l, st); }));
    }
    std::sort(ms_s.begin() + 1, ms_s.end()), std::sort(ms_g.begin() + 1, ms_g.end());
    std::printf("64 rows x 151936 bf16 (T 0.7, top_k 50, top_p 0.9): sample_rows %.3f ms, guard stats %.3f ms\n",
                ms_s[11], ms_g[11]);
    std::vector<int32_t> want = cpu_tokens(c);
    tensor h = to_host(out);
    for (int64_t row = 0; row < 64; ++row) EXPECT_EQ(h.ptr<int32_t>()[row], want[size_t(row)]) << c.vars(row);
}
