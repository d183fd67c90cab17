// Loader tests: the checked-in reference checkpoints (tools/nvfp4_ref.py outputs), crafted ModelOpt
// and compressed-tensors checkpoints (fused groups with different global scales, exclusions by
// wildcard / re:, MTP, linear_attn, routers, lm_head), contradicting tensors and unsupported methods.
// Expected values are literals: spec test vectors (reference/nvfp4-format.md §10) or hand-chosen bytes.
#include <gtest/gtest.h>

#include <cstring>

#include "io/checkpoint.h"
#include "io/weights.h"
#include "nvfp4/nvfp4.h"
#include "test_checkpoint_util.h"

namespace tetra {
namespace {

const std::string k_data = std::string(TETRA_SOURCE_DIR) + "/tests/data/checkpoints/";

std::vector<float> dequant_row(const linear_weight& lw, int64_t row) {
    std::vector<float> out(size_t(lw.n_in));
    nvfp4_dequantize_row(lw.codes.ptr<uint8_t>() + row * lw.n_in / 2, lw.scales.ptr<uint8_t>() + row * lw.n_in / 16,
                         lw.scale_global, lw.n_in, out.data());
    return out;
}

// §10 T5 dequantized (tensor amax 2688 → weight_scale_2 = 1.0), planted in layers.1.mlp.down_proj row 0.
const float k_t5_dequant[16] = {9.75f, 4.875f, -2.4375f, 1.625f, 0, 3.25f, 3.25f, 6.5f,
                                6.5f,  1.625f, -0.0f,    0,      -9.75f, 0.8125f, 1.625f, -6.5f};

TEST(checkpoint, modelopt_reference_output_loads) {
    model_weights w = load_weights(k_data + "llama_tiny_modelopt_ref");
    EXPECT_EQ(w.format, "modelopt");
    EXPECT_EQ(w.quant_algo, "W4A16_NVFP4");
    EXPECT_EQ(w.exclude, std::vector<std::string>{"lm_head"});
    EXPECT_EQ(w.linears.size(), 21u);  // 3 layers × 7 projections
    const linear_weight& down = w.linear("model.layers.1.mlp.down_proj");
    ASSERT_EQ(down.kind, linear_kind::NVFP4);
    EXPECT_EQ(down.n_out, 64);
    EXPECT_EQ(down.n_in, 128);
    EXPECT_EQ(down.scale_global, 1.0f);
    EXPECT_FALSE(down.has_input_scale);
    std::vector<float> r0 = dequant_row(down, 0);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(r0[size_t(i)], k_t5_dequant[i]) << i;
    // §10 T6: tensor amax 3.0 → weight_scale_2 bits 0x3A924925, block C packed d7 a3 01 f6 24 59 68 0f.
    const linear_weight& o = w.linear("model.layers.2.self_attn.o_proj");
    EXPECT_EQ(f32_bits(o.scale_global), 0x3A924925u);
    const uint8_t t6c[8] = {0xd7, 0xa3, 0x01, 0xf6, 0x24, 0x59, 0x68, 0x0f};
    EXPECT_EQ(std::memcmp(o.codes.ptr<uint8_t>(), t6c, 8), 0);
    EXPECT_EQ(o.scales.ptr<uint8_t>()[0], 0x7E);
    // lm_head is excluded → dense; embeddings are not Linear → dense only with dense_ok.
    EXPECT_EQ(w.linear("lm_head").kind, linear_kind::DENSE);
    EXPECT_EQ(w.linear("lm_head").dense.type, dtype::BF16);
    EXPECT_EQ(w.linear("model.embed_tokens", true).n_out, 256);
    std::string msg = error_of([&] { w.linear("model.embed_tokens"); });
    EXPECT_NE(msg.find("'model.embed_tokens.weight'"), std::string::npos) << msg;
    EXPECT_EQ(w.get("model.norm.weight").shape, std::vector<int64_t>{64});
}

TEST(checkpoint, compressed_tensors_reference_output_loads) {
    model_weights w = load_weights(k_data + "llama_tiny_ct_ref");
    EXPECT_EQ(w.format, "compressed-tensors");
    EXPECT_EQ(w.quant_algo, "W4A16_NVFP4");
    EXPECT_EQ(w.linears.size(), 21u);
    EXPECT_TRUE(w.is_excluded("lm_head"));
    EXPECT_FALSE(w.is_excluded("lm_head.x"));  // CT plain names are exact
    const linear_weight& down = w.linear("model.layers.1.mlp.down_proj");
    EXPECT_EQ(down.scale_global, 1.0f);  // weight_global_scale 2688/2688 = 1
    std::vector<float> r0 = dequant_row(down, 0);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(r0[size_t(i)], k_t5_dequant[i]) << i;
    // §10 T6: CT stores 896.0; the loader keeps the dequant direction 1/896 (fp32).
    EXPECT_EQ(w.linear("model.layers.2.self_attn.o_proj").scale_global, 1.0f / 896.0f);
}

// q/k/v with different global scales: each projection keeps its own (no max()); dequantized
// values equal the per-module §3.3 formula. Codes 0x22 = (1.0, 1.0); scale 0x38 = 1.0, 0x30 = 0.5.
TEST(checkpoint, fused_partitions_keep_their_own_global_scale) {
    for (bool ct : {false, true}) {
        std::string dir = temp_dir("fused");
        ckpt_builder b;
        const char* mods[3] = {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
                               "model.layers.0.self_attn.v_proj"};
        const float s[3] = {0.5f, 0.25f, 2.0f};  // dequant direction; CT stores 2, 4, 0.5
        for (int i = 0; i < 3; ++i) {
            if (ct) b.ct(mods[i], 4, 32, 0x22, i == 1 ? 0x30 : 0x38, 1.0f / s[i]);
            else b.modelopt(mods[i], 4, 32, 0x22, i == 1 ? 0x30 : 0x38, s[i]);
        }
        b.write(dir);
        if (ct) write_json(dir + "/config.json", {{"quantization_config", ct_quantization_config(false, {})}});
        else write_json(dir + "/hf_quant_config.json", modelopt_hf_quant_config("W4A16_NVFP4", {}));
        model_weights w = load_weights(dir);
        const float expect[3] = {0.5f, 0.125f, 2.0f};  // 1.0 · e4m3 · S
        for (int i = 0; i < 3; ++i) {
            const linear_weight& lw = w.linear(mods[i]);
            EXPECT_EQ(lw.scale_global, s[i]) << mods[i] << " ct=" << ct;
            for (float v : dequant_row(lw, 3)) EXPECT_EQ(v, expect[i]) << mods[i] << " ct=" << ct;
        }
    }
}

TEST(checkpoint, w4a4_input_scales_both_directions) {
    std::string d1 = temp_dir("w4a4mo"), d2 = temp_dir("w4a4ct");
    ckpt_builder a;
    a.modelopt("m.q_proj", 2, 16, 0x22, 0x38, 0.5f);
    a.f32("m.q_proj.input_scale", {}, 0.25f);
    a.write(d1);
    write_json(d1 + "/hf_quant_config.json", modelopt_hf_quant_config("NVFP4", {}));
    const linear_weight& x = load_weights(d1).linears.at("m.q_proj");
    EXPECT_TRUE(x.has_input_scale);
    EXPECT_EQ(x.input_scale, 0.25f);
    EXPECT_EQ(x.input_global_quant, 4.0f);
    ckpt_builder b;
    b.ct("m.q_proj", 2, 16, 0x22, 0x38, 2.0f);
    b.f32("m.q_proj.input_global_scale", {1}, 8.0f);
    b.write(d2);
    write_json(d2 + "/config.json", {{"quantization_config", ct_quantization_config(true, {})}});
    model_weights w = load_weights(d2);
    EXPECT_EQ(w.quant_algo, "NVFP4");
    const linear_weight& y = w.linears.at("m.q_proj");
    EXPECT_EQ(y.input_scale, 0.125f);
    EXPECT_EQ(y.input_global_quant, 8.0f);
    // W4A4 without the activation scale is an error naming it.
    std::string d3 = temp_dir("w4a4miss");
    ckpt_builder c;
    c.modelopt("m.q_proj", 2, 16, 0x22, 0x38, 0.5f);
    c.write(d3);
    write_json(d3 + "/hf_quant_config.json", modelopt_hf_quant_config("NVFP4", {}));
    std::string msg = error_of([&] { load_weights(d3); });
    EXPECT_NE(msg.find("'m.q_proj.input_scale' is missing"), std::string::npos) << msg;
}

// Real-checkpoint exclusion shapes (§8): lm_head, routers, MTP, GDN linear_attn stay dense.
void check_exclusions(model_weights& w) {
    EXPECT_EQ(w.linears.size(), 2u);
    EXPECT_TRUE(w.linears.count("model.layers.0.self_attn.q_proj"));
    EXPECT_TRUE(w.linears.count("model.layers.0.mlp.experts.0.gate_proj"));
    for (const char* m : {"lm_head", "model.layers.0.mlp.gate", "model.mtp.eh_proj",
                          "model.layers.1.linear_attn.in_proj_qkvz", "model.layers.1.linear_attn.out_proj",
                          "model.layers.0.mlp.shared_expert_gate"}) {
        EXPECT_TRUE(w.is_excluded(m)) << m;
        EXPECT_EQ(w.linear(m).kind, linear_kind::DENSE) << m;
    }
    EXPECT_FALSE(w.is_excluded("model.layers.0.self_attn.q_proj"));
    // o_proj is dense but not excluded: asking for it as a linear is an error naming the tensor.
    std::string msg = error_of([&] { w.linear("model.layers.1.self_attn.o_proj"); });
    EXPECT_NE(msg.find("'model.layers.1.self_attn.o_proj.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("does not exclude"), std::string::npos) << msg;
    EXPECT_EQ(w.linear("model.layers.1.self_attn.o_proj", true).kind, linear_kind::DENSE);
}

void add_excluded_modules(ckpt_builder& b) {
    b.dense("lm_head.weight", 32, 16);
    b.dense("model.layers.0.mlp.gate.weight", 4, 16);
    b.dense("model.layers.0.mlp.shared_expert_gate.weight", 1, 16);
    b.dense("model.mtp.eh_proj.weight", 16, 32);
    b.dense("model.layers.1.linear_attn.in_proj_qkvz.weight", 64, 16);
    b.dense("model.layers.1.linear_attn.out_proj.weight", 16, 32);
    b.dense("model.layers.1.self_attn.o_proj.weight", 16, 16);
}

TEST(checkpoint, modelopt_exclusions_by_wildcard) {
    std::string dir = temp_dir("exmo");
    ckpt_builder b;
    b.modelopt("model.layers.0.self_attn.q_proj", 16, 16, 0x22, 0x38, 0.5f);
    b.modelopt("model.layers.0.mlp.experts.0.gate_proj", 16, 16, 0x22, 0x38, 0.5f);
    add_excluded_modules(b);
    b.write(dir);
    // "model.layers.0.mlp.gate*" (a ModelOpt prefix wildcard) covers the router and, by vLLM's
    // rule, only "gate" and "gate.*" — never "experts.0.gate_proj".
    write_json(dir + "/hf_quant_config.json",
               modelopt_hf_quant_config("W4A16_NVFP4", {"lm_head", "model.layers.0.mlp.gate*", "*mtp*",
                                                        "model.layers.*.linear_attn*", "*shared_expert_gate"}));
    model_weights w = load_weights(dir);
    check_exclusions(w);
}

TEST(checkpoint, compressed_tensors_exclusions_by_regex) {
    std::string dir = temp_dir("exct");
    ckpt_builder b;
    b.ct("model.layers.0.self_attn.q_proj", 16, 16, 0x22, 0x38, 2.0f);
    b.ct("model.layers.0.mlp.experts.0.gate_proj", 16, 16, 0x22, 0x38, 2.0f);
    add_excluded_modules(b);
    b.write(dir);
    // llm-compressor's Qwen3-Next ignore list (§8) plus MTP; re: is Python re.match (start-anchored).
    write_json(dir + "/config.json",
               {{"quantization_config",
                 ct_quantization_config(false, {"lm_head", "re:.*mlp.gate$", "re:.*mlp.shared_expert_gate$",
                                                "re:.*linear_attn.*", "re:model\\.mtp\\."})}});
    model_weights w = load_weights(dir);
    check_exclusions(w);
}

TEST(checkpoint, excluded_module_stored_quantized_is_an_error) {
    std::string d1 = temp_dir("exq1"), d2 = temp_dir("exq2");
    ckpt_builder a;
    a.modelopt("lm_head", 16, 16, 0x22, 0x38, 0.5f);
    a.write(d1);
    write_json(d1 + "/hf_quant_config.json", modelopt_hf_quant_config("W4A16_NVFP4", {"lm_head*"}));
    std::string msg = error_of([&] { load_weights(d1); });
    EXPECT_NE(msg.find("module 'lm_head' is excluded by pattern 'lm_head*'"), std::string::npos) << msg;
    ckpt_builder b;
    b.ct("model.layers.3.mlp.gate", 16, 16, 0x22, 0x38, 2.0f);
    b.write(d2);
    write_json(d2 + "/config.json", {{"quantization_config", ct_quantization_config(false, {"re:.*mlp.gate$"})}});
    msg = error_of([&] { load_weights(d2); });
    EXPECT_NE(msg.find("'model.layers.3.mlp.gate'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("stored quantized"), std::string::npos) << msg;
}

// One contradicting tensor per case; the message must name it and say what was expected.
struct bad_case {
    const char* what;
    void (*build)(ckpt_builder&);
    const char* tensor;
    const char* expect;
};

const bad_case k_bad_modelopt[] = {
    {"weight U8 but [out, in] not [out, in/2]",
     [](ckpt_builder& b) {
         b.bytes("m.q_proj.weight", dtype::U8, {4, 32}, 0x22);
         b.bytes("m.q_proj.weight_scale", dtype::E4M3, {4, 2}, 0x38);
         b.f32("m.q_proj.weight_scale_2", {}, 1.0f);
     },
     "'m.q_proj.weight' has shape [4, 32]", "expected [4, 16]"},
    {"weight_scale not F8_E4M3",
     [](ckpt_builder& b) {
         b.bytes("m.q_proj.weight", dtype::U8, {4, 16}, 0x22);
         b.f32("m.q_proj.weight_scale", {4, 2}, 1.0f);
         b.f32("m.q_proj.weight_scale_2", {}, 1.0f);
     },
     "'m.q_proj.weight_scale' has dtype F32", "expected F8_E4M3"},
    {"weight_scale_2 not a scalar",
     [](ckpt_builder& b) {
         b.bytes("m.q_proj.weight", dtype::U8, {4, 16}, 0x22);
         b.bytes("m.q_proj.weight_scale", dtype::E4M3, {4, 2}, 0x38);
         b.f32("m.q_proj.weight_scale_2", {2}, 1.0f);
     },
     "'m.q_proj.weight_scale_2'", "expected a scalar"},
    {"weight_scale_2 not F32",
     [](ckpt_builder& b) {
         b.bytes("m.q_proj.weight", dtype::U8, {4, 16}, 0x22);
         b.bytes("m.q_proj.weight_scale", dtype::E4M3, {4, 2}, 0x38);
         b.bytes("m.q_proj.weight_scale_2", dtype::BF16, {}, 0x3f);
     },
     "'m.q_proj.weight_scale_2'", "expected F32"},
    {"weight stored as BF16 next to a weight_scale",
     [](ckpt_builder& b) {
         b.dense("m.q_proj.weight", 4, 32);
         b.bytes("m.q_proj.weight_scale", dtype::E4M3, {4, 2}, 0x38);
         b.f32("m.q_proj.weight_scale_2", {}, 1.0f);
     },
     "'m.q_proj.weight' has dtype BF16", "expected U8"},
    {"weight_scale_2 without its module", [](ckpt_builder& b) { b.f32("m.q_proj.weight_scale_2", {}, 1.0f); },
     "'m.q_proj.weight'", "is missing"},
    {"W4A16 with an input_scale",
     [](ckpt_builder& b) {
         b.modelopt("m.q_proj", 4, 32, 0x22, 0x38, 1.0f);
         b.f32("m.q_proj.input_scale", {}, 1.0f);
     },
     "'m.q_proj.input_scale'", "weight-only"},
    {"zero weight_scale_2", [](ckpt_builder& b) { b.modelopt("m.q_proj", 4, 32, 0x22, 0x38, 0.0f); },
     "'m.q_proj.weight_scale_2'", "finite and > 0"},
};

TEST(checkpoint, modelopt_contradicting_tensors_are_errors_naming_them) {
    for (const bad_case& c : k_bad_modelopt) {
        std::string dir = temp_dir("badmo");
        ckpt_builder b;
        c.build(b);
        b.write(dir);
        write_json(dir + "/hf_quant_config.json", modelopt_hf_quant_config("W4A16_NVFP4", {}));
        std::string msg = error_of([&] { load_weights(dir); });
        EXPECT_NE(msg.find(c.tensor), std::string::npos) << c.what << ": " << msg;
        EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": " << msg;
    }
}

TEST(checkpoint, compressed_tensors_contradicting_tensors_are_errors_naming_them) {
    const bad_case cases[] = {
        {"weight_packed BF16",
         [](ckpt_builder& b) {
             b.dense("m.q_proj.weight_packed", 4, 16);
             b.bytes("m.q_proj.weight_scale", dtype::E4M3, {4, 2}, 0x38);
             b.f32("m.q_proj.weight_global_scale", {1}, 1.0f);
         },
         "'m.q_proj.weight_packed' has dtype BF16", "expected U8"},
        {"weight_global_scale zero", [](ckpt_builder& b) { b.ct("m.q_proj", 4, 32, 0x22, 0x38, 0.0f); },
         "'m.q_proj.weight_global_scale'", "finite and > 0"},
        {"weight_scale rows differ",
         [](ckpt_builder& b) {
             b.bytes("m.q_proj.weight_packed", dtype::U8, {4, 16}, 0x22);
             b.bytes("m.q_proj.weight_scale", dtype::E4M3, {8, 2}, 0x38);
             b.f32("m.q_proj.weight_global_scale", {1}, 1.0f);
         },
         "'m.q_proj.weight_packed' has shape [4, 16]", "expected [8, 16]"},
        {"weight_scale without weight_packed",
         [](ckpt_builder& b) { b.bytes("m.q_proj.weight_scale", dtype::E4M3, {4, 2}, 0x38); },
         "'m.q_proj.weight_packed'", "is missing"},
    };
    for (const bad_case& c : cases) {
        std::string dir = temp_dir("badct");
        ckpt_builder b;
        c.build(b);
        b.write(dir);
        write_json(dir + "/config.json", {{"quantization_config", ct_quantization_config(false, {})}});
        std::string msg = error_of([&] { load_weights(dir); });
        EXPECT_NE(msg.find(c.tensor), std::string::npos) << c.what << ": " << msg;
        EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": " << msg;
    }
}

std::string load_error_with_config(const nlohmann::json& qc, bool hf_quant_file = false) {
    std::string dir = temp_dir("unsup");
    ckpt_builder b;
    b.modelopt("m.q_proj", 4, 32, 0x22, 0x38, 1.0f);
    b.write(dir);
    if (hf_quant_file) write_json(dir + "/hf_quant_config.json", qc);
    else write_json(dir + "/config.json", {{"quantization_config", qc}});
    return error_of([&] { load_weights(dir); });
}

TEST(checkpoint, unsupported_methods_list_what_is_supported) {
    for (const char* m : {"gptq", "awq", "fp8", "mxfp4", "bitsandbytes", "gguf"}) {
        std::string msg = load_error_with_config({{"quant_method", m}, {"bits", 4}});
        EXPECT_NE(msg.find(std::string("quant_method '") + m + "' is not supported"), std::string::npos) << msg;
        EXPECT_NE(msg.find(k_supported_checkpoints), std::string::npos) << msg;
    }
    for (const char* f : {"pack-quantized", "int-quantized", "float-quantized", "naive-quantized",
                          "mxfp4-pack-quantized"}) {
        std::string msg = load_error_with_config(ct_quantization_config(false, {}, f));
        EXPECT_NE(msg.find(std::string("format '") + f + "' is not supported"), std::string::npos) << msg;
        EXPECT_NE(msg.find("supported: "), std::string::npos) << msg;
    }
    for (const char* a : {"FP8", "NVFP4_AWQ", "W4A8_NVFP4_FP8", "INT4_AWQ"}) {
        std::string msg = load_error_with_config(modelopt_hf_quant_config(a, {}), true);
        EXPECT_NE(msg.find(std::string("quant_algo '") + a + "' is not supported"), std::string::npos) << msg;
        EXPECT_NE(msg.find(k_supported_checkpoints), std::string::npos) << msg;
    }
    // CT int8 W8A8 scheme inside a group claiming nvfp4-pack-quantized: the args are checked too.
    nlohmann::json qc = ct_quantization_config(false, {});
    qc["config_groups"]["group_0"]["weights"]["num_bits"] = 8;
    qc["config_groups"]["group_0"]["weights"]["type"] = "int";
    std::string msg = load_error_with_config(qc);
    EXPECT_NE(msg.find("config_groups.group_0.weights"), std::string::npos) << msg;
}

TEST(checkpoint, mixed_precision_only_when_every_layer_is_nvfp4) {
    nlohmann::json mixed = {{"producer", {{"name", "modelopt"}}},
                            {"quantization", {{"quant_algo", "MIXED_PRECISION"}, {"kv_cache_quant_algo", nullptr},
                                              {"quantized_layers", {{"m.q_proj", {{"quant_algo", "W4A16_NVFP4"},
                                                                                  {"group_size", 16}}},
                                                                    {"m.k_proj", {{"quant_algo", "FP8"}}}}}}}};
    std::string msg = load_error_with_config(mixed, true);
    EXPECT_NE(msg.find("layer 'm.k_proj' has quant_algo 'FP8'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("all NVFP4"), std::string::npos) << msg;

    std::string dir = temp_dir("mixed");
    ckpt_builder b;
    b.modelopt("m.q_proj", 4, 32, 0x22, 0x38, 1.0f);
    b.dense("m.k_proj.weight", 4, 32);
    b.write(dir);
    mixed["quantization"]["quantized_layers"].erase("m.k_proj");
    write_json(dir + "/hf_quant_config.json", mixed);
    model_weights w = load_weights(dir);
    EXPECT_EQ(w.quant_algo, "W4A16_NVFP4");
    EXPECT_EQ(w.linear("m.q_proj").kind, linear_kind::NVFP4);
    EXPECT_TRUE(w.is_excluded("m.k_proj"));  // not listed → unquantized
    EXPECT_EQ(w.linear("m.k_proj").kind, linear_kind::DENSE);
}

TEST(checkpoint, dense_checkpoint_and_quantized_looking_tensors) {
    model_weights w = load_weights(k_data + "llama_tiny");
    EXPECT_EQ(w.format, "dense");
    EXPECT_EQ(w.quant_algo, "");
    EXPECT_TRUE(w.linears.empty());
    const linear_weight& q = w.linear("model.layers.0.self_attn.q_proj");
    EXPECT_EQ(q.kind, linear_kind::DENSE);
    EXPECT_EQ(q.n_out, 64);
    EXPECT_EQ(q.n_in, 64);
    std::string dir = temp_dir("dense_bad");
    ckpt_builder b;
    b.modelopt("m.q_proj", 4, 32, 0x22, 0x38, 1.0f);
    b.write(dir);
    write_json(dir + "/config.json", {{"model_type", "llama"}});
    std::string msg = error_of([&] { load_weights(dir); });
    EXPECT_NE(msg.find("'m.q_proj.weight_scale"), std::string::npos) << msg;
    EXPECT_NE(msg.find("declares no quantization"), std::string::npos) << msg;
}

TEST(checkpoint, scale_health_counts) {
    const uint8_t s[] = {0x7E, 0x7E, 0x00, 0x01, 0x07, 0x08, 0x38, 0x7F, 0x80, 0x20};
    scale_health h = scale_health_of(s, 10);
    EXPECT_EQ(h.n_blocks, 10);
    EXPECT_EQ(h.n_saturated, 2);
    EXPECT_EQ(h.n_zero, 1);
    EXPECT_EQ(h.n_subnormal, 2);  // 0x01, 0x07 (0x08 is the smallest normal)
    EXPECT_EQ(h.n_invalid, 2);    // 0x7F NaN, 0x80 sign bit
}

}  // namespace
}  // namespace tetra
