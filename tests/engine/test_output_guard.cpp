// engine/output_guard: each trip on hand-built logits rows (expected verdicts are literals from the
// planted fault), healthy rows of real-looking spread that must pass, the zero-id streak, the
// process-wide counters, and the error type the CLI/server catch.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/output_guard.h"

using namespace tetra;

namespace {

// A healthy row: deterministic spread around `offset` with std ≈ 2.9 (uniform in [-5, 5]).
std::vector<float> healthy_row(int64_t n, float offset = 0.0f, uint32_t seed = 1) {
    std::vector<float> r(static_cast<size_t>(n));
    uint32_t s = seed;
    for (auto& v : r) {
        s = s * 1664525u + 1013904223u;
        v = offset + float(s >> 8) / float(1 << 24) * 10.0f - 5.0f;
    }
    return r;
}

}  // namespace

TEST(output_guard, healthy_rows_pass) {
    for (int64_t n : {2, 7, 8, 9, 256, 49152, 128256}) {
        std::vector<float> r = healthy_row(n);
        EXPECT_TRUE(output_guard::check(r.data(), n).ok()) << "n_vocab " << n;
    }
    // A large common offset (softmax-invariant) must not hide or fake a spread: the shifted sums.
    std::vector<float> big = healthy_row(50000, 3.0e4f);
    EXPECT_TRUE(output_guard::check(big.data(), 50000).ok());
    // Logits of a low-entropy step: one huge value, the rest spread.
    std::vector<float> peaked = healthy_row(1000);
    peaked[17] = 80.0f;
    EXPECT_TRUE(output_guard::check(peaked.data(), 1000).ok());
}

TEST(output_guard, nan_and_inf_are_located) {
    const int64_t n = 1003;
    std::vector<float> rows(size_t(3 * n));
    for (int r = 0; r < 3; ++r) {
        std::vector<float> h = healthy_row(n, 0.0f, uint32_t(r + 1));
        std::copy(h.begin(), h.end(), rows.begin() + r * n);
    }
    EXPECT_TRUE(output_guard::check(rows.data(), n, 3).ok());
    rows[size_t(1 * n + 999)] = std::numeric_limits<float>::quiet_NaN();  // the unrolled tail of row 1
    guard_verdict v = output_guard::check(rows.data(), n, 3);
    EXPECT_EQ(v.trip, guard_trip::NON_FINITE);
    EXPECT_EQ(v.row, 1);
    EXPECT_EQ(v.col, 999);
    EXPECT_EQ(v.detail, "row 1: NaN at column 999");
    rows[size_t(1 * n + 999)] = 0.5f;
    rows[size_t(2 * n)] = -std::numeric_limits<float>::infinity();  // the shift base itself
    v = output_guard::check(rows.data(), n, 3);
    EXPECT_EQ(v.trip, guard_trip::NON_FINITE);
    EXPECT_EQ(v.detail, "row 2: Inf at column 0");
}

TEST(output_guard, row_identical_and_collapsed) {
    for (float c : {0.0f, 5.25f, -1e30f}) {
        std::vector<float> r(4096, c);
        guard_verdict v = output_guard::check(r.data(), 4096);
        EXPECT_EQ(v.trip, guard_trip::ROW_IDENTICAL) << c;
        EXPECT_EQ(v.row, 0);
    }
    // Near-constant: 5 ± 1e-6 everywhere (std 1e-6 < 1e-4).
    std::vector<float> r(4096, 5.0f);
    for (size_t i = 0; i < r.size(); i += 2) r[i] += 2e-6f;
    guard_verdict v = output_guard::check(r.data(), 4096);
    EXPECT_EQ(v.trip, guard_trip::COLLAPSED);
    EXPECT_NE(v.detail.find("collapsed"), std::string::npos) << v.detail;
    // A spread of 1e-3 (std 5e-4) is above the floor: still passes.
    for (size_t i = 0; i < r.size(); i += 2) r[i] = 5.001f;
    EXPECT_TRUE(output_guard::check(r.data(), 4096).ok());
    // Disabled, or one-element rows: nothing to check.
    output_guard_config off;
    off.enabled = false;
    std::vector<float> z(64, 0.0f);
    EXPECT_TRUE(output_guard::check(z.data(), 64, 1, off).ok());
    EXPECT_TRUE(output_guard::check(z.data(), 1, 64).ok());
}

TEST(output_guard, check_step_counts_and_throws_the_guard_error) {
    output_guard g;
    std::vector<float> ok = healthy_row(512), bad(512, 0.0f);
    uint64_t total0 = output_guard::trips_total(), ident0 = output_guard::trips(guard_trip::ROW_IDENTICAL);
    g.check_step(ok.data(), 512, 1, "prefill");
    EXPECT_EQ(output_guard::trips_total(), total0);
    bool located = false;
    try {
        g.check_step(bad.data(), 512, 1, "decode step 3", [&] { located = true; return std::string("x"); });
        FAIL() << "no throw";
    } catch (const output_guard_error& e) {
        EXPECT_EQ(e.trip, guard_trip::ROW_IDENTICAL);
        std::string m = e.what();
        EXPECT_NE(m.find("output guard (row_identical)"), std::string::npos) << m;
        EXPECT_NE(m.find("decode step 3"), std::string::npos) << m;
        EXPECT_NE(m.find("TETRA_LOG_LEVEL=debug"), std::string::npos) << m;  // how to locate it
    }
    EXPECT_FALSE(located);  // debug_taps off: the step is not re-run
    EXPECT_EQ(output_guard::trips_total(), total0 + 1);
    EXPECT_EQ(output_guard::trips(guard_trip::ROW_IDENTICAL), ident0 + 1);
    // debug_taps: the locator runs and its answer is in the message.
    output_guard_config dc;
    dc.debug_taps = true;
    output_guard dg(dc);
    try {
        dg.check_step(bad.data(), 512, 1, "prefill", [] { return std::string("layer 1 tap 'q' [1, 4, 16]: NaN"); });
        FAIL() << "no throw";
    } catch (const error& e) {  // also a tetra::error: the CLI prints it as `error: …`
        EXPECT_NE(std::string(e.what()).find("first bad tap: layer 1 tap 'q'"), std::string::npos) << e.what();
    }
    EXPECT_EQ(output_guard::trips_total(), total0 + 2);
}

TEST(output_guard, zero_token_streak) {
    output_guard_config c;
    c.max_zero_streak = 4;
    output_guard g(c);
    uint64_t z0 = output_guard::trips(guard_trip::ZERO_STREAK);
    for (int32_t t : {0, 0, 0, 0, 7, 0, 0, 0, 0}) g.check_token(t);  // streaks of 4: at the limit
    EXPECT_THROW(g.check_token(0), output_guard_error);                 // the 5th in a row
    EXPECT_EQ(output_guard::trips(guard_trip::ZERO_STREAK), z0 + 1);
    output_guard d;  // default limit 32
    for (int i = 0; i < 32; ++i) d.check_token(0);
    EXPECT_THROW(d.check_token(0), output_guard_error);
    EXPECT_STREQ(guard_trip_name(guard_trip::ZERO_STREAK), "zero_streak");
}
