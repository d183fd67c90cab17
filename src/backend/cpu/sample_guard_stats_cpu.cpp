// sample_guard_stats_cpu: the output guard's per-row statistics (guard_row_stats) by their
// definition — one sequential pass, f64 sums of d = f32(x - x[0]) — the oracle of the device kernel.
#include "backend/cpu/cpu_kernels.h"
#include "backend/sampling.h"

#include <cmath>
#include <cstring>

namespace tetra {

guard_row_stats guard_stats_row(const float* x, int64_t n) {
    guard_row_stats s;
    s.x0 = x[0];
    s.lo = s.hi = x[0];
    for (int64_t j = 0; j < n; ++j) {
        const float v = x[j];
        if (!std::isfinite(v)) {
            if (s.first_bad < 0) s.first_bad = int32_t(j), s.bad_value = v;
            continue;
        }
        const float d = v - s.x0;
        s.sum += double(d);
        s.sum_sq += double(d) * double(d);
        s.lo = v < s.lo ? v : s.lo;
        s.hi = v > s.hi ? v : s.hi;
    }
    return s;
}

namespace cpu {

namespace {

// logits: [n_rows, n_vocab] act; stats: i32 [n_rows, 10] (guard_row_stats)
void sample_guard_stats_cpu(backend&, const sample_guard_stats_args& a) {
    const int64_t n = a.n_vocab;
    guard_row_stats* out = a.stats.ptr<guard_row_stats>();
    parallel_for(a.n_rows, [&](int64_t r0, int64_t r1) {
        std::vector<float> x(static_cast<size_t>(n));
        for (int64_t r = r0; r < r1; ++r) {
            act_load_row(a.logits.data, a.act, r * n, n, x.data());
            out[r] = guard_stats_row(x.data(), n);
        }
    });
}

}  // namespace

void register_sample_guard_stats(kernel_registry& r) {
    r.add(make_kernel<sample_guard_stats_args>("sample_guard_stats", "sample_guard_stats_cpu", plain_req(), 0, nullptr,
                                               sample_guard_stats_cpu));
}

}  // namespace cpu
}  // namespace tetra
