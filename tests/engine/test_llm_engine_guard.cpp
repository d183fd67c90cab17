// The output guard in the serving engine (llm_engine, what `tetra serve` runs): a request whose
// logits are broken fails with the guard's message (the server answers 500 with it), the other
// requests go on, and the trip is counted for tetra:output_guard_trips_total. The broken models are
// built so the fault is certain: an all-zero lm_head (every logit 0: row-identical) and a lm_head
// that makes id 0 the argmax of every step (a zero streak), on a tiny random-weight Llama.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "backend/backend.h"
#include "engine/llm_engine.h"
#include "engine/loaded_model.h"
#include "engine/output_guard.h"

namespace tetra {
namespace {

const std::string tok_dir = std::string(TETRA_SOURCE_DIR) + "/tests/data/tokenizer/llama3-trained";

enum class lm_head_kind { RANDOM, ZERO, ARGMAX_ZERO };

// 1 layer, n_embd 64; embedding column 0 is +100 for every token, so the final hidden state's
// element 0 is positive at every position (the layer adds O(1)).
std::unique_ptr<loaded_model> make_model(lm_head_kind head) {
    auto m = std::make_unique<loaded_model>();
    m->tok = tokenizer::load(tok_dir + "/tokenizer.json", tok_dir + "/tokenizer_config.json");
    const int64_t n_vocab = m->tok->n_vocab(), n_embd = 64, n_ff = 128;
    std::string cfg = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "vocab_size": )" + std::to_string(n_vocab) + R"(, "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";
    m->config = parse_model_config(cfg, "<guard llama>");
    m->weights.dir = "<guard llama>";
    m->weights.format = "dense";
    std::mt19937 rng(7);
    auto add = [&](const std::string& name, std::vector<int64_t> shape, float a, float center,
                   const std::function<float(int64_t, int64_t)>& at = {}) {
        tensor t = tensor::alloc(dtype::BF16, shape);
        std::uniform_real_distribution<float> d(center - a, center + a);
        int64_t cols = shape.back();
        for (int64_t i = 0; i < t.numel(); ++i)
            t.ptr<uint16_t>()[i] = f32_to_bf16(at ? at(i / cols, i % cols) : d(rng));
        m->weights.tensors[name] = t;
    };
    const float s = 1.0f / 8.0f;
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    add("model.embed_tokens.weight", {n_vocab, n_embd}, 0, 0, [&](int64_t, int64_t c) { return c == 0 ? 100.0f : u(rng); });
    add("model.layers.0.input_layernorm.weight", {n_embd}, 0.2f, 1.0f);
    add("model.layers.0.post_attention_layernorm.weight", {n_embd}, 0.2f, 1.0f);
    add("model.layers.0.self_attn.q_proj.weight", {64, n_embd}, 2 * s, 0);
    add("model.layers.0.self_attn.k_proj.weight", {32, n_embd}, 2 * s, 0);
    add("model.layers.0.self_attn.v_proj.weight", {32, n_embd}, s, 0);
    add("model.layers.0.self_attn.o_proj.weight", {n_embd, 64}, s, 0);
    add("model.layers.0.mlp.gate_proj.weight", {n_ff, n_embd}, s, 0);
    add("model.layers.0.mlp.up_proj.weight", {n_ff, n_embd}, s, 0);
    add("model.layers.0.mlp.down_proj.weight", {n_embd, n_ff}, 1.0f / std::sqrt(float(n_ff)), 0);
    add("model.norm.weight", {n_embd}, 0.2f, 1.0f);
    if (head == lm_head_kind::RANDOM) add("lm_head.weight", {n_vocab, n_embd}, 4 * s, 0);
    else if (head == lm_head_kind::ZERO) add("lm_head.weight", {n_vocab, n_embd}, 0, 0, [](int64_t, int64_t) { return 0.0f; });
    else  // logit 0 = hidden[0] > 0, every other logit 0: id 0 wins every step, rows not constant
        add("lm_head.weight", {n_vocab, n_embd}, 0, 0, [](int64_t r, int64_t c) { return r == 0 && c == 0 ? 1.0f : 0.0f; });
    m->be = make_cpu_backend();
    model_options mo;
    mo.max_tokens = 64;
    m->model = create_model(m->config, m->weights, *m->be, mo);
    m->max_model_len = 128;
    return m;
}

// Runs one greedy request to its end; returns its last output.
request_output run_one(llm_engine& eng, const std::string& id, int max_tokens) {
    engine_request r;
    r.request_id = id;
    r.prompt = {11, 22, 33, 44, 55};
    r.params.temperature = 0;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    auto stream = eng.add_request(r);
    while (eng.step()) {
    }
    request_output o, last;
    while (stream->next(o, 0)) last = o;
    return last;
}

TEST(llm_engine_guard, row_identical_logits_fail_the_request_and_count) {
    auto m = make_model(lm_head_kind::ZERO);
    llm_engine eng(*m);
    uint64_t before = output_guard::trips(guard_trip::ROW_IDENTICAL);
    request_output o = run_one(eng, "a", 8);
    EXPECT_TRUE(o.finished);
    EXPECT_STREQ(o.finish_reason(), "error");
    EXPECT_NE(o.error.find("output guard (row_identical): degenerate output at prefill: row 0: all "), std::string::npos)
        << o.error;
    EXPECT_EQ(o.n_output_tokens, 0);  // stopped before a token was sampled
    EXPECT_EQ(output_guard::trips(guard_trip::ROW_IDENTICAL), before + 1);
    EXPECT_EQ(eng.stats().finished_error, 1);
}

TEST(llm_engine_guard, zero_streak_fails_the_request_after_33_tokens) {
    auto m = make_model(lm_head_kind::ARGMAX_ZERO);
    llm_engine eng(*m);
    uint64_t before = output_guard::trips(guard_trip::ZERO_STREAK);
    request_output o = run_one(eng, "z", 64);
    EXPECT_STREQ(o.finish_reason(), "error");
    EXPECT_NE(o.error.find("output guard (zero_streak): degenerate output at decode step 33: 33 consecutive id-0 "
                           "tokens (limit 32)"), std::string::npos) << o.error;
    EXPECT_EQ(output_guard::trips(guard_trip::ZERO_STREAK), before + 1);
}

TEST(llm_engine_guard, healthy_model_is_not_stopped) {
    auto m = make_model(lm_head_kind::RANDOM);
    llm_engine eng(*m);
    uint64_t before = output_guard::trips_total();
    request_output o = run_one(eng, "ok", 16);
    EXPECT_STREQ(o.finish_reason(), "length") << o.error;
    EXPECT_EQ(o.n_output_tokens, 16);
    EXPECT_EQ(output_guard::trips_total(), before);
}

}  // namespace
}  // namespace tetra
