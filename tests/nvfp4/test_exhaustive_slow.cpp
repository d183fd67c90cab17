// Exhaustive proofs of the scalar encoders: e2m1_encode, e2m1_encode_modelopt and e4m3_encode on
// all 2^32 fp32 bit patterns against the independent formulations in nvfp4_reference.h (nearest
// value by distance in double / binary search over the e4m3 grid, exact ties to even).
// Speed: the reference magnitude is a non-decreasing step function of the bit pattern of |x|
// (nearest-value rounding is monotone), so its step boundaries are found once by bisection with
// the reference itself, spot-checked against it, and the sweep compares every pattern of both
// signs with the step it falls in. Runs on all hardware threads; prints the runtime and, on
// failure, the mismatch count and the lowest differing bit patterns.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nvfp4/nvfp4.h"
#include "nvfp4/nvfp4_reference.h"

using namespace tetra;

namespace {

constexpr uint32_t k_inf_bits = 0x7F800000u;

struct mismatch {
    uint32_t bits;
    int got, want;
};

struct sweep_result {
    uint64_t n_bad = 0;
    std::vector<mismatch> first;  // lowest bit patterns that differ (up to 8)
    double seconds = 0, cpu_seconds = 0;
};

// Step boundaries of a monotone magnitude function mag(|x| bits) on [0, Inf]: start[c] = the
// smallest pattern u with mag(u) >= c, by bisection (31 evaluations each).
template <typename Mag>
std::vector<uint32_t> step_starts(int n_codes, const Mag& mag) {
    std::vector<uint32_t> start(n_codes + 1, k_inf_bits + 1);
    for (int c = 0; c < n_codes; ++c) {
        uint64_t lo = 0, hi = uint64_t(k_inf_bits) + 1;  // answer in [lo, hi]
        while (lo < hi) {
            uint64_t mid = (lo + hi) / 2;
            if (mag(uint32_t(mid)) >= c) hi = mid; else lo = mid + 1;
        }
        start[c] = uint32_t(lo);
    }
    return start;
}

// The bisection assumes monotonicity; confirm the reference agrees with the steps at both sides
// of every boundary and on 2^22 random patterns (a non-monotone reference would show here).
template <typename Mag>
void check_steps_against_reference(const std::vector<uint32_t>& start, const Mag& mag) {
    auto step_of = [&](uint32_t u) {
        return int(std::upper_bound(start.begin(), start.end() - 1, u) - start.begin()) - 1;
    };
    for (size_t c = 0; c + 1 < start.size(); ++c) {
        if (start[c] > k_inf_bits) continue;  // unreachable code (none expected)
        ASSERT_EQ(mag(start[c]), int(c)) << "boundary " << c;
        if (start[c] > 0) ASSERT_EQ(mag(start[c] - 1), step_of(start[c] - 1)) << "boundary " << c;
    }
    std::mt19937 rng(99);
    for (int i = 0; i < (1 << 22); ++i) {
        uint32_t u = rng() % (k_inf_bits + 1);
        ASSERT_EQ(mag(u), step_of(u)) << "pattern " << u;
    }
}

// For every |x| pattern a in [0, 2^31) and both signs, check(bits, want_magnitude, &got, &want)
// → true when equal; want_magnitude is the reference step (-1 for NaN patterns). Work is split
// into interleaved chunks over all hardware threads.
template <typename Check>
sweep_result sweep_all_fp32(const std::vector<uint32_t>& start, const Check& check) {
    const unsigned n_threads = std::max(1u, std::thread::hardware_concurrency());
    const uint64_t chunk = 1u << 20, n_chunks = (uint64_t(1) << 31) / chunk;
    std::atomic<uint64_t> next{0}, n_bad{0};
    std::mutex mu;
    std::vector<mismatch> first;
    auto t0 = std::chrono::steady_clock::now();
    std::clock_t c0 = std::clock();  // process CPU time, all threads
    auto work = [&] {
        std::vector<mismatch> local;
        uint64_t bad = 0;
        for (uint64_t c; (c = next.fetch_add(1)) < n_chunks;) {
            uint32_t a0 = uint32_t(c * chunk);
            int step = int(std::upper_bound(start.begin(), start.end() - 1, a0) - start.begin()) - 1;
            for (uint64_t a = a0; a < a0 + chunk; ++a) {
                while (step + 1 < int(start.size()) - 1 && a >= start[step + 1]) ++step;
                int want_mag = a > k_inf_bits ? -1 : step;
                for (uint32_t u : {uint32_t(a), uint32_t(a) | 0x80000000u}) {
                    int got, want;
                    if (check(u, want_mag, &got, &want)) continue;
                    ++bad;
                    if (local.size() < 8) local.push_back({u, got, want});
                }
            }
        }
        n_bad += bad;
        std::lock_guard<std::mutex> lk(mu);
        first.insert(first.end(), local.begin(), local.end());
    };
    std::vector<std::thread> threads;
    for (unsigned i = 0; i < n_threads; ++i) threads.emplace_back(work);
    for (auto& t : threads) t.join();
    std::sort(first.begin(), first.end(), [](auto& a, auto& b) { return a.bits < b.bits; });
    if (first.size() > 8) first.resize(8);
    sweep_result r;
    r.n_bad = n_bad;
    r.first = first;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.cpu_seconds = double(std::clock() - c0) / CLOCKS_PER_SEC;
    return r;
}

std::string describe(const sweep_result& r) {
    std::string s = std::to_string(r.n_bad) + " mismatching fp32 patterns; first:";
    char buf[96];
    for (auto& m : r.first) {
        snprintf(buf, sizeof buf, "\n  0x%08X (%.9g): got 0x%02X, want 0x%02X", m.bits,
                 double(ref::from_bits(m.bits)), m.got, m.want);
        s += buf;
    }
    return s;
}

void report_time(const char* what, const sweep_result& r) {
    printf("[ time     ] %s: %.1f s wall, %.1f s cpu, %u threads\n", what, r.seconds, r.cpu_seconds,
           std::max(1u, std::thread::hardware_concurrency()));
    ::testing::Test::RecordProperty("seconds", std::to_string(r.seconds));
}

// Reference E2M1 magnitude (0..7) of the non-negative float with bits a.
int e2m1_ref_mag(uint32_t a) {
    static const ref::e2m1_grid g;
    return ref::e2m1_encode(ref::from_bits(a), false, g) & 7;
}

// Reference E4M3 byte without sign (0..0x7E) of the non-negative float with bits a.
int e4m3_ref_mag(uint32_t a) {
    static const ref::e4m3_grid g;
    return ref::e4m3_encode(ref::from_bits(a), g) & 0x7F;
}

// Both E2M1 variants share the reference magnitude; they differ in the sign rule (ref::e2m1_encode).
void e2m1_exhaustive(bool modelopt) {
    auto start = step_starts(8, e2m1_ref_mag);
    check_steps_against_reference(start, e2m1_ref_mag);
    if (::testing::Test::HasFatalFailure()) return;
    auto r = sweep_all_fp32(start, [&](uint32_t u, int want_mag, int* got, int* want) {
        float x = ref::from_bits(u);
        *got = modelopt ? e2m1_encode_modelopt(x) : e2m1_encode(x);
        bool neg = modelopt ? x < 0.0f : std::signbit(x);
        *want = want_mag < 0 ? 0x7 : (neg ? 8 : 0) | want_mag;  // NaN → 0x7
        return *got == *want;
    });
    report_time(modelopt ? "e2m1_encode_modelopt" : "e2m1_encode", r);
    EXPECT_EQ(r.n_bad, 0u) << describe(r);
}

}  // namespace

TEST(nvfp4_exhaustive, e2m1_encode_all_fp32) { e2m1_exhaustive(false); }

TEST(nvfp4_exhaustive, e2m1_encode_modelopt_all_fp32) { e2m1_exhaustive(true); }

TEST(nvfp4_exhaustive, e4m3_encode_all_fp32) {
    auto start = step_starts(127, e4m3_ref_mag);
    check_steps_against_reference(start, e4m3_ref_mag);
    if (HasFatalFailure()) return;
    auto r = sweep_all_fp32(start, [&](uint32_t u, int want_mag, int* got, int* want) {
        float x = ref::from_bits(u);
        *got = e4m3_encode(x);
        *want = want_mag < 0 ? 0x7F : (std::signbit(x) ? 0x80 : 0) | want_mag;  // NaN → 0x7F
        return *got == *want;
    });
    report_time("e4m3_encode", r);
    EXPECT_EQ(r.n_bad, 0u) << describe(r);
}
