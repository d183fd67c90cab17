// backend/sampling ops on the CPU backend: argument validation (errors name the tensor, expected vs
// actual), the entry-range clamp, and the CPU kernel against row_sampler driven by hand (apply the
// entries, then sample) on random cases; greedy rows checked against a naive argmax.
#include <gtest/gtest.h>

#include "backend/sampling.h"
#include "backend/sampling_cases.h"

using namespace tetra;
using namespace tetra_test;


TEST(sampling_ops, validation_names_the_culprit) {
    tensor logits = tensor::alloc(dtype::F32, {2, 10});
    tensor rows = tensor::alloc(dtype::I32, {2, sample_row_words});
    tensor out = tensor::alloc(dtype::I32, {2});
    tensor bad_rows = tensor::alloc(dtype::I32, {2, 12});
    EXPECT_NE(error_of([&] { sample_rows(cpu_be(), logits, bad_rows, tensor(), out); })
                  .find("sample_rows: 'rows' has shape [2, 12]; expected [2, 14]"),
              std::string::npos);
    tensor bad_out = tensor::alloc(dtype::F32, {2});
    EXPECT_NE(error_of([&] { sample_rows(cpu_be(), logits, rows, tensor(), bad_out); })
                  .find("'out' has dtype f32; expected i32"),
              std::string::npos);
    tensor bad_entries = tensor::alloc(dtype::I32, {3, 3});
    EXPECT_NE(error_of([&] { sample_rows(cpu_be(), logits, rows, bad_entries, out); })
                  .find("'entries' has shape [3, 3]; expected [3, 4]"),
              std::string::npos);
    tensor ids = tensor::alloc(dtype::I32, {2, 10});
    EXPECT_NE(error_of([&] { sample_rows(cpu_be(), ids, rows, tensor(), out); })
                  .find("'logits' has dtype i32; expected f32|bf16|f16"),
              std::string::npos);
    tensor stats = tensor::alloc(dtype::I32, {2, 8});
    EXPECT_NE(error_of([&] { sample_guard_stats(cpu_be(), logits, stats); })
                  .find("'stats' has shape [2, 8]; expected [2, 10]"),
              std::string::npos);
    EXPECT_EQ(error_of([&] { sample_rows(cpu_be(), logits, rows, tensor(), out); }), "");
}

// A row's entry range is clamped to the entries tensor: a range past the end acts as "no entries".
TEST(sampling_ops, entry_range_is_clamped) {
    sampling_case c;
    c.n_vocab = 4, c.n_rows = 3;
    c.logits = {1, 5, 2, 0, /**/ 1, 5, 2, 0, /**/ 1, 5, 2, 0};
    c.kinds.assign(3, 0);
    c.rows.assign(3, sample_row{});
    for (auto& r : c.rows) r.temperature = 0.0f;
    c.entries = {sample_entry{1, 0, 0, 1}};  // suppress id 1
    c.rows[0].entry0 = 0, c.rows[0].n_entries = 1;    // in range: token 2
    c.rows[1].entry0 = 1, c.rows[1].n_entries = 5;    // past the end: token 1
    c.rows[2].entry0 = -3, c.rows[2].n_entries = 100;  // clamped to [0, 1): token 2
    tensor out = tensor::alloc(dtype::I32, {3});
    sample_rows(cpu_be(), c.logits_tensor(), c.rows_tensor(), c.entries_tensor(), out);
    EXPECT_EQ(std::vector<int32_t>(out.ptr<int32_t>(), out.ptr<int32_t>() + 3), (std::vector<int32_t>{2, 1, 2}));
}

TEST(sampling_ops, cpu_kernel_equals_row_sampler_and_naive_greedy) {
    rng r(77);
    row_sampler smp;
    int n_greedy = 0;
    for (int64_t n_vocab : {1, 5, 300, 5000})
        for (dtype t : {dtype::F32, dtype::BF16, dtype::F16}) {
            sampling_case c = make_sampling_case(r, n_vocab, 40, t);
            tensor out = tensor::alloc(dtype::I32, {c.n_rows});
            sample_rows(cpu_be(), c.logits_tensor(), c.rows_tensor(), c.entries_tensor(), out);
            for (int64_t row = 0; row < c.n_rows; ++row) {
                std::vector<float> x(c.logits.begin() + row * n_vocab, c.logits.begin() + (row + 1) * n_vocab);
                const sample_row& p = c.rows[size_t(row)];
                int32_t want;
                if (sampler_first_bad_logit(x.data(), int32_t(n_vocab)) >= 0) {
                    want = int32_t(sample_error::NON_FINITE);
                } else {
                    apply_sample_entries(x.data(), int32_t(n_vocab), p, c.entries.data() + p.entry0);
                    if (filter_of(p).greedy()) {  // naive: first strict maximum, -inf everywhere is an error
                        ++n_greedy;
                        int32_t best = -1;
                        for (int32_t i = 0; i < n_vocab; ++i)
                            if (x[size_t(i)] > -INFINITY && (best < 0 || x[size_t(i)] > x[size_t(best)])) best = i;
                        want = best < 0 ? int32_t(sample_error::ALL_MASKED) : best;
                    } else {
                        want = smp.sample(x.data(), int32_t(n_vocab), filter_of(p), p.seed, p.step);
                    }
                }
                EXPECT_EQ(out.ptr<int32_t>()[row], want) << c.vars(row);
            }
        }
    EXPECT_GT(n_greedy, 20);
}
