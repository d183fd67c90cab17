#include "chat/tool_parser.h"

#include <cctype>

#include <nlohmann/json.hpp>

#include "chat/reasoning_parser.h"  // partial_tag_overlap
#include "core/error.h"

namespace tetra {

namespace {

const std::string open_tag = "<tool_call>", close_tag = "</tool_call>", python_tag = "<|python_tag|>";

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

enum class match { OK, MORE, FAIL };

// Matches `{ "name" : "<N>" , "arguments"|"parameters" :` plus whitespace up to the first character
// of the arguments value. `end` is that character's offset.
struct head_match {
    match status = match::FAIL;
    std::string name;
    size_t end = 0;
};

head_match match_head(std::string_view s) {
    head_match r;
    size_t i = 0;
    auto ws = [&] {
        while (i < s.size() && is_ws(s[i])) ++i;
    };
    auto lit = [&](std::string_view l, bool consume) {
        size_t n = std::min(l.size(), s.size() - i);
        if (s.substr(i, n) != l.substr(0, n)) return match::FAIL;
        if (n < l.size()) return match::MORE;
        if (consume) i += n;
        return match::OK;
    };
    for (std::string_view l : {"{", "\"name\"", ":"}) {
        ws();
        match m = lit(l, true);
        if (m != match::OK) return r.status = m, r;
    }
    ws();
    if (i >= s.size()) return r.status = match::MORE, r;
    if (s[i] != '"') return r;
    size_t j = i + 1;
    for (bool esc = false; j < s.size(); ++j) {
        if (esc) esc = false;
        else if (s[j] == '\\') esc = true;
        else if (s[j] == '"') break;
    }
    if (j >= s.size()) return r.status = match::MORE, r;
    try {
        r.name = nlohmann::json::parse(s.substr(i, j + 1 - i)).get<std::string>();
    } catch (const std::exception&) {
        return r;
    }
    i = j + 1;
    ws();
    match m = lit(",", true);
    if (m != match::OK) return r.status = m, r;
    ws();
    match a = lit("\"arguments\"", false), p = lit("\"parameters\"", false);
    if (a == match::OK) i += 11;
    else if (p == match::OK) i += 12;
    else return r.status = (a == match::MORE || p == match::MORE) ? match::MORE : match::FAIL, r;
    ws();
    m = lit(":", true);
    if (m != match::OK) return r.status = m, r;
    ws();
    if (i >= s.size()) return r.status = match::MORE, r;
    r.status = match::OK;
    r.end = i;
    return r;
}

// A complete {name, arguments|parameters} object → (name, arguments JSON text).
bool parse_call_object(std::string_view body, parsed_tool_call& out) {
    nlohmann::ordered_json j;
    try {
        j = nlohmann::ordered_json::parse(body);
    } catch (const std::exception&) {
        return false;
    }
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
    out.name = j["name"].get<std::string>();
    const char* key = j.contains("arguments") ? "arguments" : j.contains("parameters") ? "parameters" : nullptr;
    out.arguments = key ? j[key].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) : "{}";
    return true;
}

}  // namespace

const std::vector<std::string>& tool_parser::names() {
    static const std::vector<std::string> v = {"hermes", "llama3_json"};
    return v;
}

bool tool_parser::is_known(const std::string& name) {
    for (const auto& n : names())
        if (n == name) return true;
    return false;
}

tool_parser::tool_parser(const std::string& name) {
    TETRA_CHECK(is_known(name), "tool call parser '%s' is unknown; expected hermes or llama3_json", name.c_str());
    kind_ = name == "hermes" ? kind::HERMES : kind::LLAMA3_JSON;
    state_ = kind_ == kind::HERMES ? state::TEXT : state::START;
}

tool_parse_delta tool_parser::feed(std::string_view text) {
    tool_parse_delta d;
    buf_.append(text);
    while (step(d, false)) {
    }
    return d;
}

tool_parse_delta tool_parser::finish() {
    tool_parse_delta d;
    while (step(d, true)) {
    }
    buf_.clear();
    ws_held_.clear();  // whitespace after the last call is not content
    return d;
}

void tool_parser::emit_content(tool_parse_delta& d, std::string_view s) {
    if (s.empty()) return;
    if (n_calls_ == 0) {
        d.content.append(s);
        return;
    }
    // after a call: trailing whitespace waits for more text (dropped before a call or the end)
    size_t e = s.find_last_not_of(" \t\r\n");
    if (e == std::string_view::npos) {
        ws_held_.append(s);
        return;
    }
    d.content += ws_held_;
    d.content.append(s.substr(0, e + 1));
    ws_held_.assign(s.substr(e + 1));
}

void tool_parser::start_call(tool_parse_delta& d, const std::string& name) {
    ws_held_.clear();
    tool_call_delta c;
    c.index = n_calls_++;
    c.name = name;
    d.calls.push_back(std::move(c));
    args_.clear();
    depth_ = 0;
    in_string_ = escape_ = started_ = prim_ = false;
}

void tool_parser::emit_args(tool_parse_delta& d, std::string_view frag) {
    if (frag.empty()) return;
    args_.append(frag);
    if (!d.calls.empty() && d.calls.back().index == n_calls_ - 1) {
        d.calls.back().arguments.append(frag);
        return;
    }
    tool_call_delta c;
    c.index = n_calls_ - 1;
    c.arguments.assign(frag);
    d.calls.push_back(std::move(c));
}

void tool_parser::end_call(bool complete) {
    if (!complete || !nlohmann::json::accept(args_)) calls_valid_ = false;
    call_text_.clear();
}

size_t tool_parser::scan(std::string_view s) {
    for (size_t i = 0; i < s.size(); ++i) {
        char c = s[i];
        if (!started_) {
            started_ = true;
            if (c == '{' || c == '[') depth_ = 1;
            else if (c == '"') in_string_ = true;
            else prim_ = true;
            continue;
        }
        if (prim_) {
            if (c == ',' || c == '}' || c == ']' || is_ws(c)) {
                prim_ = false;
                return i;
            }
            continue;
        }
        if (in_string_) {
            if (escape_) escape_ = false;
            else if (c == '\\') escape_ = true;
            else if (c == '"') {
                in_string_ = false;
                if (depth_ == 0) return i + 1;
            }
            continue;
        }
        if (c == '"') in_string_ = true;
        else if (c == '{' || c == '[') ++depth_;
        else if ((c == '}' || c == ']') && --depth_ == 0) return i + 1;
    }
    return std::string::npos;
}

bool tool_parser::step(tool_parse_delta& d, bool at_end) {
    switch (state_) {
    case state::START: {
        size_t i = 0;
        while (i < buf_.size() && is_ws(buf_[i])) ++i;
        std::string_view rest = std::string_view(buf_).substr(i);
        if (rest.empty()) {
            if (at_end) {
                emit_content(d, buf_);
                buf_.clear();
            }
            return false;
        }
        if (rest.compare(0, python_tag.size(), python_tag) == 0) {
            call_text_ = buf_.substr(0, i + python_tag.size());
            buf_.erase(0, i + python_tag.size());
            state_ = state::HEAD;
            return true;
        }
        if (!at_end && rest.size() < python_tag.size() && python_tag.compare(0, rest.size(), rest) == 0) return false;
        if (rest[0] == '{') {
            call_text_ = buf_.substr(0, i);
            buf_.erase(0, i);
            state_ = state::HEAD;
            return true;
        }
        state_ = state::PASS;
        return true;
    }
    case state::PASS:
        emit_content(d, buf_);
        buf_.clear();
        return false;
    case state::TEXT: {
        size_t pos = buf_.find(open_tag);
        if (pos != std::string::npos) {
            emit_content(d, std::string_view(buf_).substr(0, pos));
            buf_.erase(0, pos + open_tag.size());
            call_text_ = open_tag;
            state_ = state::HEAD;
            return true;
        }
        size_t n = buf_.size() - (at_end ? 0 : partial_tag_overlap(buf_, open_tag));
        emit_content(d, std::string_view(buf_).substr(0, n));
        buf_.erase(0, n);
        return false;
    }
    case state::HEAD: return step_head(d, at_end);
    case state::ARGS: return step_args(d, at_end);
    case state::TAIL: return step_tail(d, at_end);
    case state::AFTER: {
        size_t i = 0;
        while (i < buf_.size() && is_ws(buf_[i])) ++i;
        if (i == buf_.size()) {
            if (at_end) buf_.clear();
            return false;
        }
        if (buf_[i] == ';') {
            call_text_ = buf_.substr(0, i + 1);
            buf_.erase(0, i + 1);
            state_ = state::HEAD;
            return true;
        }
        state_ = state::PASS;
        return true;
    }
    case state::OPAQUE: return step_opaque(d, at_end);
    }
    return false;
}

bool tool_parser::step_head(tool_parse_delta& d, bool at_end) {
    size_t close = kind_ == kind::HERMES ? buf_.find(close_tag) : std::string::npos;
    std::string_view view = std::string_view(buf_).substr(0, close);
    head_match h = match_head(view);
    if (h.status == match::OK) {
        call_text_.append(buf_, 0, h.end);
        buf_.erase(0, h.end);
        start_call(d, h.name);
        state_ = state::ARGS;
        return true;
    }
    if (h.status == match::FAIL || close != std::string::npos || at_end) {
        state_ = state::OPAQUE;
        return true;
    }
    return false;
}

bool tool_parser::step_args(tool_parse_delta& d, bool at_end) {
    size_t limit = buf_.size();
    size_t close = kind_ == kind::HERMES ? buf_.find(close_tag) : std::string::npos;
    if (close != std::string::npos) limit = close;
    else if (kind_ == kind::HERMES && !at_end) limit -= partial_tag_overlap(buf_, close_tag);
    size_t end = scan(std::string_view(buf_).substr(0, limit));
    if (end != std::string::npos) {
        emit_args(d, std::string_view(buf_).substr(0, end));
        buf_.erase(0, end);
        state_ = state::TAIL;
        if (kind_ == kind::LLAMA3_JSON) {  // skip to the end of the enclosing object
            started_ = true;
            depth_ = 1;
            in_string_ = escape_ = prim_ = false;
        }
        return true;
    }
    emit_args(d, std::string_view(buf_).substr(0, limit));
    buf_.erase(0, limit);
    bool prim_done = prim_ && (at_end || close != std::string::npos);
    if (close != std::string::npos) {  // the call closed inside its arguments
        buf_.erase(0, close_tag.size());
        end_call(prim_done);
        state_ = state::TEXT;
        return true;
    }
    if (at_end) {
        end_call(prim_done);
        state_ = state::PASS;
    }
    return false;
}

bool tool_parser::step_tail(tool_parse_delta& d, bool at_end) {
    if (kind_ == kind::HERMES) {
        size_t close = buf_.find(close_tag);
        if (close != std::string::npos) {
            buf_.erase(0, close + close_tag.size());
            end_call(true);
            state_ = state::TEXT;
            return true;
        }
        size_t keep = at_end ? 0 : partial_tag_overlap(buf_, close_tag);
        buf_.erase(0, buf_.size() - keep);
        if (at_end) {
            end_call(true);  // an unterminated last call is accepted (vLLM's regex allows it)
            state_ = state::TEXT;
        }
        return false;
    }
    size_t end = scan(buf_);
    if (end != std::string::npos) {
        buf_.erase(0, end);
        end_call(true);
        state_ = state::AFTER;
        return true;
    }
    buf_.clear();
    if (at_end) {
        end_call(true);
        state_ = state::AFTER;
    }
    return false;
}

bool tool_parser::step_opaque(tool_parse_delta& d, bool at_end) {
    size_t body_end, consumed;
    if (kind_ == kind::HERMES) {
        size_t close = buf_.find(close_tag);
        if (close == std::string::npos && !at_end) return false;
        body_end = close == std::string::npos ? buf_.size() : close;
        consumed = close == std::string::npos ? buf_.size() : close + close_tag.size();
    } else {
        size_t i = 0;
        while (i < buf_.size() && is_ws(buf_[i])) ++i;
        depth_ = 0;
        in_string_ = escape_ = started_ = prim_ = false;
        size_t end = scan(std::string_view(buf_).substr(i));
        if (end == std::string::npos && !at_end) return false;
        body_end = consumed = end == std::string::npos ? buf_.size() : i + end;
    }
    parsed_tool_call call;
    std::string_view body = std::string_view(buf_).substr(0, body_end);
    if (parse_call_object(body, call)) {
        start_call(d, call.name);
        emit_args(d, call.arguments);
        end_call(true);
        state_ = kind_ == kind::HERMES ? state::TEXT : state::AFTER;
    } else {
        std::string raw = call_text_ + buf_.substr(0, consumed);
        call_text_.clear();
        emit_content(d, raw);
        state_ = kind_ == kind::HERMES ? state::TEXT : state::PASS;
    }
    buf_.erase(0, consumed);
    return true;
}

tool_parser::result tool_parser::parse(const std::string& name, std::string_view text) {
    tool_parser p(name);
    result r;
    for (tool_parse_delta d : {p.feed(text), p.finish()}) {
        r.content += d.content;
        for (auto& c : d.calls) {
            if (c.index >= int(r.calls.size())) r.calls.resize(c.index + 1);
            if (!c.name.empty()) r.calls[c.index].name = c.name;
            r.calls[c.index].arguments += c.arguments;
        }
    }
    if (!p.calls_valid()) {
        r.content.assign(text);
        r.calls.clear();
    }
    return r;
}

}  // namespace tetra
