// output_guard: one pass per logits row (min, max, shifted sum and sum of squares in 8 f32 lanes,
// combined in double); the rare slow path locates the offending column. Counters are atomics.
#include "engine/output_guard.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/log.h"
#include "model/model.h"

namespace tetra {

namespace {

std::atomic<uint64_t> g_trips[k_guard_trip_kinds];

typedef float f32x4 __attribute__((vector_size(16)));  // GCC vector extension: SSE2 on x86-64, NEON on arm64

// The verdict on a finite row's spread (shared by check_row and stats_verdict): all equal, or a
// std below the floor. An all-equal row prints x0 (check_row's min keeps x0's bits then).
guard_verdict spread_verdict(int64_t row, int64_t n, float x0, float lo, float hi, double S, double SS,
                             const output_guard_config& c) {
    guard_verdict v;
    v.row = row;
    if (lo == hi) {
        v.trip = guard_trip::ROW_IDENTICAL;
        v.detail = strfmt("row %lld: all %lld logits equal %g (argmax degenerates to token id 0)", (long long)row,
                          (long long)n, double(x0));
        return v;
    }
    double mean = S / double(n), var = std::max(0.0, SS / double(n) - mean * mean), sd = std::sqrt(var);
    if (sd < double(c.min_std)) {
        v.trip = guard_trip::COLLAPSED;
        v.detail = strfmt("row %lld: logits collapsed to a near-constant (std %.3g < %.3g, range [%g, %g])",
                          (long long)row, sd, double(c.min_std), double(lo), double(hi));
        return v;
    }
    v.row = -1;
    return v;
}

// Row `row` of length n (n ≥ 2). Shifting by x[0] keeps the f32 sums small for rows with a large
// common offset (softmax-invariant), so the variance does not cancel catastrophically. Two 4-lane
// vector accumulators per statistic (scalar f32 reductions are not auto-vectorized without
// -ffast-math): ~0.1 ns per element instead of ~1.5.
guard_verdict check_row(const float* x, int64_t n, int64_t row, const output_guard_config& c) {
    const float x0 = x[0];
    const f32x4 base = {x0, x0, x0, x0}, zero = {0, 0, 0, 0};
    f32x4 mn[2] = {base, base}, mx[2] = {base, base}, s[2] = {zero, zero}, ss[2] = {zero, zero};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int h = 0; h < 2; ++h) {
            f32x4 v;
            std::memcpy(&v, x + j + 4 * h, sizeof v);
            f32x4 d = v - base;
            s[h] += d, ss[h] += d * d;
            mn[h] = v < mn[h] ? v : mn[h], mx[h] = v > mx[h] ? v : mx[h];
        }
    double S = 0, SS = 0;
    float lo = x0, hi = x0;
    for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 4; ++l)
            S += s[h][l], SS += ss[h][l], lo = std::min(lo, mn[h][l]), hi = std::max(hi, mx[h][l]);
    for (; j < n; ++j) {
        float v = x[j], d = v - x0;
        S += d, SS += double(d * d);  // squared in f32 as in the lanes: overflow does not depend on j
        lo = v < lo ? v : lo, hi = v > hi ? v : hi;
    }
    guard_verdict v;
    v.row = row;
    if (!std::isfinite(S) || !std::isfinite(SS)) {  // NaN or Inf somewhere (or |x| beyond 1e19)
        v.trip = guard_trip::NON_FINITE;
        for (int64_t k = 0; k < n; ++k)
            if (!std::isfinite(x[k])) {
                v.col = k;
                v.detail = strfmt("row %lld: %s at column %lld", (long long)row, std::isnan(x[k]) ? "NaN" : "Inf",
                                  (long long)k);
                return v;
            }
        v.detail = strfmt("row %lld: logits overflow (values up to %g)", (long long)row, double(std::max(-lo, hi)));
        return v;
    }
    return spread_verdict(row, n, x0, lo, hi, S, SS, c);
}

// The verdict of stats (check_stats): the same trips and messages as check_row.
guard_verdict stats_verdict(const guard_row_stats& s, int64_t n, int64_t row, const output_guard_config& c) {
    guard_verdict v;
    v.row = row;
    if (s.first_bad >= 0) {
        v.trip = guard_trip::NON_FINITE;
        v.col = s.first_bad;
        v.detail = strfmt("row %lld: %s at column %lld", (long long)row, std::isnan(s.bad_value) ? "NaN" : "Inf",
                          (long long)s.first_bad);
        return v;
    }
    // check_row squares every d = f32(x - x0) in f32: its sum is not finite when the largest |d|
    // squares past FLT_MAX (or the squares add up past it).
    const float dhi = s.hi - s.x0, dlo = s.lo - s.x0;
    const float dmax = std::max(std::fabs(dhi), std::fabs(dlo));
    const float dmax_sq = dmax * dmax;
    if (!std::isfinite(dmax_sq) || !(s.sum_sq <= double(std::numeric_limits<float>::max()))) {
        v.trip = guard_trip::NON_FINITE;
        v.detail = strfmt("row %lld: logits overflow (values up to %g)", (long long)row, double(std::max(-s.lo, s.hi)));
        return v;
    }
    return spread_verdict(row, n, s.x0, s.lo, s.hi, s.sum, s.sum_sq, c);
}

}  // namespace

const char* guard_trip_name(guard_trip t) {
    switch (t) {
        case guard_trip::NONE: return "none";
        case guard_trip::NON_FINITE: return "non_finite";
        case guard_trip::ROW_IDENTICAL: return "row_identical";
        case guard_trip::COLLAPSED: return "collapsed";
        case guard_trip::ZERO_STREAK: return "zero_streak";
    }
    return "?";
}

output_guard_config default_output_guard_config() {
    output_guard_config c;
    c.debug_taps = get_log_level() == log_level::DEBUG;
    return c;
}

guard_verdict output_guard::check(const float* logits, int64_t n_vocab, int64_t n_rows, const output_guard_config& c) {
    if (!c.enabled || n_vocab < 2) return {};
    for (int64_t r = 0; r < n_rows; ++r) {
        guard_verdict v = check_row(logits + r * n_vocab, n_vocab, r, c);
        if (!v.ok()) return v;
    }
    return {};
}

guard_verdict output_guard::check_stats(const guard_row_stats* stats, int64_t n_vocab, int64_t n_rows,
                                        const output_guard_config& c) {
    if (!c.enabled || n_vocab < 2) return {};
    for (int64_t r = 0; r < n_rows; ++r) {
        guard_verdict v = stats_verdict(stats[r], n_vocab, r, c);
        if (!v.ok()) return v;
    }
    return {};
}

void output_guard::count_trip(guard_trip t) {
    g_trips[int(t)].fetch_add(1, std::memory_order_relaxed);
}

uint64_t output_guard::trips(guard_trip t) { return g_trips[int(t)].load(std::memory_order_relaxed); }

uint64_t output_guard::trips_total() {
    uint64_t n = 0;
    for (int i = 1; i < k_guard_trip_kinds; ++i) n += g_trips[i].load(std::memory_order_relaxed);
    return n;
}

void output_guard::check_step(const float* logits, int64_t n_vocab, int64_t n_rows, const std::string& where,
                              const std::function<std::string()>& locate) {
    guard_verdict v = check(logits, n_vocab, n_rows, cfg_);
    if (v.ok()) return;
    count_trip(v.trip);
    std::string msg = strfmt("output guard (%s): %s logits at %s: %s. A kernel is producing wrong results on this "
                             "device; the request was stopped instead of returning garbage",
                             guard_trip_name(v.trip), v.trip == guard_trip::NON_FINITE ? "non-finite" : "degenerate",
                             where.c_str(), v.detail.c_str());
    if (cfg_.debug_taps && locate) {
        std::string tap;
        try {
            tap = locate();
        } catch (const std::exception& e) {
            tap = std::string("(re-run with taps failed: ") + e.what() + ")";
        }
        TETRA_LOG_ERROR("output guard: first bad tap of %s: %s", where.c_str(),
                        tap.empty() ? "none (every intermediate finite and varied; the fault is in the logits)"
                                    : tap.c_str());
        msg += "; first bad tap: " + (tap.empty() ? std::string("none before the logits") : tap);
    } else {
        msg += " (set TETRA_LOG_LEVEL=debug to locate the first bad layer/tap)";
    }
    throw output_guard_error(v.trip, msg);
}

void output_guard::check_token(int32_t token) {
    if (!cfg_.enabled) return;
    zero_streak_ = token == 0 ? zero_streak_ + 1 : 0;
    if (zero_streak_ <= cfg_.max_zero_streak) return;
    count_trip(guard_trip::ZERO_STREAK);
    throw output_guard_error(guard_trip::ZERO_STREAK,
                             strfmt("output guard (zero_streak): %lld consecutive tokens with id 0 (limit %lld): the "
                                    "model is emitting the argmax of degenerate logits; the request was stopped",
                                    (long long)zero_streak_, (long long)cfg_.max_zero_streak));
}

namespace {

std::vector<float> download_f32(backend& be, const tensor& t) {
    std::vector<uint8_t> raw(t.nbytes());
    be.download(t, raw.data());
    std::vector<float> out(size_t(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) out[size_t(i)] = load_f32(raw.data(), t.type, i);
    return out;
}

std::string tap_name(const std::string& name, int il, const tensor& t) {
    return (il >= 0 ? strfmt("layer %d tap '%s'", il, name.c_str()) : strfmt("tap '%s'", name.c_str())) + " " +
           t.shape_str();
}

}  // namespace

std::string first_bad_tap(causal_lm& m, backend& be, const std::function<void()>& rerun) {
    std::string first;  // the earliest tap (forward order) with NaN/Inf or all-constant rows
    m.set_tap([&](const std::string& name, int il, const tensor& t) {
        if (!first.empty() || t.rank() == 0 || t.numel() == 0) return;
        if (t.type != dtype::F32 && t.type != dtype::BF16 && t.type != dtype::F16) return;
        std::vector<float> x = download_f32(be, t);
        int64_t n = t.dim(-1), n_rows = t.numel() / n;
        for (int64_t i = 0; i < t.numel(); ++i)
            if (!std::isfinite(x[size_t(i)])) {
                first = strfmt("%s: %s at row %lld column %lld", tap_name(name, il, t).c_str(),
                               std::isnan(x[size_t(i)]) ? "NaN" : "Inf", (long long)(i / n), (long long)(i % n));
                return;
            }
        if (n < 2) return;
        bool all_const = true;
        for (int64_t r = 0; r < n_rows && all_const; ++r) {
            const float* row = x.data() + r * n;
            all_const = std::all_of(row, row + n, [&](float v) { return v == row[0]; });
        }
        if (all_const) first = tap_name(name, il, t) + ": every row has all elements equal";
    });
    try {
        rerun();
    } catch (...) {
        m.set_tap(nullptr);
        throw;
    }
    m.set_tap(nullptr);
    return first;
}

}  // namespace tetra
