// Qwen3MoeForCausalLM against HF transformers on tiny random-weight checkpoints (tests/data/moe/*,
// made by tools/gen_moe_goldens.py): qwen3_moe_tiny (mlp_only_layers, top-2 renormalized) and
// qwen3_moe_shared (decoder_sparse_step 2, top-3 not renormalized, shared expert + sigmoid gate,
// referenced by transformers' Qwen3NextSparseMoeBlock). bf16 weights teacher-forced in one chunk,
// in 24-row chunks and one token per step; then `tetra quantize` (ModelOpt and compressed-tensors)
// of the same checkpoints run by the engine vs transformers on the dequantized weights. Also the
// MoE config keys, the per-expert gate/up global-scale sharing of the quantizer, load errors, and
// the start-up self-test's MoE cases (a wrong MoE kernel is excluded).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "backend/moe.h"
#include "engine/generator.h"
#include "engine/loaded_model.h"
#include "logit_compare.h"
#include "engine/selftest.h"
#include "io/quantize.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "nvfp4/nvfp4.h"

namespace tetra {
namespace {

const std::string k_moe = std::string(TETRA_SOURCE_DIR) + "/tests/data/moe/";

struct reference : test_logits::reference_ids {
    std::vector<float> logits, logits_nvfp4;  // f32 [ids.size(), n_vocab]
};

reference read_reference(const std::string& dir) {
    reference r;
    static_cast<test_logits::reference_ids&>(r) = test_logits::read_reference_ids(dir);
    r.logits = test_logits::read_f32(dir + "/ref_logits.bin", r.ids.size() * size_t(r.n_vocab));
    r.logits_nvfp4 = test_logits::read_f32(dir + "/ref_logits_nvfp4.bin", r.ids.size() * size_t(r.n_vocab));
    return r;
}

using test_logits::compare;
using test_logits::read_f32;
using test_logits::engine_logits;
using test_logits::logit_stats;

const char* const k_models[] = {"qwen3_moe_tiny", "qwen3_moe_shared"};

// Same bf16 weights upcast exactly on both sides, f32 arithmetic on both sides: only summation order
// differs (expert outputs are summed in slot order here, in expert order by transformers' index_add).
// Bounds as tests/model/test_random_models.cpp; the smallest MoE mistake tools/gen_moe_goldens.py
// measured moves the logits by NMSE 1.8e-3 (norm_topk_prob flipped, shared model), 5.7e-3 (top-k
// minus one) and 3.7e-2 (shared_expert_gate ignored): 8 orders of magnitude above k_nmse.
constexpr double k_max_abs = 2e-4, k_nmse = 1e-11;

TEST(qwen3_moe, bf16_matches_transformers_teacher_forced) {
    for (const char* name : k_models) {
        std::string dir = k_moe + name;
        reference ref = read_reference(dir);
        ASSERT_GE(ref.ids.size(), 64u) << name;
        for (int64_t chunk : {int64_t(ref.ids.size()), int64_t(24), int64_t(1)}) {
            logit_stats s = compare(engine_logits(dir, chunk, ref.ids), ref.logits, ref.n_vocab);
            std::string v = std::string(name) + " max_tokens=" + std::to_string(chunk) + ": " + s.str();
            std::printf("  %s\n", v.c_str());
            EXPECT_GE(s.agreement, 0.99) << v;
            EXPECT_LE(s.max_abs, k_max_abs) << v;
            EXPECT_LE(s.nmse, k_nmse) << v;
        }
    }
}

TEST(qwen3_moe, config_is_the_architecture_under_test) {
    model_config t = load_model_config(k_moe + "qwen3_moe_tiny");
    EXPECT_EQ(t.architecture, "Qwen3MoeForCausalLM");
    EXPECT_TRUE(t.qk_norm);
    EXPECT_EQ(t.n_expert, 8);
    EXPECT_EQ(t.n_expert_used, 2);
    EXPECT_EQ(t.n_ff_exp, 32);
    EXPECT_EQ(t.n_ff_shexp, 0);
    EXPECT_TRUE(t.norm_topk_prob);
    EXPECT_TRUE(t.is_moe_layer(0));
    EXPECT_FALSE(t.is_moe_layer(1));
    EXPECT_TRUE(t.is_moe_layer(2));  // mlp_only_layers [1]
    model_config s = load_model_config(k_moe + "qwen3_moe_shared");
    EXPECT_EQ(s.n_ff_shexp, 48);
    EXPECT_EQ(s.n_expert_used, 3);
    EXPECT_FALSE(s.norm_topk_prob);
    EXPECT_TRUE(s.tie_word_embeddings);
    for (int il = 0; il < 4; ++il) EXPECT_EQ(s.is_moe_layer(il), il % 2 == 1) << il;  // decoder_sparse_step 2
}

std::string moe_config(const std::string& extra) {
    return R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
               "num_attention_heads": 4, "num_hidden_layers": 4, "vocab_size": 100)" + extra + "}";
}

TEST(qwen3_moe, config_keys_and_errors) {
    model_config d = parse_model_config(moe_config(""), "cfg.json");  // HF Qwen3MoeConfig defaults
    EXPECT_EQ(d.n_expert, 128);
    EXPECT_EQ(d.n_expert_used, 8);
    EXPECT_EQ(d.n_ff_exp, 768);
    EXPECT_FALSE(d.norm_topk_prob);
    for (int il = 0; il < 4; ++il) EXPECT_TRUE(d.is_moe_layer(il));
    model_config l = parse_model_config(moe_config(R"(, "num_local_experts": 6, "num_experts_per_tok": 6,
        "decoder_sparse_step": 3, "mlp_only_layers": [0])"), "cfg.json");
    EXPECT_EQ(l.n_expert, 6);
    EXPECT_FALSE(l.is_moe_layer(0));
    EXPECT_FALSE(l.is_moe_layer(1));
    EXPECT_TRUE(l.is_moe_layer(2));
    EXPECT_FALSE(l.is_moe_layer(3));
    EXPECT_NE(l.summary().find("6 experts (top 6)"), std::string::npos) << l.summary();
    model_config dense = parse_model_config(moe_config(R"(, "num_experts": 0)"), "cfg.json");
    EXPECT_FALSE(dense.is_moe_layer(0));
    struct bad { const char* extra; const char* msg; } cases[] = {
        {R"(, "num_experts": 4, "num_experts_per_tok": 5)", "num_experts_per_tok 5 must be in [1, num_experts = 4]"},
        {R"(, "mlp_only_layers": [4])", "mlp_only_layers entry 4 is not a layer index in [0, 4)"},
        {R"(, "mlp_only_layers": 1)", "field 'mlp_only_layers' must be a list"},
        {R"(, "shared_expert_intermediate_size": -1)", "'shared_expert_intermediate_size' must be a non-negative"},
        {R"(, "decoder_sparse_step": 0)", "'decoder_sparse_step' must be positive"},
    };
    for (const bad& b : cases) {
        try {
            parse_model_config(moe_config(b.extra), "cfg.json");
            ADD_FAILURE() << "accepted " << b.extra;
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find(b.msg), std::string::npos) << e.what();
        }
    }
}

TEST(qwen3_moe, missing_expert_tensor_is_a_load_error_naming_it) {
    model_config c = load_model_config(k_moe + "qwen3_moe_tiny");
    model_weights w = load_weights(k_moe + "qwen3_moe_tiny");
    w.tensors.erase("model.layers.2.mlp.experts.5.up_proj.weight");
    auto be = make_cpu_backend();
    try {
        create_model(c, w, *be, model_options());
        ADD_FAILURE() << "model without expert 5's up_proj built";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("linear 'model.layers.2.mlp.experts.5.up_proj' not found"), std::string::npos)
            << e.what();
    }
}

struct quantized {
    std::string dir;
    quantize_result res;
    ~quantized() { std::filesystem::remove_all(dir); }
};

std::unique_ptr<quantized> quantize(const std::string& name, const std::string& format) {
    auto q = std::make_unique<quantized>();
    q->dir = (std::filesystem::temp_directory_path() / ("tetra_moe_" + name + "_XXXXXX")).string();
    EXPECT_NE(mkdtemp(&q->dir[0]), nullptr) << q->dir;
    quantize_options o;
    o.force = true, o.src = k_moe + name, o.dst = q->dir, o.format = format;
    q->res = quantize_checkpoint(o);
    return q;
}

float scalar(const safetensors_model& st, const std::string& name) {
    float v = 0;
    tensor t = st.get(name);
    std::memcpy(&v, t.data, 4);
    return v;
}

// ModelOpt: every expert's gate_proj and up_proj share one weight_scale_2 (the group amax over the pair,
// as for dense gate/up), different experts have their own; routers and shared_expert_gate stay bf16.
TEST(qwen3_moe, quantize_shares_gate_up_scale_per_expert_and_keeps_routers_dense) {
    auto q = quantize("qwen3_moe_shared", "modelopt");
    EXPECT_EQ(q->res.quantized.size(), 76u);  // 4 × 4 attention + 2 dense × 3 + 2 MoE × (8 × 3 + 3 shared)
    for (const char* m : {"model.layers.1.mlp.gate", "model.layers.1.mlp.shared_expert_gate", "model.layers.3.mlp.gate"})
        EXPECT_NE(std::find(q->res.excluded.begin(), q->res.excluded.end(), m), q->res.excluded.end()) << m;
    safetensors_model st = safetensors_model::open_dir(q->dir), src = safetensors_model::open_dir(k_moe + "qwen3_moe_shared");
    auto amax = [&](const std::string& name) {
        tensor t = src.get(name);
        float m = 0;
        for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(load_f32(t.data, t.type, i)));
        return m;
    };
    std::set<float> per_expert;
    int unequal_pairs = 0;
    for (int e = 0; e < 8; ++e) {
        std::string p = "model.layers.3.mlp.experts." + std::to_string(e) + ".";
        float a_g = amax(p + "gate_proj.weight"), a_u = amax(p + "up_proj.weight");
        float want = nvfp4_scale_global_modelopt(std::max(a_g, a_u));  // the pair's amax, not each one's
        EXPECT_EQ(scalar(st, p + "gate_proj.weight_scale_2"), want) << "expert " << e;
        EXPECT_EQ(scalar(st, p + "up_proj.weight_scale_2"), want) << "expert " << e;
        EXPECT_EQ(scalar(st, p + "down_proj.weight_scale_2"), nvfp4_scale_global_modelopt(amax(p + "down_proj.weight")))
            << "expert " << e;
        unequal_pairs += a_g != a_u;
        per_expert.insert(want);
    }
    EXPECT_GE(unequal_pairs, 4);         // so sharing is visible: one of each such pair got the other's scale
    EXPECT_GE(per_expert.size(), 6u);    // each expert its own (not one scale over all experts)
    EXPECT_EQ(scalar(st, "model.layers.3.mlp.shared_expert.gate_proj.weight_scale_2"),
              scalar(st, "model.layers.3.mlp.shared_expert.up_proj.weight_scale_2"));
    EXPECT_EQ(st.get("model.layers.3.mlp.gate.weight").type, dtype::BF16);
    EXPECT_EQ(st.get("model.layers.3.mlp.shared_expert_gate.weight").type, dtype::BF16);
}

// ref_logits_nvfp4.bin: transformers on the weights quantized by tools/nvfp4_ref.py (byte-identical
// to tetra quantize's ModelOpt output, tests/io/test_quantize.cpp) and dequantized to f32: the same
// weights on both sides, so the bf16 bounds apply.
TEST(qwen3_moe, nvfp4_matches_transformers_on_dequantized_weights) {
    for (const char* name : k_models) {
        reference ref = read_reference(k_moe + name);
        auto q = quantize(name, "modelopt");
        for (int64_t chunk : {int64_t(ref.ids.size()), int64_t(1)}) {
            logit_stats s = compare(engine_logits(q->dir, chunk, ref.ids), ref.logits_nvfp4, ref.n_vocab);
            std::string v = std::string(name) + " nvfp4 max_tokens=" + std::to_string(chunk) + " vs HF on dequantized: " + s.str();
            std::printf("  %s\n", v.c_str());
            EXPECT_GE(s.agreement, 0.99) << v;
            EXPECT_LE(s.max_abs, k_max_abs) << v;
            EXPECT_LE(s.nmse, k_nmse) << v;
        }
    }
}

// compressed-tensors layout (weight_packed, weight_global_scale G, S = 1/G): ref_logits_nvfp4_ct.bin
// is transformers on the CT recipe's weights (tools/nvfp4_ref.py) dequantized the loader's way, so
// the bf16 bounds apply. (CT and ModelOpt round the global scale differently: the two NVFP4 models
// differ by NMSE 2.6e-3 / 4.2e-4, ref_ids.json — far above these bounds, so the format is pinned.)
TEST(qwen3_moe, compressed_tensors_matches_transformers_on_dequantized_weights) {
    for (const char* name : k_models) {
        reference ref = read_reference(k_moe + name);
        std::vector<float> want = read_f32(k_moe + name + "/ref_logits_nvfp4_ct.bin", ref.logits.size());
        auto q = quantize(name, "compressed-tensors");
        logit_stats s = compare(engine_logits(q->dir, 32, ref.ids), want, ref.n_vocab);
        std::string v = std::string(name) + " compressed-tensors vs HF on dequantized: " + s.str();
        std::printf("  %s\n", v.c_str());
        EXPECT_GE(s.agreement, 0.99) << v;
        EXPECT_LE(s.max_abs, k_max_abs) << v;
        EXPECT_LE(s.nmse, k_nmse) << v;
    }
}

// The start-up self-test covers the MoE ops the model uses (route, permute, combine, one grouped
// matmul per expert projection, on the real experts) and catches a wrong MoE kernel: a test-local
// registry holds every CPU kernel plus "moe_combine_swapped" at top priority, which sums the slots in
// the right order but swaps the weights of slots 0 and 1. It must be excluded and the plain one chosen.
void moe_combine_swapped(backend& be, const moe_combine_args& a) {
    moe_combine_args b = a;
    tensor w = tensor::alloc(dtype::F32, a.topk_weights.shape);
    const float* src = a.topk_weights.ptr<float>();
    for (int64_t t = 0; t < a.n_tokens; ++t)
        for (int64_t s = 0; s < a.k; ++s) w.ptr<float>()[t * a.k + s] = src[t * a.k + (s < 2 ? 1 - s : s)];
    b.topk_weights = w;
    kernel_registry::instance().find("moe_combine_cpu")->launch(be, b);
}

TEST(qwen3_moe, selftest_covers_moe_ops_and_excludes_a_wrong_kernel) {
    model_config c = load_model_config(k_moe + "qwen3_moe_shared");
    model_weights w = load_weights(k_moe + "qwen3_moe_shared");
    auto be = make_cpu_backend();
    kernel_registry reg;
    cpu::register_kernels(reg);
    kernel_req req;
    req.device = device_kind::CPU;
    reg.add(make_kernel<moe_combine_args>("moe_combine", "moe_combine_swapped", req, 100, nullptr, moe_combine_swapped));
    selftest_options o;
    o.log = false;
    selftest_report rep = run_selftest(c, w, *be, o, reg);
    std::set<std::string> ops;
    for (const selftest_result& r : rep.results)
        if (r.passed) ops.insert(r.op);
    for (const char* op : {"moe_route", "moe_permute", "moe_route_permute", "moe_combine", "moe_matmul_dense"})
        EXPECT_TRUE(ops.count(op)) << op << " not self-tested";
    bool fused_silu = false;  // the experts' fused gate/up output (silu_mul on the halves of each row)
    const std::string fused_what = "silu_mul gate_up[3, " + std::to_string(2 * c.n_ff_exp) + "]";
    for (const selftest_result& r : rep.results) fused_silu |= r.passed && r.what.rfind(fused_what, 0) == 0;
    EXPECT_TRUE(fused_silu) << "silu_mul gate_up not self-tested";
    ASSERT_EQ(rep.excluded.size(), 1u);
    EXPECT_NE(rep.excluded[0].find("moe_combine_swapped"), std::string::npos) << rep.excluded[0];
    bool chose_plain = false;
    for (const selftest_choice& ch : rep.chosen) chose_plain |= ch.op == "moe_combine" && ch.kernel == "moe_combine_cpu";
    EXPECT_TRUE(chose_plain);
    std::string classes;  // the routers and the shared expert are matmul cases of their own
    for (const selftest_choice& ch : rep.chosen) classes += ch.classes + ";";
    for (const char* m : {"mlp.gate", "mlp.shared_expert.down_proj", "mlp.shared_expert_gate", "mlp.experts.gate_proj",
                          "mlp.experts.down_proj", "mlp.down_proj"})
        EXPECT_NE(classes.find(m), std::string::npos) << m << " missing in " << classes;
}

}  // namespace
}  // namespace tetra
