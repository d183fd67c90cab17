#include "server/server.h"

#include <chrono>
#include <ctime>
#include <thread>

#include "chat/reasoning_parser.h"
#include "chat/tool_parser.h"
#include "core/log.h"
#include "server/auth.h"
#include "server/elastic_pool.h"
#include "server/server_impl.h"

namespace tetra {

openai_server::impl::impl(loaded_model& m_, llm_engine& e_, server_config cfg_) : m(m_), engine(e_), cfg(std::move(cfg_)) {
    TETRA_CHECK(!cfg.served_model_names.empty(), "server: at least one served model name is needed");
    TETRA_CHECK(cfg.reasoning_parser.empty() || reasoning_parser::is_known(cfg.reasoning_parser),
                "--reasoning-parser '%s' is unknown; expected qwen3 or deepseek_r1", cfg.reasoning_parser.c_str());
    TETRA_CHECK(cfg.tool_call_parser.empty() || tool_parser::is_known(cfg.tool_call_parser),
                "--tool-call-parser '%s' is unknown; expected hermes or llama3_json", cfg.tool_call_parser.c_str());
    for (const auto& [name, src] : m.templates) templates[name] = std::make_unique<chat_template>(src, name + " chat template");
    started_at = int64_t(std::time(nullptr));
}

void openai_server::impl::send_error(httplib::Response& res, int status, const std::string& msg,
                                     const std::optional<std::string>& param) {
    res.status = status;
    res.set_content(dump_json(error_body(status, msg, param)), "application/json");
}

void openai_server::impl::guarded(const httplib::Request& req, httplib::Response& res,
                                  const std::function<void(const httplib::Request&, httplib::Response&)>& fn) {
    try {
        fn(req, res);
    } catch (const api_error& e) {
        send_error(res, e.status, e.what(), e.param);
    } catch (const engine_stopped_error& e) {
        send_error(res, 503, e.what());
    } catch (const std::exception& e) {
        TETRA_LOG_ERROR("server: %s %s failed: %s", req.method.c_str(), req.path.c_str(), e.what());
        send_error(res, 500, std::string("internal error: ") + e.what());
    } catch (...) {
        TETRA_LOG_ERROR("server: %s %s failed with an unknown exception", req.method.c_str(), req.path.c_str());
        send_error(res, 500, "internal error");
    }
}

void openai_server::impl::check_model(const std::optional<std::string>& model) const {
    if (!model) return;
    for (const auto& n : cfg.served_model_names)
        if (n == *model) return;
    throw api_error(404, "The model `" + *model + "` does not exist.", "model");
}

std::string openai_server::impl::render_chat(const ojson& messages, const ojson& tools, bool add_generation_prompt,
                                             bool continue_final_message, const ojson& kwargs) {
    if (templates.empty())
        throw api_error(400, "this model has no chat template (tokenizer_config.json has no chat_template); "
                             "start the server with --chat-template FILE or use /v1/completions");
    std::string source = pick_chat_template(m.templates, "", !tools.is_null()), name;
    for (const auto& [n, src] : m.templates)
        if (src == source) name = n;
    chat_template_inputs in;
    in.messages = messages;
    in.tools = tools;
    in.add_generation_prompt = add_generation_prompt;
    in.bos_token = m.bos_token;
    in.eos_token = m.eos_token;
    in.kwargs = kwargs;
    std::string text;
    try {
        text = templates.at(name)->render(in);
    } catch (const error& e) {
        throw api_error(400, std::string("chat template: ") + e.what(), "messages");
    }
    if (continue_final_message) {  // end the prompt right after the final message's content
        const std::string& last = messages.back()["content"].get_ref<const std::string&>();
        size_t at = last.empty() ? std::string::npos : text.rfind(last);
        if (at == std::string::npos)
            throw api_error(400, "continue_final_message: the final message's content does not appear in the rendered prompt",
                            "continue_final_message");
        text.resize(at + last.size());
    }
    return text;
}

void openai_server::impl::track(const std::string& id) {
    std::lock_guard<std::mutex> lk(mu);
    in_flight.insert(id);
}

void openai_server::impl::untrack(const std::string& id) {
    {
        std::lock_guard<std::mutex> lk(mu);
        in_flight.erase(id);
    }
    cv.notify_all();
}

void openai_server::impl::handle_tokenize(const httplib::Request& req, httplib::Response& res) {
    ojson body = parse_json_body(req.body);
    if (body.contains("model") && body["model"].is_string()) check_model(body["model"].get<std::string>());
    std::string text;
    bool add_special;
    if (body.contains("messages")) {
        chat_request r = parse_chat_request(body);
        text = render_chat(r.messages, r.tools, r.add_generation_prompt, r.continue_final_message, r.chat_template_kwargs);
        add_special = r.add_special_tokens.value_or(false);
    } else {
        if (!body.contains("prompt") || !body["prompt"].is_string())
            throw api_error(400, "/tokenize needs 'prompt' (a string) or 'messages'", "prompt");
        text = body["prompt"].get<std::string>();
        add_special = request_bool(body, "add_special_tokens").value_or(true);
    }
    std::vector<int32_t> ids = m.tok->encode(text, add_special);
    ojson out = {{"count", ids.size()}, {"max_model_len", engine.max_model_len()}, {"tokens", ids}, {"token_strs", nullptr}};
    if (request_bool(body, "return_token_strs").value_or(false)) {
        out["token_strs"] = ojson::array();
        for (int32_t id : ids) out["token_strs"].push_back(m.tok->id_to_token(id));
    }
    res.set_content(dump_json(out), "application/json");
}

void openai_server::impl::handle_detokenize(const httplib::Request& req, httplib::Response& res) {
    ojson body = parse_json_body(req.body);
    if (body.contains("model") && body["model"].is_string()) check_model(body["model"].get<std::string>());
    if (!body.contains("tokens") || !body["tokens"].is_array()) throw api_error(400, "'tokens' must be a list of token ids", "tokens");
    std::vector<int32_t> ids;
    for (const auto& t : body["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= m.tok->n_vocab())
            throw api_error(400, strfmt("'tokens' must hold token ids in [0, %d)", m.tok->n_vocab()), "tokens");
        ids.push_back(int32_t(t.get<int64_t>()));
    }
    res.set_content(dump_json(ojson{{"prompt", m.tok->decode(ids, false)}}), "application/json");
}

void openai_server::impl::setup_routes() {
    using httplib::Request;
    using httplib::Response;
    auto wrap = [this](void (impl::*fn)(const Request&, Response&)) {
        return [this, fn](const Request& req, Response& res) { guarded(req, res, [&](const Request& q, Response& r) { (this->*fn)(q, r); }); };
    };
    http.set_pre_routing_handler([this](const Request& req, Response& res) {
        // CORS preflights are answered before the API key check (browsers send no credentials there)
        const std::string origin = req.get_header_value("Origin");
        const std::string request_method = req.get_header_value("Access-Control-Request-Method");
        if (is_cors_preflight(req.method, origin, request_method)) {
            cors_preflight p = cors_preflight_response(cfg.cors, origin, request_method,
                                                       req.get_header_value("Access-Control-Request-Headers"));
            res.status = p.status;
            for (const auto& h : p.headers) res.set_header(h.first.c_str(), h.second);
            res.set_content(p.body, "text/plain; charset=utf-8");
            return httplib::Server::HandlerResponse::Handled;
        }
        // cpp-httplib applies the body limit (413) to Content-Length only: a chunked body would be read
        // whole, however large (a 200-MB one took 5 GB). Refused before the body is read.
        if (req.has_header("Transfer-Encoding") &&
            req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos) {
            send_error(res, 411, "chunked request bodies are not accepted: send the body with a Content-Length");
            res.set_header("Connection", "close");
            return httplib::Server::HandlerResponse::Handled;
        }
        if (!cfg.api_key.empty() && path_needs_auth(req.path) &&
            !bearer_matches(req.get_header_value("Authorization"), cfg.api_key)) {
            send_error(res, 401, "Unauthorized");
            return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
    http.set_error_handler([this](const Request& req, Response& res) {
        if (!res.body.empty() || res.is_chunked_content_provider_) return;
        if (res.status == 404) res.set_content("{\"detail\":\"Not Found\"}", "application/json");
        else if (res.status == 413) send_error(res, 413, strfmt("the request body exceeds %zu bytes", cfg.max_body_bytes));
        else send_error(res, res.status, strfmt("HTTP %d", res.status));
    });
    http.set_exception_handler([this](const Request&, Response& res, std::exception_ptr) {
        send_error(res, 500, "internal error");
    });
    http.set_post_routing_handler([this](const Request& req, Response& res) {  // every response, errors too
        for (const auto& h : cors_response_headers(cfg.cors, req.get_header_value("Origin")))
            if (!res.has_header(h.first.c_str())) res.set_header(h.first.c_str(), h.second);
    });
    http.set_logger([this](const Request&, const Response& res) { metrics.count_http(res.status); });
    auto health = [this](const Request&, Response& res) { res.status = shutting_down || !engine.running() ? 503 : 200; };
    http.Get("/health", health);
    http.Get("/ping", health);
    http.Post("/ping", health);
    http.Get("/version", [](const Request&, Response& res) { res.set_content("{\"version\":\"0.1.0\"}", "application/json"); });
    http.Get("/v1/models", [this](const Request&, Response& res) {
        res.set_content(dump_json(models_json(cfg.served_model_names, cfg.model_root, engine.max_model_len(), started_at)),
                        "application/json");
    });
    http.Get("/metrics", [this](const Request&, Response& res) {
        res.set_content(metrics.render(engine.stats(), model_name()), "text/plain; version=0.0.4; charset=utf-8");
    });
    http.Post("/v1/chat/completions", wrap(&impl::handle_chat));
    http.Post("/v1/completions", wrap(&impl::handle_completion));
    http.Post("/tokenize", wrap(&impl::handle_tokenize));
    http.Post("/detokenize", wrap(&impl::handle_detokenize));
    // another method on a POST route: 405 with Allow, as FastAPI (not 404)
    auto not_allowed = [](const Request&, Response& res) {
        res.status = 405;
        res.set_header("Allow", "POST");
        res.set_content("{\"detail\":\"Method Not Allowed\"}", "application/json");
    };
    for (const char* path : {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"}) {
        http.Get(path, not_allowed);
        http.Put(path, not_allowed);
        http.Delete(path, not_allowed);
    }
}

openai_server::openai_server(loaded_model& m, llm_engine& e, server_config cfg)
    : impl_(std::make_unique<impl>(m, e, std::move(cfg))) {
    impl& s = *impl_;
    int n_threads = s.cfg.n_http_threads > 0 ? s.cfg.n_http_threads : std::max(64, e.config().max_num_seqs + 32);
    // n_threads kept, up to 4096 while connections wait for one (server/elastic_pool.h)
    s.http.new_task_queue = [n_threads] {
        return new elastic_pool(size_t(n_threads), std::max<size_t>(size_t(n_threads), 4096));
    };
    s.http.set_payload_max_length(s.cfg.max_body_bytes);
    s.http.set_tcp_nodelay(true);  // one SSE event per packet, no Nagle delay
    s.http.set_keep_alive_max_count(1000);
    s.http.set_read_timeout(30, 0);
    s.http.set_write_timeout(30, 0);
    s.setup_routes();
}

openai_server::~openai_server() = default;

int openai_server::bind() {
    impl& s = *impl_;
    int port = s.cfg.port;
    if (port == 0) {
        port = s.http.bind_to_any_port(s.cfg.host);
        TETRA_CHECK(port > 0, "server: cannot bind %s on any port", s.cfg.host.c_str());
    } else {
        TETRA_CHECK(s.http.bind_to_port(s.cfg.host, port), "server: cannot bind %s:%d (in use, or not an address of this host)",
                    s.cfg.host.c_str(), port);
    }
    return port;
}

void openai_server::run() { impl_->http.listen_after_bind(); }

size_t openai_server::in_flight() const {
    std::lock_guard<std::mutex> lk(impl_->mu);
    return impl_->in_flight.size();
}

void openai_server::shutdown() {
    impl& s = *impl_;
    bool again = s.shutting_down.exchange(true);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(again ? 0.0 : s.cfg.shutdown_grace_s);
    std::vector<std::string> left;
    {
        std::unique_lock<std::mutex> lk(s.mu);
        s.cv.wait_until(lk, deadline, [&] { return s.in_flight.empty(); });
        left.assign(s.in_flight.begin(), s.in_flight.end());
    }
    if (!left.empty()) TETRA_LOG_WARN("server: aborting %zu in-flight requests", left.size());
    for (const auto& id : left) s.engine.abort(id);
    {  // aborted streams still write their error event and [DONE]
        std::unique_lock<std::mutex> lk(s.mu);
        s.cv.wait_for(lk, std::chrono::seconds(5), [&] { return s.in_flight.empty(); });
    }
    s.http.stop();
}

}  // namespace tetra
