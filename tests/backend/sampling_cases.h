// Random inputs of the sample_rows op (backend/sampling.h) shared by the CPU and GPU tests: logits
// rows of many shapes (gaussian, exact ties, -inf masks, ranges up to 1e37, subnormals, ±0, NaN,
// +inf, all -inf), each row with its own parameters (greedy, temperature 0.3-2, top_k 1/2/50/
// n_vocab, top_p 0.1/0.9/1, min_p 0/0.05, penalties, min_tokens suppression) and sparse entries
// (ids out of range included). Values are representable in the case's dtype (bf16 rows rounded).
#pragma once
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "backend/ops_harness.h"
#include "backend/sampling.h"

namespace tetra_test {

struct sampling_case {
    int64_t n_vocab = 0, n_rows = 0;
    dtype type = dtype::F32;
    std::vector<float> logits;  // [n_rows, n_vocab], exact in `type`
    std::vector<sample_row> rows;
    std::vector<sample_entry> entries;
    std::vector<int> kinds;  // logits kind of each row
    std::string vars(int64_t r) const {
        const sample_row& p = rows[size_t(r)];
        return strfmt("n_vocab=%lld dtype=%s row=%lld kind=%d T=%g top_k=%d top_p=%g min_p=%g rep=%g freq=%g "
                      "presence=%g entries=%d seed=%llu step=%lld",
                      (long long)n_vocab, dtype_name(type), (long long)r, kinds[size_t(r)], double(p.temperature),
                      p.top_k, double(p.top_p), double(p.min_p), double(p.repetition_penalty),
                      double(p.frequency_penalty), double(p.presence_penalty), p.n_entries,
                      (unsigned long long)p.seed, (long long)p.step);
    }
    // The logits as a host tensor of `type`.
    tensor logits_tensor() const {
        tensor t = tensor::alloc(type, {n_rows, n_vocab});
        for (int64_t i = 0; i < t.numel(); ++i) {
            if (type == dtype::F32) t.ptr<float>()[i] = logits[size_t(i)];
            else t.ptr<uint16_t>()[i] = type == dtype::BF16 ? f32_to_bf16(logits[size_t(i)]) : f32_to_f16(logits[size_t(i)]);
        }
        return t;
    }
    tensor rows_tensor() const {
        tensor t = tensor::alloc(dtype::I32, {n_rows, sample_row_words});
        std::memcpy(t.data, rows.data(), rows.size() * sizeof(sample_row));
        return t;
    }
    tensor entries_tensor() const {
        tensor t = tensor::alloc(dtype::I32, {int64_t(entries.size()), 4});
        if (!entries.empty()) std::memcpy(t.data, entries.data(), entries.size() * sizeof(sample_entry));
        return t;
    }
};

constexpr int k_sampling_kinds = 11;

// Row of kind `kind` (0..10) into x[0, n).
inline void fill_logits(rng& r, int kind, float* x, int64_t n) {
    const float inf = std::numeric_limits<float>::infinity();
    const double scale = kind == 0 ? r.uniform(0.2, 12.0) : 1.0;
    for (int64_t i = 0; i < n; ++i) {
        switch (kind) {
            case 0: x[i] = float(r.normal() * scale); break;                        // gaussian
            case 1: x[i] = float(r.randint(-2, 2)); break;                          // exact ties
            case 2: x[i] = r.randint(0, 1) ? -inf : float(r.normal() * 3); break;   // half masked
            case 3: x[i] = float(r.normal() * 1e37); break;                         // temperature overflow
            case 4: x[i] = float(r.normal() * 1e-39); break;                        // subnormals
            case 5: x[i] = r.randint(0, 1) ? -0.0f : 0.0f; break;                   // ±0 only
            case 6: x[i] = float(r.normal() * 2); break;                            // + a spike below
            case 7: x[i] = r.randint(0, 20) ? -inf : float(r.normal()); break;      // few alive
            case 8: x[i] = float(r.normal() * 2); break;                            // + a NaN below
            case 9: x[i] = -inf; break;                                             // all masked
            default: x[i] = float(r.normal() * 2); break;                           // + a +inf below
        }
    }
    const int64_t at = r.randint(0, n - 1);
    if (kind == 6) x[at] = 40.0f;
    if (kind == 8 && r.randint(0, 3)) x[at] = std::numeric_limits<float>::quiet_NaN();
    if (kind == 10) x[at] = inf;
}

inline float round_to(dtype t, float v) {
    if (t == dtype::BF16) return bf16_to_f32(f32_to_bf16(v));
    if (t == dtype::F16) return f16_to_f32(f32_to_f16(v));
    return v;
}

// Kinds 8-10 (NaN, all -inf, +inf) are rare: 1 row in 16.
inline int pick_kind(rng& r) { return r.randint(0, 15) == 0 ? int(r.randint(8, 10)) : int(r.randint(0, 7)); }

inline sample_row random_params(rng& r, int64_t n_vocab) {
    static const float temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.3f, 2.0f};
    static const float top_ps[] = {0.1f, 0.9f, 1.0f, 1.0f};
    static const float min_ps[] = {0.0f, 0.0f, 0.05f};
    static const float reps[] = {1.0f, 1.0f, 1.1f, 0.8f};
    static const float freqs[] = {0.0f, 0.0f, 0.5f, -0.3f};
    static const float presences[] = {0.0f, 0.0f, 0.7f, -1.0f};
    const int32_t top_ks[] = {0, 0, 1, 2, 50, int32_t(n_vocab), int32_t(std::max<int64_t>(1, n_vocab - 1)), -1};
    sample_row p;
    p.temperature = temps[r.randint(0, 5)];
    p.top_k = top_ks[r.randint(0, 7)];
    p.top_p = top_ps[r.randint(0, 3)];
    p.min_p = min_ps[r.randint(0, 2)];
    p.repetition_penalty = reps[r.randint(0, 3)];
    p.frequency_penalty = freqs[r.randint(0, 3)];
    p.presence_penalty = presences[r.randint(0, 3)];
    p.seed = r.g();
    p.step = r.randint(0, 5000);
    return p;
}

// Up to 40 entries with distinct ids in [-2, n_vocab + 2) (out-of-range ids must be ignored).
inline void random_entries(rng& r, int64_t n_vocab, sample_row& p, std::vector<sample_entry>& out) {
    p.entry0 = int32_t(out.size());
    const int64_t n = r.randint(0, 3) == 0 ? 0 : r.randint(1, 40);
    std::set<int32_t> ids;
    for (int64_t k = 0; k < n; ++k) ids.insert(int32_t(r.randint(-2, n_vocab + 1)));
    for (int32_t id : ids) {
        sample_entry e;
        e.id = id;
        e.prompt_count = int32_t(r.randint(0, 2) == 0 ? 0 : r.randint(1, 3));
        e.output_count = int32_t(r.randint(0, 2) == 0 ? 0 : r.randint(1, 5));
        e.suppress = r.randint(0, 9) == 0;
        if (!e.prompt_count && !e.output_count && !e.suppress) e.output_count = 1;
        out.push_back(e);
    }
    p.n_entries = int32_t(out.size()) - p.entry0;
}

inline sampling_case make_sampling_case(rng& r, int64_t n_vocab, int64_t n_rows, dtype type) {
    sampling_case c;
    c.n_vocab = n_vocab, c.n_rows = n_rows, c.type = type;
    c.logits.resize(size_t(n_vocab * n_rows));
    for (int64_t row = 0; row < n_rows; ++row) {
        int kind = pick_kind(r);
        if (type == dtype::F16 && (kind == 3 || kind == 4)) kind = 0;  // beyond f16's range
        c.kinds.push_back(kind);
        float* x = c.logits.data() + row * n_vocab;
        fill_logits(r, kind, x, n_vocab);
        for (int64_t i = 0; i < n_vocab; ++i) x[i] = round_to(type, x[i]);
        sample_row p = random_params(r, n_vocab);
        random_entries(r, n_vocab, p, c.entries);
        c.rows.push_back(p);
    }
    return c;
}

}  // namespace tetra_test
