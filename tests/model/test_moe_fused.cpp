// Fused MoE gate/up (moe.cpp, issue #7): every expert's gate and up stacked into one [2·n_ff_exp,
// n_embd] weight, one grouped matmul and silu_mul_gate_up on the halves, change no value: logits of
// a random Qwen3-MoE (dummy weights; a dense FFN layer and a shared expert too) are bit-identical to
// the unfused path for NVFP4 W4A16 (f32 and bf16 activations), NVFP4 W4A4 (per-expert activation
// scales) and bf16 experts, over a two-sequence prefill and batched decode steps. A layer with one
// expert whose gate/up cannot be stacked exactly stays unfused. And the op: silu_mul_gate_up equals
// silu_mul on the two halves bit for bit, and rejects odd widths and an output overlapping its input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/runner.h"
#include "io/dummy_weights.h"
#include "model/layers.h"
#include "model/model.h"
#include "model/model_config.h"

namespace tetra {
namespace {

// 8 experts (top 3), n_ff_exp 32; layer 1 dense (mlp_only_layers); shexp > 0: a shared expert.
model_config moe_config(int64_t shexp) {
    std::string j = R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
        "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 3, "norm_topk_prob": true,
        "mlp_only_layers": [1], "shared_expert_intermediate_size": )" +
                    std::to_string(shexp) + R"(, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "max_position_embeddings": 256, "vocab_size": 320, "tie_word_embeddings": false})";
    return parse_model_config(j, "tiny_moe/config.json");
}

// Logits of a two-sequence prefill (9 and 5 tokens, all rows), then 3 decode steps of both
// sequences, as one flat vector.
std::vector<float> run_model(const model_config& c, model_weights& w, bool fuse, matmul_mode mode, dtype act) {
    auto be = make_cpu_backend();
    model_options mo;
    mo.max_tokens = 16;
    mo.fuse_projections = fuse;
    mo.mode = mode;
    mo.act = act;
    auto lm = create_model(c, w, *be, mo);
    kv_cache kv = kv_cache::create(*be, c, 4, 16, lm->act_type());
    model_runner r(*lm, *be, kv);
    std::vector<int32_t> ta = {0, 1}, tb = {2, 3};
    std::vector<int32_t> a = {5, 17, 3, 250, 9, 77, 1, 0, 31, 12, 300, 8}, b = {44, 2, 199, 63, 7, 18, 91, 5};
    std::vector<float> all;
    const auto& l0 = r.run({seq_chunk{&ta, 0, a.data(), 9, true}, seq_chunk{&tb, 0, b.data(), 5, true}});
    all.insert(all.end(), l0.begin(), l0.end());
    for (int64_t i = 0; i < 3; ++i) {
        const auto& l = r.run({seq_chunk{&ta, 9 + i, a.data() + 9 + i, 1}, seq_chunk{&tb, 5 + i, b.data() + 5 + i, 1}});
        all.insert(all.end(), l.begin(), l.end());
    }
    return all;
}

// W4A4 needs activation global scales: one per fused group (as ModelOpt exports them), each expert
// its own, so the grouped matmul must use expert e's.
void add_input_scales(model_weights& w) {
    for (auto& [name, l] : w.linears) {
        float g = 448.0f * 6.0f / 4.0f;  // amax 4
        size_t at = name.find("experts.");
        if (at != std::string::npos) g *= 1.0f + 0.125f * float(std::stoi(name.substr(at + 8)));
        l.has_input_scale = true, l.input_global_quant = g, l.input_scale = 1.0f / g;
    }
}

void store(void* data, dtype t, int64_t i, float v) {
    if (t == dtype::F32) static_cast<float*>(data)[i] = v;
    else static_cast<uint16_t*>(data)[i] = t == dtype::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
}

const moe_layer_weights& moe_of(const decoder_weights& d, int il) { return *d.layers[size_t(il)].moe; }

void expect_bit_identical(int64_t shexp, const std::string& quant, matmul_mode mode, dtype act) {
    model_config c = moe_config(shexp);
    dummy_options d;
    d.seed = 11;
    d.quant = quant;
    model_weights w = make_dummy_weights(c, d);
    if (mode == matmul_mode::W4A4) add_input_scales(w);
    const std::string what = quant + " " + matmul_mode_name(mode) + " " + dtype_name(act) +
                             " shexp=" + std::to_string(shexp);
    std::vector<float> fused = run_model(c, w, true, mode, act), plain = run_model(c, w, false, mode, act);
    ASSERT_EQ(fused.size(), size_t(14 + 3 * 2) * size_t(c.n_vocab)) << what;
    ASSERT_EQ(fused.size(), plain.size()) << what;
    EXPECT_EQ(0, std::memcmp(fused.data(), plain.data(), fused.size() * sizeof(float))) << what;
    float amax = 0;
    for (float v : fused) amax = std::max(amax, std::fabs(v));
    EXPECT_GT(amax, 0.0f) << "all-zero logits compare nothing: " << what;
    // The comparison is of the two paths: the fused one must have been taken, and not the other.
    auto be = make_cpu_backend();
    decoder_weights f = load_decoder_weights(c, w, *be, {}, true), u = load_decoder_weights(c, w, *be, {}, false);
    for (int il : {0, 2}) {
        EXPECT_TRUE(moe_of(f, il).fused_gate_up) << what << " layer " << il;
        EXPECT_EQ(moe_of(f, il).gate_up.size(), size_t(c.n_expert)) << what;
        EXPECT_TRUE(moe_of(f, il).gate.empty() && moe_of(f, il).up.empty()) << what;
        EXPECT_EQ(moe_of(f, il).gate_up[0].n_out, 2 * c.n_ff_exp) << what;
        EXPECT_EQ(moe_of(f, il).shared.fused, shexp > 0) << what;
        EXPECT_FALSE(moe_of(u, il).fused_gate_up || moe_of(u, il).shared.fused) << what;
        EXPECT_EQ(moe_of(u, il).gate.size(), size_t(c.n_expert)) << what;
    }
    EXPECT_EQ(f.layers[1].moe, nullptr);
}

TEST(moe_fused, nvfp4_w4a16_bit_identical) {
    expect_bit_identical(0, "nvfp4", matmul_mode::AUTO, dtype::F32);
    expect_bit_identical(48, "nvfp4", matmul_mode::AUTO, dtype::F32);
}
TEST(moe_fused, nvfp4_w4a16_bf16_activations_bit_identical) {
    expect_bit_identical(48, "nvfp4", matmul_mode::W4A16, dtype::BF16);
}
TEST(moe_fused, nvfp4_w4a4_bit_identical) { expect_bit_identical(48, "nvfp4", matmul_mode::W4A4, dtype::F32); }
TEST(moe_fused, bf16_experts_bit_identical) {
    expect_bit_identical(0, "bf16", matmul_mode::AUTO, dtype::F32);
    expect_bit_identical(48, "bf16", matmul_mode::AUTO, dtype::BF16);
}

// One expert whose gate and up have different global scales cannot be one NVFP4 weight: that layer
// keeps separate gate/up for every expert (one grouped matmul needs one shape), the other layer and
// the shared expert still fuse, and the logits still equal the unfused model's.
TEST(moe_fused, expert_with_different_global_scales_is_not_fused) {
    model_config c = moe_config(48);
    dummy_options d;
    d.seed = 12;
    model_weights w = make_dummy_weights(c, d);
    w.linears.at("model.layers.0.mlp.experts.5.up_proj").scale_global *= 2.0f;
    w.linears.at("model.layers.2.mlp.shared_expert.gate_proj").scale_global *= 2.0f;
    auto be = make_cpu_backend();
    decoder_weights f = load_decoder_weights(c, w, *be, {}, true);
    EXPECT_FALSE(moe_of(f, 0).fused_gate_up);
    EXPECT_TRUE(moe_of(f, 0).gate_up.empty());
    EXPECT_EQ(moe_of(f, 0).gate.size(), size_t(c.n_expert));
    EXPECT_TRUE(moe_of(f, 0).shared.fused);
    EXPECT_TRUE(moe_of(f, 2).fused_gate_up);
    EXPECT_FALSE(moe_of(f, 2).shared.fused);
    std::vector<float> fused = run_model(c, w, true, matmul_mode::AUTO, dtype::F32);
    std::vector<float> plain = run_model(c, w, false, matmul_mode::AUTO, dtype::F32);
    ASSERT_EQ(fused.size(), plain.size());
    EXPECT_EQ(0, std::memcmp(fused.data(), plain.data(), fused.size() * sizeof(float)));
}

// silu_mul_gate_up(gu, out) = silu_mul(gu[:, :ff], gu[:, ff:], out) bit for bit (the halves copied
// out by hand), for f32, bf16 and f16, with values from -12 to 12 and a few non-finite ones.
TEST(moe_fused, silu_mul_gate_up_equals_silu_mul_on_the_halves) {
    auto be = make_cpu_backend();
    const int64_t rows = 7, ff = 40;
    for (dtype t : {dtype::F32, dtype::BF16, dtype::F16}) {
        tensor gu = tensor::alloc(t, {rows, 2 * ff}), g = tensor::alloc(t, {rows, ff}), u = tensor::alloc(t, {rows, ff});
        uint32_t s = 12345;
        for (int64_t i = 0; i < gu.numel(); ++i) {
            s = s * 1664525u + 1013904223u;
            float v = (float(s >> 8) / float(1 << 24)) * 24.0f - 12.0f;
            if (i == 3) v = INFINITY;
            if (i == 2 * ff + 5) v = -INFINITY;
            if (i == 5 * ff + 1) v = NAN;
            store(gu.data, t, i, v);
        }
        const size_t es = dtype_size(t);
        for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(g.ptr<uint8_t>() + r * ff * es, gu.ptr<uint8_t>() + r * 2 * ff * es, ff * es);
            std::memcpy(u.ptr<uint8_t>() + r * ff * es, gu.ptr<uint8_t>() + (r * 2 + 1) * ff * es, ff * es);
        }
        tensor want = tensor::alloc(t, {rows, ff}), got = tensor::alloc(t, {rows, ff});
        be->silu_mul(g, u, want);
        be->silu_mul_gate_up(gu, got);
        EXPECT_EQ(0, std::memcmp(want.data, got.data, want.nbytes())) << dtype_name(t);
        int distinct = 0;
        for (int64_t i = 1; i < want.numel(); ++i) distinct += load_f32(want.data, t, i) != load_f32(want.data, t, 0);
        EXPECT_GT(distinct, rows * ff / 2) << "degenerate inputs: " << dtype_name(t);
    }
}

TEST(moe_fused, silu_mul_gate_up_rejects_bad_shapes_and_overlap) {
    auto be = make_cpu_backend();
    tensor gu = tensor::alloc(dtype::F32, {3, 10});
    struct bad_case {
        tensor out, in;
        const char* msg;
    } cases[] = {
        {tensor::alloc(dtype::F32, {3, 4}), tensor::alloc(dtype::F32, {3, 9}), "has 9 columns; expected an even number"},
        {tensor::alloc(dtype::F32, {3, 4}), gu, "'out' has shape [3, 4]"},
        {tensor::alloc(dtype::BF16, {3, 5}), gu, "'out'"},
        {tensor_reshape(tensor_rows(tensor_reshape(gu, {30}), 0, 15), {3, 5}), gu, "'out' overlaps 'gate_up'"},
    };
    for (const bad_case& b : cases) {
        try {
            be->silu_mul_gate_up(b.in, b.out);
            ADD_FAILURE() << "accepted: " << b.msg;
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find(b.msg), std::string::npos) << e.what();
        }
    }
}

}  // namespace
}  // namespace tetra
