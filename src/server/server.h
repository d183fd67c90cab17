// server/server: `tetra serve` — the OpenAI-compatible HTTP server (cpp-httplib) over llm_engine:
// /v1/chat/completions, /v1/completions, /v1/models, /health, /ping, /metrics, /tokenize,
// /detokenize, /version, with vLLM's wire format (serving.md §1). Every request is handled inside
// its own try/catch: a bad request is a 4xx, an engine failure a 5xx, the server never dies on one.
// A client that disconnects has its request aborted (KV blocks freed), streaming or not.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/cors.h"

namespace tetra {

struct loaded_model;
class llm_engine;

struct server_config {
    std::string host = "127.0.0.1";
    int port = 8000;                              // 0: any free port (bind() returns it)
    std::vector<std::string> served_model_names;  // first one is echoed in responses
    std::string model_root;                       // /v1/models "root"
    std::string api_key;                          // empty: no auth
    std::string reasoning_parser;                 // "" | qwen3 | deepseek_r1
    std::string tool_call_parser;                 // "" | hermes | llama3_json
    bool enable_auto_tool_choice = false;
    std::optional<uint64_t> seed;                 // --seed: seeds requests that have none
    size_t max_body_bytes = 32u << 20;
    int n_http_threads = 0;                       // 0: max(64, max_num_seqs + 32)
    double shutdown_grace_s = 30;                 // in-flight requests get this long on SIGTERM
    cors_config cors;                             // --allowed-origins ... (default: any origin, as vLLM)
};

class openai_server {
public:
    // The model and engine must outlive the server; the engine must be started.
    openai_server(loaded_model& m, llm_engine& e, server_config cfg);
    ~openai_server();
    openai_server(const openai_server&) = delete;
    openai_server& operator=(const openai_server&) = delete;

    // Binds host:port; returns the bound port. Throws tetra::error when it cannot.
    int bind();
    // Serves until stop(); returns once every connection handler has returned.
    void run();
    // Graceful: refuse new generation requests (503), let in-flight ones finish for up to
    // shutdown_grace_s, abort the rest, then stop the listener. Blocks; call from any thread but
    // the HTTP workers (e.g. a signal-waiting thread). A second call aborts at once.
    void shutdown();
    size_t in_flight() const;

    struct impl;

private:
    std::unique_ptr<impl> impl_;
};

}  // namespace tetra
