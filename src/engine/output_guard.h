// output_guard: cheap run-time checks on every step's logits and sampled tokens, so a wrong kernel
// fails the request loudly instead of streaming garbage (docs/no-silent-garbage.md). Trips: NaN/Inf
// in a logits row, a row whose elements are all equal (the "!!!!!" signature: argmax = id 0), a row
// collapsed to a near-constant (std below a floor), and a long streak of sampled token id 0. One
// pass over n_vocab floats per row (~0.1 ms for 128k on one core); the counters are process-wide.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "backend/backend.h"
#include "backend/sampling.h"
#include "core/error.h"

namespace tetra {

class causal_lm;

enum class guard_trip : uint8_t { NONE, NON_FINITE, ROW_IDENTICAL, COLLAPSED, ZERO_STREAK };
constexpr int k_guard_trip_kinds = 5;
const char* guard_trip_name(guard_trip t);  // "non_finite", "row_identical", "collapsed", "zero_streak"

struct output_guard_config {
    bool enabled = true;
    // Collapsed: std of a row below this. Trained LMs put logits std over the vocabulary at ~1–5;
    // 1e-4 means every probability is within ~0.01 % of uniform, i.e. the row carries nothing.
    float min_std = 1e-4f;
    // Byte-level BPE merges runs of one character, so a model that means "!!!!!!!!" emits merged
    // tokens; 32 single id-0 tokens in a row only come from argmax over broken (constant) logits.
    int64_t max_zero_streak = 32;
    // On a trip, re-run the step with taps on the model and log the first layer/tap where NaN/Inf
    // or row-identical values appeared. Default: on when TETRA_LOG_LEVEL=debug.
    bool debug_taps = false;
};
// Defaults, with debug_taps on when the log level is debug.
output_guard_config default_output_guard_config();

struct guard_verdict {
    guard_trip trip = guard_trip::NONE;
    int64_t row = -1, col = -1;  // first offending row (and column for NaN/Inf)
    std::string detail;          // "row 0: NaN at column 17", "" when ok
    bool ok() const { return trip == guard_trip::NONE; }
};

// A request the guard stopped: the CLI prints it, the server answers 500 with it.
struct output_guard_error : error {
    output_guard_error(guard_trip t, const std::string& msg) : error(msg), trip(t) {}
    guard_trip trip;
};

class output_guard {
  public:
    explicit output_guard(output_guard_config c = default_output_guard_config()) : cfg_(c) {}

    // Stateless check of logits rows; neither counts nor throws.
    // logits: f32 [n_rows, n_vocab] row-major (host)
    static guard_verdict check(const float* logits, int64_t n_vocab, int64_t n_rows = 1,
                               const output_guard_config& c = {});
    // check()'s verdict from each row's statistics (backend/sampling.h sample_guard_stats: what a
    // device computes so that the rows stay there): the same kinds, rows, columns and messages.
    // The overflow case ("logits overflow") is decided on the f32 square of the largest |x - x[0]|
    // or an f64 sum of squares beyond FLT_MAX; check() decides it on its f32 lane sums, so the two
    // can differ only for rows whose squared spread straddles the f32 range (|logits| ~ 1e19).
    // The std is the f64 one (check(): f32 lanes summed in f64; they agree to ~1e-6 relative).
    // stats: [n_rows] guard_row_stats (host)
    static guard_verdict check_stats(const guard_row_stats* stats, int64_t n_vocab, int64_t n_rows = 1,
                                     const output_guard_config& c = {});

    // One step of a request: check(); on a trip counts it, optionally calls `locate` (debug_taps:
    // re-runs the step with taps, returns the first bad tap) and throws output_guard_error.
    // where: "prefill", "decode step 12". logits: f32 [n_rows, n_vocab] (host)
    void check_step(const float* logits, int64_t n_vocab, int64_t n_rows, const std::string& where,
                    const std::function<std::string()>& locate = {});
    // Each sampled token of the request, in order; throws on a streak of id 0 > max_zero_streak.
    void check_token(int32_t token);

    const output_guard_config& config() const { return cfg_; }

    // Process-wide counters (server metric tetra:output_guard_trips_total{kind}).
    static uint64_t trips_total();
    static uint64_t trips(guard_trip t);
    static void count_trip(guard_trip t);  // for front ends that call check() themselves

  private:
    output_guard_config cfg_;
    int64_t zero_streak_ = 0;
};

// Re-runs one forward step (`rerun`) with a tap on `m` that downloads every named intermediate and
// returns the earliest tap (forward order) holding NaN/Inf ("layer 2 tap 'attn_norm' [5, 576]: NaN
// at row 0 column 575") or whose every row is constant; "" if none. Clears the model's tap after.
std::string first_bad_tap(causal_lm& m, backend& be, const std::function<void()>& rerun);

}  // namespace tetra
