// backend/sampling: THE ALGORITHM on the host (row_sampler, moved here from engine/sampler so the
// CPU kernel and the engine share one implementation) and the op wrappers. Cost for n_vocab =
// 152064: a few O(n_vocab) passes (scale, exp, collect) plus radix selections over the candidates;
// no full sort. FP contraction must stay off (the project builds with -std=c++17, i.e. ISO mode,
// where GCC does not contract); the sampler goldens (tests/data/sampler) catch a violation.
#include "backend/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>

#include "backend/op_checks.h"
#include "core/error.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

namespace tetra {

float sampler_exp(float d) { return sampler_exp_inline(d); }

uint64_t sampler_random_bits(uint64_t seed, int64_t step) {
    uint64_t z = seed + (uint64_t(step) + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

const char* sample_error_message(int32_t code) {
    switch (code) {
        case int32_t(sample_error::NON_FINITE): return "a logit is NaN or +inf";
        case int32_t(sample_error::ALL_MASKED): return "every logit is -inf after penalties and min_tokens";
        case int32_t(sample_error::TEMP_OVERFLOW): return "logits / temperature overflow f32";
        default: return code < 0 ? "unknown sampling error" : "";
    }
}

namespace {

using u128 = unsigned __int128;

// ceil(p * total) exactly, p = f32 in (0, 1): p = M * 2^-s with M < 2^24 an integer.
uint64_t ceil_mul(float p, uint64_t total) {
    int e = 0;
    double mant = std::frexp(double(p), &e);  // p = mant * 2^e, mant in [0.5, 1)
    uint64_t m = uint64_t(std::ldexp(mant, 24));
    int s = 24 - e;
    u128 prod = u128(m) * total;
    if (prod == 0) return 0;
    if (s >= 100) return 1;
    return uint64_t((prod + ((u128(1) << s) - 1)) >> s);
}

// k-th largest value (1-based k <= n) of x f32[n].
float kth_largest(const float* x, int32_t n, int32_t k, std::vector<float>& buf) {
    if (k <= 1024) {  // min-heap of the k largest: one compare per element after warm-up
        buf.assign(x, x + k);
        std::make_heap(buf.begin(), buf.end(), std::greater<float>());
        for (int32_t i = k; i < n; ++i) {
            if (x[i] > buf.front()) {
                std::pop_heap(buf.begin(), buf.end(), std::greater<float>());
                buf.back() = x[i];
                std::push_heap(buf.begin(), buf.end(), std::greater<float>());
            }
        }
        return buf.front();
    }
    buf.assign(x, x + n);
    std::nth_element(buf.begin(), buf.begin() + (k - 1), buf.end(), std::greater<float>());
    return buf[k - 1];
}

// The key at which the running sum of q, in descending key order, first exceeds r (r < sum q),
// and that running sum (q summed over all keys >= it).
// Radix select: each pass histograms one digit (weights summed per bucket), keeps only the bucket
// holding the crossing and moves on to the next digit. Digits start at the highest bit where the
// keys differ, 11 bits wide (a 16 KiB histogram), so the first pass over all n usually leaves a
// few thousand. Every key lies in [kmin, kmax]. a[0, n) is not modified; survivors go to `buf`.
struct crossing_result {
    uint64_t key;
    uint64_t cum;
};

template <typename C>
crossing_result crossing(const C* a, size_t n, uint64_t kmin, uint64_t kmax, std::vector<C>& buf, uint64_t r) {
    constexpr int digit = 11;
    const uint64_t r0 = r;
    TETRA_ASSERT(n > 0 && kmin <= kmax);
    int shift = kmin == kmax ? -1 : 63 - __builtin_clzll(kmin ^ kmax) + 1 - digit;
    std::vector<uint64_t> hist(size_t(1) << digit);
    if (buf.size() < n) buf.resize(n);  // never shrinks: no refill on the next call
    while (n > 64 && shift > -digit) {
        const int sh = std::max(shift, 0);
        const uint64_t mask = (uint64_t(1) << digit) - 1;
        std::fill(hist.begin(), hist.end(), 0);
        for (size_t i = 0; i < n; ++i) hist[(a[i].key >> sh) & mask] += a[i].q;
        size_t b = mask;
        for (; b > 0; --b) {
            if (r < hist[b]) break;
            r -= hist[b];
        }
        size_t m = 0;
        C* out = buf.data();
        for (size_t i = 0; i < n; ++i)  // one bucket of many: the branch is well predicted
            if (((a[i].key >> sh) & mask) == b) out[m++] = a[i];
        a = out;
        n = m;
        shift -= digit;
    }
    if (a != buf.data()) std::copy(a, a + n, buf.data());
    std::sort(buf.begin(), buf.begin() + n, [](const C& u, const C& v) { return u.key > v.key; });
    for (size_t i = 0; i < n; ++i) {
        if (r < buf[i].q) return {buf[i].key, r0 - r + buf[i].q};
        r -= buf[i].q;
    }
    TETRA_ASSERT(false && "crossing: r >= sum of q");
    return {0, 0};
}

}  // namespace

// 4 independent chains (the scalar max is latency-bound).
float sampler_max(const float* x, int32_t n) {
    float mx[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int32_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; ++j) mx[j] = x[i + j] > mx[j] ? x[i + j] : mx[j];
    for (; i < n; ++i) mx[0] = x[i] > mx[0] ? x[i] : mx[0];
    return std::max(std::max(mx[0], mx[1]), std::max(mx[2], mx[3]));
}

int32_t sampler_argmax(const float* x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i)
        if (x[i] > x[best]) best = i;  // strict: the first maximum wins
    return best;
}

int32_t sampler_first_bad_logit(const float* x, int32_t n) {
    uint32_t n_bad = 0;  // NaN or +inf, counted on the bits so the scan vectorizes
    for (int32_t i = 0; i < n; ++i) {
        uint32_t b;
        std::memcpy(&b, x + i, 4);
        n_bad += uint32_t((b & 0x7FFFFFFFu) > 0x7F800000u) | uint32_t(b == 0x7F800000u);
    }
    for (int32_t i = 0; n_bad && i < n; ++i)
        if (std::isnan(x[i]) || x[i] == INFINITY) return i;
    return -1;
}

// ---- steps 4-8 ----

int32_t row_sampler::filter(float* x, int32_t n, const sample_filter& p) {
    // step 4: scale (x / 1 == x, so T = 1 skips the division), max, weights
    if (!p.greedy() && p.temperature != 1.0f) {
        const float t = p.temperature;
        for (int32_t i = 0; i < n; ++i) x[i] = x[i] / t;
    }
    const float m = sampler_max(x, n);
    if (!(m > -INFINITY)) return int32_t(sample_error::ALL_MASKED);
    if (!(m < INFINITY)) return int32_t(sample_error::TEMP_OVERFLOW);
    w_.resize(n);
    float* w = w_.data();
    for (int32_t k = 0; k < n; ++k) w[k] = sampler_exp_inline(x[k] - m);
    // step 6 threshold
    float x_k = -INFINITY;
    if (p.top_k > 0 && p.top_k < n) x_k = kth_largest(x, n, p.top_k, xs_);
    // candidates: q > 0 and within top-k (branch-free compaction)
    if (cands_.size() < size_t(n)) cands_.resize(n);  // never shrinks: no refill next call
    cand* c = cands_.data();
    size_t nc = 0;
    uint64_t total = 0, kmin = ~uint64_t(0), kmax = 0;
    const float two40 = 1099511627776.0f;  // 2^40
    for (int32_t k = 0; k < n; ++k) {
        uint64_t q = uint64_t(int64_t(w[k] * two40));  // exact scaling; truncation == floor
        bool keep = (q != 0) & (x[k] >= x_k);
        uint64_t key = sampler_key(x[k], k);
        c[nc] = {key, q};
        nc += keep;
        total += keep ? q : 0;
        kmin = std::min<uint64_t>(kmin, keep ? key : ~uint64_t(0));
        kmax = std::max<uint64_t>(kmax, keep ? key : 0);
    }
    // step 7: top-p. The kept set is the prefix of keys >= cut. It is not compacted: an inverse-CDF
    // walk with r < (the prefix's total) never leaves the prefix, so sampling can run on c[0, nc).
    uint64_t cut = 0;
    if (p.top_p < 1.0f) {
        uint64_t t = ceil_mul(p.top_p, total);
        if (t < total) {
            crossing_result cr = crossing(c, nc, kmin, kmax, scratch_, t - 1);
            cut = cr.key;
            total = cr.cum;
        }
    }
    // step 8: min-p (not a prefix in general: compacted, with the top-p cut applied on the way)
    if (p.min_p > 0.0f) {
        size_t j = 0;
        total = 0;
        for (size_t k = 0; k < nc; ++k) {  // branch-free: the kept ids are scattered
            c[j] = c[k];
            bool keep = (c[k].key >= cut) & (w[sampler_key_id(c[k].key)] >= p.min_p);
            j += keep;
            total += keep ? c[k].q : 0;
        }
        nc = j;  // a subset: the key bounds still hold
        cut = 0;
    }
    cut_ = cut;
    n_cands_ = nc;
    total_ = total;
    kmin_ = kmin;
    kmax_ = kmax;
    return 0;
}

std::vector<row_sampler::kept_token> row_sampler::kept(float* x, int32_t n, const sample_filter& p) {
    std::vector<kept_token> out;
    if (filter(x, n, p) != 0) return out;
    std::vector<cand> c;
    for (size_t i = 0; i < n_cands_; ++i)
        if (cands_[i].key >= cut_) c.push_back(cands_[i]);
    std::sort(c.begin(), c.end(), [](const cand& u, const cand& v) { return u.key > v.key; });
    for (const cand& k : c) out.push_back({sampler_key_id(k.key), k.q});
    return out;
}

int32_t row_sampler::sample(float* x, int32_t n, const sample_filter& p, uint64_t seed, int64_t step) {
    if (p.greedy()) {
        int32_t t = sampler_argmax(x, n);
        return x[t] > -INFINITY ? t : int32_t(sample_error::ALL_MASKED);
    }
    int32_t err = filter(x, n, p);
    if (err != 0) return err;
    const uint64_t total = total_;
    TETRA_ASSERT(total > 0);  // the max token has q = 2^40 and survives every filter
    uint64_t u53 = sampler_random_bits(seed, step) >> 11;
    uint64_t r = uint64_t((u128(u53) * total) >> 53);
    return sampler_key_id(crossing(cands_.data(), n_cands_, kmin_, kmax_, scratch_, r).key);
}

// ---- steps 1-2 from sparse entries ----

sample_filter filter_of(const sample_row& r) {
    sample_filter f;
    f.temperature = r.temperature;
    f.top_k = r.top_k;
    f.top_p = r.top_p;
    f.min_p = r.min_p;
    return f;
}

void apply_sample_entries(float* x, int32_t n, const sample_row& r, const sample_entry* entries) {
    const float rep = r.repetition_penalty;
    const bool freq_or_presence = !(r.frequency_penalty == 0.0f && r.presence_penalty == 0.0f);
    for (int32_t e = 0; e < r.n_entries; ++e) {
        const sample_entry& s = entries[e];
        if (s.id < 0 || s.id >= n) continue;
        float l = x[s.id];
        if (s.suppress) l = -INFINITY;
        if (rep != 1.0f && (s.prompt_count > 0 || s.output_count > 0)) l = l > 0.0f ? l / rep : l * rep;
        if (freq_or_presence && s.output_count > 0) {
            l = l - r.frequency_penalty * float(s.output_count);
            l = l - r.presence_penalty;
        }
        x[s.id] = l;
    }
}

// ---- op wrappers ----

using namespace op_checks;

namespace {

void check_logits(const tensor& t, const char* op) {
    check_act(t, op, "logits");
    TETRA_CHECK(t.rank() == 2, "%s: 'logits' has shape %s; expected rank 2 [n_rows, n_vocab]", op,
                t.shape_str().c_str());
    TETRA_CHECK(t.dim(1) >= 1 && t.dim(1) <= sampler_max_vocab, "%s: 'logits' %s has n_vocab %lld; expected [1, %d]",
                op, t.shape_str().c_str(), (long long)t.dim(1), sampler_max_vocab);
    TETRA_CHECK(t.dim(0) <= 0x7fffffff, "%s: 'logits' %s has too many rows", op, t.shape_str().c_str());
}

void check_i32(const tensor& t, const std::vector<int64_t>& want, const char* op, const char* name) {
    check_dtype(t, dtype::I32, op, name), check_shape(t, want, op, name);
}

}  // namespace

void sample_rows(backend& be, const tensor& logits, const tensor& rows, const tensor& entries, const tensor& out) {
    const char* op = "sample_rows";
    check_on(be, logits, op, "logits"), check_on(be, rows, op, "rows"), check_on(be, out, op, "out");
    check_logits(logits, op);
    const int64_t n_rows = logits.dim(0);
    check_i32(rows, {n_rows, sample_row_words}, op, "rows");
    check_i32(out, {n_rows}, op, "out");
    int64_t n_entries = 0;
    if (!(entries.empty() && entries.rank() == 0)) {  // tensor(): no entries
        check_on(be, entries, op, "entries");
        TETRA_CHECK(entries.rank() == 2, "%s: 'entries' has shape %s; expected [n_entries, 4]", op,
                    entries.shape_str().c_str());
        n_entries = entries.dim(0);
        check_i32(entries, {n_entries, 4}, op, "entries");
        TETRA_CHECK(n_entries < (int64_t(1) << 31), "%s: %lld entries overflow i32 offsets", op, (long long)n_entries);
    }
    sample_rows_args a;
    a.act = logits.type, a.logits = logits, a.rows = rows, a.entries = entries, a.out = out;
    a.n_rows = n_rows, a.n_vocab = logits.dim(1), a.n_entries = n_entries;
    run_op(be, op, a, {&logits, &rows, &out});
}

void sample_guard_stats(backend& be, const tensor& logits, const tensor& stats) {
    const char* op = "sample_guard_stats";
    check_on(be, logits, op, "logits"), check_on(be, stats, op, "stats");
    check_logits(logits, op);
    check_i32(stats, {logits.dim(0), guard_stats_words}, op, "stats");
    sample_guard_stats_args a;
    a.act = logits.type, a.logits = logits, a.stats = stats;
    a.n_rows = logits.dim(0), a.n_vocab = logits.dim(1);
    run_op(be, op, a, {&logits, &stats});
}

namespace cpu {
void register_sampling_kernels(kernel_registry& r) {
    register_sample_rows(r);
    register_sample_guard_stats(r);
}
}  // namespace cpu

}  // namespace tetra
