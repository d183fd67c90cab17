// chat/reasoning_parser: splits a thinking model's output into reasoning and content (vLLM
// --reasoning-parser qwen3 | deepseek_r1; serving.md §1.13): text before </think> is reasoning,
// text after it is content; a <think> generated at the very start is dropped. Streaming and
// one-shot give the same split for every chunking, and nothing is lost:
// reasoning + content == output minus that leading <think> and the first </think>.
// Decided on text, not token ids (partial tags are held back until they cannot be a tag).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tetra {

struct reasoning_delta {
    std::string reasoning;
    std::string content;
};

class reasoning_parser {
public:
    // name: "qwen3" or "deepseek_r1" (both use <think>/</think>); throws tetra::error otherwise.
    // starts_in_reasoning: the output begins inside a reasoning block (see initial_reasoning_state).
    reasoning_parser(const std::string& name, bool starts_in_reasoning);

    reasoning_delta feed(std::string_view text);
    reasoning_delta finish();  // held-back text (a partial tag) goes to the current side
    bool in_reasoning() const { return state_ != state::CONTENT; }

    static bool is_known(const std::string& name);
    static const std::vector<std::string>& names();
    const std::string& start_tag() const { return start_; }
    const std::string& end_tag() const { return end_; }

    // Where generation starts, from the rendered prompt: the last tag in the prompt decides
    // (<think> open → reasoning; </think> closed, e.g. Qwen3 with enable_thinking=false → content);
    // with no tag, enable_thinking == false → content, else reasoning (thinking models think first).
    static bool initial_reasoning_state(std::string_view prompt, std::optional<bool> enable_thinking);

    // One shot: feed(text) + finish().
    static reasoning_delta parse(const std::string& name, std::string_view text, bool starts_in_reasoning);

private:
    enum class state { START, REASONING, CONTENT };
    std::string start_ = "<think>", end_ = "</think>";
    state state_;
    std::string held_;  // START: a proper prefix of start_; REASONING: a proper prefix of end_
};

// The length of the longest suffix of `text` that is a proper prefix of `tag` (0 if none).
size_t partial_tag_overlap(std::string_view text, std::string_view tag);

}  // namespace tetra
