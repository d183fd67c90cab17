#include "server/openai_request.h"

#include <cmath>
#include <limits>

namespace tetra {

namespace {

constexpr int32_t max_n = 128;  // parallel samples per request

[[noreturn]] void bad(const std::string& param, const std::string& msg) { throw api_error(400, msg, param); }

// JSON nesting accepted in a request (bodies, tool-call arguments). Copying or destroying a value
// recurses on the stack once per level: a 300-KB body of 150,000 nested arrays crashed the server
// (session 23's audit). Requests nest a few levels; tool schemas a few dozen.
constexpr int max_json_depth = 128;

ojson parse_json_limited(const std::string& text, const std::string& what, const std::string& param) {
    const ojson::parser_callback_t limit = [&](int depth, ojson::parse_event_t, ojson&) {
        if (depth <= max_json_depth) return true;
        const std::string msg = strfmt("%s nests deeper than %d levels", what.c_str(), max_json_depth);
        if (param.empty()) throw api_error(400, msg);
        bad(param, msg);
    };
    return ojson::parse(text, limit);
}

const char* json_type(const ojson& v) {
    switch (v.type()) {
    case ojson::value_t::null: return "null";
    case ojson::value_t::boolean: return "boolean";
    case ojson::value_t::string: return "string";
    case ojson::value_t::array: return "array";
    case ojson::value_t::object: return "object";
    default: return "number";
    }
}

// The field, or nullptr when absent or null.
const ojson* field(const ojson& body, const char* key) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
}

std::optional<bool> get_bool(const ojson& body, const char* key) {
    const ojson* v = field(body, key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) bad(key, strfmt("'%s' must be a boolean; got %s", key, json_type(*v)));
    return v->get<bool>();
}

std::optional<double> get_number(const ojson& body, const char* key) {
    const ojson* v = field(body, key);
    if (!v) return std::nullopt;
    if (!v->is_number()) bad(key, strfmt("'%s' must be a number; got %s", key, json_type(*v)));
    double d = v->get<double>();
    if (!std::isfinite(d)) bad(key, strfmt("'%s' must be finite", key));
    return d;
}

std::optional<float> get_float(const ojson& body, const char* key) {
    auto d = get_number(body, key);
    if (!d) return std::nullopt;
    if (std::fabs(*d) > std::numeric_limits<float>::max()) bad(key, strfmt("'%s' is out of range: %g", key, *d));
    return float(*d);
}

// Integers; a float with an integral value is accepted (pydantic's lax mode).
std::optional<int64_t> get_int(const ojson& body, const char* key, int64_t lo, int64_t hi) {
    const ojson* v = field(body, key);
    if (!v) return std::nullopt;
    int64_t i;
    if (v->is_number_integer()) {
        if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
            bad(key, strfmt("'%s' is out of range", key));
        i = v->get<int64_t>();
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9e18) {
        i = int64_t(v->get<double>());
    } else {
        bad(key, strfmt("'%s' must be an integer; got %s", key, v->is_number() ? v->dump().c_str() : json_type(*v)));
    }
    if (i < lo || i > hi)
        bad(key, strfmt("'%s' must be in [%lld, %lld]; got %lld", key, (long long)lo, (long long)hi, (long long)i));
    return i;
}

std::optional<std::string> get_string(const ojson& body, const char* key) {
    const ojson* v = field(body, key);
    if (!v) return std::nullopt;
    if (!v->is_string()) bad(key, strfmt("'%s' must be a string; got %s", key, json_type(*v)));
    return v->get<std::string>();
}

void parse_common(const ojson& body, request_common& r) {
    r.model = get_string(body, "model");
    r.stream = get_bool(body, "stream").value_or(false);
    if (const ojson* so = field(body, "stream_options")) {
        if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
        if (!r.stream) bad("stream_options", "Stream options can only be defined when `stream=True`.");
        r.include_usage = get_bool(*so, "include_usage").value_or(true);
        r.continuous_usage_stats = get_bool(*so, "continuous_usage_stats").value_or(false);
    }
    r.n = int32_t(get_int(body, "n", 1, max_n).value_or(1));
    r.temperature = get_float(body, "temperature");
    r.top_p = get_float(body, "top_p");
    r.min_p = get_float(body, "min_p");
    r.repetition_penalty = get_float(body, "repetition_penalty");
    r.presence_penalty = get_float(body, "presence_penalty");
    r.frequency_penalty = get_float(body, "frequency_penalty");
    if (auto k = get_int(body, "top_k", -1, std::numeric_limits<int32_t>::max())) r.top_k = int32_t(*k);
    if (auto s = get_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
        r.seed = uint64_t(*s);
    if (auto m = get_int(body, "min_tokens", 0, std::numeric_limits<int32_t>::max())) r.min_tokens = int32_t(*m);
    if (const ojson* s = field(body, "stop")) {
        if (s->is_string()) {
            r.stop.push_back(s->get<std::string>());
        } else if (s->is_array()) {
            for (const auto& x : *s) {
                if (!x.is_string()) bad("stop", "'stop' must be a string or a list of strings");
                r.stop.push_back(x.get<std::string>());
            }
        } else {
            bad("stop", strfmt("'stop' must be a string or a list of strings; got %s", json_type(*s)));
        }
    }
    if (const ojson* s = field(body, "stop_token_ids")) {
        if (!s->is_array()) bad("stop_token_ids", "'stop_token_ids' must be a list of integers");
        for (const auto& x : *s) {
            if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > std::numeric_limits<int32_t>::max())
                bad("stop_token_ids", "'stop_token_ids' must be a list of non-negative integers");
            r.stop_token_ids.push_back(int32_t(x.get<int64_t>()));
        }
    }
    r.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
    r.include_stop_str_in_output = get_bool(body, "include_stop_str_in_output").value_or(false);
    r.add_special_tokens = get_bool(body, "add_special_tokens");
    if (const ojson* lb = field(body, "logit_bias"))
        if (!lb->is_object() || !lb->empty()) bad("logit_bias", "'logit_bias' is not supported by this server");
    if (const ojson* rf = field(body, "response_format")) {
        std::string type = rf->is_object() && rf->contains("type") && (*rf)["type"].is_string() ? (*rf)["type"].get<std::string>() : "";
        if (type != "text")
            bad("response_format", "response_format type '" + type + "' is not supported (no structured-output decoding); use 'text'");
    }
    if (get_bool(body, "use_beam_search").value_or(false)) bad("use_beam_search", "beam search is not supported");
    if (auto b = get_int(body, "best_of", 1, max_n); b && *b != r.n) bad("best_of", "'best_of' other than n is not supported");
}

// Text of a message's content: a string, null (→ ""), or a list of parts (text joined with "\n").
std::string content_text(const ojson& content, size_t i) {
    if (content.is_null()) return "";
    if (content.is_string()) return content.get<std::string>();
    std::string param = strfmt("messages[%zu].content", i);
    if (!content.is_array()) bad(param, "'" + param + "' must be a string, a list of content parts or null");
    std::string out;
    bool first = true;
    for (const auto& part : content) {
        std::string type = part.is_object() && part.contains("type") && part["type"].is_string() ? part["type"].get<std::string>() : "";
        if (type == "text" || type == "input_text") {
            if (!part.contains("text") || !part["text"].is_string()) bad(param, "a text content part needs a string 'text'");
            if (!first) out += "\n";
            out += part["text"].get<std::string>();
            first = false;
        } else {
            bad(param, "content part type '" + type + "' is not supported: this server is text-only");
        }
    }
    return out;
}

ojson normalize_message(const ojson& m, size_t i) {
    std::string param = strfmt("messages[%zu]", i);
    if (!m.is_object()) bad(param, "'" + param + "' must be an object");
    if (!m.contains("role") || !m["role"].is_string()) bad(param + ".role", "'" + param + ".role' must be a string");
    ojson out = m;
    if (out["role"] == "developer") out["role"] = "system";
    out["content"] = content_text(m.contains("content") ? m["content"] : ojson(), i);
    if (m.contains("tool_calls")) {
        const ojson& tc = m["tool_calls"];
        if (tc.is_null() || (tc.is_array() && tc.empty())) {
            out.erase("tool_calls");
        } else {
            if (!tc.is_array()) bad(param + ".tool_calls", "'" + param + ".tool_calls' must be a list");
            for (size_t j = 0; j < tc.size(); ++j) {
                std::string p = strfmt("%s.tool_calls[%zu].function", param.c_str(), j);
                if (!tc[j].is_object() || !tc[j].contains("function") || !tc[j]["function"].is_object())
                    bad(p, "'" + p + "' must be an object with 'name' and 'arguments'");
                ojson& fn = out["tool_calls"][j]["function"];
                if (fn.contains("arguments") && fn["arguments"].is_string()) {
                    try {  // templates do `arguments | tojson`: a string would be encoded twice
                        fn["arguments"] = parse_json_limited(fn["arguments"].get<std::string>(), "'" + p + ".arguments'",
                                                             p + ".arguments");
                    } catch (const api_error&) {
                        throw;
                    } catch (const std::exception&) {
                        bad(p + ".arguments", "'" + p + ".arguments' is not valid JSON");
                    }
                }
            }
        }
    }
    return out;
}

}  // namespace

const char* error_type_for_status(int status) {
    switch (status) {
    case 400: return "BadRequestError";
    case 401: return "AuthenticationError";
    case 404: return "NotFoundError";
    case 413: return "RequestTooLargeError";
    case 503: return "ServiceUnavailableError";
    default: return status >= 500 ? "InternalServerError" : "BadRequestError";
    }
}

std::optional<bool> request_bool(const ojson& body, const char* key) { return get_bool(body, key); }

ojson parse_json_body(const std::string& body) {
    ojson j;
    try {
        j = parse_json_limited(body, "the request body", "");
    } catch (const nlohmann::json::parse_error& e) {
        // nlohmann's message ends with the token read so far ("last read: '...'"): a 100-MB string
        // would come back whole, so the message is cut
        std::string what = e.what();
        if (what.size() > 300) what = what.substr(0, 300) + "...";
        throw api_error(400, strfmt("Invalid JSON body at byte %zu: %s", e.byte, what.c_str()));
    }
    if (!j.is_object()) throw api_error(400, strfmt("the request body must be a JSON object; got %s", json_type(j)));
    return j;
}

chat_request parse_chat_request(const ojson& body) {
    chat_request r;
    parse_common(body, r);
    const ojson* msgs = field(body, "messages");
    if (!msgs) bad("messages", "'messages' is required");
    if (!msgs->is_array() || msgs->empty()) bad("messages", "'messages' must be a non-empty list");
    r.messages = ojson::array();
    for (size_t i = 0; i < msgs->size(); ++i) r.messages.push_back(normalize_message((*msgs)[i], i));

    auto mct = get_int(body, "max_completion_tokens", 1, std::numeric_limits<int32_t>::max());
    auto mt = get_int(body, "max_tokens", 1, std::numeric_limits<int32_t>::max());
    if (mct) r.max_tokens = int32_t(*mct);
    else if (mt) r.max_tokens = int32_t(*mt);

    bool want_logprobs = get_bool(body, "logprobs").value_or(false);
    auto top = get_int(body, "top_logprobs", 0, max_logprobs);
    if (top && *top > 0 && !want_logprobs) bad("top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true.");
    if (want_logprobs) r.logprobs = int32_t(top.value_or(0));

    if (const ojson* tools = field(body, "tools")) {
        if (!tools->is_array() || tools->empty()) bad("tools", "'tools' must be a non-empty list");
        for (size_t i = 0; i < tools->size(); ++i) {
            const ojson& t = (*tools)[i];
            if (!t.is_object() || !t.contains("function") || !t["function"].is_object() ||
                !t["function"].contains("name") || !t["function"]["name"].is_string())
                bad(strfmt("tools[%zu]", i), strfmt("'tools[%zu]' must be {\"type\": \"function\", \"function\": {\"name\": ...}}", i));
        }
        r.tools = *tools;
        r.tool_choice = "auto";
    }
    if (const ojson* tc = field(body, "tool_choice")) {
        if (tc->is_string()) {
            std::string s = tc->get<std::string>();
            if (s != "none" && s != "auto" && s != "required")
                bad("tool_choice", "'tool_choice' must be none, auto, required or a named function; got '" + s + "'");
            r.tool_choice = s;
        } else if (tc->is_object()) {
            r.tool_choice = "function";
        } else {
            bad("tool_choice", "'tool_choice' must be a string or an object");
        }
        if (r.tool_choice != "none" && r.tools.is_null())
            bad("tool_choice", "When using `tool_choice`, `tools` must be set.");
    }
    if (r.tool_choice == "required" || r.tool_choice == "function")
        bad("tool_choice", "tool_choice '" + r.tool_choice + "' needs structured-output decoding, which this server does not support; use \"auto\"");

    r.add_generation_prompt = get_bool(body, "add_generation_prompt").value_or(true);
    r.continue_final_message = get_bool(body, "continue_final_message").value_or(false);
    if (r.add_generation_prompt && r.continue_final_message)
        bad("continue_final_message", "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
    r.include_reasoning = get_bool(body, "include_reasoning").value_or(true);
    if (get_bool(body, "echo").value_or(false)) bad("echo", "'echo' is not supported for chat completions");
    if (const ojson* k = field(body, "chat_template_kwargs")) {
        if (!k->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
        r.chat_template_kwargs = *k;
    }
    if (auto effort = get_string(body, "reasoning_effort")) {
        if (!r.chat_template_kwargs.contains("reasoning_effort")) r.chat_template_kwargs["reasoning_effort"] = *effort;
        if (!r.chat_template_kwargs.contains("enable_thinking")) r.chat_template_kwargs["enable_thinking"] = *effort != "none";
    }
    if (get_string(body, "chat_template")) bad("chat_template", "a per-request 'chat_template' is not supported; start the server with --chat-template");
    return r;
}

completion_request parse_completion_request(const ojson& body) {
    completion_request r;
    parse_common(body, r);
    const ojson* p = field(body, "prompt");
    if (!p) bad("prompt", "'prompt' is required");
    const ojson* one = p;
    if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
        if (p->size() != 1) bad("prompt", "batched prompts are not supported: send one prompt per request");
        one = &p->front();
    }
    if (one->is_string()) {
        r.prompt = one->get<std::string>();
        if (r.prompt.empty()) bad("prompt", "'prompt' must not be empty");
    } else if (one->is_array()) {
        if (one->empty()) bad("prompt", "'prompt' must not be empty");
        for (const auto& x : *one) {
            if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > std::numeric_limits<int32_t>::max())
                bad("prompt", "a token-id prompt must be a list of non-negative integers");
            r.prompt_ids.push_back(int32_t(x.get<int64_t>()));
        }
        r.prompt_is_ids = true;
    } else {
        bad("prompt", strfmt("'prompt' must be a string, a list of token ids, or a list of one of those; got %s", json_type(*one)));
    }
    if (auto mt = get_int(body, "max_tokens", 0, std::numeric_limits<int32_t>::max())) {
        if (*mt == 0) bad("max_tokens", "'max_tokens' must be at least 1");
        r.max_tokens = int32_t(*mt);
    }
    if (auto lp = get_int(body, "logprobs", 0, max_logprobs)) r.logprobs = int32_t(*lp);
    r.echo = get_bool(body, "echo").value_or(false);
    if (r.echo && r.logprobs) bad("echo", "'echo' with 'logprobs' (prompt logprobs) is not supported");
    if (get_string(body, "suffix")) bad("suffix", "'suffix' is not supported");
    return r;
}

sampling_params make_sampling_params(const request_common& r, const sampling_params& defaults, int64_t n_prompt,
                                     int64_t max_model_len, int32_t default_max_tokens) {
    if (n_prompt >= max_model_len) {
        int64_t want = r.max_tokens.value_or(1);
        throw api_error(400,
                        strfmt("This model's maximum context length is %lld tokens. However, you requested %lld output "
                               "tokens and your prompt contains at least %lld input tokens, for a total of at least %lld "
                               "tokens. Please reduce the length of the input prompt or the number of requested output tokens.",
                               (long long)max_model_len, (long long)want, (long long)n_prompt + 1, (long long)(n_prompt + 1 + want)),
                        "input_tokens");
    }
    sampling_params p = defaults;
    int64_t room = max_model_len - n_prompt;
    if (r.max_tokens) {
        if (*r.max_tokens > room)
            throw api_error(400,
                            strfmt("'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context "
                                   "length is %lld tokens and your request has %lld input tokens (%d > %lld - %lld).",
                                   *r.max_tokens, (long long)max_model_len, (long long)n_prompt, *r.max_tokens,
                                   (long long)max_model_len, (long long)n_prompt),
                            "max_tokens");
        p.max_tokens = *r.max_tokens;
    } else {
        p.max_tokens = int32_t(default_max_tokens > 0 ? std::min<int64_t>(default_max_tokens, room) : room);
    }
    if (r.temperature) p.temperature = *r.temperature;
    if (r.top_p) p.top_p = *r.top_p;
    if (r.top_k) p.top_k = *r.top_k;
    if (r.min_p) p.min_p = *r.min_p;
    if (r.repetition_penalty) p.repetition_penalty = *r.repetition_penalty;
    p.presence_penalty = r.presence_penalty.value_or(0.0f);
    p.frequency_penalty = r.frequency_penalty.value_or(0.0f);
    p.seed = r.seed;
    p.min_tokens = r.min_tokens.value_or(0);
    p.stop = r.stop;
    p.stop_token_ids = r.stop_token_ids;
    p.ignore_eos = r.ignore_eos;
    p.include_stop_str_in_output = r.include_stop_str_in_output;
    p.logprobs = r.logprobs;
    try {
        p.validate();
    } catch (const sampling_param_error& e) {
        throw api_error(400, e.what(), e.param);
    }
    return p;
}

}  // namespace tetra
