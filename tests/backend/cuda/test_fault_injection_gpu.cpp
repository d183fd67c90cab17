// The faulty CUDA kernels (src/backend/cuda/fault_injection_sm80.cu) through the engine on the
// device, as tests/engine/test_selftest.cpp does on the CPU: registered above every real kernel, the
// self-test excludes each one (naming kernel, device, compute capability, compiled targets and the
// error) and chooses the real kernel; forced with TETRA_KERNEL and the self-test skipped, the output
// guard stops the request. Built only with -DTETRA_FAULT_INJECTION=ON and the CUDA backend (gpu label).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/fault_injection.h"
#include "core/log.h"
#include "engine/generator.h"
#include "engine/output_guard.h"
#include "engine/selftest.h"
#include "engine/guarded_request.h"
#include "model/model.h"
#include "nvfp4/nvfp4.h"
#include "tokenizer/tokenizer.h"

using namespace tetra;

namespace {

const std::string k_tiny = std::string(TETRA_SOURCE_DIR) + "/tests/data/checkpoints/llama_tiny_modelopt_ref";
const std::string k_tok = std::string(TETRA_SOURCE_DIR) + "/tests/data/tokenizer/llama3-trained";
const char* const k_faulty[] = {"faulty_matmul_nvfp4_w4a16_broadcast_sm80", "faulty_matmul_nvfp4_w4a16_nan_sm80",
                                "faulty_matmul_nvfp4_w4a16_dropblock_sm80", "faulty_matmul_dense_broadcast_sm80"};

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }


struct fault_gpu : ::testing::Test {
    void SetUp() override { ASSERT_GT(cuda_device_count(), 0) << "a gpu test needs a CUDA device"; }
    void TearDown() override {
        kernel_registry::instance().clear_exclusions();
        unsetenv("TETRA_KERNEL");
    }
};

// Every real kernel of the process registry (CPU and CUDA) plus the faulty CUDA kernels at
// priority 1000, so each is the first choice of its op.
void fill_registry_with_faults_on_top(kernel_registry& reg) {
    const kernel_registry& all = kernel_registry::instance();
    for (const std::string& op : all.ops())
        for (const kernel_entry* k : all.kernels(op))
            if (k->name.rfind("faulty_", 0) != 0) reg.add(*k);
    cuda::register_faulty_kernels(reg, 1000);
}

const selftest_choice* choice_of(const selftest_report& r, const std::string& what) {
    for (const auto& c : r.chosen)
        if (c.what == what) return &c;
    return nullptr;
}

}  // namespace

// The build's process registry holds them at -100 (chosen only when forced): cuda_backend.cpp's hook.
TEST_F(fault_gpu, process_registry_holds_the_faulty_cuda_kernels_below_the_real_ones) {
    for (const char* k : k_faulty) {
        const kernel_entry* e = kernel_registry::instance().find(k);
        ASSERT_NE(e, nullptr) << k << " is not registered: cuda::register_kernels must call "
                                      "cuda::register_faulty_kernels(r) under #ifdef TETRA_FAULT_INJECTION";
        EXPECT_EQ(e->priority, -100) << k;
        EXPECT_EQ(e->req.device, device_kind::CUDA) << k;
    }
}

TEST_F(fault_gpu, selftest_excludes_each_faulty_kernel_and_chooses_the_real_one) {
    model_config c;
    model_weights w;
    make_selftest_model(c, w);
    auto be = make_cuda_backend(0);
    kernel_registry reg;
    fill_registry_with_faults_on_top(reg);
    selftest_options o;
    o.log = false;
    selftest_report r = run_selftest(c, w, *be, o, reg);
    ASSERT_EQ(r.excluded.size(), 4u);
    const device_info& d = be->device();
    for (const char* k : k_faulty) {
        EXPECT_TRUE(has(reg.exclusion(k), "self-test on " + d.name)) << k << ": " << reg.exclusion(k);
        bool named = false;
        for (const std::string& m : r.excluded) named |= has(m, std::string("kernel ") + k + " (op ");
        EXPECT_TRUE(named) << k;
    }
    for (const std::string& m : r.excluded) {  // device, compute capability, compiled targets, error measure
        EXPECT_TRUE(has(m, "is wrong on " + d.name)) << m;
        EXPECT_TRUE(has(m, strfmt("compute capability sm_%d, compiled targets [", d.cc))) << m;
        EXPECT_TRUE(has(m, "NMSE") || has(m, "non-finite output (NaN")) << m;
    }
    std::map<std::string, const selftest_result*> res;
    for (const auto& x : r.results) res[x.kernel] = &x;
    ASSERT_EQ(res.count("faulty_matmul_nvfp4_w4a16_nan_sm80"), 1u);
    EXPECT_TRUE(has(res["faulty_matmul_nvfp4_w4a16_nan_sm80"]->error, "non-finite output (NaN"));
    EXPECT_GT(res["faulty_matmul_nvfp4_w4a16_broadcast_sm80"]->nmse, 0.5);  // one value per row vs random rows
    EXPECT_GT(res["faulty_matmul_dense_broadcast_sm80"]->nmse, 0.5);
    // The subtle one: K = 256 has 16 blocks, dropping the last leaves ~1/16 of the energy as error
    // (0.049 on the CPU twin), far above the bf16 tolerance 1e-4.
    double drop = res["faulty_matmul_nvfp4_w4a16_dropblock_sm80"]->nmse;
    EXPECT_GT(drop, 0.02);
    EXPECT_LT(drop, 0.2);
    // The next eligible kernel is the real one, and it passes.
    const selftest_choice* q = choice_of(r, "linear nvfp4 256x256");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->kernel, "matmul_nvfp4_w4a16_sm80");
    const selftest_choice* lm = choice_of(r, "linear dense bf16 1024x256");
    ASSERT_NE(lm, nullptr);
    EXPECT_EQ(lm->kernel, "matmul_dense_bf16_cublaslt");
    EXPECT_TRUE(has(q->reason, "faulty_matmul_nvfp4_w4a16_dropblock_sm80 excluded")) << q->reason;
    for (const auto& x : r.results)
        EXPECT_EQ(x.passed, x.kernel.rfind("faulty_", 0) != 0) << x.kernel << ": " << x.error << " " << x.what;
}

// Only faulty kernels left for an op (the real one excluded too): the load fails naming them.
TEST_F(fault_gpu, no_kernel_left_fails_with_the_reasons) {
    model_config c;
    model_weights w;
    make_selftest_model(c, w);
    auto be = make_cuda_backend(0);
    kernel_registry reg;
    fill_registry_with_faults_on_top(reg);
    reg.exclude("matmul_dense", "matmul_dense_bf16_cublaslt", "pretend the real kernel is broken here too");
    std::string e;
    try {
        selftest_options o;
        o.log = false;
        run_selftest(c, w, *be, o, reg);
    } catch (const error& x) {
        e = x.what();
    }
    EXPECT_TRUE(has(e, "self-test: no working kernel for linear dense bf16")) << e;
    EXPECT_TRUE(has(e, "so this model cannot run here")) << e;
    EXPECT_TRUE(has(e, "faulty_matmul_dense_broadcast_sm80: excluded: self-test on " + be->device().name)) << e;
}

namespace {

// The tiny NVFP4 checkpoint on the GPU, optionally with lm_head quantized to NVFP4 too (so a faulty
// W4A16 kernel reaches the logits directly), the self-test skipped and `forced` kernels; runs one
// greedy request and returns the guard's message ("" when the request finished).
std::string guarded_request(const std::string& forced, bool nvfp4_lm_head, bool debug_taps, guard_trip expect,
                            uint64_t* counted) {
    model_config c = load_model_config(k_tiny);
    model_weights w = load_weights(k_tiny);
    std::vector<uint8_t> codes, scales;
    if (nvfp4_lm_head) {
        const linear_weight& d = w.linear("lm_head", true);
        std::vector<float> f(size_t(d.n_out * d.n_in));
        float amax = 0;
        for (size_t i = 0; i < f.size(); ++i) {
            f[i] = bf16_to_f32(d.dense.ptr<uint16_t>()[i]);
            amax = std::max(amax, std::fabs(f[i]));
        }
        linear_weight q;
        q.kind = linear_kind::NVFP4, q.n_out = d.n_out, q.n_in = d.n_in;
        q.scale_global = amax / (6.0f * 448.0f);
        codes.resize(f.size() / 2), scales.resize(f.size() / 16);
        nvfp4_quantize_modelopt(f.data(), d.n_out, d.n_in, q.scale_global, codes.data(), scales.data());
        q.codes = tensor::view(dtype::U8, {d.n_out, d.n_in / 2}, codes.data());
        q.scales = tensor::view(dtype::E4M3, {d.n_out, d.n_in / 16}, scales.data());
        w.linears["lm_head"] = q;
    }
    auto be = make_cuda_backend(0);
    env_kernel env(forced);
    model_options mo;
    mo.max_tokens = 64;
    auto m = create_model(c, w, *be, mo);
    auto tok = tokenizer::load_dir(k_tok);
    generator gen(*m, *be, *tok, 128);
    return guarded_generate(gen, debug_taps, expect, counted);
}

}  // namespace

TEST_F(fault_gpu, output_guard_stops_requests_on_forced_faulty_kernels) {
    uint64_t n = 0;
    // Dense lm_head broadcasting: row-identical logits, the "!!!!!" signature.
    std::string e = guarded_request("matmul_dense:faulty_matmul_dense_broadcast_sm80", false, false,
                                    guard_trip::ROW_IDENTICAL, &n);
    EXPECT_TRUE(has(e, "output guard (row_identical): degenerate logits at prefill: row 0: all 256 logits equal")) << e;
    EXPECT_EQ(n, 1u);
    // The W4A16 broadcast on every NVFP4 linear, lm_head included: row-identical logits.
    e = guarded_request("matmul_nvfp4_w4a16:faulty_matmul_nvfp4_w4a16_broadcast_sm80", true, false,
                        guard_trip::ROW_IDENTICAL, &n);
    EXPECT_TRUE(has(e, "output guard (row_identical)")) << e;
    EXPECT_EQ(n, 1u);
    // One NaN from layer 0's first projection reaches the logits; debug taps name the first bad tap.
    // q, k and v are one fused projection (exact for this checkpoint), so the poisoned last element of
    // its first row is v's (last kv head, last dim): q stays clean, and the attention output of the
    // heads reading that kv head (4 heads × 16, 2 kv heads: column 2·16 + 15) is the first bad tap.
    e = guarded_request("matmul_nvfp4_w4a16:faulty_matmul_nvfp4_w4a16_nan_sm80", false, true, guard_trip::NON_FINITE,
                        &n);
    EXPECT_TRUE(has(e, "output guard (non_finite): non-finite logits at prefill")) << e;
    EXPECT_TRUE(has(e, "first bad tap: layer 0 tap 'attn_out' [4, 64]: NaN at row 0 column 47")) << e;
    EXPECT_EQ(n, 1u);
    // The dropped scale block stays finite and plausible: the guard lets it through (only the
    // self-test, against the oracle, catches it: see the test above).
    e = guarded_request("matmul_nvfp4_w4a16:faulty_matmul_nvfp4_w4a16_dropblock_sm80", false, false, guard_trip::NONE,
                        &n);
    EXPECT_EQ(e, "");
    // Without faults the same request runs to its end.
    e = guarded_request("", false, false, guard_trip::NONE, &n);
    EXPECT_EQ(e, "");
}
