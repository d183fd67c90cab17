// `tetra bench` end to end on the CPU (the built binary, --json): the MoE active-bytes accounting.
// Expected values come from the checked-in config's literals (configs/qwen3-moe-tiny-nvfp4: 16
// experts, top-2, 3 MoE layers of 512 × 256 NVFP4 experts) and the definition in docs/perf.md
// (each distinct routed expert's weights once per step), never from the bench's own code.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace {

const std::string k_tetra = std::string(TETRA_BINARY_DIR) + "/cli/tetra";
const std::string k_configs = std::string(TETRA_SOURCE_DIR) + "/configs/";

nlohmann::json bench_json(const std::string& args) {
    const std::string cmd = "env -u TETRA_KERNEL " + k_tetra + " bench " + args + " --json 2>/dev/null";
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    EXPECT_NE(p, nullptr) << cmd;
    if (!p) return {};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int st = pclose(p);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cmd << "\n" << out;
    return nlohmann::json::parse(out, nullptr, false);
}

}  // namespace

// Batch 1 reads the token's 2 experts per MoE layer; batch 6 reads every distinct expert the batch
// was routed to once: GB/step grows by (distinct − 2) × 3 layers × one expert's bytes, beside the
// KV of the extra sequences.
TEST(cli_bench, moe_bytes_count_each_distinct_routed_expert) {
    // context: 8 prompt tokens, 4 warm-up steps, then 2 timed steps at positions 12 and 13 (the
    // bench's KV count is Σ (position + 1) over the timed steps and sequences, per step)
    nlohmann::json j = bench_json(k_configs + "qwen3-moe-tiny-nvfp4 --load-format dummy --device cpu --batch 1,6 "
                                  "--input-len 8 --output-len 2 --skip-selftest");
    ASSERT_TRUE(j.is_object());
    ASSERT_EQ(j["decode"].size(), 2u);
    const double weights = j["weight_bytes_per_step"], kv_tok = j["kv_bytes_per_token"];
    const double expert = 3.0 * 512 * 256 * (0.5 + 1.0 / 16);  // gate + up + down codes and e4m3 scales
    const auto& b1 = j["decode"][0];
    const auto& b6 = j["decode"][1];
    EXPECT_EQ(b1["moe_experts_per_layer"].get<double>(), 2.0);
    EXPECT_DOUBLE_EQ(b1["bytes_per_step"].get<double>(), weights + 1 * 13.5 * kv_tok);
    const double d = b6["moe_experts_per_layer"];  // mean over the 3 MoE layers
    EXPECT_GE(d, 2.0);
    EXPECT_LE(d, 12.0);  // 6 tokens × top-2
    EXPECT_GT(d, 2.0) << "six random tokens all routed to the same two experts in every layer";
    EXPECT_NEAR(b6["bytes_per_step"].get<double>(), weights + 6 * 13.5 * kv_tok + (d - 2.0) * 3 * expert, 1.0);
}

// A dense model reports no MoE experts, and its bytes per step do not depend on the batch beyond KV.
TEST(cli_bench, dense_bytes_are_the_weights_and_kv) {
    nlohmann::json j = bench_json(k_configs + "smollm2-135m-nvfp4 --load-format dummy --device cpu --batch 1,2 "
                                  "--input-len 8 --output-len 2 --skip-selftest");
    ASSERT_TRUE(j.is_object());
    ASSERT_EQ(j["decode"].size(), 2u);
    const double weights = j["weight_bytes_per_step"], kv_tok = j["kv_bytes_per_token"];
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(j["decode"][i]["moe_experts_per_layer"].get<double>(), 0.0);
        EXPECT_DOUBLE_EQ(j["decode"][i]["bytes_per_step"].get<double>(), weights + (i + 1) * 13.5 * kv_tok);
    }
}

// --breakdown: one row per op class the step reaches, with the calls per step and the weights each
// class reads, from the config's literals (4 layers, layer 1 dense (mlp_only_layers), 3 MoE layers
// of top-2 512 × 256 NVFP4 experts, bf16 lm_head 8192 × 512 (excluded from quantization), dense
// FFN 512 × 1024 NVFP4).
TEST(cli_bench, breakdown_lists_every_op_class_of_the_step) {
    nlohmann::json j = bench_json(k_configs + "qwen3-moe-tiny-nvfp4 --load-format dummy --device cpu --batch 1 "
                                  "--input-len 8 --output-len 2 --skip-selftest --breakdown --breakdown-rounds 1");
    ASSERT_TRUE(j.is_object());
    ASSERT_TRUE(j.contains("breakdown"));
    const auto& b = j["breakdown"];
    EXPECT_EQ(b["batch"].get<int>(), 1);
    const double nvfp4 = 0.5 + 1.0 / 16;  // bytes per weight: e2m1 code + one e4m3 scale per 16
    const std::map<std::string, std::pair<int, double>> want = {
        {"embedding", {1, 0}},
        {"attn_norm", {4, 0}},
        {"qkv", {4, 4 * (8 + 2 * 4) * 64 * 512 * nvfp4}},
        {"rope_kv", {4, 0}},
        {"attention", {4, 0}},
        {"o_proj", {4, 4 * 512 * 8 * 64 * nvfp4}},
        {"ffn_norm", {4, 0}},
        {"gate_up", {1, 2 * 1024 * 512 * nvfp4}},
        {"down", {1, 512 * 1024 * nvfp4}},
        {"router", {3, 3 * 16 * 512 * 2.0}},
        {"route", {3, 0}},
        {"gather", {3, 0}},
        {"expert_gate_up", {3, 3 * 2 * 2 * 256 * 512 * nvfp4}},
        {"expert_down", {3, 3 * 2 * 512 * 256 * nvfp4}},
        {"combine", {3, 0}},
        {"output_norm", {1, 0}},
        {"lm_head", {1, 8192 * 512 * 2.0}},
    };
    std::map<std::string, std::pair<int, double>> got;
    for (const auto& r : b["ops"]) {
        got[r["op"].get<std::string>()] = {r["calls_per_step"].get<int>(), r["weight_bytes_per_step"].get<double>()};
        EXPECT_GT(r["ms_per_step_without"].get<double>(), 0.0) << r.dump();
    }
    EXPECT_EQ(got, want);
}
