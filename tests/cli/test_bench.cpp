// `tetra bench` end to end on the CPU (the built binary, --json): the MoE active-bytes accounting.
// Expected values come from the checked-in config's literals (configs/qwen3-moe-tiny-nvfp4: 16
// experts, top-2, 3 MoE layers of 512 × 256 NVFP4 experts) and the definition in docs/perf.md
// (each distinct routed expert's weights once per step), never from the bench's own code.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
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
