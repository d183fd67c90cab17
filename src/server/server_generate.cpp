// server/server_generate: POST /v1/chat/completions and /v1/completions — request → template →
// tokens → engine request, then either one JSON response or an SSE stream (serving.md §1.6):
// chat: role chunk per choice, content chunks, the last text riding with finish_reason, the
// usage chunk when asked, `data: [DONE]`. A request whose client went away is aborted in the engine:
// a stream when a write fails, a non-streaming request when its connection's socket shows the hang-up.
#include <cstring>
#include <ctime>

#include "core/log.h"
#include "server/chat_output.h"
#include "server/client_conn.h"
#include "server/server_impl.h"

namespace tetra {

namespace {

using impl = openai_server::impl;

struct choice_state {
    std::string text;  // non-streaming: all of it
    std::vector<int32_t> ids;
    std::vector<sample_result> lps;
    int64_t text_offset = 0;  // completions logprobs
    int64_t n_output = 0;
    double last_time = 0;
    bool finished = false;
    std::string finish_reason;
    ojson stop_reason;
    std::unique_ptr<chat_choice_output> out;  // chat streaming
};

struct gen_job {
    bool chat = true;
    std::string id, model, role = "assistant", prompt_text;
    int64_t created = 0;
    std::vector<int32_t> prompt;
    sampling_params params;
    int32_t n = 1;
    double arrival = 0;
    bool stream = false, include_usage = false, continuous_usage = false, echo = false;
    std::optional<int32_t> logprobs;
    chat_output_options out_opt;
    std::shared_ptr<request_stream> rs;
    std::vector<choice_state> choices;
    std::string error;
    bool aborted = false, started = false, ended = false;

    int64_t n_completion() const {
        int64_t t = 0;
        for (const auto& c : choices) t += c.n_output;
        return t;
    }
};

// Bookkeeping common to both modes: metrics, counts, finish state, errors.
void account(impl& s, gen_job& j, const request_output& o) {
    if (o.index < 0 || o.index >= int(j.choices.size())) return;
    choice_state& c = j.choices[o.index];
    if (!o.new_token_ids.empty()) {
        if (c.last_time > 0) s.metrics.observe_inter_token(o.time - c.last_time);
        c.last_time = o.time;
    }
    c.n_output = o.n_output_tokens;
    if (!o.error.empty()) j.error = o.error;
    if (o.aborted) j.aborted = true;
    if (!o.finished) return;
    c.finished = true;
    c.finish_reason = o.finish_reason() ? o.finish_reason() : "stop";
    c.stop_reason = stop_reason_json(o.status);
    if (o.error.empty() && !o.aborted)
        s.metrics.observe_request(o.first_scheduled_time > 0 ? o.first_scheduled_time - o.arrival_time : -1,
                                  o.first_token_time > 0 ? o.first_token_time - o.arrival_time : -1, o.time - o.arrival_time,
                                  o.n_prompt_tokens, o.n_output_tokens);
}

void submit(impl& s, gen_job& j) {
    if (!j.params.seed && s.cfg.seed) j.params.seed = *s.cfg.seed + s.seed_counter.fetch_add(1);
    j.choices.resize(size_t(j.n));
    for (auto& c : j.choices)
        if (j.chat && j.stream) c.out = std::make_unique<chat_choice_output>(j.out_opt);
    engine_request er;
    er.request_id = j.id;
    er.prompt = j.prompt;
    er.params = j.params;
    er.n = j.n;
    er.arrival_time = j.arrival;
    s.track(j.id);
    try {
        j.rs = s.engine.add_request(std::move(er));
    } catch (const sampling_param_error& e) {
        s.untrack(j.id);
        throw api_error(400, e.what(), e.param);
    } catch (...) {
        s.untrack(j.id);
        throw;
    }
}

// Aborts (when not finished) and untracks when the handler or the stream ends, however it ends.
struct job_guard {
    impl& s;
    std::shared_ptr<gen_job> j;
    ~job_guard() {
        if (!j->rs) return;
        if (!j->rs->done()) s.engine.abort(j->id);
        s.untrack(j->id);
    }
};

void append_str(ojson& d, const char* key, const ojson& more) {
    if (!more.contains(key)) return;
    d[key] = d.value(key, std::string()) + more[key].get<std::string>();
}

// ---- non-streaming ----

// How often a waiting non-streaming request looks at its client's socket (one poll() call).
constexpr double hangup_check_s = 0.1;

// Collects every output; false when the client hung up first (the caller aborts the request).
bool wait_all(impl& s, gen_job& j, const client_connection& conn) {
    request_output o;
    double next_check = 0;
    while (true) {
        if (conn.found() && llm_engine::now() >= next_check) {
            if (conn.gone()) return false;
            next_check = llm_engine::now() + hangup_check_s;
        }
        if (!j.rs->next(o, hangup_check_s)) {
            if (j.rs->done()) return true;
            continue;
        }
        account(s, j, o);
        if (o.index < 0 || o.index >= int(j.choices.size())) continue;
        choice_state& c = j.choices[o.index];
        c.text += o.new_text;
        c.ids.insert(c.ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        c.lps.insert(c.lps.end(), o.logprobs.begin(), o.logprobs.end());
    }
}

void check_failed(const gen_job& j) {
    if (!j.error.empty()) throw std::runtime_error("engine: " + j.error);
    if (j.aborted) throw api_error(503, "the request was aborted: the server is shutting down");
}

ojson chat_response(impl& s, gen_job& j) {
    ojson choices = ojson::array();
    auto tt = [&](int32_t id) { return s.token_text(id); };
    for (size_t i = 0; i < j.choices.size(); ++i) {
        choice_state& c = j.choices[i];
        bool tools_called = false;
        ojson msg = chat_message(c.text, j.out_opt, tools_called);
        ojson lp = j.logprobs ? ojson{{"content", chat_logprobs_content(c.ids, c.lps, tt)}} : ojson(nullptr);
        choices.push_back({{"index", i},
                           {"message", msg},
                           {"logprobs", lp},
                           {"finish_reason", chat_finish_reason(c.finish_reason.c_str(), tools_called)},
                           {"stop_reason", c.stop_reason}});
    }
    return response_envelope(j.id, "chat.completion", j.created, j.model, choices,
                             usage_json(int64_t(j.prompt.size()), j.n_completion()));
}

ojson completion_response(impl& s, gen_job& j) {
    ojson choices = ojson::array();
    auto tt = [&](int32_t id) { return s.token_text(id); };
    for (size_t i = 0; i < j.choices.size(); ++i) {
        choice_state& c = j.choices[i];
        ojson lp = j.logprobs ? completion_logprobs(c.ids, c.lps, tt, 0) : ojson(nullptr);
        choices.push_back(completion_choice(int(i), (j.echo ? j.prompt_text : "") + c.text, lp, c.finish_reason.c_str(),
                                            c.stop_reason));
    }
    return response_envelope(j.id, "text_completion", j.created, j.model, choices,
                             usage_json(int64_t(j.prompt.size()), j.n_completion()));
}

// ---- streaming ----

// The SSE events for one engine output (possibly none).
std::vector<std::string> stream_events(impl& s, gen_job& j, const request_output& o) {
    std::vector<std::string> ev;
    if (o.index < 0 || o.index >= int(j.choices.size())) return ev;
    choice_state& c = j.choices[o.index];
    auto tt = [&](int32_t id) { return s.token_text(id); };
    const char* fr = nullptr;
    ojson stop_reason = nullptr, lp = nullptr, choice;
    if (o.finished) {
        fr = o.finish_reason() ? o.finish_reason() : "stop";
        stop_reason = stop_reason_json(o.status);
    }
    ojson usage = j.continuous_usage ? usage_json(int64_t(j.prompt.size()), j.n_completion()) : ojson(nullptr);
    if (j.chat) {
        ojson delta = c.out->feed(o.new_text);
        if (o.finished) {
            ojson fin = c.out->finish();
            for (const char* k : {"reasoning", "reasoning_content", "content"}) append_str(delta, k, fin);
            if (fin.contains("tool_calls")) {
                if (!delta.contains("tool_calls")) delta["tool_calls"] = ojson::array();
                for (auto& x : fin["tool_calls"]) delta["tool_calls"].push_back(x);
            }
            fr = chat_finish_reason(fr, c.out->called_tools());
        }
        if (j.logprobs && !o.new_token_ids.empty())
            lp = ojson{{"content", chat_logprobs_content(o.new_token_ids, o.logprobs, tt)}};
        if (delta.empty() && !fr && lp.is_null()) return ev;
        choice = chat_chunk_choice(o.index, std::move(delta), lp, fr, stop_reason);
        ev.push_back(sse_event(response_envelope(j.id, "chat.completion.chunk", j.created, j.model,
                                                 ojson::array({choice}), usage)));
        return ev;
    }
    if (j.logprobs && !o.new_token_ids.empty()) {
        lp = completion_logprobs(o.new_token_ids, o.logprobs, tt, c.text_offset);
        for (const auto& t : lp["tokens"]) c.text_offset += int64_t(t.get_ref<const std::string&>().size());
    }
    if (o.new_text.empty() && !fr && lp.is_null()) return ev;
    choice = completion_choice(o.index, o.new_text, lp, fr, stop_reason);
    ev.push_back(sse_event(response_envelope(j.id, "text_completion", j.created, j.model, ojson::array({choice}), usage)));
    return ev;
}

std::vector<std::string> stream_start(gen_job& j) {
    std::vector<std::string> ev;
    // continuous_usage_stats: every chunk carries usage, the role chunk too (0 completion tokens, as vLLM)
    const ojson usage = j.continuous_usage ? usage_json(int64_t(j.prompt.size()), 0) : ojson(nullptr);
    for (int i = 0; i < j.n; ++i) {
        if (j.chat) {
            ojson delta = {{"role", j.role}, {"content", ""}};
            ev.push_back(sse_event(response_envelope(j.id, "chat.completion.chunk", j.created, j.model,
                                                     ojson::array({chat_chunk_choice(i, delta, nullptr, nullptr)}),
                                                     usage)));
        } else if (j.echo) {
            j.choices[i].text_offset = int64_t(j.prompt_text.size());
            ev.push_back(sse_event(response_envelope(j.id, "text_completion", j.created, j.model,
                                                     ojson::array({completion_choice(i, j.prompt_text, nullptr, nullptr, nullptr)}),
                                                     usage)));
        }
    }
    return ev;
}

std::vector<std::string> stream_end(gen_job& j) {
    std::vector<std::string> ev;
    if (!j.error.empty()) {
        ev.push_back(sse_event(error_body(500, "engine: " + j.error)));
    } else if (j.aborted) {
        ev.push_back(sse_event(error_body(503, "the request was aborted: the server is shutting down")));
    } else if (j.include_usage) {
        ev.push_back(sse_event(response_envelope(j.id, j.chat ? "chat.completion.chunk" : "text_completion", j.created, j.model,
                                                 ojson::array(), usage_json(int64_t(j.prompt.size()), j.n_completion()))));
    }
    ev.push_back(sse_done());
    return ev;
}

// The SSE stream: chunked transfer encoding for HTTP/1.1 clients; an HTTP/1.0 client cannot decode
// chunks, so it gets the raw events and the end of the body is the connection's close.
void start_stream(impl& s, bool http10, httplib::Response& res, std::shared_ptr<gen_job> j) {
    std::shared_ptr<job_guard> guard(new job_guard{s, j});
    res.set_header("Cache-Control", "no-cache");
    auto provider = [&s, j](size_t, httplib::DataSink& sink) {
        auto write_all = [&](const std::vector<std::string>& ev) {
            for (const auto& e : ev)
                if (!sink.write(e.data(), e.size())) return false;
            return true;
        };
        try {
            if (!j->started) {
                j->started = true;
                if (!write_all(stream_start(*j))) return false;
            }
            request_output o;
            if (!j->rs->next(o, 0.05)) {
                if (!j->rs->done()) return !sink.is_writable || sink.is_writable();
                if (!write_all(stream_end(*j))) return false;
                j->ended = true;
                sink.done();
                return true;
            }
            account(s, *j, o);
            if (!o.error.empty() || o.aborted) return true;  // reported by stream_end once done
            return write_all(stream_events(s, *j, o));
        } catch (const std::exception& e) {  // after the headers: an error event, then [DONE]
            TETRA_LOG_ERROR("server: stream %s failed: %s", j->id.c_str(), e.what());
            std::string ev = sse_event(error_body(500, std::string("internal error: ") + e.what())) + sse_done();
            sink.write(ev.data(), ev.size());
            sink.done();
            return true;
        }
    };
    auto release = [guard](bool) {};  // the guard aborts an unfinished request when the response is released
    if (http10) res.set_content_provider("text/event-stream", provider, release);
    else res.set_chunked_content_provider("text/event-stream", provider, release);
}

void run_job(impl& s, const httplib::Request& req, httplib::Response& res, std::shared_ptr<gen_job> j) {
    client_connection conn;
    if (!j->stream) conn = client_connection::find(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    submit(s, *j);
    if (j->stream) {
        start_stream(s, req.version == "HTTP/1.0", res, j);
        return;
    }
    job_guard guard{s, j};
    if (!wait_all(s, *j, conn)) {  // the guard aborts the request: its KV blocks go back to the pool
        TETRA_LOG_INFO("server: %s: the client closed the connection, request aborted", j->id.c_str());
        throw api_error(499, "the client closed the connection before the response; the request was aborted");
    }
    check_failed(*j);
    ojson body = j->chat ? chat_response(s, *j) : completion_response(s, *j);
    res.set_content(dump_json(body), "application/json");
}

void check_accepting(const impl& s) {
    if (s.shutting_down) throw api_error(503, "the server is shutting down");
}

// The job fields chat and completions fill alike; j.prompt must be set (it bounds max_tokens).
void fill_job(impl& s, gen_job& j, const request_common& r, const char* id_prefix, int32_t default_max_tokens) {
    j.params = make_sampling_params(r, s.m.defaults, int64_t(j.prompt.size()), s.engine.max_model_len(), default_max_tokens);
    j.id = random_id(id_prefix);
    j.model = s.model_name();
    j.created = int64_t(std::time(nullptr));
    j.n = r.n;
    j.stream = r.stream;
    j.include_usage = r.include_usage;
    j.continuous_usage = r.continuous_usage_stats;
    j.logprobs = r.logprobs;
}

}  // namespace

void openai_server::impl::handle_chat(const httplib::Request& req, httplib::Response& res) {
    auto j = std::make_shared<gen_job>();
    j->arrival = llm_engine::now();
    chat_request r = parse_chat_request(parse_json_body(req.body));
    check_model(r.model);
    check_accepting(*this);
    bool use_tools = !r.tools.is_null() && r.tool_choice == "auto";
    if (use_tools && !(cfg.enable_auto_tool_choice && !cfg.tool_call_parser.empty()))
        throw api_error(400, "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set", "tool_choice");
    std::string prompt = render_chat(r.messages, r.tools, r.add_generation_prompt, r.continue_final_message,
                                     r.chat_template_kwargs);
    j->prompt = m.tok->encode(prompt, r.add_special_tokens.value_or(false));
    fill_job(*this, *j, r, "chatcmpl-", m.gen.max_new_tokens.value_or(0));
    if (!r.add_generation_prompt) j->role = r.messages.back()["role"].get<std::string>();
    j->out_opt.reasoning_parser = cfg.reasoning_parser;
    std::optional<bool> thinking;
    if (r.chat_template_kwargs.contains("enable_thinking") && r.chat_template_kwargs["enable_thinking"].is_boolean())
        thinking = r.chat_template_kwargs["enable_thinking"].get<bool>();
    j->out_opt.starts_in_reasoning = reasoning_parser::initial_reasoning_state(prompt, thinking);
    j->out_opt.include_reasoning = r.include_reasoning;
    j->out_opt.tool_parser = use_tools ? cfg.tool_call_parser : "";
    run_job(*this, req, res, j);
}

void openai_server::impl::handle_completion(const httplib::Request& req, httplib::Response& res) {
    auto j = std::make_shared<gen_job>();
    j->arrival = llm_engine::now();
    completion_request r = parse_completion_request(parse_json_body(req.body));
    check_model(r.model);
    check_accepting(*this);
    j->chat = false;
    if (r.prompt_is_ids) {
        j->prompt = r.prompt_ids;
        if (r.echo) j->prompt_text = m.tok->decode(r.prompt_ids, false);
    } else {
        j->prompt = m.tok->encode(r.prompt, r.add_special_tokens.value_or(true));
        j->prompt_text = r.prompt;
    }
    fill_job(*this, *j, r, "cmpl-", 16);  // OpenAI's default max_tokens for completions
    j->echo = r.echo;
    run_job(*this, req, res, j);
}

}  // namespace tetra
