// A tensor stored in a form that contradicts the config is a load error naming it (issue 6 point 6):
// one module stored both packed and dense, a packed tensor of the other format, U8 codes without
// their block scales. Crafted checkpoints in both formats; the well-formed twin of each loads.
#include <gtest/gtest.h>

#include "io/weights.h"
#include "test_checkpoint_util.h"

namespace tetra {
namespace {

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

const char* const k_q = "model.layers.0.self_attn.q_proj";

std::string write_ct(ckpt_builder& b, const std::string& tag) {
    std::string dir = temp_dir(tag);
    b.write(dir);
    write_json(dir + "/config.json", {{"quantization_config", ct_quantization_config(false, {"lm_head"})}});
    return dir;
}

std::string write_modelopt(ckpt_builder& b, const std::string& tag) {
    std::string dir = temp_dir(tag);
    b.write(dir);
    write_json(dir + "/hf_quant_config.json", modelopt_hf_quant_config("W4A16_NVFP4", {"lm_head"}));
    return dir;
}

TEST(checkpoint_forms, compressed_tensors_module_stored_packed_and_dense) {
    ckpt_builder ok;
    ok.ct(k_q, 16, 32, 0x22, 0x38, 2.0f);
    ok.dense("lm_head.weight", 8, 32);
    model_weights w = load_weights(write_ct(ok, "forms_ct_ok"));
    EXPECT_EQ(w.linear(k_q).kind, linear_kind::NVFP4);
    EXPECT_EQ(w.linear("lm_head").kind, linear_kind::DENSE);

    ckpt_builder b;
    b.ct(k_q, 16, 32, 0x22, 0x38, 2.0f);
    b.dense(std::string(k_q) + ".weight", 16, 32);  // the bf16 original left next to the packed form
    b.dense("lm_head.weight", 8, 32);
    std::string dir = write_ct(b, "forms_ct_both");
    std::string e = error_of([&] { load_weights(dir); });
    EXPECT_TRUE(has(e, "module 'model.layers.0.self_attn.q_proj' is stored twice: packed NVFP4 "
                       "('model.layers.0.self_attn.q_proj.weight_packed') and as tensor "
                       "'model.layers.0.self_attn.q_proj.weight' (BF16 [16, 32]); expected only the packed form"))
        << e;
    EXPECT_TRUE(has(e, "compressed-tensors W4A16_NVFP4")) << e;
}

TEST(checkpoint_forms, compressed_tensors_with_modelopt_scale_tensors) {
    ckpt_builder b;
    b.ct(k_q, 16, 32, 0x22, 0x38, 2.0f);
    b.f32(std::string(k_q) + ".weight_scale_2", {}, 0.5f);  // ModelOpt's global scale
    std::string e = error_of([&] { load_weights(write_ct(b, "forms_ct_s2")); });
    EXPECT_TRUE(has(e, "tensor 'model.layers.0.self_attn.q_proj.weight_scale_2' (F32 []) is a ModelOpt tensor")) << e;
    EXPECT_TRUE(has(e, "module 'model.layers.0.self_attn.q_proj' is already loaded from its compressed-tensors "
                       "tensors; expected no such tensor")) << e;
}

TEST(checkpoint_forms, modelopt_module_with_a_compressed_tensors_packed_form) {
    ckpt_builder ok;
    ok.modelopt(k_q, 16, 32, 0x22, 0x38, 0.5f);
    ok.dense("lm_head.weight", 8, 32);
    model_weights w = load_weights(write_modelopt(ok, "forms_mo_ok"));
    EXPECT_EQ(w.linear(k_q).kind, linear_kind::NVFP4);

    // Packed twice: ModelOpt codes in .weight and compressed-tensors codes in .weight_packed.
    ckpt_builder b;
    b.modelopt(k_q, 16, 32, 0x22, 0x38, 0.5f);
    b.bytes(std::string(k_q) + ".weight_packed", dtype::U8, {16, 16}, 0x22);
    std::string e = error_of([&] { load_weights(write_modelopt(b, "forms_mo_both")); });
    EXPECT_TRUE(has(e, "tensor 'model.layers.0.self_attn.q_proj.weight_packed' (U8 [16, 16]) is a compressed-tensors "
                       "tensor")) << e;
    EXPECT_TRUE(has(e, "declares modelopt W4A16_NVFP4 and module 'model.layers.0.self_attn.q_proj' is already "
                       "loaded from its modelopt tensors")) << e;

    // Dense bf16 .weight plus a packed .weight_packed of the same module.
    ckpt_builder d;
    d.modelopt("model.layers.0.self_attn.k_proj", 16, 32, 0x22, 0x38, 0.5f);
    d.dense(std::string(k_q) + ".weight", 16, 32);
    d.bytes(std::string(k_q) + ".weight_packed", dtype::U8, {16, 16}, 0x22);
    e = error_of([&] { load_weights(write_modelopt(d, "forms_mo_dense")); });
    EXPECT_TRUE(has(e, "tensor 'model.layers.0.self_attn.q_proj.weight_packed' (U8 [16, 16]) is a compressed-tensors "
                       "tensor, but")) << e;
}

TEST(checkpoint_forms, modelopt_dense_weight_with_block_scales) {
    // weight_scale marks the module NVFP4, so a bf16 .weight contradicts it (named, with the dtype).
    ckpt_builder b;
    b.dense(std::string(k_q) + ".weight", 16, 32);
    b.bytes(std::string(k_q) + ".weight_scale", dtype::E4M3, {16, 2}, 0x38);
    b.f32(std::string(k_q) + ".weight_scale_2", {}, 0.5f);
    std::string e = error_of([&] { load_weights(write_modelopt(b, "forms_mo_bf16")); });
    EXPECT_TRUE(has(e, "tensor 'model.layers.0.self_attn.q_proj.weight' has dtype BF16; expected U8")) << e;
}

TEST(checkpoint_forms, modelopt_packed_codes_without_scales) {
    ckpt_builder b;
    b.modelopt("model.layers.0.self_attn.k_proj", 16, 32, 0x22, 0x38, 0.5f);
    b.bytes(std::string(k_q) + ".weight", dtype::U8, {16, 16}, 0x22);
    std::string e = error_of([&] { load_weights(write_modelopt(b, "forms_mo_u8")); });
    EXPECT_TRUE(has(e, "tensor 'model.layers.0.self_attn.q_proj.weight' is U8 [16, 16] (packed NVFP4 codes) but "
                       "'model.layers.0.self_attn.q_proj.weight_scale' is missing")) << e;
}

}  // namespace
}  // namespace tetra
