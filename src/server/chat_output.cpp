#include "server/chat_output.h"

#include <cstring>

#include "server/openai_format.h"

namespace tetra {

namespace {

bool all_ws(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

}  // namespace

chat_choice_output::chat_choice_output(const chat_output_options& opt) : opt_(opt) {
    if (!opt.reasoning_parser.empty())
        reasoning_ = std::make_unique<reasoning_parser>(opt.reasoning_parser, opt.starts_in_reasoning);
    if (!opt.tool_parser.empty()) tools_ = std::make_unique<tool_parser>(opt.tool_parser);
}

ojson chat_choice_output::make_delta(const std::string& reasoning, const std::string& content, bool at_end) {
    ojson d = ojson::object();
    if (!reasoning.empty() && opt_.include_reasoning) {
        d["reasoning"] = reasoning;
        d["reasoning_content"] = reasoning;
    }
    tool_parse_delta td;
    if (tools_) {
        td = tools_->feed(content);
        if (at_end) {  // held partial tags become content; a truncated call is closed
            tool_parse_delta rest = tools_->finish();
            td.content += rest.content;
            for (auto& c : rest.calls) {
                if (!td.calls.empty() && td.calls.back().index == c.index && c.name.empty())
                    td.calls.back().arguments += c.arguments;
                else
                    td.calls.push_back(std::move(c));
            }
        }
    } else {
        td.content = content;
    }
    if (!td.content.empty()) d["content"] = td.content;
    if (td.calls.empty()) return d;
    ojson calls = ojson::array();
    for (const auto& c : td.calls) {
        ojson j = ojson::object();
        j["index"] = c.index;
        ojson fn = ojson::object();
        if (!c.name.empty()) {
            call_ids_.push_back(random_id("chatcmpl-tool-"));
            j["id"] = call_ids_.back();
            j["type"] = "function";
            fn["name"] = c.name;
        }
        if (!c.arguments.empty() || c.name.empty()) fn["arguments"] = c.arguments;
        j["function"] = std::move(fn);
        calls.push_back(std::move(j));
    }
    d["tool_calls"] = std::move(calls);
    return d;
}

ojson chat_choice_output::feed(const std::string& text) {
    if (!reasoning_) return make_delta("", text, false);
    reasoning_delta r = reasoning_->feed(text);
    return make_delta(r.reasoning, r.content, false);
}

ojson chat_choice_output::finish() {
    reasoning_delta r;
    if (reasoning_) r = reasoning_->finish();
    return make_delta(r.reasoning, r.content, true);
}

ojson chat_message(const std::string& text, const chat_output_options& opt, bool& tools_called) {
    reasoning_delta rd;
    if (opt.reasoning_parser.empty())
        rd.content = text;
    else
        rd = reasoning_parser::parse(opt.reasoning_parser, text, opt.starts_in_reasoning);
    ojson m = ojson::object();
    m["role"] = "assistant";
    tools_called = false;
    ojson calls = ojson::array();
    std::string content = rd.content;
    if (!opt.tool_parser.empty()) {
        tool_parser::result tr = tool_parser::parse(opt.tool_parser, rd.content);
        content = tr.content;
        for (const auto& c : tr.calls) {
            calls.push_back({{"id", random_id("chatcmpl-tool-")},
                             {"type", "function"},
                             {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        }
        tools_called = !calls.empty();
    }
    bool null_content = (tools_called && all_ws(content)) || (content.empty() && !opt.reasoning_parser.empty());
    m["content"] = null_content ? ojson(nullptr) : ojson(content);
    bool has_reasoning = !opt.reasoning_parser.empty() && opt.include_reasoning && !rd.reasoning.empty();
    m["reasoning"] = has_reasoning ? ojson(rd.reasoning) : ojson(nullptr);
    m["reasoning_content"] = m["reasoning"];
    if (tools_called) m["tool_calls"] = std::move(calls);
    return m;
}

const char* chat_finish_reason(const char* engine_reason, bool tools_called) {
    if (tools_called && engine_reason && std::strcmp(engine_reason, "stop") == 0) return "tool_calls";
    return engine_reason;
}

}  // namespace tetra
