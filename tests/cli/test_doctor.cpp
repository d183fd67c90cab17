// `tetra doctor` and strict configuration end to end: runs the built binary (TETRA_BINARY_DIR/cli/tetra).
// Expected values are literals from the build (no CUDA backend in a CPU build), from the checked-in
// tiny checkpoint's shapes (3 layers × 2304 scale blocks) and from the flag tables, never from the
// doctor's own code. Fault-injection cases run only in TETRA_FAULT_INJECTION builds.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

namespace {

const std::string k_tetra = std::string(TETRA_BINARY_DIR) + "/cli/tetra";
const std::string k_tiny = std::string(TETRA_SOURCE_DIR) + "/tests/data/checkpoints/llama_tiny_modelopt_ref";

struct proc_result {
    int status = -1;
    std::string out;  // stdout (and stderr when merged)
};

proc_result run_cmd(const std::string& cmd) {
    proc_result r;
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

// env: "NAME=value " prefixes; stderr merged unless json_only.
proc_result run_tetra(const std::string& args, const std::string& env = "", bool json_only = false) {
    return run_cmd("env -u TETRA_KERNEL " + env + " " + k_tetra + " " + args + (json_only ? " 2>/dev/null" : " 2>&1"));
}

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

const nlohmann::json* find_by(const nlohmann::json& arr, const char* key, const std::string& v) {
    for (const auto& x : arr)
        if (x[key] == v) return &x;
    return nullptr;
}

}  // namespace

TEST(cli_doctor, reports_build_device_kernels_and_selftest) {
    ASSERT_TRUE(std::filesystem::exists(k_tetra)) << "build the tetra binary first";
    proc_result r = run_tetra("doctor --device cpu --json", "", true);
    ASSERT_EQ(r.status, 0) << r.out;
    nlohmann::json j = nlohmann::json::parse(r.out);
#ifndef TETRA_HAVE_CUDA
    EXPECT_EQ(j["build"]["cuda_backend"], false);
    EXPECT_EQ(j["device"]["cuda"], "no CUDA backend in this build");
    EXPECT_EQ(j["device"]["driver_version"], "n/a (no CUDA backend in this build)");
    EXPECT_EQ(j["device"]["runtime_version"], "n/a (no CUDA backend in this build)");
#else
    // "major.minor" from cudaRuntimeGetVersion / cudaDriverGetVersion (no driver: says so).
    const std::regex ver("[1-9][0-9]*\\.[0-9]+");
    EXPECT_TRUE(std::regex_match(j["device"]["runtime_version"].get<std::string>(), ver)) << j["device"].dump();
    EXPECT_TRUE(std::regex_match(j["device"]["runtime_built_with"].get<std::string>(), ver)) << j["device"].dump();
    std::string drv = j["device"]["driver_version"].get<std::string>();
    EXPECT_TRUE(std::regex_match(drv, ver) || drv == "none (no CUDA driver installed)") << drv;
#endif
    EXPECT_EQ(j["device"]["kind"], "cpu");  // --device cpu
    EXPECT_EQ(j["device"]["compute_capability"], "n/a");
    EXPECT_TRUE(has(j["device"]["e2m1"].get<std::string>(), "software")) << j["device"]["e2m1"];
    EXPECT_GT(j["device"]["bandwidth_gbs"].get<double>(), 0.1);
    EXPECT_GT(j["device"]["memory_bytes"].get<int64_t>(), int64_t(1) << 28);
    // The kernel table: every op, each plain kernel eligible with an empty reason.
    const nlohmann::json* mm = find_by(j["kernels"], "op", "matmul_nvfp4_w4a16");
    ASSERT_NE(mm, nullptr);
    const nlohmann::json* plain = find_by((*mm)["kernels"], "kernel", "matmul_nvfp4_w4a16_cpu");
    ASSERT_NE(plain, nullptr);
    EXPECT_EQ((*plain)["eligible"], true);
    EXPECT_EQ((*plain)["why_not"], "");
    // Self-test of the synthetic model: every real kernel passes; one line per layer class.
    for (const auto& x : j["selftest"]["results"])
        if (x["kernel"].get<std::string>().rfind("faulty_", 0) != 0) {
            EXPECT_EQ(x["passed"], true) << x.dump();
        }
    const nlohmann::json* down = find_by(j["selftest"]["chosen"], "what", "linear nvfp4 256x512");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ((*down)["classes"], "mlp.down_proj");
    EXPECT_EQ(j["ok"], true);
    EXPECT_FALSE(j.contains("model"));
    EXPECT_EQ(j["activations"], "f32");  // the CPU default
}

// --dtype: the self-test runs its cases at that activation dtype; float16 is refused with the reason.
TEST(cli_doctor, dtype_sets_the_selftest_activation_dtype) {
    proc_result r = run_tetra("doctor --device cpu --dtype bfloat16 --json", "", true);
    ASSERT_EQ(r.status, 0) << r.out;
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["activations"], "bf16");
    int bf16_cases = 0;
    for (const auto& x : j["selftest"]["results"]) bf16_cases += has(x["case"].get<std::string>(), " bf16");
    EXPECT_GT(bf16_cases, 5) << j["selftest"].dump();
    r = run_tetra("doctor --device cpu --dtype float16");
    EXPECT_NE(r.status, 0);
    EXPECT_TRUE(has(r.out, "--dtype float16: tetra's matmul kernels take bfloat16 or float32 activations")) << r.out;
}

TEST(cli_doctor, model_checkpoint_facts_and_layer_classes) {
    proc_result r = run_tetra("doctor --device cpu " + k_tiny + " --json", "", true);
    ASSERT_EQ(r.status, 0) << r.out;
    nlohmann::json j = nlohmann::json::parse(r.out);
    const nlohmann::json& m = j["model"];
    EXPECT_EQ(m["format"], "modelopt");
    EXPECT_EQ(m["quant_algo"], "W4A16_NVFP4");
    EXPECT_EQ(m["exclude"], nlohmann::json::array({"lm_head"}));
    EXPECT_EQ(m["dense_linears"], nlohmann::json::array({"lm_head"}));
    EXPECT_EQ(m["nvfp4_linears"], 21);
    // Per layer: (64·64 + 2·32·64 + 64·64 + 2·128·64 + 64·128) / 16 = 2304 blocks; 3 layers.
    EXPECT_EQ(m["scale_health"]["blocks"], 6912);
    EXPECT_EQ(m["scale_health"]["invalid"], 0);
    const nlohmann::json* down = find_by(j["selftest"]["chosen"], "what", "linear nvfp4 64x128");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ((*down)["classes"], "mlp.down_proj");
    EXPECT_NE(find_by(j["selftest"]["chosen"], "what", "linear dense bf16 256x64"), nullptr);  // lm_head
    // Text mode prints the same facts.
    r = run_tetra("doctor --device cpu " + k_tiny);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "format:    modelopt, quant_algo W4A16_NVFP4, 21 NVFP4 linears")) << r.out;
#ifndef TETRA_HAVE_CUDA
    EXPECT_TRUE(has(r.out, "cuda:      no CUDA backend in this build\n")) << r.out;
#else
    EXPECT_TRUE(has(r.out, "(driver ")) << r.out;
    EXPECT_TRUE(has(r.out, ", built with ")) << r.out;
#endif
    EXPECT_TRUE(has(r.out, "linear nvfp4 64x128 → matmul_nvfp4_w4a16_")) << r.out;
}

TEST(cli_strict, unknown_flags_suggest_the_closest) {
    proc_result r = run_tetra("doctor --jsn");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "hint: unknown flag --jsn; did you mean --json?")) << r.out;
    r = run_tetra("run " + k_tiny + " -p hi --temprature 0.5");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "did you mean --temperature?")) << r.out;
    r = run_tetra("run " + k_tiny + " -p hi --skip-self-test");
    EXPECT_TRUE(has(r.out, "did you mean --skip-selftest?")) << r.out;
    r = run_tetra("doctor --device cpu --completely-different");  // nothing close: no guess
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_FALSE(has(r.out, "did you mean")) << r.out;
}

TEST(cli_strict, environment_and_forced_kernels) {
    proc_result r = run_tetra("doctor", "TETRA_FOO=1");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out, "error: unknown environment variable(s): TETRA_FOO")) << r.out;
    r = run_tetra("doctor", "TETRA_KERNEL=rms_norm:rms_norm_nope");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out, "TETRA_KERNEL: unknown kernel 'rms_norm_nope' for op 'rms_norm' (valid kernels: ")) << r.out;
    EXPECT_TRUE(has(r.out, "rms_norm_cpu")) << r.out;
    // --skip-selftest warns (the load then stops at the missing tokenizer of this weights-only dir).
    r = run_tetra("run " + k_tiny + " -p hi --skip-selftest");
    EXPECT_TRUE(has(r.out, "self-test skipped (--skip-selftest)")) << r.out;
}

#ifdef TETRA_FAULT_INJECTION
TEST(cli_strict, forced_faulty_kernel_stops_the_load) {
    proc_result r = run_tetra("run " + k_tiny + " -p hi", "TETRA_KERNEL=matmul_nvfp4_w4a16:faulty_matmul_nvfp4_w4a16_dropblock");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r.out, "error: self-test: no working kernel for linear nvfp4")) << r.out;
    EXPECT_TRUE(has(r.out, "faulty_matmul_nvfp4_w4a16_dropblock")) << r.out;
    // doctor in a fault-injection build: the faulty kernels are found and excluded, the model still runs.
    r = run_tetra("doctor --device cpu --json", "", true);
    ASSERT_EQ(r.status, 0) << r.out;
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["build"]["fault_injection"], true);
    EXPECT_EQ(j["selftest"]["excluded"].size(), 6u);
}
#endif
