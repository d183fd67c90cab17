// The batched sampling op on the CPU backend (backend/sampling.h sample_rows, the oracle of the
// CUDA kernel) against engine/sampler (pinned by the numpy goldens of test_sampler.cpp): the same
// token for every random row (shapes, dtypes, parameters, penalties, min_tokens), the same errors,
// and pack_sample_row (hand-written entries, and tokens equal with the case's own entries). Then
// output_guard::check_stats on the stats of crafted rows against check() on the rows themselves.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backend/sampling.h"
#include "backend/sampling_cases.h"
#include "engine/output_guard.h"
#include "engine/sampler.h"

using namespace tetra;
using namespace tetra_test;

namespace {

backend& cpu_be() {
    static std::unique_ptr<backend> be = make_cpu_backend();
    return *be;
}

std::vector<int32_t> run_sample_rows(const sampling_case& c, const std::vector<sample_row>& rows,
                                     const std::vector<sample_entry>& entries) {
    sampling_case cc = c;
    cc.rows = rows;
    cc.entries = entries;
    tensor out = tensor::alloc(dtype::I32, {c.n_rows});
    sample_rows(cpu_be(), cc.logits_tensor(), cc.rows_tensor(), cc.entries_tensor(), out);
    return std::vector<int32_t>(out.ptr<int32_t>(), out.ptr<int32_t>() + c.n_rows);
}

// The request-level form of one row: suppressed ids become EOS ids with min_tokens unreached.
void to_request(const sample_row& row, const sample_entry* e, sampling_params& p, token_history& h) {
    p.temperature = row.temperature;
    p.top_k = row.top_k;
    p.top_p = row.top_p;
    p.min_p = row.min_p;
    p.repetition_penalty = row.repetition_penalty;
    p.frequency_penalty = row.frequency_penalty;
    p.presence_penalty = row.presence_penalty;
    h.n_output = 7;
    for (int32_t k = 0; k < row.n_entries; ++k) {
        if (e[k].suppress) p.eos_token_ids.push_back(e[k].id);
        if (e[k].prompt_count > 0) h.prompt_counts[e[k].id] = e[k].prompt_count;
        if (e[k].output_count > 0) h.output_counts[e[k].id] = e[k].output_count;
    }
    p.min_tokens = p.eos_token_ids.empty() ? 0 : h.n_output + 1;
}

}  // namespace

TEST(sample_rows_cpu, equals_engine_sampler_on_random_rows) {
    rng r(4242);
    sampler smp;
    int n_rows_total = 0, n_errors = 0, n_greedy = 0;
    for (int64_t n_vocab : {1, 2, 3, 17, 1000, 4099, 32000})
        for (dtype t : {dtype::F32, dtype::BF16}) {
            const int64_t n_rows = n_vocab >= 4099 ? 24 : 96;
            sampling_case c = make_sampling_case(r, n_vocab, n_rows, t);
            std::vector<int32_t> got = run_sample_rows(c, c.rows, c.entries);
            std::vector<sample_row> packed_rows(static_cast<size_t>(n_rows));
            std::vector<sample_entry> packed;
            for (int64_t row = 0; row < n_rows; ++row) {
                const sample_row& sr = c.rows[size_t(row)];
                sampling_params p;
                token_history h;
                to_request(sr, c.entries.data() + sr.entry0, p, h);
                pack_sample_row(p, h, sr.seed, sr.step, packed_rows[size_t(row)], packed);
                std::vector<float> x(c.logits.begin() + row * n_vocab, c.logits.begin() + (row + 1) * n_vocab);
                int32_t want = -100;
                try {
                    want = smp.sample(x.data(), int32_t(n_vocab), p, h, sr.seed, sr.step).token;
                } catch (const error&) {
                }
                ++n_rows_total;
                n_greedy += p.greedy();
                if (want == -100) {
                    ++n_errors;
                    EXPECT_LT(got[size_t(row)], 0) << c.vars(row) << ": the engine sampler threw";
                } else {
                    EXPECT_EQ(got[size_t(row)], want) << c.vars(row);
                }
            }
            // pack_sample_row's entries (only what the settings act on) give the same tokens.
            EXPECT_EQ(run_sample_rows(c, packed_rows, packed), got) << "n_vocab " << n_vocab << " " << dtype_name(t);
        }
    printf("%d rows (%d greedy, %d errors)\n", n_rows_total, n_greedy, n_errors);
    EXPECT_GT(n_errors, 10);                   // the NaN / all -inf / overflow kinds occurred
    EXPECT_LT(n_errors, n_rows_total / 3);
}

TEST(sample_rows_cpu, error_codes) {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    sampling_case c;
    c.n_vocab = 3, c.n_rows = 5;
    c.logits = {0, nan, 1, /**/ -inf, -inf, -inf, /**/ 1e35f, 0, 0, /**/ 1, inf, 0, /**/ 2, -inf, 1};
    c.kinds.assign(5, 0);
    c.rows.assign(5, sample_row{});
    c.rows[2].temperature = 2e-5f;  // 1e35 / 2e-5 overflows f32
    c.rows[4].temperature = 0.0f;
    c.rows[4].n_entries = 1;  // id 0 suppressed: the greedy token is 2
    c.entries = {sample_entry{0, 0, 0, 1}};
    EXPECT_EQ(run_sample_rows(c, c.rows, c.entries),
              (std::vector<int32_t>{int32_t(sample_error::NON_FINITE), int32_t(sample_error::ALL_MASKED),
                                    int32_t(sample_error::TEMP_OVERFLOW), int32_t(sample_error::NON_FINITE), 2}));
    EXPECT_STREQ(sample_error_message(-2), "every logit is -inf after penalties and min_tokens");
}

TEST(sample_rows_cpu, pack_sample_row_lists_what_the_settings_touch) {
    sampling_params p;
    p.repetition_penalty = 1.2f;
    p.frequency_penalty = 0.5f;
    p.min_tokens = 3;
    p.eos_token_ids = {2, 7};
    p.stop_token_ids = {7, 9};
    token_history h;
    h.add_prompt({1, 1, 2});
    h.add_output(1);  // n_output = 1 < min_tokens
    sample_row row;
    std::vector<sample_entry> e = {sample_entry{99, 0, 0, 0}};  // already there: row.entry0 = 1
    pack_sample_row(p, h, 11, 1, row, e);
    auto same = [](const sample_entry& a, const sample_entry& b) {
        return a.id == b.id && a.prompt_count == b.prompt_count && a.output_count == b.output_count &&
               (a.suppress != 0) == (b.suppress != 0);
    };
    std::vector<sample_entry> want = {{99, 0, 0, 0}, {1, 2, 1, 0}, {2, 1, 0, 1}, {7, 0, 0, 1}, {9, 0, 0, 1}};
    ASSERT_EQ(e.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same(e[i], want[i])) << "entry " << i << " id " << e[i].id;
    EXPECT_EQ(row.entry0, 1);
    EXPECT_EQ(row.n_entries, 4);
    EXPECT_EQ(row.seed, 11u);
    EXPECT_EQ(row.step, 1);
    EXPECT_EQ(row.repetition_penalty, 1.2f);
    // min_tokens reached, only a frequency penalty: the output ids alone.
    h.add_output(5), h.add_output(5), h.add_output(5);
    p.repetition_penalty = 1.0f;
    e.clear();
    pack_sample_row(p, h, 0, 4, row, e);
    want = {{1, 0, 1, 0}, {5, 0, 3, 0}};
    ASSERT_EQ(e.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same(e[i], want[i])) << "entry " << i << " id " << e[i].id;
    // Nothing to do: no entries.
    p.frequency_penalty = 0.0f;
    e.clear();
    pack_sample_row(p, h, 0, 4, row, e);
    EXPECT_TRUE(e.empty());
    EXPECT_EQ(row.n_entries, 0);
}

// ---- the guard from statistics ----

namespace {

std::vector<float> spread_row(int64_t n, float offset, uint32_t seed) {
    std::vector<float> v(static_cast<size_t>(n));
    uint32_t s = seed;
    for (auto& x : v) {
        s = s * 1664525u + 1013904223u;
        x = offset + float(s >> 8) / float(1 << 24) * 10.0f - 5.0f;
    }
    return v;
}

// check() on the rows and check_stats() on their statistics (guard_stats_row and the CPU op on
// f32 rows) give the same verdict.
void expect_same_verdict(const std::vector<float>& rows, int64_t n, const std::string& what,
                         const output_guard_config& cfg = {}) {
    const int64_t n_rows = int64_t(rows.size()) / n;
    guard_verdict want = output_guard::check(rows.data(), n, n_rows, cfg);
    std::vector<guard_row_stats> st;
    for (int64_t r = 0; r < n_rows; ++r) st.push_back(guard_stats_row(rows.data() + r * n, n));
    tensor x = tensor::alloc(dtype::F32, {n_rows, n});
    std::memcpy(x.data, rows.data(), rows.size() * 4);
    tensor s = tensor::alloc(dtype::I32, {n_rows, guard_stats_words});
    sample_guard_stats(cpu_be(), x, s);
    for (const guard_row_stats* stats : std::vector<const guard_row_stats*>{st.data(), s.ptr<const guard_row_stats>()}) {
        guard_verdict got = output_guard::check_stats(stats, n, n_rows, cfg);
        EXPECT_EQ(int(got.trip), int(want.trip)) << what << ": " << got.detail << " vs " << want.detail;
        EXPECT_EQ(got.row, want.row) << what;
        EXPECT_EQ(got.col, want.col) << what;
        EXPECT_EQ(got.detail, want.detail) << what;
    }
}

}  // namespace

TEST(output_guard_stats, verdict_equals_check_on_crafted_rows) {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    int n_tripped = 0;
    for (int64_t n : {1, 2, 9, 1003, 4096}) {
        auto with = [&](int64_t col, float v) {
            std::vector<float> r = spread_row(n, 0.0f, 3);
            r[size_t(std::min(col, n - 1))] = v;
            return r;
        };
        const std::string at = " n=" + std::to_string(n);
        expect_same_verdict(spread_row(n, 0.0f, 1), n, "healthy" + at);
        expect_same_verdict(spread_row(n, 3.0e4f, 2), n, "offset 3e4" + at);
        expect_same_verdict(with(17, nan), n, "NaN at 17" + at);
        expect_same_verdict(with(17, inf), n, "+inf at 17" + at);
        expect_same_verdict(with(0, -inf), n, "-inf at 0" + at);
        expect_same_verdict(with(n - 1, -inf), n, "-inf last" + at);
        expect_same_verdict(with(3, 1e20f), n, "1e20 at 3 (overflow)" + at);
        expect_same_verdict(with(n - 1, -1e20f), n, "-1e20 last (overflow)" + at);
        expect_same_verdict(with(n / 2, 3e38f), n, "3e38 (d overflows)" + at);
        for (float c : {0.0f, 5.25f, -1e30f}) expect_same_verdict(std::vector<float>(size_t(n), c), n, "constant" + at);
        // Near-constant with exact sums: 5 and 5 + 2^-17 (std 2^-18 < 1e-4), then 5 + 2^-9 (above).
        for (float delta : {0x1p-17f, 0x1p-9f}) {
            std::vector<float> r(size_t(n), 5.0f);
            for (size_t i = 0; i < r.size(); i += 2) r[i] += delta;
            expect_same_verdict(r, n, "near-constant " + std::to_string(delta) + at);
        }
        std::vector<float> two = with(17, nan);  // NaN at 17 and +inf at 5: the first column wins
        two[size_t(std::min<int64_t>(5, n - 1))] = inf;
        expect_same_verdict(two, n, "inf then NaN" + at);
        // Three rows, the second bad: row index in the verdict.
        std::vector<float> rows = spread_row(n, 0.0f, 5), bad(size_t(n), 1.0f), third = spread_row(n, 1.0f, 6);
        rows.insert(rows.end(), bad.begin(), bad.end());
        rows.insert(rows.end(), third.begin(), third.end());
        expect_same_verdict(rows, n, "3 rows" + at);
        output_guard_config off;
        off.enabled = false;
        expect_same_verdict(rows, n, "disabled" + at, off);
        n_tripped += !output_guard::check(rows.data(), n, 3).ok();
    }
    EXPECT_EQ(n_tripped, 4);  // every n >= 2
    // The literal verdicts (not just agreement): NaN at column 17 of row 0.
    std::vector<float> r = spread_row(64, 0.0f, 9);
    r[17] = nan;
    guard_row_stats st = guard_stats_row(r.data(), 64);
    EXPECT_EQ(st.first_bad, 17);
    EXPECT_EQ(output_guard::check_stats(&st, 64).detail, "row 0: NaN at column 17");
}

TEST(output_guard_stats, stats_by_definition) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> x = {2, 4, -1, 5};
    guard_row_stats s = guard_stats_row(x.data(), 4);
    EXPECT_EQ(s.first_bad, -1);
    EXPECT_EQ(s.x0, 2.0f);
    EXPECT_EQ(s.lo, -1.0f);
    EXPECT_EQ(s.hi, 5.0f);
    EXPECT_EQ(s.sum, 0.0 + 2 - 3 + 3);
    EXPECT_EQ(s.sum_sq, 0.0 + 4 + 9 + 9);
    x = {1, nan, 3, -INFINITY};
    s = guard_stats_row(x.data(), 4);
    EXPECT_EQ(s.first_bad, 1);
    EXPECT_TRUE(std::isnan(s.bad_value));
}
