// engine/sampler: steps 1-2 of THE ALGORITHM from a token_history, steps 3-9 by backend/sampling's
// row_sampler (the implementation the CPU kernel of sample_rows shares), and raw logprobs. The
// packing of a row for the batched device op lives here too (pack_sample_row).
// FP contraction must stay off (ISO C++17 mode; the golden test catches a violation).
#include "engine/sampler.h"

#include "backend/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

namespace tetra {

static_assert(sampling_eps == 1e-5f, "sample_filter::greedy() uses the same threshold");

void token_history::add_prompt(const std::vector<int32_t>& ids) {
    for (int32_t id : ids) ++prompt_counts[id];
}

void token_history::add_output(int32_t id) {
    ++output_counts[id];
    ++n_output;
}

namespace {

sample_filter filter_of(const sampling_params& p) {
    sample_filter f;
    f.temperature = p.temperature;
    f.top_k = p.top_k;
    f.top_p = p.top_p;
    f.min_p = p.min_p;
    return f;
}

// Raw log-softmax pieces (vLLM raw_logprobs): log-sum-exp, top-n by logit (ties -> lowest id).
// Not bit-exact across backends (the sum's order differs); accurate to ~1e-6.
double log_sum_exp(const float* l, int32_t n, std::vector<float>& buf) {
    const float m = sampler_max(l, n);
    buf.resize(n);
    float* w = buf.data();
    for (int32_t i = 0; i < n; ++i) w[i] = sampler_exp_inline(l[i] - m);
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
        uint64_t k = sampler_key(l[i], i);
        if (int32_t(heap.size()) < n) {
            heap.push_back(k);
            std::push_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
        } else if (k > heap.front()) {
            std::pop_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
            heap.back() = k;
            std::push_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
        }
        if (int32_t(heap.size()) == n) floor_v = l[sampler_key_id(heap.front())];
    }
    std::sort(heap.begin(), heap.end(), std::greater<uint64_t>());
    std::vector<token_logprob> out;
    for (uint64_t k : heap) {
        int32_t id = sampler_key_id(k);
        out.push_back({id, float(double(l[id]) - lse)});
    }
    return out;
}

void check_vocab(int32_t n_vocab) {
    TETRA_CHECK(n_vocab > 0 && n_vocab <= sampler_max_vocab, "sampler: n_vocab %d outside [1, %d]", n_vocab,
                sampler_max_vocab);
}

// The errors of row_sampler as the sampler's exceptions.
void throw_on_error(int32_t code, int32_t n_vocab, const sampling_params& p) {
    TETRA_CHECK(code != int32_t(sample_error::ALL_MASKED),
                "sampler: every logit is -inf after penalties and min_tokens (n_vocab %d)", n_vocab);
    TETRA_CHECK(code != int32_t(sample_error::TEMP_OVERFLOW),
                "sampler: logits / temperature overflow f32 (temperature %g)", double(p.temperature));
    TETRA_ASSERT(code >= 0);
}

}  // namespace

// ---- steps 1-3 ----

void apply_min_tokens(float* logits, int32_t n_vocab, const sampling_params& p, const token_history& h) {
    if (h.n_output >= p.min_tokens) return;
    const float ninf = -std::numeric_limits<float>::infinity();
    for (int32_t id : p.eos_token_ids)
        if (id >= 0 && id < n_vocab) logits[id] = ninf;
    for (int32_t id : p.stop_token_ids)
        if (id >= 0 && id < n_vocab) logits[id] = ninf;
}

void apply_penalties(float* logits, int32_t n_vocab, const sampling_params& p, const token_history& h) {
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

int32_t argmax_lowest_id(const float* logits, int32_t n_vocab) { return sampler_argmax(logits, n_vocab); }

// ---- the sampler ----

sampler::sampler() : core_(std::make_unique<row_sampler>()) {}
sampler::~sampler() = default;
sampler::sampler(sampler&&) noexcept = default;
sampler& sampler::operator=(sampler&&) noexcept = default;

std::vector<sampler::kept_token> sampler::kept(float* logits, int32_t n_vocab, const sampling_params& p) {
    check_vocab(n_vocab);
    sample_filter f = filter_of(p);
    if (!f.greedy()) {  // the errors of step 4, as sample() throws them
        std::vector<float> x(logits, logits + n_vocab);
        if (p.temperature != 1.0f)
            for (float& v : x) v = v / p.temperature;
        const float m = sampler_max(x.data(), n_vocab);
        throw_on_error(m > -INFINITY ? (m < INFINITY ? 0 : int32_t(sample_error::TEMP_OVERFLOW))
                                     : int32_t(sample_error::ALL_MASKED),
                       n_vocab, p);
    }
    std::vector<kept_token> out;
    for (const row_sampler::kept_token& k : core_->kept(logits, n_vocab, f)) out.push_back({k.id, k.q});
    return out;
}

sample_result sampler::sample(float* logits, int32_t n_vocab, const sampling_params& p, const token_history& h,
                              uint64_t seed, int64_t step) {
    check_vocab(n_vocab);
    const int32_t bad = sampler_first_bad_logit(logits, n_vocab);
    TETRA_CHECK(bad < 0, "sampler: logit of token %d is %g; expected a finite value or -inf", bad,
                double(bad < 0 ? 0.0f : logits[bad]));
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
    res.token = core_->sample(logits, n_vocab, filter_of(p), seed, step);
    throw_on_error(res.token, n_vocab, p);
    if (p.logprobs) {
        float lt = raw_[res.token];
        res.logprob = float(double(lt) - lse);
        int32_t rank = 0;
        const uint32_t olt = sampler_ord32(lt + 0.0f);  // on the bits so that the count vectorizes
        for (int32_t i = 0; i < n_vocab; ++i) rank += sampler_ord32(raw_[i] + 0.0f) >= olt;
        res.rank = rank;
    }
    return res;
}

// ---- the batched op's form ----

void pack_sample_row(const sampling_params& p, const token_history& h, uint64_t seed, int64_t step, sample_row& row,
                     std::vector<sample_entry>& entries) {
    row = sample_row{};
    row.temperature = p.temperature;
    row.top_k = p.top_k;
    row.top_p = p.top_p;
    row.min_p = p.min_p;
    row.repetition_penalty = p.repetition_penalty;
    row.frequency_penalty = p.frequency_penalty;
    row.presence_penalty = p.presence_penalty;
    row.seed = seed;
    row.step = step;
    row.entry0 = int32_t(entries.size());
    const bool suppress = h.n_output < p.min_tokens;
    const bool rep = p.repetition_penalty != 1.0f;
    const bool freq_or_presence = !(p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f);
    if (!suppress && !rep && !freq_or_presence) return;
    // One entry per id (apply_penalties visits an id once per rule; duplicates would apply twice):
    // the pieces are listed, sorted by id and merged (contiguous: cheaper than a node map per step).
    const size_t first = entries.size();
    auto add = [&](int32_t id, int32_t prompt, int32_t output, int32_t sup) {
        entries.push_back(sample_entry{id, prompt, output, sup});
    };
    if (suppress) {
        for (int32_t id : p.eos_token_ids) add(id, 0, 0, 1);
        for (int32_t id : p.stop_token_ids) add(id, 0, 0, 1);
    }
    if (rep)
        for (const auto& [id, c] : h.prompt_counts)
            if (c > 0) add(id, c, 0, 0);
    if (rep || freq_or_presence)
        for (const auto& [id, c] : h.output_counts)
            if (c > 0) add(id, 0, c, 0);
    std::sort(entries.begin() + first, entries.end(),
              [](const sample_entry& a, const sample_entry& b) { return a.id < b.id; });
    size_t j = first;
    for (size_t i = first; i < entries.size(); ++i) {
        if (j > first && entries[j - 1].id == entries[i].id) {  // merge into the previous entry of this id
            sample_entry& e = entries[j - 1];
            e.prompt_count = std::max(e.prompt_count, entries[i].prompt_count);
            e.output_count = std::max(e.output_count, entries[i].output_count);
            e.suppress |= entries[i].suppress;
        } else {
            entries[j++] = entries[i];
        }
    }
    entries.resize(j);
    row.n_entries = int32_t(entries.size()) - row.entry0;
}

}  // namespace tetra
