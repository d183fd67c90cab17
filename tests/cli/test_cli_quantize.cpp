// `tetra quantize` and `tetra inspect` end to end: runs the built binary (TETRA_BINARY_DIR/cli/tetra)
// on the checked-in tiny checkpoint. Expected counts come from the planted data (one underflowing
// block, etc.) and from a plain byte count over the reference goldens, never from the inspect code.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "io/safetensors.h"

namespace tetra {
namespace {

namespace fs = std::filesystem;
const std::string k_tetra = std::string(TETRA_BINARY_DIR) + "/cli/tetra";
const std::string k_data = std::string(TETRA_SOURCE_DIR) + "/tests/data/checkpoints/";

struct proc_result {
    int status = -1;
    std::string out;  // stdout and stderr
};

proc_result run_tetra(const std::string& args) {
    proc_result r;
    std::string cmd = k_tetra + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    EXPECT_NE(p, nullptr) << cmd;
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

std::string temp_dir(const char* tag) {
    std::string t = (fs::temp_directory_path() / (std::string("tetra_cli_") + tag + "_XXXXXX")).string();
    EXPECT_NE(mkdtemp(&t[0]), nullptr);
    return t;
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

TEST(cli_quantize, quantizes_then_refuses_to_overwrite_without_force) {
    ASSERT_TRUE(fs::exists(k_tetra)) << "build the tetra binary first";
    std::string dst = temp_dir("q") + "/out";  // a directory that does not exist yet
    proc_result r = run_tetra("quantize " + k_data + "llama_tiny " + dst);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "quantized 21 linear modules")) << r.out;
    EXPECT_TRUE(contains(r.out, "  lm_head\n")) << r.out;
    EXPECT_TRUE(fs::exists(dst + "/hf_quant_config.json"));
    EXPECT_TRUE(fs::exists(dst + "/generation_config.json"));
    r = run_tetra("quantize " + k_data + "llama_tiny " + dst);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(contains(r.out, "error: destination '" + dst + "' is not empty")) << r.out;
    EXPECT_TRUE(contains(r.out, "hint: pass --force")) << r.out;
    r = run_tetra("quantize " + k_data + "llama_tiny " + dst + " --force --format compressed-tensors "
                  "--exclude 'model.layers.2*' --max-shard-size 100KB");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "quantized 14 linear modules")) << r.out;  // layer 2's 7 kept dense
    EXPECT_FALSE(fs::exists(dst + "/hf_quant_config.json"));              // stale ModelOpt file removed
    EXPECT_TRUE(fs::exists(dst + "/model.safetensors.index.json"));
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dst + "/config.json"));
    EXPECT_EQ(cfg["quantization_config"]["ignore"].size(), 8u);
    EXPECT_EQ(cfg["quantization_config"]["ignore"][0], "lm_head");
}

TEST(cli_quantize, bad_arguments_fail_cleanly) {
    proc_result r = run_tetra("quantize " + k_data + "llama_tiny " + temp_dir("b") + " --format mxfp4");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "--format")) << r.out;
    r = run_tetra("quantize " + k_data + "llama_tiny " + temp_dir("b") + " --max-shard-size 5XB");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(contains(r.out, "error: size '5XB'")) << r.out;
    r = run_tetra("quantize " + k_data + "does_not_exist " + temp_dir("b"));
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(contains(r.out, "does_not_exist")) << r.out;
    r = run_tetra("inspect " + k_data + "does_not_exist");
    EXPECT_EQ(r.status, 1) << r.out;
}

// Counting scale bytes of the golden directly: the independent side of the inspect check.
struct counts { int64_t blocks = 0, sat = 0, sub = 0, zero = 0; };
counts count_golden(const std::string& dir) {
    counts c;
    safetensors_model st = safetensors_model::open_dir(dir);
    for (const std::string& n : st.names()) {
        if (n.size() < 13 || n.compare(n.size() - 13, 13, ".weight_scale") != 0) continue;
        tensor t = st.get(n);
        for (int64_t i = 0; i < t.numel(); ++i) {
            uint8_t b = t.ptr<uint8_t>()[i];
            c.blocks++;
            c.sat += b == 0x7E;
            c.zero += b == 0x00;
            c.sub += b >= 0x01 && b <= 0x07;
        }
    }
    return c;
}

TEST(cli_inspect, table_and_json) {
    const std::string dir = k_data + "llama_tiny_modelopt_ref";
    proc_result r = run_tetra("inspect " + dir);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "format:     modelopt\n")) << r.out;
    EXPECT_TRUE(contains(r.out, "quant_algo: W4A16_NVFP4\n")) << r.out;
    EXPECT_TRUE(contains(r.out, "exclusions (1):\n  lm_head\n")) << r.out;
    EXPECT_TRUE(contains(r.out, "tensors (72):")) << r.out;
    EXPECT_TRUE(contains(r.out, "model.layers.0.self_attn.q_proj.weight_scale    F8_E4M3   [64, 4]\n")) << r.out;
    EXPECT_TRUE(contains(r.out, "model.layers.0.self_attn.q_proj.weight_scale_2  F32       []\n")) << r.out;
    EXPECT_TRUE(contains(r.out, "block-scale health (21 NVFP4 linears)")) << r.out;
    EXPECT_TRUE(contains(r.out, "scale_global: min ")) << r.out;

    r = run_tetra("inspect --json " + dir);
    ASSERT_EQ(r.status, 0) << r.out;
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["format"], "modelopt");
    EXPECT_EQ(j["tensors"].size(), 72u);
    EXPECT_EQ(j["linears"].size(), 21u);
    counts c = count_golden(dir);
    EXPECT_EQ(j["total"]["blocks"], c.blocks);
    EXPECT_EQ(j["total"]["saturated"], c.sat);
    EXPECT_EQ(j["total"]["subnormal"], c.sub);
    EXPECT_EQ(j["total"]["zero"], c.zero);
    EXPECT_EQ(j["total"]["zero"], 1);  // the one planted underflowing block (layers.0 q_proj)
    EXPECT_EQ(j["total"]["scale_global_max"], 1.0);  // layers.1 down_proj: amax 2688
    for (const auto& l : j["linears"])
        if (l["module"] == "model.layers.0.self_attn.q_proj") EXPECT_EQ(l["zero"], 1);
    // compressed-tensors: underflow is replaced by 0.125 (0x20), so no zero scales.
    r = run_tetra("inspect --json " + k_data + "llama_tiny_ct_ref");
    ASSERT_EQ(r.status, 0) << r.out;
    j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["format"], "compressed-tensors");
    EXPECT_EQ(j["total"]["zero"], 0);
    // dense checkpoint: no health section.
    r = run_tetra("inspect " + k_data + "llama_tiny");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "format:     dense\nquant_algo: (none)\n")) << r.out;
    EXPECT_FALSE(contains(r.out, "block-scale health")) << r.out;
}

}  // namespace
}  // namespace tetra
