// llm_engine on the CPU backend with a tiny random-weight Llama (2 layers, n_embd 64, seeded bf16
// weights) and the llama3-trained test tokenizer. The oracle is the single-sequence `generator`
// (its own KV pool, one sequence at a time, unchunked prefill): every request's tokens and text
// must equal what the generator produces for it alone, however the engine batches, chunks,
// preempts, caches or forks. Every test also checks that no KV block leaks.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "backend/backend.h"
#include "engine/generator.h"
#include "engine/llm_engine.h"
#include "engine/loaded_model.h"

namespace tetra {
namespace {

const std::string tok_dir = std::string(TETRA_SOURCE_DIR) + "/tests/data/tokenizer/llama3-trained";
constexpr int64_t k_max_tokens = 256;  // model rows per forward

void add_random(model_weights& w, std::mt19937& rng, const std::string& name, std::vector<int64_t> shape, float a,
                float center = 0.0f) {
    tensor t = tensor::alloc(dtype::BF16, shape);
    std::uniform_real_distribution<float> d(center - a, center + a);
    for (int64_t i = 0; i < t.numel(); ++i) t.ptr<uint16_t>()[i] = f32_to_bf16(d(rng));
    w.tensors[name] = t;
}

// A LlamaForCausalLM with seeded uniform weights (scale 1/sqrt(n_in) so activations stay O(1)).
std::unique_ptr<loaded_model> make_tiny_llama() {
    auto m = std::make_unique<loaded_model>();
    m->tok = tokenizer::load(tok_dir + "/tokenizer.json", tok_dir + "/tokenizer_config.json");
    const int64_t n_vocab = m->tok->n_vocab(), n_embd = 64, n_ff = 128, n_layer = 2;
    std::string cfg = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": )" + std::to_string(n_vocab) + R"(, "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";
    m->config = parse_model_config(cfg, "<tiny random llama>");
    m->weights.dir = "<tiny random llama>";
    m->weights.format = "dense";
    std::mt19937 rng(20240611);
    auto& w = m->weights;
    add_random(w, rng, "model.embed_tokens.weight", {n_vocab, n_embd}, 1.0f);
    const float s_embd = 1.0f / std::sqrt(float(n_embd)), s_ff = 1.0f / std::sqrt(float(n_ff));
    for (int64_t il = 0; il < n_layer; ++il) {
        std::string p = "model.layers." + std::to_string(il) + ".";
        add_random(w, rng, p + "input_layernorm.weight", {n_embd}, 0.2f, 1.0f);
        add_random(w, rng, p + "post_attention_layernorm.weight", {n_embd}, 0.2f, 1.0f);
        add_random(w, rng, p + "self_attn.q_proj.weight", {64, n_embd}, 2 * s_embd);
        add_random(w, rng, p + "self_attn.k_proj.weight", {32, n_embd}, 2 * s_embd);
        add_random(w, rng, p + "self_attn.v_proj.weight", {32, n_embd}, s_embd);
        add_random(w, rng, p + "self_attn.o_proj.weight", {n_embd, 64}, s_embd);
        add_random(w, rng, p + "mlp.gate_proj.weight", {n_ff, n_embd}, s_embd);
        add_random(w, rng, p + "mlp.up_proj.weight", {n_ff, n_embd}, s_embd);
        add_random(w, rng, p + "mlp.down_proj.weight", {n_embd, n_ff}, s_ff);
    }
    add_random(w, rng, "model.norm.weight", {n_embd}, 0.2f, 1.0f);
    add_random(w, rng, "lm_head.weight", {n_vocab, n_embd}, 4 * s_embd);
    m->be = make_cpu_backend();
    model_options mo;
    mo.max_tokens = k_max_tokens;
    m->model = create_model(m->config, m->weights, *m->be, mo);
    m->max_model_len = 256;
    return m;
}

loaded_model& tiny() {
    static std::unique_ptr<loaded_model> m = make_tiny_llama();
    return *m;
}

std::vector<int32_t> random_prompt(int n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> d(0, 1394);  // model vocab of the tokenizer (no added tokens)
    std::vector<int32_t> p(size_t(n), 0);
    for (auto& t : p) t = d(rng);
    return p;
}

sampling_params greedy(int max_tokens) {
    sampling_params p;
    p.temperature = 0.0f;
    p.max_tokens = max_tokens;
    return p;
}

// The oracle: the request alone in the single-sequence generator. It shares the model (and its
// activation buffers) with the engine: call it only while no engine thread runs.
generation_result reference(const std::vector<int32_t>& prompt, const sampling_params& p, int64_t max_model_len = 256) {
    loaded_model& m = tiny();
    generator g(*m.model, *m.be, *m.tok, max_model_len);
    return g.generate(prompt, p);
}

struct result {
    std::vector<std::vector<int32_t>> tokens;  // per sample index
    std::vector<std::string> text;
    std::vector<request_output> last;  // the finishing output per sample index
    int n_outputs = 0;
};

result collect(request_stream& st, int n = 1) {
    result r;
    r.tokens.resize(size_t(n));
    r.text.resize(size_t(n));
    r.last.resize(size_t(n));
    request_output o;
    while (st.next(o, 60.0)) {
        ++r.n_outputs;
        EXPECT_GE(o.index, 0);
        EXPECT_LT(o.index, n);
        auto& t = r.tokens[size_t(o.index)];
        t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        r.text[size_t(o.index)] += o.new_text;
        if (o.finished) r.last[size_t(o.index)] = o;
    }
    EXPECT_TRUE(st.done()) << "request " << st.request_id() << " timed out";
    return r;
}

void expect_no_leak(const llm_engine& e) {
    engine_stats s = e.stats();
    EXPECT_EQ(s.num_blocks_free, s.num_blocks_total);
    EXPECT_EQ(s.num_running, 0);
    EXPECT_EQ(s.num_waiting, 0);
    EXPECT_EQ(s.num_requests, 0);
}

engine_request make_req(const std::string& id, std::vector<int32_t> prompt, sampling_params p, int n = 1) {
    engine_request r;
    r.request_id = id;
    r.prompt = std::move(prompt);
    r.params = std::move(p);
    r.n = n;
    return r;
}

struct batch_case {
    std::vector<int> lens{5, 17, 33, 1, 48, 16, 9, 70};
    std::vector<int> max_tokens{12, 7, 20, 3, 15, 9, 11, 6};
};

// Runs the 8 requests of batch_case in one engine and compares each with the generator alone.
void run_batch_vs_alone(const engine_config& cfg, bool threaded, int64_t* steps = nullptr) {
    batch_case bc;
    std::vector<generation_result> refs;
    for (size_t i = 0; i < bc.lens.size(); ++i)
        refs.push_back(reference(random_prompt(bc.lens[i], uint32_t(i)), greedy(bc.max_tokens[i])));
    llm_engine eng(tiny(), cfg);
    std::vector<std::shared_ptr<request_stream>> streams;
    for (size_t i = 0; i < bc.lens.size(); ++i)
        streams.push_back(eng.add_request(make_req("r" + std::to_string(i), random_prompt(bc.lens[i], uint32_t(i)),
                                                   greedy(bc.max_tokens[i]))));
    if (threaded) eng.start();
    else
        while (eng.has_work()) ASSERT_TRUE(eng.step());
    int64_t prompt_total = 0, gen_total = 0;
    for (size_t i = 0; i < bc.lens.size(); ++i) {
        result r = collect(*streams[i]);
        const generation_result& ref = refs[i];
        EXPECT_EQ(r.tokens[0], ref.tokens) << "request " << i;
        EXPECT_EQ(r.text[0], ref.text) << "request " << i;
        EXPECT_STREQ(r.last[0].finish_reason(), "length");
        EXPECT_EQ(r.last[0].n_prompt_tokens, bc.lens[i]);
        EXPECT_EQ(r.last[0].n_output_tokens, bc.max_tokens[i]);
        EXPECT_GT(r.last[0].first_token_time, 0);
        EXPECT_GE(r.last[0].first_token_time, r.last[0].first_scheduled_time);
        EXPECT_GE(r.last[0].first_scheduled_time, r.last[0].arrival_time);
        prompt_total += bc.lens[i];
        gen_total += bc.max_tokens[i];
    }
    eng.shutdown(true);
    engine_stats s = eng.stats();
    EXPECT_EQ(s.prompt_tokens_total, prompt_total);
    EXPECT_EQ(s.generation_tokens_total, gen_total);
    EXPECT_EQ(s.finished_length, 8);
    if (steps) *steps = s.num_steps;
    expect_no_leak(eng);
}

TEST(llm_engine, batched_greedy_equals_alone) {
    int64_t steps = 0;
    run_batch_vs_alone(engine_config{}, true, &steps);
    // All 8 were queued before the thread started: one step prefills them all (199 tokens <= 256),
    // then every step decodes the whole batch, so the longest request (20 tokens) sets the count.
    EXPECT_EQ(steps, 20);
}

// --enforce-eager reaches the runner: no graph replay; the default replays them (where the backend
// has graphs), and the tokens are the same either way.
TEST(llm_engine, enforce_eager_turns_decode_graphs_off) {
    engine_config eager;
    eager.enforce_eager = true;
    llm_engine a(tiny(), eager), b(tiny(), engine_config{});
    EXPECT_FALSE(a.decode_graphs());
    EXPECT_TRUE(b.decode_graphs());
    auto sa = a.add_request(make_req("eager", random_prompt(21, 3), greedy(8)));
    while (a.has_work()) ASSERT_TRUE(a.step());
    EXPECT_EQ(collect(*sa).tokens[0], reference(random_prompt(21, 3), greedy(8)).tokens);
}

TEST(llm_engine, one_request_alone_in_the_engine_equals_the_generator) {
    llm_engine eng(tiny(), engine_config{});
    auto st = eng.add_request(make_req("solo", random_prompt(33, 2), greedy(20)));
    while (eng.has_work()) ASSERT_TRUE(eng.step());  // synchronous: no engine thread
    result r = collect(*st);
    EXPECT_EQ(r.tokens[0], reference(random_prompt(33, 2), greedy(20)).tokens);
    expect_no_leak(eng);
}

TEST(llm_engine, chunked_prefill_equals_unchunked) {
    engine_config cfg;
    cfg.max_num_batched_tokens = 7;  // a 70-token prompt takes 10 steps
    run_batch_vs_alone(cfg, false);
}

TEST(llm_engine, preemption_under_a_tiny_kv_pool_gives_the_same_tokens) {
    for (bool caching : {false, true}) {
        SCOPED_TRACE(caching ? "prefix caching on" : "prefix caching off");
        engine_config cfg;
        cfg.max_model_len = 64;            // 4 blocks per sequence at most
        cfg.num_kv_blocks_override = 6;    // 4 sequences growing to 4 blocks each cannot fit
        cfg.enable_prefix_caching = caching;
        std::vector<int> lens{20, 25, 30, 18}, maxt{30, 25, 20, 40};
        std::vector<generation_result> refs;
        for (size_t i = 0; i < lens.size(); ++i)
            refs.push_back(reference(random_prompt(lens[i], 100 + uint32_t(i)), greedy(maxt[i]), 64));
        llm_engine eng(tiny(), cfg);
        std::vector<std::shared_ptr<request_stream>> st;
        for (size_t i = 0; i < lens.size(); ++i)
            st.push_back(eng.add_request(make_req("p" + std::to_string(i), random_prompt(lens[i], 100 + uint32_t(i)),
                                                  greedy(maxt[i]))));
        eng.start();
        for (size_t i = 0; i < lens.size(); ++i) {
            result r = collect(*st[i]);
            const generation_result& ref = refs[i];
            EXPECT_EQ(r.tokens[0], ref.tokens) << "request " << i;
            EXPECT_EQ(r.text[0], ref.text) << "request " << i;
        }
        eng.shutdown(true);
        EXPECT_GT(eng.stats().num_preemptions, 0);
        expect_no_leak(eng);
    }
}

TEST(llm_engine, prefix_cache_hit_reports_cached_tokens_and_same_output) {
    std::vector<int32_t> prompt = random_prompt(53, 7);  // 3 full blocks + 5 tokens
    std::vector<int32_t> other = prompt;  // the same 3-block prefix, a different tail
    other.resize(48);
    for (int32_t t : random_prompt(9, 8)) other.push_back(t);
    auto ref_prompt = reference(prompt, greedy(10)), ref_other = reference(other, greedy(10));
    llm_engine eng(tiny(), engine_config{});
    eng.start();
    result a = collect(*eng.add_request(make_req("a", prompt, greedy(10))));
    EXPECT_EQ(a.last[0].n_cached_tokens, 0);
    result b = collect(*eng.add_request(make_req("b", prompt, greedy(10))));
    EXPECT_EQ(b.last[0].n_cached_tokens, 48);
    EXPECT_EQ(b.tokens[0], a.tokens[0]);
    EXPECT_EQ(a.tokens[0], ref_prompt.tokens);
    // The prefix is reused, the output follows the new tail.
    result c = collect(*eng.add_request(make_req("c", other, greedy(10))));
    EXPECT_EQ(c.last[0].n_cached_tokens, 48);
    EXPECT_EQ(c.tokens[0], ref_other.tokens);
    eng.shutdown(true);
    engine_stats s = eng.stats();
    EXPECT_EQ(s.prefix_cache_queries, 53 + 53 + 57);
    EXPECT_EQ(s.prefix_cache_hits, 48 + 48);
    expect_no_leak(eng);
}

TEST(llm_engine, prefix_caching_off_never_reports_cached_tokens) {
    engine_config cfg;
    cfg.enable_prefix_caching = false;
    llm_engine eng(tiny(), cfg);
    eng.start();
    std::vector<int32_t> prompt = random_prompt(53, 7);
    result a = collect(*eng.add_request(make_req("a", prompt, greedy(4))));
    result b = collect(*eng.add_request(make_req("b", prompt, greedy(4))));
    EXPECT_EQ(b.last[0].n_cached_tokens, 0);
    EXPECT_EQ(b.tokens[0], a.tokens[0]);
    eng.shutdown(true);
    EXPECT_EQ(eng.stats().prefix_cache_hits, 0);
    expect_no_leak(eng);
}

TEST(llm_engine, abort_frees_blocks_at_once) {
    llm_engine eng(tiny(), engine_config{});
    auto st = eng.add_request(make_req("long", random_prompt(40, 3), greedy(200)));
    ASSERT_TRUE(eng.step());  // prefill + first token
    ASSERT_TRUE(eng.step());
    engine_stats before = eng.stats();
    EXPECT_EQ(before.num_blocks_total - before.num_blocks_free, 3);  // 42 tokens' KV
    EXPECT_TRUE(eng.abort("long"));
    engine_stats after = eng.stats();
    EXPECT_EQ(after.num_blocks_free, after.num_blocks_total);
    EXPECT_EQ(after.finished_abort, 1);
    result r = collect(*st);
    EXPECT_EQ(r.tokens[0].size(), 2u);
    EXPECT_STREQ(r.last[0].finish_reason(), "abort");
    EXPECT_FALSE(eng.abort("long"));
    EXPECT_FALSE(eng.has_work());
    expect_no_leak(eng);
}

TEST(llm_engine, abort_of_a_queued_request_and_from_a_callback) {
    llm_engine eng(tiny(), engine_config{});
    auto queued = eng.add_request(make_req("queued", random_prompt(10, 4), greedy(5)));
    EXPECT_TRUE(eng.abort("queued"));  // never scheduled
    result q = collect(*queued);
    EXPECT_TRUE(q.tokens[0].empty());
    EXPECT_STREQ(q.last[0].finish_reason(), "abort");

    // The callback aborts after the 3rd token; the abort applies at the next step.
    std::atomic<int> seen{0};
    std::atomic<bool> aborted{false};
    engine_request req = make_req("cb", random_prompt(10, 5), greedy(100));
    req.on_output = [&](const request_output& o) {
        if (o.finished) {
            aborted = o.aborted;
            return;
        }
        if (++seen == 3) eng.abort("cb");
    };
    auto st = eng.add_request(std::move(req));
    eng.start();
    request_output o;
    EXPECT_FALSE(st->next(o, 60.0));  // a callback request queues nothing
    EXPECT_TRUE(st->done());
    EXPECT_EQ(seen.load(), 3);
    EXPECT_TRUE(aborted.load());
    eng.shutdown(true);
    expect_no_leak(eng);
}

TEST(llm_engine, n_parallel_samples_fork_and_match_seeded_references) {
    for (bool caching : {true, false}) {
        SCOPED_TRACE(caching ? "prefix caching on" : "prefix caching off");
        engine_config cfg;
        cfg.enable_prefix_caching = caching;
        sampling_params p;
        p.temperature = 0.9f;
        p.top_p = 0.95f;
        p.seed = 1234;
        p.max_tokens = 10;
        std::vector<int32_t> prompt = random_prompt(37, 9);
        std::vector<generation_result> refs;
        for (int i = 0; i < 3; ++i) {
            sampling_params pi = p;
            pi.seed = 1234 + uint64_t(i);
            refs.push_back(reference(prompt, pi));
        }
        llm_engine eng(tiny(), cfg);
        auto st = eng.add_request(make_req("fork", prompt, p, 3));
        eng.start();
        result r = collect(*st, 3);
        for (int i = 0; i < 3; ++i) {
            const generation_result& ref = refs[size_t(i)];
            EXPECT_EQ(r.tokens[size_t(i)], ref.tokens) << "sample " << i;
            EXPECT_EQ(r.text[size_t(i)], ref.text) << "sample " << i;
            EXPECT_EQ(r.last[size_t(i)].index, i);
        }
        eng.shutdown(true);  // stats are published at the end of a step, after its outputs
        EXPECT_EQ(eng.stats().generation_tokens_total, 3 * 10);
        expect_no_leak(eng);
    }
}

TEST(llm_engine, prompt_too_long_is_rejected_with_vllm_wording) {
    engine_config cfg;
    cfg.max_model_len = 64;
    llm_engine eng(tiny(), cfg);
    try {
        eng.add_request(make_req("long", random_prompt(64, 1), greedy(5)));
        FAIL() << "a 64-token prompt with max_model_len 64 was accepted";
    } catch (const sampling_param_error& e) {
        EXPECT_EQ(e.param, "input_tokens");
        EXPECT_NE(std::string(e.what()).find("maximum context length is 64 tokens"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("64 input tokens"), std::string::npos) << e.what();
    }
    // 63 tokens fit; the context limit ends it after one token.
    auto st = eng.add_request(make_req("fits", random_prompt(63, 1), greedy(5)));
    while (eng.has_work()) ASSERT_TRUE(eng.step());
    result r = collect(*st);
    EXPECT_EQ(r.tokens[0].size(), 1u);
    EXPECT_STREQ(r.last[0].finish_reason(), "length");
    expect_no_leak(eng);
}

TEST(llm_engine, bad_requests_are_rejected) {
    llm_engine eng(tiny(), engine_config{});
    auto expect_param = [&](engine_request r, const char* param) {
        try {
            eng.add_request(std::move(r));
            ADD_FAILURE() << "accepted; expected an error on " << param;
        } catch (const sampling_param_error& e) {
            EXPECT_EQ(e.param, param) << e.what();
        }
    };
    expect_param(make_req("", {1, 2}, greedy(3)), "request_id");
    expect_param(make_req("a", {}, greedy(3)), "prompt");
    expect_param(make_req("a", {1, 99999}, greedy(3)), "prompt");
    expect_param(make_req("a", {1, 2}, greedy(3), 0), "n");
    sampling_params bad = greedy(3);
    bad.top_p = 0.0f;
    expect_param(make_req("a", {1, 2}, bad), "top_p");
    auto st = eng.add_request(make_req("dup", {1, 2}, greedy(3)));
    expect_param(make_req("dup", {1, 2}, greedy(3)), "request_id");
    eng.shutdown(false);  // aborts "dup"
    EXPECT_STREQ(collect(*st).last[0].finish_reason(), "abort");
    EXPECT_THROW(eng.add_request(make_req("late", {1, 2}, greedy(3))), engine_stopped_error);
    expect_no_leak(eng);
}

TEST(llm_engine, a_request_whose_sampling_throws_fails_alone) {
    auto good_prompt = random_prompt(21, 11);
    generation_result ref = reference(good_prompt, greedy(8));
    llm_engine eng(tiny(), engine_config{});
    // Every id is a stop token and min_tokens suppresses them all: the sampler has nothing left.
    sampling_params bad = greedy(5);
    bad.min_tokens = 1;
    for (int32_t id = 0; id < int32_t(tiny().config.n_vocab); ++id) bad.stop_token_ids.push_back(id);
    auto st_bad = eng.add_request(make_req("bad", random_prompt(12, 10), bad));
    auto st_good = eng.add_request(make_req("good", good_prompt, greedy(8)));
    eng.start();
    result rb = collect(*st_bad), rg = collect(*st_good);
    EXPECT_STREQ(rb.last[0].finish_reason(), "error");
    EXPECT_NE(rb.last[0].error.find("sampling failed"), std::string::npos) << rb.last[0].error;
    EXPECT_EQ(rg.tokens[0], ref.tokens);
    // The engine keeps serving.
    result again = collect(*eng.add_request(make_req("after", good_prompt, greedy(8))));
    EXPECT_EQ(again.tokens[0], rg.tokens[0]);
    eng.shutdown(true);
    EXPECT_EQ(eng.stats().finished_error, 1);
    expect_no_leak(eng);
}

TEST(llm_engine, stop_strings_logprobs_and_streamed_text_match_the_generator) {
    auto prompt = random_prompt(15, 12);
    generation_result full = reference(prompt, greedy(24));
    ASSERT_GE(full.text.size(), 12u);
    sampling_params p = greedy(24);
    p.stop = {full.text.substr(6, 3)};  // a stop string the greedy text is known to contain
    p.logprobs = 2;
    generation_result ref = reference(prompt, p);
    llm_engine eng(tiny(), engine_config{});
    eng.start();
    result r = collect(*eng.add_request(make_req("s", prompt, p)));
    EXPECT_EQ(r.tokens[0], ref.tokens);
    EXPECT_EQ(r.text[0], ref.text);
    EXPECT_STREQ(r.last[0].finish_reason(), "stop");
    ASSERT_TRUE(r.last[0].status.stop_str.has_value());
    EXPECT_EQ(*r.last[0].status.stop_str, p.stop[0]);
    EXPECT_LT(r.tokens[0].size(), 24u);
    // Logprobs: one entry per token, the chosen token first in rank under greedy.
    request_output o;
    auto st = eng.add_request(make_req("lp", prompt, p));
    size_t n_lp = 0;
    while (st->next(o, 60.0)) {
        ASSERT_EQ(o.logprobs.size(), o.new_token_ids.size());
        for (size_t i = 0; i < o.logprobs.size(); ++i, ++n_lp) {
            EXPECT_EQ(o.logprobs[i].token, o.new_token_ids[i]);
            EXPECT_EQ(o.logprobs[i].rank, 1);
            ASSERT_EQ(o.logprobs[i].top_logprobs.size(), 2u);
            EXPECT_EQ(o.logprobs[i].top_logprobs[0].id, o.new_token_ids[i]);
        }
    }
    EXPECT_EQ(n_lp, ref.tokens.size());
    eng.shutdown(true);
    expect_no_leak(eng);
}

TEST(llm_engine, concurrent_clients_with_aborts) {
    // 4 client threads x 4 requests while the engine runs; every third request is aborted by its
    // client after its first output. The rest must equal the generator; nothing may leak.
    constexpr int n_threads = 4, per_thread = 4;
    auto prompt_of = [](int k) { return random_prompt(3 + 11 * (k % 7), 500 + uint32_t(k)); };
    auto max_of = [](int k) { return 4 + k % 9; };
    std::vector<generation_result> refs;
    for (int k = 0; k < n_threads * per_thread; ++k) refs.push_back(reference(prompt_of(k), greedy(max_of(k))));
    engine_config cfg;
    cfg.max_num_batched_tokens = 32;
    llm_engine eng(tiny(), cfg);
    eng.start();
    std::vector<result> got(size_t(n_threads * per_thread));
    std::vector<std::thread> clients;
    for (int t = 0; t < n_threads; ++t)
        clients.emplace_back([&, t] {
            std::vector<std::shared_ptr<request_stream>> st;
            for (int j = 0; j < per_thread; ++j) {
                int k = t * per_thread + j;
                st.push_back(eng.add_request(make_req("c" + std::to_string(k), prompt_of(k), greedy(max_of(k)))));
            }
            for (int j = 0; j < per_thread; ++j) {
                int k = t * per_thread + j;
                request_output first;
                bool has_first = k % 3 == 0 && st[size_t(j)]->next(first, 60.0);
                if (has_first) eng.abort("c" + std::to_string(k));
                got[size_t(k)] = collect(*st[size_t(j)]);
                if (has_first) {
                    auto& t = got[size_t(k)].tokens[0];
                    t.insert(t.begin(), first.new_token_ids.begin(), first.new_token_ids.end());
                }
            }
        });
    for (auto& c : clients) c.join();
    eng.shutdown(true);
    for (int k = 0; k < n_threads * per_thread; ++k) {
        const result& r = got[size_t(k)];
        if (k % 3 == 0) {  // aborted, unless it had already finished; its tokens are a prefix
            const char* why = r.last[0].finish_reason();
            ASSERT_NE(why, nullptr);
            EXPECT_TRUE(std::string(why) == "abort" || std::string(why) == "length") << why;
            const auto& ref = refs[size_t(k)].tokens;
            ASSERT_LE(r.tokens[0].size(), ref.size());
            EXPECT_TRUE(std::equal(r.tokens[0].begin(), r.tokens[0].end(), ref.begin())) << "request " << k;
            continue;
        }
        EXPECT_EQ(r.tokens[0], refs[size_t(k)].tokens) << "request " << k;
        EXPECT_EQ(r.text[0], refs[size_t(k)].text) << "request " << k;
    }
    expect_no_leak(eng);
}

TEST(llm_engine, config_errors_name_the_field) {
    engine_config cfg;
    cfg.max_num_batched_tokens = k_max_tokens + 1;
    EXPECT_THROW({ llm_engine e(tiny(), cfg); }, error);
    cfg = {};
    cfg.max_model_len = 64;
    cfg.num_kv_blocks_override = 3;  // 64 tokens need 4 blocks
    try {
        llm_engine e(tiny(), cfg);
        FAIL() << "a KV pool smaller than one sequence was accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("max_model_len"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace tetra
