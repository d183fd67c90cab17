// server/chat_output: turns one choice's generated text into OpenAI chat output — reasoning split
// (--reasoning-parser), tool calls (--tool-call-parser) and content — as streaming deltas or as
// the final non-streaming message. Streaming and non-streaming use the same parsers, so both
// carry the same text; tool call ids are chatcmpl-tool-<hex> as vLLM.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "chat/reasoning_parser.h"
#include "chat/tool_parser.h"
#include "server/openai_request.h"

namespace tetra {

struct chat_output_options {
    std::string reasoning_parser;   // "" = none
    bool starts_in_reasoning = true;
    bool include_reasoning = true;  // false: reasoning is parsed out and dropped
    std::string tool_parser;        // "" = none (tools absent, tool_choice none, or no parser)
};

class chat_choice_output {
public:
    explicit chat_choice_output(const chat_output_options& opt);
    // A delta object for newly generated text: {"reasoning", "reasoning_content", "content",
    // "tool_calls"} as present; empty object when nothing can be emitted yet.
    ojson feed(const std::string& text);
    ojson finish();  // the held-back remainder
    bool called_tools() const { return tools_ && tools_->n_calls() > 0; }

private:
    ojson make_delta(const std::string& reasoning, const std::string& content, bool at_end);
    chat_output_options opt_;
    std::unique_ptr<reasoning_parser> reasoning_;
    std::unique_ptr<tool_parser> tools_;
    std::vector<std::string> call_ids_;
};

// Non-streaming: the whole text → {"role": "assistant", "content", "reasoning", "reasoning_content",
// "tool_calls"?}; content is null when empty and tools were called (or nothing was generated
// outside reasoning). tools_called tells the caller to report finish_reason "tool_calls".
ojson chat_message(const std::string& text, const chat_output_options& opt, bool& tools_called);

// finish_reason for a chat choice: "tool_calls" replaces "stop" when tools were called.
const char* chat_finish_reason(const char* engine_reason, bool tools_called);

}  // namespace tetra
