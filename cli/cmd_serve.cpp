// `tetra serve [MODEL]`: the OpenAI-compatible server (docs/server.md). Flags follow `vllm serve`
// where the meaning matches; unknown flags are errors. SIGINT/SIGTERM: refuse new requests, let
// in-flight ones finish (30 s), abort the rest, exit 0; a second signal aborts at once.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <thread>

#include "common.h"
#include "core/log.h"
#include "engine/llm_engine.h"
#include "server/server.h"

namespace tetra {

namespace {

struct serve_flags {
    std::string host = "127.0.0.1";
    int port = 8000;
    std::vector<std::string> served_model_names;
    int max_num_seqs = 256;
    float gpu_memory_utilization = 0.9f;
    std::string kv_cache_memory;
    bool prefix_caching = true;
    std::string api_key;
    int64_t seed = -1;
    std::string reasoning_parser, tool_call_parser;
    bool auto_tool_choice = false;
    std::string kv_cache_dtype = "auto";
    int block_size = 16;
    std::string allowed_origins = "[\"*\"]", allowed_methods = "[\"*\"]", allowed_headers = "[\"*\"]";
    bool allow_credentials = false;
    bool enforce_eager = false, trust_remote_code = false;
    int tensor_parallel_size = 1;
};

// "4G", "512MiB", "1000000" → bytes.
int64_t parse_bytes(const std::string& s) {
    size_t pos = 0;
    double v = 0;
    try {
        v = std::stod(s, &pos);
    } catch (const std::exception&) {
        pos = 0;
    }
    std::string unit = s.substr(pos);
    double mul = 0;
    for (auto [u, m] : std::initializer_list<std::pair<const char*, double>>{
             {"", 1}, {"B", 1}, {"K", 1e3}, {"KB", 1e3}, {"KiB", 1024.0}, {"M", 1e6}, {"MB", 1e6}, {"MiB", 1048576.0},
             {"G", 1e9}, {"GB", 1e9}, {"GiB", 1073741824.0}})
        if (unit == u) mul = m;
    if (pos == 0 || mul == 0 || v <= 0)
        throw cli_error("--kv-cache-memory '" + s + "' is not a size", "give bytes, optionally with a unit: 512MiB, 2G, 1073741824");
    return int64_t(v * mul);
}

void check_flags(const serve_flags& f) {
    if (f.kv_cache_dtype != "auto")
        throw cli_error("--kv-cache-dtype '" + f.kv_cache_dtype + "' is not supported yet", "use --kv-cache-dtype auto");
    if (f.auto_tool_choice && f.tool_call_parser.empty())
        throw cli_error("--enable-auto-tool-choice requires --tool-call-parser", "add --tool-call-parser hermes (Qwen, Hermes) or llama3_json (Llama 3.x)");
    if (f.port < 0 || f.port > 65535) throw cli_error("--port " + std::to_string(f.port) + " is out of range", "use 1..65535 (0: any free port)");
    if (f.tensor_parallel_size != 1)
        throw cli_error("--tensor-parallel-size " + std::to_string(f.tensor_parallel_size) +
                            ": tetra serves a model on one GPU (tensor parallelism is not implemented)",
                        "use --tensor-parallel-size 1 (or leave it out) and a model that fits one GPU");
}

std::string basename_of(std::string p) {
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    size_t s = p.rfind('/');
    return s == std::string::npos ? p : p.substr(s + 1);
}

void serve(const model_flags& mf, const serve_flags& f) {
    check_flags(f);
    // Signals go to one waiting thread: block them before any thread starts (all inherit the mask).
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    ::signal(SIGPIPE, SIG_IGN);

    auto m = mf.load();
    engine_config ec;
    ec.enforce_eager = f.enforce_eager;
    ec.max_num_seqs = f.max_num_seqs;
    ec.max_num_batched_tokens = mf.max_tokens_per_step;
    ec.block_size = f.block_size;
    ec.enable_prefix_caching = f.prefix_caching;
    ec.gpu_memory_utilization = f.gpu_memory_utilization;
    if (!f.kv_cache_memory.empty()) ec.kv_cache_memory = parse_bytes(f.kv_cache_memory);
    llm_engine engine(*m, ec);
    engine.start();

    server_config sc;
    sc.host = f.host;
    sc.port = f.port;
    sc.served_model_names = f.served_model_names;
    if (sc.served_model_names.empty()) sc.served_model_names.push_back(mf.model.empty() ? basename_of(m->dir) : mf.model);
    sc.model_root = m->dir;
    sc.api_key = f.api_key;
    sc.reasoning_parser = f.reasoning_parser;
    sc.tool_call_parser = f.tool_call_parser;
    sc.enable_auto_tool_choice = f.auto_tool_choice;
    if (f.seed >= 0) sc.seed = uint64_t(f.seed);
    sc.cors.origins = parse_cors_list("--allowed-origins", f.allowed_origins);
    sc.cors.methods = parse_cors_list("--allowed-methods", f.allowed_methods);
    sc.cors.headers = parse_cors_list("--allowed-headers", f.allowed_headers);
    sc.cors.credentials = f.allow_credentials;
    openai_server server(*m, engine, sc);
    int port = server.bind();

    std::thread([&server, sigs] {
        for (int n = 0;; ++n) {
            int sig = 0;
            if (sigwait(&sigs, &sig) != 0) continue;
            std::fprintf(stderr, "tetra serve: %s, %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                         n == 0 ? "finishing in-flight requests (signal again to abort them)" : "aborting in-flight requests");
            std::thread([&server] { server.shutdown(); }).detach();
        }
    }).detach();

    const std::string& name = sc.served_model_names.front();
    std::printf("tetra serve: %s on http://%s:%d (OpenAI API under /v1; max_model_len %lld, max_num_seqs %d)\n"
                "try:\n  curl http://%s:%d/v1/chat/completions -H 'Content-Type: application/json'%s \\\n"
                "    -d '{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}]}'\n",
                name.c_str(), f.host.c_str(), port, (long long)engine.max_model_len(), engine.config().max_num_seqs,
                f.host.c_str(), port, f.api_key.empty() ? "" : " -H 'Authorization: Bearer $API_KEY'", name.c_str());
    std::fflush(stdout);
    server.run();
    engine.shutdown(false);
    std::fprintf(stderr, "tetra serve: stopped\n");
}

}  // namespace

void register_serve(CLI::App& app) {
    auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (vLLM flags and wire format)");
    auto mf = std::make_shared<model_flags>();
    mf->max_tokens_per_step = 2048;  // vLLM's API-server default for --max-num-batched-tokens
    auto f = std::make_shared<serve_flags>();
    mf->add(cmd);
    cmd->add_option("--host", f->host, "address to bind (default 127.0.0.1; 0.0.0.0 for all interfaces)");
    cmd->add_option("--port", f->port, "port (default 8000)");
    cmd->add_option("--served-model-name", f->served_model_names, "model names accepted in requests; the first is echoed")->expected(1, 16);
    cmd->add_option("--max-num-seqs", f->max_num_seqs, "maximum sequences per step")->check(CLI::PositiveNumber);
    cmd->add_option("--gpu-memory-utilization", f->gpu_memory_utilization, "fraction of GPU memory for weights, activations and KV cache")
        ->check(CLI::Range(0.01f, 1.0f));
    cmd->add_option("--kv-cache-memory", f->kv_cache_memory, "KV cache size in bytes (units: K M G KiB MiB GiB)");
    cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", f->prefix_caching, "reuse KV blocks of shared prompt prefixes (default on)");
    cmd->add_option("--block-size", f->block_size, "tokens per KV block")->check(CLI::PositiveNumber);
    cmd->add_option("--api-key", f->api_key, "require `Authorization: Bearer KEY` on /v1/*");
    cmd->add_option("--seed", f->seed, "seed for requests that give none (reproducible runs)");
    cmd->add_option("--reasoning-parser", f->reasoning_parser, "split <think> reasoning into message.reasoning")
        ->check(CLI::IsMember({"qwen3", "deepseek_r1"}));
    cmd->add_flag("--enable-auto-tool-choice", f->auto_tool_choice, "parse tool calls from the output (needs --tool-call-parser)");
    cmd->add_option("--tool-call-parser", f->tool_call_parser, "tool call format")->check(CLI::IsMember({"hermes", "llama3_json"}));
    cmd->add_option("--kv-cache-dtype", f->kv_cache_dtype, "KV cache dtype (auto)");
    cmd->add_option("--allowed-origins", f->allowed_origins, "CORS: allowed origins, a JSON list (default [\"*\"])");
    cmd->add_option("--allowed-methods", f->allowed_methods, "CORS: allowed methods, a JSON list (default [\"*\"])");
    cmd->add_option("--allowed-headers", f->allowed_headers, "CORS: allowed headers, a JSON list (default [\"*\"])");
    cmd->add_flag("--allow-credentials", f->allow_credentials, "CORS: allow credentials");
    cmd->add_flag("--enforce-eager", f->enforce_eager, "launch decode kernels one by one: no CUDA graphs (as vLLM)");
    cmd->add_option("--tensor-parallel-size", f->tensor_parallel_size, "GPUs per model: 1 only (tetra serves on one GPU)")
        ->check(CLI::PositiveNumber);
    cmd->add_flag("--trust-remote-code", f->trust_remote_code,
                  "accepted for vLLM command lines; tetra never runs code from a checkpoint");
    cmd->callback([mf, f] { serve(*mf, *f); });
}

}  // namespace tetra
