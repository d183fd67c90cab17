// llm_engine: the serving engine behind `tetra serve` — continuous batching (scheduler.h) over a
// paged KV cache with prefix caching (block_manager.h), driven by one background engine thread.
// Thread-safe API: add_request / abort / stats may be called from any thread (the HTTP server's);
// outputs arrive per sequence per step on the request's stream (or callback).
// Invariant: only the engine thread (or the caller of step() when no thread runs) touches the
// model, the KV cache and the scheduler. Not here: tokenization, chat templates, HTTP.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "engine/generation_config.h"
#include "engine/sampler.h"
#include "engine/stop.h"

namespace tetra {

struct loaded_model;
class scheduler;
class model_runner;
struct kv_cache;
struct engine_state;

struct engine_config {
    int32_t max_num_seqs = 256;          // sequences per step (vLLM --max-num-seqs)
    // Tokens per step, decode + prefill chunks (--max-num-batched-tokens). 0: min(2048, the
    // model's max_tokens); must not exceed the model's max_tokens (its activation rows).
    int64_t max_num_batched_tokens = 0;
    int64_t max_model_len = 0;           // 0: the loaded model's max_model_len
    int block_size = 16;                 // tokens per KV block (--block-size)
    bool enable_prefix_caching = true;   // --enable-prefix-caching (on, as vLLM V1)
    // KV pool size. CPU: kv_cache_memory bytes (0: enough for max_num_seqs full-length sequences,
    // capped at 1 GiB). GPU: kv_cache_memory if given, else what is left of gpu_memory_utilization
    // × device memory once weights and activation buffers are resident (minus a 512 MiB reserve).
    int64_t kv_cache_memory = 0;
    float gpu_memory_utilization = 0.9f;
    int64_t num_kv_blocks_override = 0;  // > 0: exactly this many KV blocks (tests, benchmarks)
    // Sample on the device (backend/sampling.h: only token ids and guard statistics leave it) when
    // the backend is not the CPU; steps with a logprobs row always sample on the host. The tokens
    // are the same either way (bit-exact algorithm); false forces the host path (tests).
    bool device_sampling = true;
    // --enforce-eager (vLLM): decode steps launch their kernels one by one, no CUDA graph replay
    // (debugging, profiling). No effect on the CPU backend, which has no graphs.
    bool enforce_eager = false;
};

// What the engine reports for one sequence after a step (or on finish / abort / error).
struct request_output {
    std::string request_id;
    int32_t index = 0;                     // which of the request's n samples (0..n-1)
    std::vector<int32_t> new_token_ids;    // tokens sampled since the previous output
    std::string new_text;                  // newly safe text (detokenized, stop strings applied)
    std::vector<sample_result> logprobs;   // one per new token when params.logprobs is set
    // Finish: `finished` is set on the last output of this sequence. status.reason is STOP/LENGTH
    // with stop_token / stop_str as vLLM's stop_reason; aborted or error (message) otherwise.
    bool finished = false;
    stop_status status;
    bool aborted = false;
    std::string error;                     // non-empty: the request failed inside the engine
    // "stop" | "length" | "abort" | "error" once finished, else nullptr.
    const char* finish_reason() const;
    // Token counts (cumulative for this sequence).
    int64_t n_prompt_tokens = 0;
    int64_t n_cached_tokens = 0;           // prompt tokens served from the prefix cache (first schedule)
    int64_t n_output_tokens = 0;
    // Timings, llm_engine::now() seconds (monotonic). 0 = not yet.
    double arrival_time = 0;               // engine_request::arrival_time
    double first_scheduled_time = 0;       // first step that computed this sequence (queue time end)
    double first_token_time = 0;           // first output token sampled (TTFT end)
    double time = 0;                       // when this output was produced (ITL: differences)
    int64_t n_preemptions = 0;             // times this sequence was preempted (recomputed)
};

struct engine_request {
    std::string request_id;        // unique among requests in flight
    std::vector<int32_t> prompt;   // token ids, 1 <= size < max_model_len, each < n_vocab
    sampling_params params;        // validated by add_request; eos_token_ids as the caller set them
    int32_t n = 1;                 // parallel samples: seeds seed+i (or independent random seeds)
    double arrival_time = 0;       // 0: now (set it at HTTP arrival so TTFT includes tokenization)
    // Optional: called on the engine thread with each output; must be quick. It may call abort()
    // (applied at the next step), nothing else of the engine. Unset: outputs queue on the stream.
    std::function<void(const request_output&)> on_output;
};

// The consumer side of one request: outputs of all n sequences, in production order.
class request_stream {
  public:
    explicit request_stream(std::string id) : id_(std::move(id)) {}
    const std::string& request_id() const { return id_; }
    // Waits up to timeout_s (< 0: forever) for the next output. false: timed out, or done() and
    // every output was taken.
    bool next(request_output& out, double timeout_s = -1);
    // Every sequence of the request finished (and its last output was queued or delivered).
    bool done() const;

  private:
    friend struct engine_state;
    void push(request_output o, bool use_queue, bool last);
    std::string id_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<request_output> q_;
    bool done_ = false;
};

// add_request refuses a request it cannot run: the client's fault (HTTP 400), as a
// sampling_param_error naming the field ("input_tokens" for the context length).
// engine_stopped_error: the engine no longer accepts requests (HTTP 503).
struct engine_stopped_error : error {
    using error::error;
};

// vLLM 0.10's wording (serving.md §1.9; clients match "maximum context length").
std::string context_length_message(int64_t max_model_len, int64_t n_prompt, int64_t n_output);

struct engine_stats {
    int64_t num_running = 0, num_waiting = 0;           // sequences
    int64_t num_requests = 0;                           // requests in flight
    int64_t num_blocks_total = 0, num_blocks_free = 0;  // free includes evictable cached blocks
    double kv_usage = 0;                                // 1 - free/total (vllm:kv_cache_usage_perc)
    int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;  // tokens, cumulative
    int64_t prompt_tokens_total = 0, generation_tokens_total = 0;  // computed prompt tokens, sampled
    int64_t num_preemptions = 0;
    int64_t finished_stop = 0, finished_length = 0, finished_abort = 0, finished_error = 0;  // sequences
    int64_t num_steps = 0;
    int64_t device_sampled_tokens = 0;  // tokens drawn by the device sampling path (the rest: host)
};

class llm_engine {
  public:
    // The model must outlive the engine. Allocates the KV cache. Throws tetra::error for a bad
    // config (naming the field, expected vs actual).
    llm_engine(loaded_model& m, const engine_config& cfg = {});
    ~llm_engine();  // shutdown(false)
    llm_engine(const llm_engine&) = delete;
    llm_engine& operator=(const llm_engine&) = delete;

    // Validates and queues; returns at once. Throws sampling_param_error / engine_stopped_error.
    std::shared_ptr<request_stream> add_request(engine_request req);
    // Ends every sequence of the request (output with aborted = true) and frees its KV blocks:
    // when abort returns the blocks are free. false if no such request is in flight.
    bool abort(const std::string& request_id);

    // The background engine thread: steps while there is work, sleeps otherwise.
    void start();
    // Stop accepting requests; finish in-flight requests (finish_in_flight) or abort them; join.
    void shutdown(bool finish_in_flight = false);
    bool running() const;

    // One scheduler step on the calling thread (only while the engine thread is not running):
    // admits queued requests, runs one forward, samples, emits outputs. false: nothing to do.
    bool step();
    bool has_work() const;

    // A consistent snapshot, any thread; published at the end of each step (after its outputs).
    engine_stats stats() const;
    const engine_config& config() const { return cfg_; }  // defaults resolved
    // Whether decode steps replay CUDA graphs where the backend has them (off with enforce_eager).
    bool decode_graphs() const;
    int64_t max_model_len() const { return cfg_.max_model_len; }
    static double now();  // steady clock, seconds

  private:
    friend struct engine_state;
    void loop();
    bool step_locked();   // caller holds step_mu_
    void drain_inbox();   // caller holds step_mu_: admits queued requests, applies deferred aborts
    void publish_stats();  // caller holds step_mu_
    loaded_model& model_;
    engine_config cfg_;
    std::unique_ptr<kv_cache> kv_;
    std::unique_ptr<model_runner> runner_;
    std::unique_ptr<engine_state> state_;  // blocks, requests, sampler, counters
    std::unique_ptr<scheduler> sched_;
    // Lock order: step_mu_ (held for a whole step, and by abort) before inbox_mu_ (the queues
    // below, the flags and stats_; never held for long).
    mutable std::mutex step_mu_, inbox_mu_;
    std::condition_variable cv_;
    std::deque<std::pair<engine_request, std::shared_ptr<request_stream>>> inbox_;
    std::unordered_set<std::string> in_flight_ids_;  // accepted, not yet done (duplicate check)
    std::vector<std::string> abort_inbox_;  // aborts asked from inside a step (callbacks)
    bool accepting_ = true, stop_thread_ = false, thread_running_ = false;
    std::thread thread_;
    std::atomic<int> abort_waiters_{0};  // the engine thread lets a waiting abort() in
    std::atomic<std::thread::id> stepping_thread_{};
    engine_stats stats_;
};

}  // namespace tetra
