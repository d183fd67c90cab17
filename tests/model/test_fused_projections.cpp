// Fused q/k/v and gate/up projections (model_options::fuse_projections, layers.cpp) change no
// value: logits are bit-identical to one matmul per projection, for one row per step (the fused
// output is split by views) and for many rows (split by get_rows), on dummy NVFP4 and bf16 weights
// of Llama and Qwen3 shapes. And weights that cannot be stacked exactly (different NVFP4 global
// scales) are not fused.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/runner.h"
#include "io/dummy_weights.h"
#include "model/layers.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/tiny_config.h"

namespace tetra {
namespace {

model_config tiny_config(const std::string& arch) { return test_models::tiny_dense_config(arch, 2); }

// Logits of a 9-token prefill, then 3 one-token steps, as one flat vector.
std::vector<float> run_model(const model_config& c, model_weights& w, bool fuse) {
    auto be = make_cpu_backend();
    model_options mo;
    mo.max_tokens = 16;
    mo.fuse_projections = fuse;
    auto lm = create_model(c, w, *be, mo);
    kv_cache kv = kv_cache::create(*be, c, 4, 16, lm->act_type());
    model_runner r(*lm, *be, kv);
    std::vector<int32_t> table = {0, 1, 2, 3}, toks = {5, 17, 3, 250, 9, 77, 1, 0, 31, 12, 300, 8};
    std::vector<float> all;
    seq_chunk pre{&table, 0, toks.data(), 9, /*all_logits=*/true};
    const auto& l0 = r.run({pre});
    all.insert(all.end(), l0.begin(), l0.end());
    for (int64_t i = 9; i < 12; ++i) {
        const auto& l = r.run({seq_chunk{&table, i, toks.data() + i, 1}});
        all.insert(all.end(), l.begin(), l.end());
    }
    return all;
}

void expect_bit_identical(const std::string& arch, const std::string& quant) {
    model_config c = tiny_config(arch);
    dummy_options d;
    d.seed = 3;
    d.quant = quant;
    model_weights w = make_dummy_weights(c, d);
    std::vector<float> fused = run_model(c, w, true), plain = run_model(c, w, false);
    ASSERT_EQ(fused.size(), plain.size());
    EXPECT_EQ(0, std::memcmp(fused.data(), plain.data(), fused.size() * sizeof(float))) << arch << " " << quant;
    auto be = make_cpu_backend();
    decoder_weights dw = load_decoder_weights(c, w, *be, {}, true);
    EXPECT_TRUE(dw.layers[0].fused_qkv && dw.layers[0].mlp.fused) << "nothing was fused: the test compares nothing";
}

TEST(fused_projections, llama_nvfp4_bit_identical) { expect_bit_identical("LlamaForCausalLM", "nvfp4"); }
TEST(fused_projections, qwen3_nvfp4_bit_identical) { expect_bit_identical("Qwen3ForCausalLM", "nvfp4"); }
TEST(fused_projections, llama_bf16_bit_identical) { expect_bit_identical("LlamaForCausalLM", "bf16"); }

TEST(fused_projections, different_global_scales_are_not_fused) {
    model_config c = tiny_config("LlamaForCausalLM");
    dummy_options d;
    d.quant = "nvfp4";
    model_weights w = make_dummy_weights(c, d);
    w.linears.at("model.layers.0.self_attn.v_proj").scale_global *= 2.0f;
    w.linears.at("model.layers.0.mlp.up_proj").scale_global *= 2.0f;
    auto be = make_cpu_backend();
    decoder_weights dw = load_decoder_weights(c, w, *be, {}, true);
    EXPECT_FALSE(dw.layers[0].fused_qkv);
    EXPECT_FALSE(dw.layers[0].mlp.fused);
    EXPECT_TRUE(dw.layers[1].fused_qkv);
}

}  // namespace
}  // namespace tetra
