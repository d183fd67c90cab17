// Fused MoE router (moe.cpp + backend/moe.h moe_router, issue #7): the router matmul and top-k as
// one op change no value on the CPU. One MoE block's output is bit-identical with the fused router
// (moe_layer_weights::fused_router set) and with matmul + moe_route (1, 5 and 16 tokens; f32, bf16
// activations; with and without a shared expert), and the op profile shows which path ran. The
// model leaves it off (slower on the H100, docs/moe.md): a whole model's forward runs matmul +
// moe_route. The self-test has a moe_router case that catches a wrong kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "backend/backend.h"
#include "backend/moe.h"
#include "engine/runner.h"
#include "engine/selftest.h"
#include "io/dummy_weights.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/moe.h"

namespace tetra {
namespace {

// 8 experts (top 3), n_ff_exp 32; layer 1 dense (mlp_only_layers); shexp > 0: a shared expert.
model_config router_config(int64_t shexp) {
    std::string j = R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
        "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 3, "norm_topk_prob": true,
        "mlp_only_layers": [1], "shared_expert_intermediate_size": )" +
                    std::to_string(shexp) + R"(, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "max_position_embeddings": 256, "vocab_size": 320, "tie_word_embeddings": false})";
    return parse_model_config(j, "tiny_moe/config.json");
}

// The kernels the op profile saw since the last reset (names without the shape).
std::set<std::string> kernels_run() {
    std::set<std::string> s;
    for (const op_profile_entry& e : op_profile()) s.insert(e.kernel.substr(0, e.kernel.find(' ')));
    return s;
}

struct profiling {
    profiling() { set_op_profiling(true), reset_op_profile(); }
    ~profiling() { set_op_profiling(false), reset_op_profile(); }
};

tensor random_act(dtype t, int64_t n, int64_t m, uint32_t seed) {
    tensor x = tensor::alloc(t, {n, m});
    for (int64_t i = 0; i < x.numel(); ++i) {
        seed = seed * 1664525u + 1013904223u;
        float v = (float(seed >> 8) / float(1 << 24)) * 6.0f - 3.0f;
        if (t == dtype::F32) x.ptr<float>()[i] = v;
        else x.ptr<uint16_t>()[i] = t == dtype::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
    }
    return x;
}

TEST(moe_router_fused, block_output_bit_identical_to_matmul_then_route) {
    for (int64_t shexp : {0, 48})
        for (dtype act : {dtype::F32, dtype::BF16}) {
            model_config c = router_config(shexp);
            dummy_options d;
            d.seed = 21;
            model_weights w = make_dummy_weights(c, d);
            auto be = make_cpu_backend();
            moe_layer_weights plain = load_moe_layer(c, w, *be, "model.layers.0.", true);
            EXPECT_FALSE(plain.fused_router) << "off unless the caller sets it";
            ASSERT_EQ(plain.router.kind, linear_kind::DENSE);
            moe_layer_weights fused = plain;
            fused.fused_router = true;
            moe_ffn ffn(c, *be, 16, act);
            for (int64_t n : {1, 5, 16}) {
                const std::string what = std::string(dtype_name(act)) + " shexp=" + std::to_string(shexp) +
                                         " n=" + std::to_string(n);
                tensor h = random_act(act, n, c.n_embd, uint32_t(100 + n));
                tensor a = tensor::alloc(act, {n, c.n_embd}), b = tensor::alloc(act, {n, c.n_embd});
                std::set<std::string> ran_fused, ran_plain;
                {
                    profiling p;
                    ffn.forward(fused, h, a, matmul_mode::AUTO);
                    ran_fused = kernels_run();
                }
                {
                    profiling p;
                    ffn.forward(plain, h, b, matmul_mode::AUTO);
                    ran_plain = kernels_run();
                }
                EXPECT_EQ(0, std::memcmp(a.data, b.data, a.nbytes())) << what;
                EXPECT_EQ(ran_fused.count("moe_router_cpu"), 1u) << what;
                EXPECT_EQ(ran_plain.count("moe_router_cpu"), 0u) << what;
                EXPECT_EQ(ran_plain.count("moe_route_cpu"), 1u) << what;
                int distinct = 0;
                for (int64_t i = 1; i < a.numel(); ++i) distinct += load_f32(a.data, act, i) != load_f32(a.data, act, 0);
                EXPECT_GT(distinct, a.numel() / 2) << "degenerate block output: " << what;
            }
        }
}

// Logits of a two-sequence prefill (9 and 5 tokens), then 3 decode steps of both sequences; the
// kernels that ran.
std::vector<float> run_model(const model_config& c, model_weights& w, bool fuse, dtype act, std::set<std::string>* ran) {
    auto be = make_cpu_backend();
    model_options mo;
    mo.max_tokens = 16;
    mo.fuse_projections = fuse;
    mo.act = act;
    auto lm = create_model(c, w, *be, mo);
    kv_cache kv = kv_cache::create(*be, c, 4, 16, lm->act_type());
    model_runner r(*lm, *be, kv);
    std::vector<int32_t> ta = {0, 1}, tb = {2, 3};
    std::vector<int32_t> a = {5, 17, 3, 250, 9, 77, 1, 0, 31, 12, 300, 8}, b = {44, 2, 199, 63, 7, 18, 91, 5};
    std::vector<float> all;
    profiling p;
    const auto& l0 = r.run({seq_chunk{&ta, 0, a.data(), 9, true}, seq_chunk{&tb, 0, b.data(), 5, true}});
    all.insert(all.end(), l0.begin(), l0.end());
    for (int64_t i = 0; i < 3; ++i) {
        const auto& l = r.run({seq_chunk{&ta, 9 + i, a.data() + 9 + i, 1}, seq_chunk{&tb, 5 + i, b.data() + 5 + i, 1}});
        all.insert(all.end(), l.begin(), l.end());
    }
    *ran = kernels_run();
    return all;
}

// The model's forward keeps matmul + moe_route (fused_router off): the fused kernel never runs.
TEST(moe_router_fused, model_runs_matmul_then_route) {
    model_config c = router_config(48);
    dummy_options d;
    d.seed = 22;
    model_weights w = make_dummy_weights(c, d);
    std::set<std::string> ran;
    std::vector<float> logits = run_model(c, w, true, dtype::F32, &ran);
    ASSERT_EQ(logits.size(), size_t(14 + 3 * 2) * size_t(c.n_vocab));
    EXPECT_EQ(ran.count("moe_router_cpu"), 0u);
    EXPECT_EQ(ran.count("moe_route_cpu"), 1u);
}

// A wrong fused router for the self-test to catch: right logits and ids, the first weight doubled.
void moe_router_bad_weight(backend& be, const moe_router_args& a) {
    be.matmul(a.x, *a.router, a.logits, matmul_mode::DENSE);
    moe_route(be, a.logits, a.norm_topk_prob, a.topk_ids, a.topk_weights);
    a.topk_weights.ptr<float>()[0] *= 2.0f;
}

// The start-up self-test has a moe_router case (engine/selftest_cases.cpp moe_cases): the CPU
// kernel passes it, and a kernel with one wrong weight fails it and is excluded.
TEST(moe_router_fused, selftest_covers_moe_router_and_excludes_a_wrong_kernel) {
    const std::string dir = std::string(TETRA_SOURCE_DIR) + "/tests/data/moe/qwen3_moe_shared";
    model_config c = load_model_config(dir);
    model_weights w = load_weights(dir);
    auto be = make_cpu_backend();
    kernel_registry reg;
    cpu::register_kernels(reg);
    kernel_req req;
    req.device = device_kind::CPU;
    reg.add(make_kernel<moe_router_args>("moe_router", "moe_router_bad_weight", req, 100, nullptr, moe_router_bad_weight));
    selftest_options o;
    o.log = false;
    selftest_report rep = run_selftest(c, w, *be, o, reg);
    bool passed = false;
    for (const selftest_result& r : rep.results) passed |= r.op == "moe_router" && r.passed;
    EXPECT_TRUE(passed) << "moe_router not self-tested";
    ASSERT_EQ(rep.excluded.size(), 1u);
    EXPECT_NE(rep.excluded[0].find("moe_router_bad_weight"), std::string::npos) << rep.excluded[0];
    bool chose_cpu = false;
    for (const selftest_choice& ch : rep.chosen) chose_cpu |= ch.op == "moe_router" && ch.kernel == "moe_router_cpu";
    EXPECT_TRUE(chose_cpu);
}

}  // namespace
}  // namespace tetra
