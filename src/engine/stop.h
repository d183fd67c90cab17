// engine/stop: when generation ends. Token-level stop conditions (EOS, stop_token_ids, max_tokens,
// min_tokens, context length) and a streaming stop-string matcher that emits text only once it
// can no longer be the start of a stop string. Text is UTF-8 and matched bytewise (char-aligned
// since UTF-8 is self-synchronizing); lengths are bytes, not characters as in vLLM.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/generation_config.h"

namespace tetra {

enum class finish_reason { NONE, STOP, LENGTH };
const char* finish_reason_name(finish_reason r);  // "stop", "length", or nullptr for NONE

// finish_reason plus vLLM's stop_reason: the stop token id or the stop string, both absent for
// EOS and for "length".
struct stop_status {
    finish_reason reason = finish_reason::NONE;
    std::optional<int32_t> stop_token;
    std::optional<std::string> stop_str;
    // True when the last token ended generation by id (EOS or stop_token_ids) and its text must
    // not reach the output (vLLM drops it unless include_stop_str_in_output).
    bool drop_last_token_text = false;
    bool finished() const { return reason != finish_reason::NONE; }
};

// After appending `token` as output token number n_output (1-based, so n_output >= 1).
// n_total: prompt + output tokens; max_model_len 0 means no context limit. Order as vLLM's
// check_stop: length first, then (only once n_output >= min_tokens) EOS unless ignore_eos, then
// stop_token_ids.
stop_status check_stop_token(const sampling_params& p, int32_t token, int32_t n_output,
                             int64_t n_total = 0, int64_t max_model_len = 0);

// Streaming stop strings. Feed newly detokenized text; get back what may be emitted now. A match
// is the stop string that completes first in the text (ties: the longest, i.e. the one starting
// earliest); so the result does not depend on how the text was chunked. vLLM instead takes the
// first string in list order that occurs in the new text.
class stop_string_matcher {
public:
    stop_string_matcher(std::vector<std::string> stop, bool include_stop_str_in_output);

    struct result {
        std::string text;                // safe to emit now
        std::optional<std::string> stop;  // the matched stop string: generation must end
    };
    // Only a stop string completed by `new_text` counts. allow_stop = false (vLLM: fewer than
    // min_tokens output tokens so far) disables matching but still holds back partial prefixes.
    // After a match every further feed() returns nothing.
    result feed(std::string_view new_text, bool allow_stop = true);
    // End of generation without a match: the held-back text, which is now safe.
    std::string flush();
    bool stopped() const { return stopped_; }
    size_t held_size() const { return held_.size(); }

private:
    std::vector<std::string> stop_;
    bool include_;
    bool stopped_ = false;
    std::string held_;  // a suffix of the text so far that is a proper prefix of a stop string
    size_t max_len_ = 0;
};

}  // namespace tetra
