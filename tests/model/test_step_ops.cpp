// The op classes of a forward step (model/step_ops.h) that `tetra bench --breakdown` leaves out: each
// reached as often as the config says, together a partition of the step's backend ops, each matmul
// class on its own weights, and the logits kept with lm_head left out. Dense Llama (fused and
// separate projections), Qwen3 (qk-norm), Qwen3-MoE with a dense layer and with a shared expert;
// dummy weights on the CPU backend.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>

#include "engine/runner.h"
#include "io/dummy_weights.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/tiny_config.h"

namespace tetra {
namespace {

model_config tiny_dense(const std::string& arch) { return test_models::tiny_dense_config(arch, 3); }

// Qwen3-MoE, 4 layers: layer 1 dense (mlp_only_layers), 3 MoE layers; shared: a shared expert with
// its sigmoid gate on every MoE layer (the shape of Qwen2-MoE / Qwen3-Next blocks).
model_config tiny_moe(bool shared) {
    std::string j = R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
        "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": true,
        "decoder_sparse_step": 1, "mlp_only_layers": [1], "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "max_position_embeddings": 256, "vocab_size": 320, "tie_word_embeddings": false)" +
                    std::string(shared ? R"(, "shared_expert_intermediate_size": 48})" : "}");
    return parse_model_config(j, "tiny_moe/config.json");
}

struct model_case {
    std::string name;
    model_config cfg;
    bool fuse = true;
    int dense_layers, moe_layers;  // from the config literals above
    bool shared = false;
};

std::vector<model_case> cases() {
    return {
        {"llama fused", tiny_dense("LlamaForCausalLM"), true, 3, 0},
        {"llama separate projections", tiny_dense("LlamaForCausalLM"), false, 3, 0},
        {"qwen3 qk-norm", tiny_dense("Qwen3ForCausalLM"), true, 3, 0},
        {"qwen3-moe", tiny_moe(false), true, 1, 3},
        {"qwen3-moe shared expert", tiny_moe(true), true, 1, 3, true},
    };
}

struct harness {
    std::unique_ptr<backend> be = make_cpu_backend();
    model_weights w;
    std::unique_ptr<causal_lm> lm;
    kv_cache kv;
    std::vector<int32_t> table = {0, 1, 2, 3};
    std::vector<int32_t> toks = {5, 17, 3, 250, 9, 77, 1, 0, 31, 12, 300, 8};

    explicit harness(const model_case& mc) {
        dummy_options d;
        d.seed = 5;
        d.quant = "nvfp4";
        w = make_dummy_weights(mc.cfg, d);
        model_options mo;
        mo.max_tokens = 16;
        mo.fuse_projections = mc.fuse;
        lm = create_model(mc.cfg, w, *be, mo);
        kv = kv_cache::create(*be, mc.cfg, 4, 16, lm->act_type());
    }
    // A 6-token prefill, then one decode step at position 6 with token `tok`: that step's logits.
    std::vector<float> decode(int32_t tok) {
        model_runner r(*lm, *be, kv);
        r.run({seq_chunk{&table, 0, toks.data(), 6}});
        return r.run({seq_chunk{&table, 6, &tok, 1}});
    }
    // The backend ops of the second of two decode steps (the first one complete, so that a step
    // without the routing reuses one token's routing, as the bench's steps reuse their batch's), per
    // kernel and shape (the op profiler).
    std::map<std::string, int64_t> decode_ops(uint32_t skip) {
        model_runner r(*lm, *be, kv);
        r.run({seq_chunk{&table, 0, toks.data(), 6}});
        r.run({seq_chunk{&table, 6, &toks[6], 1}});
        lm->set_skip_ops(skip);
        reset_op_profile();
        set_op_profiling(true);
        r.run({seq_chunk{&table, 7, &toks[7], 1}});
        set_op_profiling(false);
        lm->set_skip_ops(0);
        std::map<std::string, int64_t> ops;
        for (const op_profile_entry& e : op_profile()) ops[e.kernel] = e.calls;
        return ops;
    }
};

int64_t total(const std::map<std::string, int64_t>& m) {
    int64_t t = 0;
    for (const auto& e : m) t += e.second;
    return t;
}

TEST(step_ops, classes_are_reached_as_the_architecture_says) {
    for (const model_case& mc : cases()) {
        harness h(mc);
        h.decode(7);
        const step_ops::counts& n = h.lm->ops().calls;
        const int layers = mc.dense_layers + mc.moe_layers, moe = mc.moe_layers;
        std::map<step_op, int> want = {
            {step_op::EMBEDDING, 1},      {step_op::ATTN_NORM, layers},  {step_op::QKV, layers},
            {step_op::ROPE_KV, layers},   {step_op::ATTENTION, layers},  {step_op::O_PROJ, layers},
            {step_op::FFN_NORM, layers},  {step_op::GATE_UP, mc.dense_layers}, {step_op::DOWN, mc.dense_layers},
            {step_op::ROUTER, moe},       {step_op::ROUTE, moe},         {step_op::GATHER, moe},
            {step_op::EXPERT_GATE_UP, moe}, {step_op::EXPERT_DOWN, moe}, {step_op::SHARED_EXPERT, mc.shared ? moe : 0},
            {step_op::COMBINE, moe},      {step_op::OUTPUT_NORM, 1},     {step_op::LM_HEAD, 1},
        };
        ASSERT_EQ(int(want.size()), k_step_op_count);
        for (const auto& e : want)
            EXPECT_EQ(n[size_t(e.first)], e.second) << mc.name << ": " << step_op_name(e.first);
    }
}

TEST(step_ops, classes_partition_the_ops_of_a_step) {
    for (const model_case& mc : cases()) {
        harness h(mc);
        const std::map<std::string, int64_t> full = h.decode_ops(0);
        const int64_t all = total(full);
        ASSERT_GT(all, 0) << mc.name << ": the op profiler saw nothing";
        const step_ops::counts calls = h.lm->ops().calls;
        int64_t removed_sum = 0;
        uint32_t every = 0;
        for (int i = 0; i < k_step_op_count; ++i) {
            if (calls[size_t(i)] == 0) continue;
            every |= 1u << i;
            const std::map<std::string, int64_t> without = h.decode_ops(1u << i);
            const int64_t removed = all - total(without);
            EXPECT_GE(removed, calls[size_t(i)]) << mc.name << ": leaving out " << step_op_name(step_op(i));
            for (const auto& e : without) {  // nothing appears or grows when a class is left out
                auto it = full.find(e.first);
                EXPECT_TRUE(it != full.end() && e.second <= it->second) << mc.name << ": " << e.first;
            }
            removed_sum += removed;
        }
        EXPECT_EQ(removed_sum, all) << mc.name << ": the classes overlap or miss ops";
        EXPECT_EQ(total(h.decode_ops(every)), 0) << mc.name << ": ops outside every class";
    }
}

TEST(step_ops, lm_head_left_out_keeps_the_logits) {
    harness h(cases()[0]);
    const std::vector<float> a = h.decode(7), b = h.decode(250);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_NE(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "two tokens gave the same logits";
    h.decode(7);
    h.lm->set_skip_ops(1u << int(step_op::LM_HEAD));
    const std::vector<float> kept = h.decode(250);
    h.lm->set_skip_ops(0);
    EXPECT_EQ(0, std::memcmp(kept.data(), a.data(), a.size() * sizeof(float)))
        << "with lm_head left out the logits are not the previous step's";
    const std::vector<float> again = h.decode(250);
    EXPECT_EQ(0, std::memcmp(again.data(), b.data(), b.size() * sizeof(float))) << "the mask was not cleared";
}

// Each matmul class reads its own weights: the matmuls a class's absence removes are keyed (op
// profiler: kernel + weight shape) by exactly the weights the config says the class reads. NVFP4
// weights show as [rows, k / 2] code bytes, dense ones (router, shared-expert gate, lm_head) as
// [rows, k]. Catches a class label on the wrong op, which the partition test cannot see.
std::string shape(int64_t rows, int64_t cols) { return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]"; }

TEST(step_ops, matmul_classes_read_their_own_weights) {
    for (const model_case& mc : cases()) {
        const model_config& c = mc.cfg;
        const int64_t e = c.n_embd, q = c.n_head * c.head_dim, kv = c.n_head_kv * c.head_dim;
        std::map<step_op, std::set<std::string>> want = {
            {step_op::QKV, mc.fuse ? std::set<std::string>{shape(q + 2 * kv, e / 2)}
                                   : std::set<std::string>{shape(q, e / 2), shape(kv, e / 2)}},
            {step_op::O_PROJ, {shape(e, q / 2)}},
            {step_op::LM_HEAD, {shape(c.n_vocab, e)}},
        };
        if (mc.dense_layers > 0) {
            want[step_op::GATE_UP] = {shape(mc.fuse ? 2 * c.n_ff : c.n_ff, e / 2)};
            want[step_op::DOWN] = {shape(e, c.n_ff / 2)};
        }
        if (mc.moe_layers > 0) {
            want[step_op::ROUTER] = {shape(c.n_expert, e)};
            want[step_op::EXPERT_GATE_UP] = {shape(2 * c.n_ff_exp, e / 2)};
            want[step_op::EXPERT_DOWN] = {shape(e, c.n_ff_exp / 2)};
        }
        if (mc.shared) want[step_op::SHARED_EXPERT] = {shape(2 * c.n_ff_shexp, e / 2), shape(e, c.n_ff_shexp / 2), shape(1, e)};
        harness h(mc);
        const std::map<std::string, int64_t> full = h.decode_ops(0);
        for (int i = 0; i < k_step_op_count; ++i) {
            const step_op o = step_op(i);
            const std::map<std::string, int64_t> without = h.decode_ops(1u << i);
            std::set<std::string> got;
            for (const auto& kv_ : full) {
                const std::string& key = kv_.first;
                auto it = without.find(key);
                const bool removed = it == without.end() || it->second < kv_.second;
                if (removed && key.find("matmul") != std::string::npos && key.find("silu") == std::string::npos)
                    got.insert(key.substr(key.find('[')));
            }
            auto w = want.find(o);
            EXPECT_EQ(got, w == want.end() ? std::set<std::string>{} : w->second) << mc.name << ": " << step_op_name(o);
        }
    }
}

TEST(step_ops, names_round_trip) {
    for (int i = 0; i < k_step_op_count; ++i) {
        step_op o;
        ASSERT_TRUE(step_op_of(step_op_name(step_op(i)), o)) << i;
        EXPECT_EQ(int(o), i);
    }
    step_op o;
    EXPECT_FALSE(step_op_of("lm-head", o));
}

}  // namespace
}  // namespace tetra
