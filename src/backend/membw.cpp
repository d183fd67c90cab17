// measure_read_bandwidth (membw.h): dispatch by device kind and the CPU probe. CPU: a 64-byte
// aligned buffer filled by the pool threads (first touch puts each page near the thread that
// reads it), one warm-up pass, then k_passes timed passes; each thread reads its contiguous share
// with four independent 256-bit accumulators (xor: no FP latency chain), and the result goes to a
// volatile sink so the compiler must issue every load.
#include "backend/membw.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace tetra {

namespace {

constexpr size_t k_min_bytes = size_t(1) << 20;
constexpr int k_passes = 5;

__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, size_t n) {  // n % 128 == 0
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
    }
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3)));
    return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
}

uint64_t read_plain(const uint8_t* p, size_t n) {  // n % 32 == 0; vectorized to SSE2 by the compiler
    const uint64_t* q = reinterpret_cast<const uint64_t*>(p);
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i < n / 8; i += 4) a0 ^= q[i], a1 ^= q[i + 1], a2 ^= q[i + 2], a3 ^= q[i + 3];
    return a0 ^ a1 ^ a2 ^ a3;
}

double measure_cpu(size_t bytes) {
    const size_t n = bytes / 4096 * 4096;
    std::unique_ptr<uint8_t, decltype(&std::free)> buf(static_cast<uint8_t*>(std::aligned_alloc(4096, n)), &std::free);
    TETRA_CHECK(buf != nullptr, "memory bandwidth probe: cannot allocate %zu bytes of host memory", n);
    uint8_t* p = buf.get();
    const int64_t pages = int64_t(n / 4096);
    // Same page split as the reads below (parallel_for ranges depend only on (n, threads)).
    parallel_for(pages, [&](int64_t a, int64_t b) {
        for (int64_t pg = a; pg < b; ++pg) std::memset(p + pg * 4096, int(pg * 131 + 7) & 0xFF, 4096);
    });
    const bool avx2 = __builtin_cpu_supports("avx2");
    std::vector<uint64_t> part(size_t(pages), 0);  // slot = first page of a range
    volatile uint64_t sink = 0;
    double best = 0.0;
    for (int pass = 0; pass <= k_passes; ++pass) {  // pass 0: warm-up (TLB, page tables, clocks)
        auto t0 = std::chrono::steady_clock::now();
        parallel_for(pages, [&](int64_t a, int64_t b) {
            const uint8_t* q = p + a * 4096;
            size_t len = size_t(b - a) * 4096;
            part[size_t(a)] = avx2 ? read_avx2(q, len) : read_plain(q, len);  // disjoint slots per range
        });
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        uint64_t x = 0;
        for (uint64_t v : part) x ^= v;
        sink = sink ^ x;
        if (pass > 0 && s > 0) best = std::max(best, double(n) / s);
    }
    (void)sink;
    return best;
}

}  // namespace

double measure_read_bandwidth(backend& be, size_t bytes) {
    TETRA_CHECK(bytes == 0 || bytes >= k_min_bytes,
                "memory bandwidth probe: %zu bytes requested; expected 0 (default) or at least %zu (1 MiB)", bytes,
                k_min_bytes);
    if (be.device().kind == device_kind::CPU) return measure_cpu(bytes ? bytes : size_t(256) << 20);
#ifdef TETRA_HAVE_CUDA
    return cuda::measure_read_bandwidth_cuda(be, bytes);
#else
    TETRA_FAIL("memory bandwidth probe: backend '%s' is not a CPU backend and this tetra was built without CUDA",
               be.device().name.c_str());
#endif
}

}  // namespace tetra
