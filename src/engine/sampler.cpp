// engine/sampler: the algorithm specified in sampler.h. Cost for n_vocab = 152064: a few O(n_vocab)
// passes (scale, exp, collect) plus radix selections over the candidates; no full sort. The exp
// loop is branch-free so it vectorizes. FP contraction must stay off (the project builds with
// -std=c++17, i.e. ISO mode, where GCC does not contract); the golden test catches a violation.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

namespace tetra {

void token_history::add_prompt(const std::vector<int32_t>& ids) {
    for (int32_t id : ids) ++prompt_counts[id];
}

void token_history::add_output(int32_t id) {
    ++output_counts[id];
    ++n_output;
}

// ---- bit-exact building blocks ----

namespace {

// The body of sampler_exp, internal so that it inlines and vectorizes under -fPIC (an exported
// function may be interposed, so GCC would not inline it into the loops).
inline float exp_f32(float d) {
    // The d < -87 test and the selects are done on the bits (d <= 0: a larger u32 is a more
    // negative float; -inf included) so that the loop calling this vectorizes without
    // -fno-trapping-math.
    uint32_t db;
    std::memcpy(&db, &d, 4);
    const uint32_t zero = db > 0xC2AE0000u ? 0xFFFFFFFFu : 0u;  // 0xC2AE0000 = -87.0f
    db = (db & ~zero) | (0xC2AE0000u & zero);
    std::memcpy(&d, &db, 4);
    float t = d * 1.44269504f;
    float k = (t + 12582912.0f) - 12582912.0f;  // 1.5 * 2^23: rounds t to an integer, ties even
    float r = d - k * 0.693359375f;             // ln2 split: k * hi is exact for |k| < 2^15
    r = r - k * -2.12194440e-4f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = (int32_t(k) + 127) << 23;  // k in [-126, 0]
    float scale;
    std::memcpy(&scale, &bits, 4);
    float res = p * scale;
    uint32_t rb;
    std::memcpy(&rb, &res, 4);
    rb &= ~zero;
    std::memcpy(&res, &rb, 4);
    return res;
}

}  // namespace

float sampler_exp(float d) { return exp_f32(d); }

uint64_t sampler_random_bits(uint64_t seed, int64_t step) {
    uint64_t z = seed + (uint64_t(step) + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

namespace {

using u128 = unsigned __int128;
constexpr int q_bits = 40;  // fixed-point weight: q = floor(w * 2^40)
constexpr int32_t max_vocab = 1 << 23;  // sum of q < 2^63

uint32_t ord32(float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    return b ^ (uint32_t(int32_t(b) >> 31) | 0x80000000u);  // negative: ~b; else b | sign
}

uint64_t make_key(float x, int32_t id) {
    x = x + 0.0f;  // -0 -> +0, so that equal values tie on the id
    return (uint64_t(ord32(x)) << 32) | uint64_t(0xFFFFFFFFu - uint32_t(id));
}

int32_t key_id(uint64_t key) { return int32_t(0xFFFFFFFFu - uint32_t(key & 0xFFFFFFFFu)); }

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
crossing_result crossing(const C* a, size_t n, uint64_t kmin, uint64_t kmax, std::vector<C>& buf,
                         uint64_t r) {
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

// max of x f32[n] (n >= 1) in 4 independent chains (the scalar max is latency-bound).
float max_f32(const float* x, int32_t n) {
    float mx[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int32_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; ++j) mx[j] = x[i + j] > mx[j] ? x[i + j] : mx[j];
    for (; i < n; ++i) mx[0] = x[i] > mx[0] ? x[i] : mx[0];
    return std::max(std::max(mx[0], mx[1]), std::max(mx[2], mx[3]));
}

// Raw log-softmax pieces (vLLM raw_logprobs): log-sum-exp, top-n by logit (ties -> lowest id).
// Not bit-exact across backends (the sum's order differs); accurate to ~1e-6.
double log_sum_exp(const float* l, int32_t n, std::vector<float>& buf) {
    const float m = max_f32(l, n);
    buf.resize(n);
    float* w = buf.data();
    for (int32_t i = 0; i < n; ++i) w[i] = exp_f32(l[i] - m);
    double s[4] = {0, 0, 0, 0};
    int32_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; ++j) s[j] += double(w[i + j]);
    for (; i < n; ++i) s[0] += double(w[i]);
    return double(m) + std::log((s[0] + s[1]) + (s[2] + s[3]));
}

std::vector<token_logprob> top_n(const float* l, int32_t n_vocab, int32_t n, double lse) {
    // min-heap on key (logit, then lower id larger) holding the n best
    std::vector<uint64_t> heap;
    heap.reserve(n);
    float floor_v = -INFINITY;  // the heap's smallest logit once full: cheap early reject
    for (int32_t i = 0; i < n_vocab && n > 0; ++i) {
        if (l[i] < floor_v) continue;
        uint64_t k = make_key(l[i], i);
        if (int32_t(heap.size()) < n) {
            heap.push_back(k);
            std::push_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
        } else if (k > heap.front()) {
            std::pop_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
            heap.back() = k;
            std::push_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
        }
        if (int32_t(heap.size()) == n) floor_v = l[key_id(heap.front())];
    }
    std::sort(heap.begin(), heap.end(), std::greater<uint64_t>());
    std::vector<token_logprob> out;
    for (uint64_t k : heap) {
        int32_t id = key_id(k);
        out.push_back({id, float(double(l[id]) - lse)});
    }
    return out;
}

}  // namespace

// ---- steps 1-3 ----

void apply_min_tokens(float* logits, int32_t n_vocab, const sampling_params& p,
                      const token_history& h) {
    if (h.n_output >= p.min_tokens) return;
    const float ninf = -std::numeric_limits<float>::infinity();
    for (int32_t id : p.eos_token_ids)
        if (id >= 0 && id < n_vocab) logits[id] = ninf;
    for (int32_t id : p.stop_token_ids)
        if (id >= 0 && id < n_vocab) logits[id] = ninf;
}

void apply_penalties(float* logits, int32_t n_vocab, const sampling_params& p,
                     const token_history& h) {
    const float rep = p.repetition_penalty;
    auto repeat = [&](int32_t id) {
        if (id < 0 || id >= n_vocab) return;
        float& l = logits[id];
        l = l > 0.0f ? l / rep : l * rep;
    };
    if (rep != 1.0f) {
        for (const auto& [id, c] : h.prompt_counts)
            if (c > 0) repeat(id);
        for (const auto& [id, c] : h.output_counts) {
            auto it = h.prompt_counts.find(id);
            if (c > 0 && (it == h.prompt_counts.end() || it->second <= 0)) repeat(id);
        }
    }
    if (p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f) return;
    for (const auto& [id, c] : h.output_counts) {
        if (c <= 0 || id < 0 || id >= n_vocab) continue;
        float& l = logits[id];
        l = l - p.frequency_penalty * float(c);
        l = l - p.presence_penalty;
    }
}

int32_t argmax_lowest_id(const float* logits, int32_t n_vocab) {
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; ++i)
        if (logits[i] > logits[best]) best = i;  // strict: the first maximum wins
    return best;
}

// ---- steps 4-8 ----

void sampler::filter(float* x, int32_t n, const sampling_params& p) {
    // step 4: scale (x / 1 == x, so T = 1 skips the division), max, weights
    if (!p.greedy() && p.temperature != 1.0f) {
        const float t = p.temperature;
        for (int32_t i = 0; i < n; ++i) x[i] = x[i] / t;
    }
    const float m = max_f32(x, n);
    TETRA_CHECK(m > -INFINITY,
                "sampler: every logit is -inf after penalties and min_tokens (n_vocab %d)", n);
    TETRA_CHECK(m < INFINITY, "sampler: logits / temperature overflow f32 (temperature %g)",
                double(p.temperature));
    w_.resize(n);
    float* w = w_.data();
    for (int32_t k = 0; k < n; ++k) w[k] = exp_f32(x[k] - m);
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
        uint64_t key = make_key(x[k], k);
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
            bool keep = (c[k].key >= cut) & (w[key_id(c[k].key)] >= p.min_p);
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
}

std::vector<sampler::kept_token> sampler::kept(float* logits, int32_t n_vocab,
                                               const sampling_params& p) {
    TETRA_CHECK(n_vocab > 0 && n_vocab <= max_vocab, "sampler: n_vocab %d outside [1, %d]",
                n_vocab, max_vocab);
    filter(logits, n_vocab, p);
    std::vector<cand> c;
    for (size_t i = 0; i < n_cands_; ++i)
        if (cands_[i].key >= cut_) c.push_back(cands_[i]);
    std::sort(c.begin(), c.end(), [](const cand& u, const cand& v) { return u.key > v.key; });
    std::vector<kept_token> out;
    for (const cand& k : c) out.push_back({key_id(k.key), k.q});
    return out;
}

sample_result sampler::sample(float* logits, int32_t n_vocab, const sampling_params& p,
                              const token_history& h, uint64_t seed, int64_t step) {
    TETRA_CHECK(n_vocab > 0 && n_vocab <= max_vocab, "sampler: n_vocab %d outside [1, %d]",
                n_vocab, max_vocab);
    uint32_t n_bad = 0;  // NaN or +inf, counted on the bits so the scan vectorizes
    for (int32_t i = 0; i < n_vocab; ++i) {
        uint32_t b;
        std::memcpy(&b, logits + i, 4);
        n_bad += uint32_t((b & 0x7FFFFFFFu) > 0x7F800000u) | uint32_t(b == 0x7F800000u);
    }
    for (int32_t i = 0; n_bad && i < n_vocab; ++i)
        TETRA_CHECK(!std::isnan(logits[i]) && logits[i] != INFINITY,
                    "sampler: logit of token %d is %g; expected a finite value or -inf", i,
                    double(logits[i]));
    sample_result res;
    double lse = 0.0;
    if (p.logprobs) {
        lse = log_sum_exp(logits, n_vocab, w_);
        res.top_logprobs = top_n(logits, n_vocab, *p.logprobs, lse);
    }
    // The raw logits are needed again for the chosen token's logprob and rank.
    if (p.logprobs) raw_.assign(logits, logits + n_vocab);

    apply_min_tokens(logits, n_vocab, p, h);
    apply_penalties(logits, n_vocab, p, h);
    if (p.greedy()) {
        res.token = argmax_lowest_id(logits, n_vocab);
        TETRA_CHECK(logits[res.token] > -INFINITY,
                    "sampler: every logit is -inf after penalties and min_tokens (n_vocab %d)",
                    n_vocab);
    } else {
        filter(logits, n_vocab, p);
        const uint64_t total = total_;
        TETRA_ASSERT(total > 0);  // the max token has q = 2^40 and survives every filter
        uint64_t u53 = sampler_random_bits(seed, step) >> 11;
        uint64_t r = uint64_t((u128(u53) * total) >> 53);
        res.token = key_id(crossing(cands_.data(), n_cands_, kmin_, kmax_, scratch_, r).key);
    }
    if (p.logprobs) {
        float lt = raw_[res.token];
        res.logprob = float(double(lt) - lse);
        int32_t rank = 0;
        const uint32_t olt = ord32(lt + 0.0f);  // on the bits so that the count vectorizes
        for (int32_t i = 0; i < n_vocab; ++i) rank += ord32(raw_[i] + 0.0f) >= olt;
        res.rank = rank;
    }
    return res;
}

}  // namespace tetra
