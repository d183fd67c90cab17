// chat/tool_parser: OpenAI tool calls from model output (vLLM --tool-call-parser hermes: text
// <tool_call>{"name": N, "arguments": A}</tool_call>...; llama3_json: [<|python_tag|>]{"name": N,
// "parameters": A}[; {...}] only at the start), streaming (name first, then A's raw text in
// fragments) or one-shot. Lossless: content + every A == output minus tags, call wrappers and, after
// a call, whitespace ending the text before the next call or the end; a malformed "call" comes back
// as content verbatim. Arguments written before the name are re-serialized compactly.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tetra {

struct tool_call_delta {
    int index = 0;          // call number in this output (0, 1, ...)
    std::string name;       // set on the first delta of a call only
    std::string arguments;  // a fragment of the arguments JSON text
};

struct tool_parse_delta {
    std::string content;
    std::vector<tool_call_delta> calls;
};

struct parsed_tool_call {
    std::string name;
    std::string arguments;  // JSON text
};

class tool_parser {
public:
    // name: "hermes" or "llama3_json"; throws tetra::error otherwise.
    explicit tool_parser(const std::string& name);

    tool_parse_delta feed(std::string_view text);
    tool_parse_delta finish();  // end of output: flushes held text, closes a truncated call
    int n_calls() const { return n_calls_; }
    // Every call so far was complete and its arguments parse as JSON.
    bool calls_valid() const { return calls_valid_; }

    static bool is_known(const std::string& name);
    static const std::vector<std::string>& names();

    // One shot as vLLM's non-streaming path: content is the text outside calls; when a call is
    // truncated or its arguments are not JSON, there are no calls and content is the whole text.
    struct result {
        std::string content;
        std::vector<parsed_tool_call> calls;
    };
    static result parse(const std::string& name, std::string_view text);

private:
    enum class kind { HERMES, LLAMA3_JSON };
    enum class state { START, TEXT, PASS, HEAD, ARGS, TAIL, AFTER, OPAQUE };
    // One step of the state machine on buf_; false when it needs more text.
    bool step(tool_parse_delta& d, bool at_end);
    bool step_head(tool_parse_delta& d, bool at_end);
    bool step_args(tool_parse_delta& d, bool at_end);
    bool step_tail(tool_parse_delta& d, bool at_end);
    bool step_opaque(tool_parse_delta& d, bool at_end);
    void emit_content(tool_parse_delta& d, std::string_view s);
    void start_call(tool_parse_delta& d, const std::string& name);
    void emit_args(tool_parse_delta& d, std::string_view frag);
    void end_call(bool complete);
    // Feeds s to the JSON value scanner: offset one past the value's end, or npos (needs more).
    size_t scan(std::string_view s);

    kind kind_;
    state state_;
    std::string buf_;           // unconsumed text
    std::string call_text_;     // raw text of the current call (fallback to content)
    std::string args_;          // arguments text of the current call so far
    std::string ws_held_;       // whitespace-only content after a call, dropped unless text follows
    int n_calls_ = 0;
    bool calls_valid_ = true;
    // JSON value scanner for ARGS / TAIL / OPAQUE
    int depth_ = 0;
    bool in_string_ = false, escape_ = false, started_ = false, prim_ = false;
};

}  // namespace tetra
