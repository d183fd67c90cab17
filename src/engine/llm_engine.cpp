// llm_engine: requests -> sequences -> scheduler steps -> one forward -> per-row sampling ->
// outputs. Failures inside a step end only the requests they touch (forward: the step's batch;
// sampling: that request) with an error output; the engine goes on.
#include "engine/llm_engine.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "core/dtype.h"
#include "core/log.h"
#include "engine/block_manager.h"
#include "engine/loaded_model.h"
#include "engine/output_guard.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"

namespace tetra {

// ---- request_stream ----

bool request_stream::next(request_output& out, double timeout_s) {
    std::unique_lock<std::mutex> lk(mu_);
    auto ready = [this] { return !q_.empty() || done_; };
    if (timeout_s < 0) cv_.wait(lk, ready);
    else cv_.wait_for(lk, std::chrono::duration<double>(timeout_s), ready);
    if (q_.empty()) return false;
    out = std::move(q_.front());
    q_.pop_front();
    return true;
}

bool request_stream::done() const {
    std::lock_guard<std::mutex> lk(mu_);
    return done_;
}

void request_stream::push(request_output o, bool use_queue, bool last) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (use_queue) q_.push_back(std::move(o));
        if (last) done_ = true;
    }
    cv_.notify_all();
}

const char* request_output::finish_reason() const {
    if (!finished) return nullptr;
    if (!error.empty()) return "error";
    if (aborted) return "abort";
    return finish_reason_name(status.reason);
}

std::string context_length_message(int64_t max_model_len, int64_t n_prompt, int64_t n_output) {
    return strfmt("This model's maximum context length is %lld tokens. However, you requested %lld output tokens "
                  "and your prompt contains at least %lld input tokens, for a total of at least %lld tokens. "
                  "Please reduce the length of the input prompt or the number of requested output tokens.",
                  (long long)max_model_len, (long long)n_output, (long long)n_prompt, (long long)(n_prompt + n_output));
}

double llm_engine::now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- engine_state: requests and their sequences (touched only under step_mu_) ----

struct request_state {
    engine_request req;
    std::shared_ptr<request_stream> stream;
    std::vector<std::unique_ptr<sequence>> seqs;
    int n_live = 0;
};

struct engine_state {
    llm_engine& eng;
    std::unique_ptr<block_manager> blocks;
    std::unordered_map<std::string, std::unique_ptr<request_state>> requests;
    std::vector<std::string> done;  // finished requests, erased at the end of the step
    sampler smp;
    std::vector<float> row;
    // The device path's per-step buffers: one sample_row per batch row, their entries, the results.
    std::vector<sample_row> rows;
    std::vector<sample_entry> entries;
    std::vector<int32_t> ids;
    std::vector<guard_row_stats> stats;
    int64_t next_seq_id = 0;
    int64_t prompt_tokens_total = 0, generation_tokens_total = 0, num_steps = 0, device_sampled_tokens = 0;
    int64_t finished_stop = 0, finished_length = 0, finished_abort = 0, finished_error = 0;

    explicit engine_state(llm_engine& e) : eng(e) {}

    request_output make_output(const sequence& s) const {
        const request_state& r = *static_cast<const request_state*>(s.owner);
        request_output o;
        o.request_id = r.req.request_id;
        o.index = s.index;
        o.n_prompt_tokens = s.num_prompt_tokens;
        o.n_cached_tokens = std::max<int64_t>(0, s.num_cached_prompt_tokens);
        o.n_output_tokens = s.num_output_tokens();
        o.arrival_time = s.arrival_time;
        o.first_scheduled_time = s.first_scheduled_time;
        o.first_token_time = s.first_token_time;
        o.time = llm_engine::now();
        o.n_preemptions = s.num_preemptions;
        return o;
    }

    void emit(request_state& r, const request_output& o, bool last) {
        if (r.req.on_output) {
            try {
                r.req.on_output(o);
            } catch (const std::exception& e) {
                TETRA_LOG_WARN("engine: output callback of request '%s' threw: %s", r.req.request_id.c_str(), e.what());
            }
        }
        if (last) {  // the id is free again before the stream says done
            std::lock_guard<std::mutex> lk(eng.inbox_mu_);
            eng.in_flight_ids_.erase(r.req.request_id);
        }
        r.stream->push(o, !r.req.on_output, last);
        if (last) done.push_back(r.req.request_id);
    }

    // Ends sequence s with output o (finished set here); counts it by reason.
    void finish_seq(sequence& s, request_output& o) {
        request_state& r = *static_cast<request_state*>(s.owner);
        eng.sched_->finish(&s);
        o.finished = true;
        if (!o.error.empty()) ++finished_error;
        else if (o.aborted) ++finished_abort;
        else if (o.status.reason == finish_reason::LENGTH) ++finished_length;
        else ++finished_stop;
        --r.n_live;
        emit(r, o, r.n_live == 0);
    }

    // Every live sequence of r ends: aborted, or with `error`.
    void end_request(request_state& r, bool aborted, const std::string& error) {
        for (auto& s : r.seqs) {
            if (s->finished()) continue;
            request_output o = make_output(*s);
            o.aborted = aborted;
            o.error = error;
            finish_seq(*s, o);
        }
    }

    void admit(engine_request&& req, std::shared_ptr<request_stream> stream) {
        auto r = std::make_unique<request_state>();
        r->stream = std::move(stream);
        const sampling_params& p = req.params;
        uint64_t seed = resolve_seed(p);
        const tokenizer* tok = eng.model_.tok.get();
        for (int32_t i = 0; i < req.n; ++i) {
            auto s = std::make_unique<sequence>(next_seq_id++, req.prompt);
            s->index = i;
            s->owner = r.get();
            // n > 1: seeds seed+i for a seeded request, independent draws otherwise.
            s->seed = i == 0 ? seed : (p.seed ? seed + uint64_t(i) : resolve_seed(p));
            s->history.add_prompt(req.prompt);
            if (tok) s->detok.emplace(*tok, true);
            s->stops.emplace(p.stop, p.include_stop_str_in_output);
            s->arrival_time = req.arrival_time;
            if (i > 0) {
                s->fork_parent = r->seqs[0].get();
                r->seqs[0]->fork_children.push_back(s.get());
            }
            r->seqs.push_back(std::move(s));
        }
        r->n_live = req.n;
        r->req = std::move(req);
        for (auto& s : r->seqs) eng.sched_->add(s.get());
        std::string id = r->req.request_id;
        requests[id] = std::move(r);
    }

    // rows/entries for this step's batch (one row per scheduled sequence, in batch order); rows
    // that sample nothing this step (a prefill chunk before the last) get a greedy row.
    void pack_rows(const std::vector<scheduled_seq>& batch) {
        rows.assign(batch.size(), sample_row{});
        entries.clear();
        for (size_t i = 0; i < batch.size(); ++i) {
            const sequence& s = *batch[i].seq;
            if (!batch[i].sample || s.finished()) {
                rows[i].temperature = 0.0f;
                continue;
            }
            const sampling_params& p = static_cast<const request_state*>(s.owner)->req.params;
            pack_sample_row(p, s.history, s.seed, s.history.n_output, rows[i], entries);
        }
    }

    void erase_done() {
        for (const std::string& id : done) requests.erase(id);
        done.clear();
    }

    // The output guard (docs/no-silent-garbage.md §2) on one logits row (its verdict, from the row
    // on the host or from its device statistics) or on the token sampled from it (token >= 0):
    // "" or the message that fails the request (server: HTTP 500); every trip counts in
    // tetra:output_guard_trips_total.
    std::string guard_trip_message(const sequence& s, guard_verdict v, int32_t token) {
        const output_guard_config cfg;
        if (token == 0) {  // trailing id-0 run of the output, this token included
            int64_t run = 0;
            for (int64_t i = s.num_tokens() - 1; i >= s.num_prompt_tokens && s.token_ids[size_t(i)] == 0; --i) ++run;
            if (run > cfg.max_zero_streak) {
                v.trip = guard_trip::ZERO_STREAK;
                v.detail = strfmt("%lld consecutive id-0 tokens (limit %lld)", (long long)run, (long long)cfg.max_zero_streak);
            }
        }
        if (v.ok()) return "";
        output_guard::count_trip(v.trip);
        const int64_t n_out = s.num_output_tokens();
        return strfmt("output guard (%s): %s at %s: %s. A kernel is producing wrong results on this device; the request "
                      "was stopped instead of returning garbage", guard_trip_name(v.trip),
                      v.trip == guard_trip::NON_FINITE ? "non-finite logits" : "degenerate output",
                      n_out == 0 ? "prefill" : strfmt("decode step %lld", (long long)n_out).c_str(), v.detail.c_str());
    }

    // Ends s's request when the guard trips on `v` / `token`; false then.
    bool guard_ok(sequence& s, const guard_verdict& v, int32_t token) {
        std::string msg = guard_trip_message(s, v, token);
        if (msg.empty()) return true;
        request_state& r = *static_cast<request_state*>(s.owner);
        TETRA_LOG_ERROR("engine: request '%s': %s", r.req.request_id.c_str(), msg.c_str());
        end_request(r, false, msg);
        return false;
    }

    void sampling_failed(sequence& s, const std::string& what) {
        request_state& r = *static_cast<request_state*>(s.owner);
        TETRA_LOG_WARN("engine: request '%s' failed in sampling: %s", r.req.request_id.c_str(), what.c_str());
        end_request(r, false, strfmt("sampling failed: %s", what.c_str()));
    }

    // Samples s's next token from its logits row (host) and emits the output.
    void sample_one(sequence& s, const float* logits, int32_t n_vocab) {
        const sampling_params& p = static_cast<request_state*>(s.owner)->req.params;
        if (!guard_ok(s, output_guard::check(logits, n_vocab, 1, output_guard_config{}), -1)) return;
        row.assign(logits, logits + n_vocab);
        sample_result sr;
        try {
            sr = smp.sample(row.data(), n_vocab, p, s.history, s.seed, s.history.n_output);
        } catch (const std::exception& e) {
            sampling_failed(s, e.what());
            return;
        }
        accept(s, std::move(sr));
    }

    // The device path's result for s: the token sample_rows drew (or its error code) and the guard
    // statistics of s's logits row; the same checks, messages and output as sample_one.
    void sample_one_device(sequence& s, int32_t token, const guard_row_stats& st, int32_t n_vocab) {
        const sampling_params& p = static_cast<request_state*>(s.owner)->req.params;
        if (!guard_ok(s, output_guard::check_stats(&st, n_vocab, 1, output_guard_config{}), -1)) return;
        if (token < 0) {  // sampler.cpp's messages
            sampling_failed(s, token == int32_t(sample_error::TEMP_OVERFLOW)
                                   ? strfmt("sampler: logits / temperature overflow f32 (temperature %g)",
                                            double(p.temperature))
                                   : strfmt("sampler: %s (n_vocab %d)", sample_error_message(token), n_vocab));
            return;
        }
        sample_result sr;
        sr.token = token;
        ++device_sampled_tokens;
        accept(s, std::move(sr));
    }

    // Appends the sampled token to s, runs the zero-streak guard and the stop checks, emits.
    void accept(sequence& s, sample_result sr) {
        request_state& r = *static_cast<request_state*>(s.owner);
        const sampling_params& p = r.req.params;
        const double t = llm_engine::now();
        if (s.first_token_time == 0) {
            s.first_token_time = t;
            prompt_tokens_total += s.num_prompt_tokens;
        }
        s.append_token(sr.token);
        s.history.add_output(sr.token);
        ++generation_tokens_total;
        if (!guard_ok(s, guard_verdict{}, sr.token)) return;
        request_output o = make_output(s);
        o.new_token_ids.push_back(sr.token);
        if (p.logprobs) o.logprobs.push_back(std::move(sr));
        stop_status st = check_stop_token(p, o.new_token_ids[0], s.history.n_output, s.num_tokens(), eng.cfg_.max_model_len);
        auto feed = [&](const std::string& text, bool allow) {
            auto m = s.stops->feed(text, allow);
            o.new_text += m.text;
            if (m.stop) {
                st = stop_status{};
                st.reason = finish_reason::STOP;
                st.stop_str = m.stop;
            }
        };
        if (s.detok && !st.drop_last_token_text) feed(s.detok->push(o.new_token_ids[0]), s.history.n_output >= p.min_tokens);
        if (st.finished() && s.detok && !s.stops->stopped()) {
            feed(s.detok->finish(), true);
            if (!s.stops->stopped()) o.new_text += s.stops->flush();
        }
        o.status = st;
        if (st.finished()) finish_seq(s, o);
        else emit(r, o, false);
    }
};

// ---- llm_engine ----

llm_engine::llm_engine(loaded_model& m, const engine_config& cfg)
    : model_(m), cfg_(cfg), state_(std::make_unique<engine_state>(*this)) {
    TETRA_CHECK(m.model && m.be, "llm_engine: the loaded model has no model or backend");
    causal_lm& lm = *m.model;
    const model_config& c = lm.config();
    if (cfg_.max_model_len == 0) cfg_.max_model_len = m.max_model_len > 0 ? m.max_model_len : c.max_position;
    TETRA_CHECK(cfg_.max_model_len >= 2 && cfg_.max_model_len <= c.max_position,
                "engine: max_model_len must be in [2, max_position_embeddings=%lld], got %lld", (long long)c.max_position,
                (long long)cfg_.max_model_len);
    if (cfg_.max_num_batched_tokens == 0) cfg_.max_num_batched_tokens = std::min<int64_t>(2048, lm.max_tokens());
    TETRA_CHECK(cfg_.max_num_batched_tokens >= 1 && cfg_.max_num_batched_tokens <= lm.max_tokens(),
                "engine: max_num_batched_tokens must be in [1, %lld] (the model was prepared for %lld tokens per step), "
                "got %lld", (long long)lm.max_tokens(), (long long)lm.max_tokens(), (long long)cfg_.max_num_batched_tokens);
    TETRA_CHECK(cfg_.max_num_seqs >= 1, "engine: max_num_seqs must be >= 1, got %d", cfg_.max_num_seqs);
    TETRA_CHECK(cfg_.block_size >= 1 && cfg_.block_size <= 1024, "engine: block_size must be in [1, 1024], got %d",
                cfg_.block_size);
    const int64_t bs = cfg_.block_size;
    const int64_t block_bytes = 2 * c.n_layer * bs * c.n_head_kv * c.head_dim * int64_t(dtype_size(lm.act_type()));
    const int64_t need = (cfg_.max_model_len + bs - 1) / bs;
    int64_t n_blocks = cfg_.num_kv_blocks_override;
    if (n_blocks <= 0) {
        int64_t bytes = cfg_.kv_cache_memory;
        if (bytes <= 0 && m.be->device().kind != device_kind::CPU) {
            // vLLM's rule: the engine may use gpu_memory_utilization × total; weights and activation
            // buffers are resident already, so the KV cache gets what is left of that share, minus
            // a reserve for scratch (attention partials, dequant tiles) and graphs.
            int64_t free_b = 0, total_b = 0;
            m.be->memory_info(&free_b, &total_b);
            const int64_t reserve = int64_t(512) << 20;
            bytes = free_b - int64_t((1.0 - double(cfg_.gpu_memory_utilization)) * double(total_b)) - reserve;
            TETRA_CHECK(bytes > 0,
                        "engine: no GPU memory left for the KV cache: %.2f GiB free of %.2f GiB, gpu_memory_utilization "
                        "%.2f leaves %.2f GiB after the weights: raise --gpu-memory-utilization or use a smaller model",
                        double(free_b) / (1 << 30), double(total_b) / (1 << 30), double(cfg_.gpu_memory_utilization),
                        double(bytes) / (1 << 30));
        }
        if (bytes <= 0) bytes = std::min<int64_t>(int64_t(1) << 30, int64_t(cfg_.max_num_seqs) * need * block_bytes);
        n_blocks = bytes / block_bytes;
    }
    TETRA_CHECK(n_blocks >= need,
                "engine: the KV cache holds %lld blocks of %lld tokens (%.1f MiB); one sequence of max_model_len %lld "
                "tokens needs %lld: raise the KV cache memory or lower max_model_len",
                (long long)n_blocks, (long long)bs, double(n_blocks * block_bytes) / (1 << 20),
                (long long)cfg_.max_model_len, (long long)need);
    TETRA_CHECK(n_blocks <= INT32_MAX / bs, "engine: %lld KV blocks of %lld tokens exceed the int32 slot ids of the "
                "slot mapping (%d slots at most)", (long long)n_blocks, (long long)bs, INT32_MAX);
    kv_ = std::make_unique<kv_cache>(kv_cache::create(*m.be, c, n_blocks, int(bs), lm.act_type()));
    runner_ = std::make_unique<model_runner>(lm, *m.be, *kv_);
    runner_->set_graphs(!cfg_.enforce_eager);
    state_->blocks = std::make_unique<block_manager>(n_blocks, int(bs), cfg_.enable_prefix_caching);
    sched_ = std::make_unique<scheduler>(scheduler_config{cfg_.max_num_seqs, cfg_.max_num_batched_tokens}, *state_->blocks);
    std::lock_guard<std::mutex> lk(step_mu_);
    publish_stats();
}

llm_engine::~llm_engine() {
    try {
        shutdown(false);
    } catch (const std::exception& e) {
        TETRA_LOG_ERROR("engine: shutdown failed: %s", e.what());
    }
}

std::shared_ptr<request_stream> llm_engine::add_request(engine_request req) {
    auto bad = [](const char* param, const std::string& msg) { throw sampling_param_error(param, msg); };
    if (req.request_id.empty()) bad("request_id", "request_id must not be empty");
    if (req.n < 1 || req.n > cfg_.max_num_seqs)
        bad("n", strfmt("n must be in [1, %d] (max_num_seqs), got %d", cfg_.max_num_seqs, req.n));
    if (req.prompt.empty()) bad("prompt", "the prompt is empty");
    const int64_t n_vocab = model_.model->config().n_vocab, n_prompt = int64_t(req.prompt.size());
    for (size_t i = 0; i < req.prompt.size(); ++i)
        if (req.prompt[i] < 0 || req.prompt[i] >= n_vocab)
            bad("prompt", strfmt("prompt token %d at index %zu is out of range [0, %lld)", req.prompt[i], i, (long long)n_vocab));
    if (n_prompt >= cfg_.max_model_len)  // at least one output token must fit
        bad("input_tokens", context_length_message(cfg_.max_model_len, n_prompt, std::max(1, req.params.max_tokens)));
    req.params.validate();
    if (req.arrival_time <= 0) req.arrival_time = now();
    auto stream = std::make_shared<request_stream>(req.request_id);
    {
        std::lock_guard<std::mutex> lk(inbox_mu_);
        if (!accepting_) throw engine_stopped_error("the engine is shutting down and accepts no new requests");
        if (in_flight_ids_.count(req.request_id))
            bad("request_id", "a request with id '" + req.request_id + "' is already in flight");
        in_flight_ids_.insert(req.request_id);
        inbox_.emplace_back(std::move(req), stream);
    }
    cv_.notify_all();
    return stream;
}

void llm_engine::drain_inbox() {
    std::deque<std::pair<engine_request, std::shared_ptr<request_stream>>> in;
    std::vector<std::string> aborts;
    {
        std::lock_guard<std::mutex> lk(inbox_mu_);
        in.swap(inbox_);
        aborts.swap(abort_inbox_);
    }
    for (auto& [req, stream] : in) state_->admit(std::move(req), std::move(stream));
    for (const std::string& id : aborts) {
        auto it = state_->requests.find(id);
        if (it != state_->requests.end()) state_->end_request(*it->second, true, "");
    }
    state_->erase_done();
}

namespace {
// Marks the thread that holds step_mu_, so an abort() from an output callback is deferred.
struct stepping_guard {
    std::atomic<std::thread::id>& id;
    explicit stepping_guard(std::atomic<std::thread::id>& i) : id(i) { id = std::this_thread::get_id(); }
    ~stepping_guard() { id = std::thread::id(); }
};
}  // namespace

bool llm_engine::abort(const std::string& request_id) {
    if (stepping_thread_.load() == std::this_thread::get_id()) {
        std::lock_guard<std::mutex> lk(inbox_mu_);
        abort_inbox_.push_back(request_id);
        return in_flight_ids_.count(request_id) != 0;
    }
    ++abort_waiters_;
    std::lock_guard<std::mutex> lk(step_mu_);
    --abort_waiters_;
    stepping_guard g(stepping_thread_);
    drain_inbox();
    auto it = state_->requests.find(request_id);
    bool found = it != state_->requests.end();
    if (found) state_->end_request(*it->second, true, "");
    state_->erase_done();
    publish_stats();
    return found;
}

bool llm_engine::step_locked() {
    stepping_guard g(stepping_thread_);
    drain_inbox();
    std::vector<scheduled_seq> batch = sched_->empty() ? std::vector<scheduled_seq>{} : sched_->schedule();
    if (batch.empty()) {
        publish_stats();
        return false;
    }
    const double t = now();
    std::vector<seq_chunk> chunks;
    for (const scheduled_seq& w : batch) {
        if (w.seq->first_scheduled_time == 0) w.seq->first_scheduled_time = t;
        seq_chunk c;
        c.block_table = &w.seq->block_table;
        c.pos0 = w.pos0;
        c.tokens = w.seq->token_ids.data() + w.pos0;
        c.n = w.n_tokens;
        chunks.push_back(c);
    }
    // Device sampling (only ids and guard statistics come back) unless the backend is the CPU or
    // a row of this step asks for logprobs (they need the whole row on the host).
    bool on_device = cfg_.device_sampling && model_.be->device().kind != device_kind::CPU;
    for (const scheduled_seq& w : batch)
        on_device = on_device && !(w.sample && static_cast<request_state*>(w.seq->owner)->req.params.logprobs);
    const std::vector<float>* logits = nullptr;
    try {
        if (on_device) {
            state_->pack_rows(batch);
            runner_->run_sample(chunks, state_->rows, state_->entries, state_->ids, state_->stats);
        } else {
            logits = &runner_->run(chunks);
        }
    } catch (const std::exception& e) {  // the whole batch shared the failed forward
        TETRA_LOG_ERROR("engine: forward step failed for %zu sequences: %s", batch.size(), e.what());
        for (const scheduled_seq& w : batch)
            if (!w.seq->finished())
                state_->end_request(*static_cast<request_state*>(w.seq->owner), false,
                                    strfmt("engine error in the forward step: %s", e.what()));
        state_->erase_done();
        publish_stats();
        return true;
    }
    ++state_->num_steps;
    sched_->postprocess(batch);
    const int32_t n_vocab = int32_t(model_.model->config().n_vocab);
    for (size_t i = 0; i < batch.size(); ++i) {
        sequence& s = *batch[i].seq;
        if (!batch[i].sample || s.finished()) continue;
        if (on_device) state_->sample_one_device(s, state_->ids[i], state_->stats[i], n_vocab);
        else state_->sample_one(s, logits->data() + i * size_t(n_vocab), n_vocab);
    }
    state_->erase_done();
    publish_stats();
    return true;
}

bool llm_engine::step() {
    {
        std::lock_guard<std::mutex> lk(inbox_mu_);
        TETRA_CHECK(!thread_running_, "llm_engine::step: the engine thread is running; step() is for synchronous use");
    }
    std::lock_guard<std::mutex> lk(step_mu_);
    return step_locked();
}

void llm_engine::publish_stats() {
    engine_stats st;
    st.num_running = sched_->num_running();
    st.num_waiting = sched_->num_waiting();
    st.num_requests = int64_t(state_->requests.size());
    const block_manager& b = *state_->blocks;
    st.num_blocks_total = b.n_total();
    st.num_blocks_free = b.n_free();
    st.kv_usage = 1.0 - double(b.n_free()) / double(b.n_total());
    st.prefix_cache_queries = sched_->prefix_cache_queries;
    st.prefix_cache_hits = sched_->prefix_cache_hits;
    st.prompt_tokens_total = state_->prompt_tokens_total;
    st.generation_tokens_total = state_->generation_tokens_total;
    st.num_preemptions = sched_->num_preemptions;
    st.finished_stop = state_->finished_stop;
    st.finished_length = state_->finished_length;
    st.finished_abort = state_->finished_abort;
    st.finished_error = state_->finished_error;
    st.num_steps = state_->num_steps;
    st.device_sampled_tokens = state_->device_sampled_tokens;
    std::lock_guard<std::mutex> lk(inbox_mu_);
    for (const auto& q : inbox_) st.num_waiting += q.first.n;
    st.num_requests += int64_t(inbox_.size());
    stats_ = st;
}

engine_stats llm_engine::stats() const {
    std::lock_guard<std::mutex> lk(inbox_mu_);
    return stats_;
}

bool llm_engine::has_work() const {
    std::lock_guard<std::mutex> lk(inbox_mu_);
    return !inbox_.empty() || !in_flight_ids_.empty();
}

bool llm_engine::running() const {
    std::lock_guard<std::mutex> lk(inbox_mu_);
    return thread_running_;
}

void llm_engine::loop() {
    for (;;) {
        {
            std::lock_guard<std::mutex> lk(inbox_mu_);
            if (stop_thread_) break;
        }
        while (abort_waiters_.load() > 0) std::this_thread::yield();
        bool did = false;
        try {
            std::lock_guard<std::mutex> lk(step_mu_);
            did = step_locked();
        } catch (const std::exception& e) {  // a bug, not a request's fault: log and keep serving
            TETRA_LOG_ERROR("engine: step failed: %s", e.what());
        }
        if (!did) {
            std::unique_lock<std::mutex> lk(inbox_mu_);
            cv_.wait_for(lk, std::chrono::milliseconds(100),
                         [this] { return stop_thread_ || !inbox_.empty() || !abort_inbox_.empty(); });
        }
    }
}

void llm_engine::start() {
    std::lock_guard<std::mutex> lk(inbox_mu_);
    TETRA_CHECK(!thread_running_ && !stop_thread_, "llm_engine::start: already started (or shut down)");
    thread_running_ = true;
    thread_ = std::thread([this] { loop(); });
}

void llm_engine::shutdown(bool finish_in_flight) {
    bool threaded;
    {
        std::lock_guard<std::mutex> lk(inbox_mu_);
        accepting_ = false;
        threaded = thread_running_;
    }
    if (finish_in_flight) {
        if (threaded) {
            while (has_work()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        } else {
            while (has_work() && step()) {
            }
        }
    }
    {
        ++abort_waiters_;
        std::lock_guard<std::mutex> lk(step_mu_);
        --abort_waiters_;
        stepping_guard g(stepping_thread_);
        drain_inbox();
        for (auto& [id, r] : state_->requests) state_->end_request(*r, true, "");
        state_->erase_done();
        publish_stats();
    }
    {
        std::lock_guard<std::mutex> lk(inbox_mu_);
        stop_thread_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    std::lock_guard<std::mutex> lk(inbox_mu_);
    thread_running_ = false;
}

bool llm_engine::decode_graphs() const { return runner_->graphs(); }

}  // namespace tetra
