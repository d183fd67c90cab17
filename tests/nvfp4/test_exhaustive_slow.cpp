// Exhaustive proofs of the scalar encoders: e2m1_encode, e2m1_encode_modelopt and e4m3_encode on
// all 2^32 fp32 bit patterns against the independent formulations in nvfp4_reference.h (nearest
// value by distance in double / binary search over the e4m3 grid, exact ties to even). Runs on all
// hardware threads; reports the mismatch count and the first few differing bit patterns.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nvfp4/nvfp4.h"
#include "nvfp4/nvfp4_reference.h"

using namespace tetra;

namespace {

struct mismatch {
    uint32_t bits;
    int got, want;
};

struct sweep_result {
    uint64_t n_bad = 0;
    std::vector<mismatch> first;  // lowest bit patterns that differ (up to 8)
    double seconds = 0;
};

// check(bits, &got, &want) → true when equal. Splits [0, 2^32) over all hardware threads in
// interleaved chunks (so slow and fast ranges spread evenly).
template <typename Check>
sweep_result sweep_all_fp32(const Check& check) {
    const unsigned n_threads = std::max(1u, std::thread::hardware_concurrency());
    const uint64_t chunk = 1u << 20, n_chunks = (uint64_t(1) << 32) / chunk;
    std::atomic<uint64_t> next{0}, n_bad{0};
    std::mutex mu;
    std::vector<mismatch> first;
    auto t0 = std::chrono::steady_clock::now();
    auto work = [&] {
        std::vector<mismatch> local;
        uint64_t bad = 0;
        for (uint64_t c; (c = next.fetch_add(1)) < n_chunks;) {
            for (uint64_t u = c * chunk; u < (c + 1) * chunk; ++u) {
                int got, want;
                if (check(uint32_t(u), &got, &want)) continue;
                ++bad;
                if (local.size() < 8) local.push_back({uint32_t(u), got, want});
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

void report_time(const char* what, double seconds) {
    printf("[ time     ] %s: %.1f s on %u threads\n", what, seconds,
           std::max(1u, std::thread::hardware_concurrency()));
    ::testing::Test::RecordProperty("seconds", std::to_string(seconds));
}

}  // namespace

TEST(nvfp4_exhaustive, e2m1_encode_all_fp32) {
    const ref::e2m1_grid g;
    auto r = sweep_all_fp32([&](uint32_t u, int* got, int* want) {
        float x = ref::from_bits(u);
        *got = e2m1_encode(x);
        *want = ref::e2m1_encode(x, false, g);
        return *got == *want;
    });
    report_time("e2m1_encode", r.seconds);
    EXPECT_EQ(r.n_bad, 0u) << describe(r);
}

TEST(nvfp4_exhaustive, e2m1_encode_modelopt_all_fp32) {
    const ref::e2m1_grid g;
    auto r = sweep_all_fp32([&](uint32_t u, int* got, int* want) {
        float x = ref::from_bits(u);
        *got = e2m1_encode_modelopt(x);
        *want = ref::e2m1_encode(x, true, g);
        return *got == *want;
    });
    report_time("e2m1_encode_modelopt", r.seconds);
    EXPECT_EQ(r.n_bad, 0u) << describe(r);
}

TEST(nvfp4_exhaustive, e4m3_encode_all_fp32) {
    const ref::e4m3_grid g;
    auto r = sweep_all_fp32([&](uint32_t u, int* got, int* want) {
        float x = ref::from_bits(u);
        *got = e4m3_encode(x);
        *want = ref::e4m3_encode(x, g);
        return *got == *want;
    });
    report_time("e4m3_encode", r.seconds);
    EXPECT_EQ(r.n_bad, 0u) << describe(r);
}
