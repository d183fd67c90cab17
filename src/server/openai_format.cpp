#include "server/openai_format.h"

#include <cmath>
#include <random>

namespace tetra {

std::string dump_json(const ojson& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

ojson error_body(int status, const std::string& message, const std::optional<std::string>& param) {
    ojson e = ojson::object();
    e["message"] = message;
    e["type"] = error_type_for_status(status);
    e["param"] = param ? ojson(*param) : ojson(nullptr);
    e["code"] = status;
    return ojson{{"error", e}};
}

ojson error_body(const api_error& e) { return error_body(e.status, e.what(), e.param); }

std::string sse_event(const ojson& j) { return "data: " + dump_json(j) + "\n\n"; }
std::string sse_done() { return "data: [DONE]\n\n"; }

std::string random_id(const std::string& prefix) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char* hex = "0123456789abcdef";
    std::string s = prefix;
    for (int i = 0; i < 2; ++i) {
        uint64_t x = rng();
        for (int k = 0; k < 16; ++k, x >>= 4) s += hex[x & 15];
    }
    return s;
}

ojson usage_json(int64_t n_prompt, int64_t n_completion) {
    return ojson{{"prompt_tokens", n_prompt},
                 {"total_tokens", n_prompt + n_completion},
                 {"completion_tokens", n_completion},
                 {"prompt_tokens_details", nullptr}};
}

ojson response_envelope(const std::string& id, const char* object, int64_t created, const std::string& model,
                        ojson choices, const ojson& usage) {
    ojson r = ojson::object();
    r["id"] = id;
    r["object"] = object;
    r["created"] = created;
    r["model"] = model;
    r["choices"] = std::move(choices);
    if (!usage.is_null()) r["usage"] = usage;
    return r;
}

ojson chat_chunk_choice(int index, ojson delta, const ojson& logprobs, const char* finish_reason,
                        const ojson& stop_reason) {
    ojson c = ojson::object();
    c["index"] = index;
    c["delta"] = std::move(delta);
    c["logprobs"] = logprobs;
    c["finish_reason"] = finish_reason ? ojson(finish_reason) : ojson(nullptr);
    if (finish_reason) c["stop_reason"] = stop_reason;
    return c;
}

ojson completion_choice(int index, const std::string& text, const ojson& logprobs, const char* finish_reason,
                        const ojson& stop_reason) {
    ojson c = ojson::object();
    c["index"] = index;
    c["text"] = text;
    c["logprobs"] = logprobs;
    c["finish_reason"] = finish_reason ? ojson(finish_reason) : ojson(nullptr);
    c["stop_reason"] = stop_reason;
    return c;
}

ojson stop_reason_json(const stop_status& s) {
    if (s.stop_str) return *s.stop_str;
    if (s.stop_token) return *s.stop_token;
    return nullptr;
}

namespace {

ojson bytes_of(const std::string& s) {
    ojson b = ojson::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
}

// -inf (a token the filters removed) is not JSON; vLLM writes -9999.0.
ojson logprob_value(float lp) { return std::isfinite(lp) ? ojson(lp) : ojson(-9999.0); }

}  // namespace

ojson chat_logprobs_content(const std::vector<int32_t>& ids, const std::vector<sample_result>& lps,
                            const token_text_fn& text) {
    ojson content = ojson::array();
    for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
        std::string t = text(ids[i]);
        ojson e = {{"token", t}, {"logprob", logprob_value(lps[i].logprob)}, {"bytes", bytes_of(t)}};
        ojson top = ojson::array();
        for (const auto& x : lps[i].top_logprobs) {
            std::string tt = text(x.id);
            top.push_back({{"token", tt}, {"logprob", logprob_value(x.logprob)}, {"bytes", bytes_of(tt)}});
        }
        e["top_logprobs"] = std::move(top);
        content.push_back(std::move(e));
    }
    return content;
}

ojson completion_logprobs(const std::vector<int32_t>& ids, const std::vector<sample_result>& lps,
                          const token_text_fn& text, int64_t text_offset0) {
    ojson r = {{"text_offset", ojson::array()}, {"token_logprobs", ojson::array()}, {"tokens", ojson::array()},
               {"top_logprobs", ojson::array()}};
    int64_t off = text_offset0;
    for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
        std::string t = text(ids[i]);
        r["text_offset"].push_back(off);
        r["token_logprobs"].push_back(logprob_value(lps[i].logprob));
        r["tokens"].push_back(t);
        ojson top = ojson::object();
        for (const auto& x : lps[i].top_logprobs) top[text(x.id)] = logprob_value(x.logprob);
        r["top_logprobs"].push_back(std::move(top));
        off += int64_t(t.size());
    }
    return r;
}

void append_completion_logprobs(ojson& a, const ojson& b) {
    if (a.is_null()) {
        a = b;
        return;
    }
    for (const char* k : {"text_offset", "token_logprobs", "tokens", "top_logprobs"})
        for (const auto& x : b[k]) a[k].push_back(x);
}

ojson models_json(const std::vector<std::string>& names, const std::string& root, int64_t max_model_len,
                  int64_t created) {
    ojson data = ojson::array();
    for (const auto& n : names) {
        data.push_back({{"id", n},
                        {"object", "model"},
                        {"created", created},
                        {"owned_by", "tetra"},
                        {"root", root},
                        {"parent", nullptr},
                        {"max_model_len", max_model_len},
                        {"permission", ojson::array()}});
    }
    return ojson{{"object", "list"}, {"data", data}};
}

}  // namespace tetra
