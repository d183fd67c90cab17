// server/server_impl: the server's private state shared by server.cpp (HTTP setup, small
// endpoints, shutdown) and server_generate.cpp (chat and text completions, streaming).
// Invariant: every generation request in the engine is in `in_flight` until its handler is done.
#pragma once
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "chat/chat_template.h"
#include "engine/llm_engine.h"
#include "engine/loaded_model.h"
#include "server/metrics.h"
#include "server/openai_format.h"
#include "server/server.h"

namespace tetra {

struct openai_server::impl {
    impl(loaded_model& m_, llm_engine& e_, server_config cfg_);

    loaded_model& m;
    llm_engine& engine;
    server_config cfg;
    httplib::Server http;
    server_metrics metrics;
    std::map<std::string, std::unique_ptr<chat_template>> templates;  // parsed once, by name
    std::atomic<bool> shutting_down{false};
    std::atomic<uint64_t> seed_counter{0};
    int64_t started_at = 0;  // unix seconds, /v1/models "created"

    mutable std::mutex mu;
    std::condition_variable cv;
    std::set<std::string> in_flight;  // engine request ids

    void setup_routes();
    // Writes an OpenAI error response.
    void send_error(httplib::Response& res, int status, const std::string& msg,
                    const std::optional<std::string>& param = std::nullopt);
    // Runs fn, mapping exceptions to error responses (the per-request safety net).
    void guarded(const httplib::Request& req, httplib::Response& res,
                 const std::function<void(const httplib::Request&, httplib::Response&)>& fn);
    void check_model(const std::optional<std::string>& model) const;
    const std::string& model_name() const { return cfg.served_model_names.front(); }
    std::string token_text(int32_t id) const { return m.tok->decode({id}, false); }

    // Chat template rendering with tools and kwargs (vLLM's defaults); errors are 400.
    std::string render_chat(const ojson& messages, const ojson& tools, bool add_generation_prompt,
                            bool continue_final_message, const ojson& kwargs);

    void handle_chat(const httplib::Request& req, httplib::Response& res);
    void handle_completion(const httplib::Request& req, httplib::Response& res);
    void handle_tokenize(const httplib::Request& req, httplib::Response& res);
    void handle_detokenize(const httplib::Request& req, httplib::Response& res);

    void track(const std::string& id);
    void untrack(const std::string& id);
};

}  // namespace tetra
