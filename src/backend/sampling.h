// Token sampling and the output guard's logits statistics as backend ops (free functions on
// `backend&` that validate once and dispatch through the kernel registry, as moe.h), plus THE
// ALGORITHM of the sampler in its pure host form (row_sampler), shared by the CPU kernel and
// engine/sampler. The CUDA kernel reproduces it bit for bit, so only token ids (and 40 bytes of
// guard statistics per row) leave the device. Not here: token histories and logprobs
// (engine/sampler), the guard's verdicts (engine/output_guard), logit_bias, structured output.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"

namespace tetra {

// THE ALGORITHM (what a backend must reproduce bit for bit). f32 and u64 arithmetic, every f32
// operation IEEE round-to-nearest-even, no FMA contraction, no flush-to-zero (CUDA: __fmul_rn,
// __fadd_rn, __fdiv_rn). Steps, on l = logits f32[n_vocab]:
//  1. min_tokens: while n_output < min_tokens, l[id] = -inf for id in eos_token_ids, stop_token_ids.
//  2. penalties, per id seen (any order, ids are independent):
//     seen in prompt or output and rep != 1: l = l > 0 ? l / rep : l * rep;
//     output count c > 0 (and freq or presence != 0): l = l - freq * float(c); then l = l - presence.
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
// Errors: a NaN or +inf logit (checked on the raw row, before step 1), every logit -inf after
// step 2, or m = +inf after the division (temperature overflow). n_vocab <= 2^23.

// exp(d) for d <= 0 in f32, written down so a GPU gets the same bits: d < -87 (incl. -inf) -> 0;
// t = d * 1.44269504f; k = (t + 12582912f) - 12582912f (round to nearest even);
// r = d - k * 0.693359375f; r = r - k * -2.12194440e-4f; p = Horner of sum_{n=0..7} r^n / n!
// (coefficients float(1/n!), highest first: p = c7; p = p * r + c6; ...; p = p * r + 1);
// result p * 2^k (2^k built from its bits). Relative error < 4e-7 against exp().
float sampler_exp(float d);

// The same, inline (so host loops calling it vectorize): the d < -87 test and the selects are done
// on the bits (d <= 0: a larger u32 is a more negative float; -inf included) so that the loop
// calling it vectorizes without -fno-trapping-math. Callers must not compile with FP contraction.
inline float sampler_exp_inline(float d) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
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

// ord32: f32 -> u32 preserving order (negative: ~b; else b | sign). The canonical key of step 5
// and its id.
inline uint32_t sampler_ord32(float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    return b ^ (uint32_t(int32_t(b) >> 31) | 0x80000000u);
}
inline uint64_t sampler_key(float x, int32_t id) {
    x = x + 0.0f;  // -0 -> +0, so that equal values tie on the id
    return (uint64_t(sampler_ord32(x)) << 32) | uint64_t(0xFFFFFFFFu - uint32_t(id));
}
inline int32_t sampler_key_id(uint64_t key) { return int32_t(0xFFFFFFFFu - uint32_t(key & 0xFFFFFFFFu)); }

// SplitMix64 (Steele, Lea, Flood 2014): output number step+1 of the generator seeded with
// `seed`: z = seed + (step + 1) * 0x9E3779B97F4A7C15 (mod 2^64); z = (z ^ z >> 30) *
// 0xBF58476D1CE4E5B9; z = (z ^ z >> 27) * 0x94D049BB133111EB; return z ^ z >> 31.
uint64_t sampler_random_bits(uint64_t seed, int64_t step);

constexpr int32_t sampler_max_vocab = 1 << 23;  // sum of q < 2^63

// Steps 3-8's parameters (validated upstream: temperature >= 0, top_p in (0, 1], min_p in [0, 1]).
struct sample_filter {
    float temperature = 1.0f;  // < 1e-5: greedy
    int32_t top_k = 0;         // off unless 0 < top_k < n_vocab
    float top_p = 1.0f;
    float min_p = 0.0f;
    bool greedy() const { return temperature < 1e-5f; }
};

// Why a row has no token (sample_rows writes these negative codes instead of an id).
enum class sample_error : int32_t {
    NON_FINITE = -1,   // a NaN or +inf logit in the raw row
    ALL_MASKED = -2,   // every logit -inf after min_tokens and penalties
    TEMP_OVERFLOW = -3,  // logits / temperature overflow f32
};
// "every logit is -inf after penalties and min_tokens", ... ("" for a token id >= 0).
const char* sample_error_message(int32_t code);

// Steps 3-9 on penalized logits. Holds scratch buffers that grow to n_vocab once and are reused:
// keep one per thread. n_vocab in [1, 2^23] (checked by callers).
class row_sampler {
  public:
    // x: f32[n] after steps 1-2, overwritten (x / temperature). The token id, or a sample_error
    // code (ALL_MASKED, TEMP_OVERFLOW); never throws for bad values.
    int32_t sample(float* x, int32_t n, const sample_filter& f, uint64_t seed, int64_t step);
    // Steps 4-8 only: the kept ids in canonical order with their weights q (x: f32[n], overwritten).
    struct kept_token {
        int32_t id;
        uint64_t q;
    };
    std::vector<kept_token> kept(float* x, int32_t n, const sample_filter& f);

  private:
    struct cand {
        uint64_t key;
        uint64_t q;
    };
    int32_t filter(float* x, int32_t n, const sample_filter& f);  // fills cands_; 0 or an error code
    // cands_[0, n_cands_) with key >= cut_ are the kept ids (unordered); total_ is their sum of q
    std::vector<cand> cands_, scratch_;
    size_t n_cands_ = 0;
    uint64_t cut_ = 0, total_ = 0;
    uint64_t kmin_ = 0, kmax_ = 0;  // bounds on the keys of cands_
    std::vector<float> w_, xs_;
};

// Step 3 alone: argmax with ties -> lowest id. x: f32[n], n >= 1.
int32_t sampler_argmax(const float* x, int32_t n);
// The largest number in x f32[n] (n >= 1; a NaN never wins a comparison: -inf if all are NaN).
float sampler_max(const float* x, int32_t n);
// The first column holding NaN or +inf (what THE ALGORITHM rejects), -1 if none. x: f32[n]
int32_t sampler_first_bad_logit(const float* x, int32_t n);

// ---- the batched op's inputs -----------------------------------------------------------------------
// One row's parameters, as sample_rows reads them: 14 i32 words of the `rows` tensor.
struct sample_row {
    float temperature = 1.0f;
    int32_t top_k = 0;
    float top_p = 1.0f;
    float min_p = 0.0f;
    float repetition_penalty = 1.0f;
    float frequency_penalty = 0.0f;
    float presence_penalty = 0.0f;
    int32_t entry0 = 0;     // this row's entries are entries[entry0, entry0 + n_entries)
    int32_t n_entries = 0;
    int32_t reserved = 0;
    uint64_t seed = 0;
    int64_t step = 0;       // index of the output token being sampled
};
static_assert(sizeof(sample_row) == 56, "sample_row is 14 i32 words");
constexpr int64_t sample_row_words = 14;

// A token id that steps 1-2 touch in one row: at most one entry per id per row (the sparse form
// of engine/sampler's token_history). Ids outside [0, n_vocab) are ignored.
struct sample_entry {
    int32_t id = 0;
    int32_t prompt_count = 0;  // > 0: seen in the prompt (repetition penalty)
    int32_t output_count = 0;  // > 0: seen in the output (repetition, frequency, presence)
    int32_t suppress = 0;      // != 0: min_tokens not reached and id is an EOS/stop id (-> -inf)
};
static_assert(sizeof(sample_entry) == 16, "sample_entry is 4 i32 words");

sample_filter filter_of(const sample_row& r);
// Steps 1-2 for one row from its entries, in place. x: f32[n]
void apply_sample_entries(float* x, int32_t n, const sample_row& r, const sample_entry* entries);

// ---- the output guard's statistics -------------------------------------------------------------------
// Per logits row, what engine/output_guard needs for its verdict (output_guard::check_stats).
// d = f32(x[j] - x[0]) (the shift keeps a large common offset from cancelling the variance).
struct guard_row_stats {
    double sum = 0;        // Σ_j d, f64 (any order: the rounding differs by ~1e-16 relative)
    double sum_sq = 0;     // Σ_j d·d, each product exact in f64
    float x0 = 0;          // x[0]
    float lo = 0, hi = 0;  // min and max over the row (finite rows)
    float bad_value = 0;   // x[first_bad] (NaN or ±inf)
    int32_t first_bad = -1;  // first column holding NaN or ±inf, -1 if none
    int32_t reserved = 0;
};
static_assert(sizeof(guard_row_stats) == 40, "guard_row_stats is 10 i32 words");
constexpr int64_t guard_stats_words = 10;

// The CPU definition (sequential f64 sums): the oracle of the device kernel. x: f32[n], n >= 1
guard_row_stats guard_stats_row(const float* x, int64_t n);

// ---- ops -------------------------------------------------------------------------------------------
// THE ALGORITHM on every row: out[r] = the token of row r (or a negative sample_error code).
// logits: [n_rows, n_vocab] f32|bf16|f16 (read only; bf16/f16 widened exactly);
// rows: i32 [n_rows, 14] (sample_row); entries: i32 [n_entries, 4] (sample_entry, may be empty);
// out: i32 [n_rows]. A row's entry range is clamped to [0, n_entries) (the kernels never read
// outside `entries`; the contents are not validated on the host, they may live on a device).
void sample_rows(backend& be, const tensor& logits, const tensor& rows, const tensor& entries, const tensor& out);

// stats[r] = guard_row_stats of logits row r.
// logits: [n_rows, n_vocab] f32|bf16|f16; stats: i32 [n_rows, 10] (guard_row_stats)
void sample_guard_stats(backend& be, const tensor& logits, const tensor& stats);

// ---- kernel arguments (registry op name in the comment; shapes as validated above) ----------------

// "sample_rows"
struct sample_rows_args : op_args {
    tensor logits, rows, entries, out;
    int64_t n_rows = 0, n_vocab = 0, n_entries = 0;
};

// "sample_guard_stats"
struct sample_guard_stats_args : op_args {
    tensor logits, stats;
    int64_t n_rows = 0, n_vocab = 0;
};

namespace cpu {
// Adds the CPU tables of both ops (cpu/sample_rows_cpu.cpp, cpu/sample_guard_stats_cpu.cpp);
// called by cpu::register_kernels.
void register_sampling_kernels(kernel_registry& r);
void register_sample_rows(kernel_registry& r);
void register_sample_guard_stats(kernel_registry& r);
}  // namespace cpu

}  // namespace tetra
