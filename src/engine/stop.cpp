// engine/stop: token-level stop checks and the streaming stop-string matcher. The matcher scans
// only end positions inside the new text (earlier ones were scanned before), so a feed costs
// O(new bytes * total stop bytes) — stop lists are short and feeds are a token's worth of text.
#include "engine/stop.h"

#include <algorithm>

namespace tetra {

const char* finish_reason_name(finish_reason r) {
    switch (r) {
    case finish_reason::STOP: return "stop";
    case finish_reason::LENGTH: return "length";
    case finish_reason::NONE: return nullptr;
    }
    return nullptr;
}

stop_status check_stop_token(const sampling_params& p, int32_t token, int32_t n_output,
                             int64_t n_total, int64_t max_model_len) {
    stop_status st;
    if ((max_model_len > 0 && n_total >= max_model_len) || n_output >= p.max_tokens) {
        st.reason = finish_reason::LENGTH;
        return st;
    }
    if (n_output < p.min_tokens) return st;
    const bool drop = !p.include_stop_str_in_output;
    if (!p.ignore_eos &&
        std::find(p.eos_token_ids.begin(), p.eos_token_ids.end(), token) != p.eos_token_ids.end()) {
        st.reason = finish_reason::STOP;
        st.drop_last_token_text = drop;
        return st;
    }
    if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) !=
        p.stop_token_ids.end()) {
        st.reason = finish_reason::STOP;
        st.stop_token = token;
        st.drop_last_token_text = drop;
    }
    return st;
}

stop_string_matcher::stop_string_matcher(std::vector<std::string> stop, bool include)
    : stop_(std::move(stop)), include_(include) {
    for (const auto& s : stop_) {
        TETRA_CHECK(!s.empty(), "stop_string_matcher: stop strings must be non-empty");
        max_len_ = std::max(max_len_, s.size());
    }
}

stop_string_matcher::result stop_string_matcher::feed(std::string_view new_text, bool allow_stop) {
    result res;
    if (stopped_) return res;
    std::string buf = held_;
    buf.append(new_text);
    held_.clear();
    if (allow_stop) {
        // The first end position (inside the new text) where some stop string ends; among the
        // strings ending there, the longest.
        for (size_t e = buf.size() - new_text.size() + 1; e <= buf.size(); ++e) {
            const std::string* best = nullptr;
            for (const auto& s : stop_) {
                if (s.size() > e || (best && best->size() >= s.size())) continue;
                if (buf.compare(e - s.size(), s.size(), s) == 0) best = &s;
            }
            if (best) {
                stopped_ = true;
                res.stop = *best;
                res.text = buf.substr(0, include_ ? e : e - best->size());
                return res;
            }
        }
    }
    // Hold back the longest suffix that is a proper prefix of a stop string.
    size_t hold = 0;
    for (size_t len = std::min(buf.size(), max_len_ ? max_len_ - 1 : 0); len > 0 && !hold; --len) {
        for (const auto& s : stop_) {
            if (s.size() > len && buf.compare(buf.size() - len, len, s, 0, len) == 0) {
                hold = len;
                break;
            }
        }
    }
    held_ = buf.substr(buf.size() - hold);
    res.text = buf.substr(0, buf.size() - hold);
    return res;
}

std::string stop_string_matcher::flush() {
    std::string out;
    if (!stopped_) out.swap(held_);
    return out;
}

}  // namespace tetra
