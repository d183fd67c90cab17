#include "chat/reasoning_parser.h"

#include "core/error.h"

namespace tetra {

size_t partial_tag_overlap(std::string_view text, std::string_view tag) {
    size_t max = std::min(text.size(), tag.size() - (tag.empty() ? 0 : 1));
    for (size_t n = max; n > 0; --n)
        if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
    return 0;
}

const std::vector<std::string>& reasoning_parser::names() {
    static const std::vector<std::string> v = {"qwen3", "deepseek_r1"};
    return v;
}

bool reasoning_parser::is_known(const std::string& name) {
    for (const auto& n : names())
        if (n == name) return true;
    return false;
}

reasoning_parser::reasoning_parser(const std::string& name, bool starts_in_reasoning) {
    TETRA_CHECK(is_known(name), "reasoning parser '%s' is unknown; expected qwen3 or deepseek_r1", name.c_str());
    state_ = starts_in_reasoning ? state::START : state::CONTENT;
}

reasoning_delta reasoning_parser::feed(std::string_view text) {
    reasoning_delta d;
    if (state_ == state::CONTENT) {
        d.content.assign(text);
        return d;
    }
    std::string buf = std::move(held_);
    held_.clear();
    buf.append(text);
    if (state_ == state::START) {
        if (buf.size() < start_.size() && start_.compare(0, buf.size(), buf) == 0) {
            held_ = std::move(buf);  // could still become <think>
            return d;
        }
        if (buf.compare(0, start_.size(), start_) == 0) buf.erase(0, start_.size());
        state_ = state::REASONING;
    }
    size_t end = buf.find(end_);
    if (end != std::string::npos) {
        d.reasoning = buf.substr(0, end);
        d.content = buf.substr(end + end_.size());
        state_ = state::CONTENT;
        return d;
    }
    size_t keep = partial_tag_overlap(buf, end_);
    d.reasoning = buf.substr(0, buf.size() - keep);
    held_ = buf.substr(buf.size() - keep);
    return d;
}

reasoning_delta reasoning_parser::finish() {
    reasoning_delta d;
    if (state_ == state::CONTENT)
        d.content = std::move(held_);
    else
        d.reasoning = std::move(held_);
    held_.clear();
    if (state_ == state::START) state_ = state::REASONING;
    return d;
}

bool reasoning_parser::initial_reasoning_state(std::string_view prompt, std::optional<bool> enable_thinking) {
    const std::string_view start = "<think>", end = "</think>";
    size_t s = prompt.rfind(start), e = prompt.rfind(end);
    if (s != std::string_view::npos || e != std::string_view::npos) {
        if (e == std::string_view::npos) return true;
        if (s == std::string_view::npos) return false;
        return s > e;
    }
    return enable_thinking.value_or(true);
}

reasoning_delta reasoning_parser::parse(const std::string& name, std::string_view text, bool starts_in_reasoning) {
    reasoning_parser p(name, starts_in_reasoning);
    reasoning_delta a = p.feed(text), b = p.finish();
    a.reasoning += b.reasoning;
    a.content += b.content;
    return a;
}

}  // namespace tetra
