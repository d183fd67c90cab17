// engine/sampler: one token from one row of logits. Deterministic: the token is a pure function of
// (logits, params, history, seed, step), specified below to the bit so that the CUDA backend can
// reproduce it exactly; tests/data/sampler/goldens.json (tools/gen_sampler_goldens.py) pins it.
// Not here: batching (the engine calls this per row), logit_bias, structured output.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/generation_config.h"

namespace tetra {

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

// THE ALGORITHM (what a backend must reproduce bit for bit). f32 and u64 arithmetic, every f32
// operation IEEE round-to-nearest-even, no FMA contraction, no flush-to-zero (CUDA: __fmul_rn,
// __fadd_rn, __fdiv_rn). Steps, on l = logits f32[n_vocab]:
//  1. min_tokens: while n_output < min_tokens, l[id] = -inf for id in eos_token_ids, stop_token_ids.
//  2. penalties, per id seen (any order, ids are independent):
//     seen in prompt or output and rep != 1: l = l > 0 ? l / rep : l * rep;
//     output count c > 0: l = l - freq * float(c); then l = l - presence.
//  3. greedy (temperature < 1e-5): the argmax of l, ties -> lowest id. Done.
//  4. x = l / temperature; m = max x; w = exp_f32(x - m) (see sampler_exp below; w(m) = 1);
//     q = floor(w * 2^40) as u64 (fixed point: sums are exact and order-free, so any parallel
//     reduction gives the same bits). Ids with q == 0 (w < 2^-40) are never sampled.
//  5. canonical order: x descending, ties id ascending; key = ord32(x + 0) << 32 | (2^32-1 - id),
//     descending; ord32 maps f32 to u32 preserving order; "+ 0" turns -0 into +0.
//  6. top-k (0 < k < n_vocab): keep x >= the k-th largest x (ties at the boundary kept, as vLLM).
//  7. top-p (p < 1): Q = sum q over kept; T = ceil(p * Q) exactly (p as an exact binary
//     fraction); keep the shortest canonical-order prefix whose sum of q >= T.
//  8. min-p (min_p > 0): keep w >= min_p (w of the most likely token is 1).
//  9. Q = sum q over kept; h = sampler_random_bits(seed, step); r = ((h >> 11) * Q) >> 53 exactly
//     (u53 * Q < 2^117); the token is the first in canonical order whose running sum of q > r.
// (vLLM V1 applies min-p before top-p; here, as in HF and the task spec, min-p comes last.)

// Holds scratch buffers that grow to n_vocab once and are reused: keep one sampler per thread.
class sampler {
public:
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
    struct cand {
        uint64_t key;
        uint64_t q;
    };
    void filter(float* logits, int32_t n_vocab, const sampling_params& p);  // fills cands_
    // cands_[0, n_cands_) with key >= cut_ are the kept ids (unordered); total_ is their sum of q
    std::vector<cand> cands_, scratch_;
    size_t n_cands_ = 0;
    uint64_t cut_ = 0, total_ = 0;
    uint64_t kmin_ = 0, kmax_ = 0;  // bounds on the keys of cands_
    std::vector<float> w_, xs_, raw_;
};

// Steps 1-2 (in place, logits f32[n_vocab]).
void apply_min_tokens(float* logits, int32_t n_vocab, const sampling_params& p,
                      const token_history& h);
void apply_penalties(float* logits, int32_t n_vocab, const sampling_params& p,
                     const token_history& h);
// Step 3: argmax with ties -> lowest id.
int32_t argmax_lowest_id(const float* logits, int32_t n_vocab);

// exp(d) for d <= 0 in f32, written down so a GPU gets the same bits: d < -87 (incl. -inf) -> 0;
// t = d * 1.44269504f; k = (t + 12582912f) - 12582912f (round to nearest even);
// r = d - k * 0.693359375f; r = r - k * -2.12194440e-4f; p = Horner of sum_{n=0..7} r^n / n!
// (coefficients float(1/n!), highest first: p = c7; p = p * r + c6; ...; p = p * r + 1);
// result p * 2^k (2^k built from its bits). Relative error < 4e-7 against exp().
float sampler_exp(float d);

// SplitMix64 (Steele, Lea, Flood 2014): output number step+1 of the generator seeded with
// `seed`: z = seed + (step + 1) * 0x9E3779B97F4A7C15 (mod 2^64); z = (z ^ z >> 30) *
// 0xBF58476D1CE4E5B9; z = (z ^ z >> 27) * 0x94D049BB133111EB; return z ^ z >> 31.
uint64_t sampler_random_bits(uint64_t seed, int64_t step);

}  // namespace tetra
