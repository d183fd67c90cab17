// Exclusion correctness, the cases test_checkpoint*.cpp does not cover yet (checked against it):
// names under a multimodal "language_model." wrapper and vLLM fused names at load time, "re:" in a
// ModelOpt list, CT plain names without wildcards at load, a dot-prefix exclusion contradicted by a
// quantized module, and an excluded layer running dense through the engine (the start-up self-test
// tests its own dense shapes, one line per layer class).
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "engine/selftest.h"
#include "io/quantize.h"
#include "model/model_config.h"
#include "test_checkpoint_util.h"

namespace tetra {
namespace {

TEST(exclusion_issue6, language_model_prefix_at_load) {
    std::string dir = temp_dir("ex6lm");
    ckpt_builder b;
    b.modelopt("language_model.model.layers.0.self_attn.q_proj", 16, 16, 0x22, 0x38, 0.5f);
    b.dense("language_model.model.layers.0.mlp.gate.weight", 4, 16);
    b.dense("language_model.lm_head.weight", 32, 16);
    b.write(dir);
    // The config lists the text model's names (as vLLM and ModelOpt write them for the wrapper).
    write_json(dir + "/hf_quant_config.json",
               modelopt_hf_quant_config("W4A16_NVFP4", {"lm_head", "model.layers.0.mlp.gate"}));
    model_weights w = load_weights(dir);
    EXPECT_EQ(w.linears.size(), 1u);
    for (const char* m : {"language_model.model.layers.0.mlp.gate", "language_model.lm_head"}) {
        EXPECT_TRUE(w.is_excluded(m)) << m;
        EXPECT_EQ(w.linear(m).kind, linear_kind::DENSE) << m;
    }
    EXPECT_FALSE(w.is_excluded("language_model.model.layers.0.self_attn.q_proj"));
    EXPECT_EQ(w.linear("language_model.model.layers.0.self_attn.q_proj").kind, linear_kind::NVFP4);
}

TEST(exclusion_issue6, fused_names_exclude_their_parts_at_load) {
    std::string dir = temp_dir("ex6fused");
    ckpt_builder b;
    for (const char* p : {"q_proj", "k_proj", "v_proj"})
        b.dense(std::string("model.layers.0.self_attn.") + p + ".weight", 16, 16);
    b.ct("model.layers.0.self_attn.o_proj", 16, 16, 0x22, 0x38, 2.0f);
    b.write(dir);
    // vLLM's fused name in the ignore list covers q/k/v; o_proj stays quantized.
    write_json(dir + "/config.json",
               {{"quantization_config", ct_quantization_config(false, {"model.layers.0.self_attn.qkv_proj"})}});
    model_weights w = load_weights(dir);
    for (const char* p : {"q_proj", "k_proj", "v_proj"})
        EXPECT_EQ(w.linear(std::string("model.layers.0.self_attn.") + p).kind, linear_kind::DENSE) << p;
    EXPECT_EQ(w.linear("model.layers.0.self_attn.o_proj").kind, linear_kind::NVFP4);
    // The fused name excluded while a part is stored quantized: a load error naming the part.
    std::string d2 = temp_dir("ex6fused2");
    ckpt_builder c;
    c.ct("model.layers.0.self_attn.k_proj", 16, 16, 0x22, 0x38, 2.0f);
    c.write(d2);
    write_json(d2 + "/config.json",
               {{"quantization_config", ct_quantization_config(false, {"model.layers.0.self_attn.qkv_proj"})}});
    std::string msg = error_of([&] { load_weights(d2); });
    EXPECT_NE(msg.find("'model.layers.0.self_attn.k_proj'"), std::string::npos) << msg;
}

TEST(exclusion_issue6, modelopt_list_with_re_pattern) {
    std::string dir = temp_dir("ex6re");
    ckpt_builder b;
    b.modelopt("model.layers.0.self_attn.q_proj", 16, 16, 0x22, 0x38, 0.5f);
    b.dense("model.layers.1.linear_attn.in_proj_qkvz.weight", 64, 16);
    b.dense("model.layers.1.linear_attn.out_proj.weight", 16, 32);
    b.dense("lm_head.weight", 32, 16);
    b.write(dir);
    write_json(dir + "/hf_quant_config.json",
               modelopt_hf_quant_config("W4A16_NVFP4", {"lm_head", "re:.*\\.linear_attn\\."}));
    model_weights w = load_weights(dir);
    EXPECT_EQ(w.linear("model.layers.1.linear_attn.in_proj_qkvz").kind, linear_kind::DENSE);
    EXPECT_EQ(w.linear("model.layers.1.linear_attn.out_proj").kind, linear_kind::DENSE);
    EXPECT_FALSE(w.is_excluded("model.layers.0.self_attn.q_proj"));
}

TEST(exclusion_issue6, compressed_tensors_plain_names_have_no_wildcards_at_load) {
    std::string dir = temp_dir("ex6ctw");
    ckpt_builder b;
    b.ct("model.layers.0.self_attn.q_proj", 16, 16, 0x22, 0x38, 2.0f);
    b.dense("model.layers.0.mlp.gate.weight", 4, 16);
    b.write(dir);
    // "model.layers.*.mlp.gate" is not a regex ("re:" missing) and CT plain names are exact.
    write_json(dir + "/config.json",
               {{"quantization_config", ct_quantization_config(false, {"model.layers.*.mlp.gate"})}});
    model_weights w = load_weights(dir);
    EXPECT_FALSE(w.is_excluded("model.layers.0.mlp.gate"));
    std::string msg = error_of([&] { w.linear("model.layers.0.mlp.gate"); });
    EXPECT_NE(msg.find("'model.layers.0.mlp.gate.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("does not exclude"), std::string::npos) << msg;
}

TEST(exclusion_issue6, dot_prefix_exclusion_contradicted_by_a_quantized_module) {
    std::string dir = temp_dir("ex6dot");
    ckpt_builder b;
    b.modelopt("model.layers.1.self_attn.q_proj", 16, 16, 0x22, 0x38, 0.5f);
    b.modelopt("model.layers.10.self_attn.q_proj", 16, 16, 0x22, 0x38, 0.5f);  // not under "model.layers.1"
    b.write(dir);
    write_json(dir + "/hf_quant_config.json", modelopt_hf_quant_config("W4A16_NVFP4", {"model.layers.1"}));
    std::string msg = error_of([&] { load_weights(dir); });
    EXPECT_NE(msg.find("module 'model.layers.1.self_attn.q_proj' is excluded by pattern 'model.layers.1'"),
              std::string::npos) << msg;
    EXPECT_EQ(msg.find("model.layers.10"), std::string::npos) << msg;
}

// `tetra quantize --exclude 'model.layers.2*'` on the tiny Llama: layer 2 stays dense, and the
// engine's self-test tests those dense shapes too (one case per op and shape over all layers).
TEST(exclusion_issue6, excluded_layer_runs_dense_through_the_engine) {
    quantize_options q;
    q.src = std::string(TETRA_SOURCE_DIR) + "/tests/data/checkpoints/llama_tiny";
    q.dst = temp_dir("ex6q") + "/out";
    q.exclude = {"model.layers.2*"};
    quantize_checkpoint(q);
    model_weights w = load_weights(q.dst);
    model_config c = load_model_config(q.dst);
    EXPECT_EQ(w.linear("model.layers.0.mlp.down_proj").kind, linear_kind::NVFP4);
    EXPECT_EQ(w.linear("model.layers.2.mlp.down_proj").kind, linear_kind::DENSE);
    EXPECT_EQ(w.linear("lm_head", true).kind, linear_kind::DENSE);
    auto be = make_cpu_backend();
    selftest_options o;
    o.log = false;
    selftest_report r = run_selftest(c, w, *be, o);
    std::map<std::string, std::string> by_what;
    for (const auto& ch : r.chosen) by_what[ch.what] = ch.classes;
    // Layer 2 (dense bf16): q/o 64x64, k/v 32x64, gate/up 128x64, down 64x128; lm_head 256x64.
    EXPECT_EQ(by_what["linear dense bf16 64x64"], "self_attn.q_proj, self_attn.o_proj");
    EXPECT_EQ(by_what["linear dense bf16 32x64"], "self_attn.k_proj, self_attn.v_proj");
    EXPECT_EQ(by_what["linear dense bf16 128x64"], "mlp.gate_proj, mlp.up_proj");
    EXPECT_EQ(by_what["linear dense bf16 64x128"], "mlp.down_proj");
    EXPECT_EQ(by_what["linear dense bf16 256x64"], "lm_head");
    EXPECT_EQ(by_what["linear nvfp4 64x128"], "mlp.down_proj");
    for (const auto& res : r.results) {
        if (res.kernel.rfind("faulty_", 0) == 0) continue;
        EXPECT_TRUE(res.passed) << res.kernel << " " << res.what;
    }
}

}  // namespace
}  // namespace tetra
