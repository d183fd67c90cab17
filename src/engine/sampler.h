// engine/sampler: one token from one row of logits. Deterministic: the token is a pure function of
// (logits, params, history, seed, step), specified to the bit in backend/sampling.h so that the CUDA
// backend reproduces it exactly; tests/data/sampler/goldens.json (tools/gen_sampler_goldens.py) pins it.
// Not here: batching (the engine calls this per row), logit_bias, structured output.
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/generation_config.h"

namespace tetra {

class row_sampler;    // backend/sampling.h (this header stays free of the backend's headers)
struct sample_row;    // backend/sampling.h
struct sample_entry;  // backend/sampling.h

// Token counts of one sequence, prompt and output kept apart (penalties read them sparsely).
struct token_history {
    std::unordered_map<int32_t, int32_t> prompt_counts;  // id -> count in the prompt
    std::unordered_map<int32_t, int32_t> output_counts;  // id -> count in the output so far
    int32_t n_output = 0;                                // output tokens so far
    void add_prompt(const std::vector<int32_t>& ids);
    void add_output(int32_t id);
};

struct token_logprob {
    int32_t id;
    float logprob;
};

struct sample_result {
    int32_t token = -1;
    // Only when params.logprobs is set; from the model's raw logits (vLLM's default raw_logprobs):
    float logprob = 0.0f;                     // log-softmax of `token`
    int32_t rank = 0;                         // number of ids with raw logit >= token's (vLLM)
    std::vector<token_logprob> top_logprobs;  // *params.logprobs entries; logit desc, id asc
};

// THE ALGORITHM is specified in backend/sampling.h (steps 1-9, bit for bit); this class runs it on
// one host row with a token_history, plus the logprobs a request may ask for. The CUDA op
// sample_rows (backend/sampling.h) reproduces the tokens exactly from pack_sample_row's form.

// Holds scratch buffers that grow to n_vocab once and are reused: keep one sampler per thread.
class sampler {
public:
    sampler();
    ~sampler();
    sampler(sampler&&) noexcept;
    sampler& operator=(sampler&&) noexcept;

    // logits: f32[n_vocab], overwritten (penalties, temperature). step: index of the output token
    // being sampled (0 for the first), so a recomputed sequence draws the same numbers.
    // Throws tetra::error for NaN/+inf logits or when every id is -inf. n_vocab <= 2^23.
    sample_result sample(float* logits, int32_t n_vocab, const sampling_params& p,
                         const token_history& h, uint64_t seed, int64_t step);

    // Steps 4-8 on already penalized logits (f32[n_vocab], overwritten with x): the kept ids in
    // canonical order with their weights q. For tests and backend cross-checks.
    struct kept_token {
        int32_t id;
        uint64_t q;
    };
    std::vector<kept_token> kept(float* logits, int32_t n_vocab, const sampling_params& p);

private:
    std::unique_ptr<row_sampler> core_;  // steps 3-9
    std::vector<float> w_, raw_;
};

// Steps 1-2 (in place, logits f32[n_vocab]).
void apply_min_tokens(float* logits, int32_t n_vocab, const sampling_params& p,
                      const token_history& h);
void apply_penalties(float* logits, int32_t n_vocab, const sampling_params& p,
                     const token_history& h);
// Step 3: argmax with ties -> lowest id.
int32_t argmax_lowest_id(const float* logits, int32_t n_vocab);

// The bit-exact pieces of THE ALGORITHM, defined in backend/sampling.cpp (declared there too).
float sampler_exp(float d);
uint64_t sampler_random_bits(uint64_t seed, int64_t step);

// The sparse per-row form of (params, history, seed, step) that sample_rows reads: fills `row`
// and appends this row's entries (one per id that min_tokens or a penalty touches; row.entry0 =
// the index of the first appended entry). Only ids the row's settings act on are listed: none when
// the penalties are off and min_tokens is reached.
void pack_sample_row(const sampling_params& p, const token_history& h, uint64_t seed, int64_t step, sample_row& row,
                     std::vector<sample_entry>& entries);

}  // namespace tetra
