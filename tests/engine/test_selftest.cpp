// engine/selftest and the output guard end to end on the CPU backend. Without fault injection: the
// real kernels pass on the synthetic model and on the checked-in tiny NVFP4 checkpoint, forced
// kernels the device cannot run are errors with the registry's reason. With TETRA_FAULT_INJECTION
// (test builds): each faulty kernel is excluded with a message naming it, the next kernel is chosen,
// load fails when none is left, and the output guard stops requests run on faulty kernels.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <functional>

#include "backend/ops.h"
#include "core/log.h"
#include "engine/generator.h"
#include "engine/loaded_model.h"
#include "engine/output_guard.h"
#include "engine/selftest.h"
#include "engine/guarded_request.h"
#include "model/model.h"

using namespace tetra;

namespace {

namespace fs = std::filesystem;
const std::string k_tiny = std::string(TETRA_SOURCE_DIR) + "/tests/data/checkpoints/llama_tiny_modelopt_ref";

// Every test leaves the process registry without exclusions.
struct selftest_fixture : ::testing::Test {
    void TearDown() override {
        kernel_registry::instance().clear_exclusions();
        unsetenv("TETRA_KERNEL");
    }
};
using selftest = selftest_fixture;

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const error& e) {
        return e.what();
    }
    return "";
}

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

std::string fast(const char* op) {  // the kernel the CPU tables pick on this machine
    bool avx2 = (cpu_features() & FEAT_CPU_AVX2_FMA_F16C) != 0;
    return std::string(op) + (avx2 ? "_avx2" : "_cpu");
}

const selftest_choice* choice_of(const selftest_report& r, const std::string& what) {
    for (const auto& c : r.chosen)
        if (c.what == what) return &c;
    return nullptr;
}

// The tiny checkpoint plus a tokenizer (ids 0..255 decode in any byte-level vocabulary ≥ 256).
std::string tiny_model_dir() {
    std::string d = (fs::temp_directory_path() / "tetra_selftest_XXXXXX").string();
    EXPECT_NE(mkdtemp(&d[0]), nullptr);
    for (const char* f : {"config.json", "hf_quant_config.json", "model.safetensors"})
        fs::copy_file(k_tiny + "/" + f, d + "/" + f);
    fs::copy_file(std::string(TETRA_SOURCE_DIR) + "/tests/data/tokenizer/llama3-trained/tokenizer.json",
                  d + "/tokenizer.json");
    return d;
}

}  // namespace

TEST_F(selftest, synthetic_model_passes_with_the_real_kernels) {
    model_config c;
    model_weights w;
    make_selftest_model(c, w);
    auto be = make_cpu_backend();
    selftest_options o;
    o.all_kernels = true;  // the plain kernels too
    selftest_report r = run_selftest(c, w, *be, o);
    EXPECT_FALSE(r.skipped);
    // all_kernels also runs the test-only faulty kernels of a TETRA_FAULT_INJECTION build (and
    // excludes them); every real kernel passes.
    for (const auto& res : r.results)
        EXPECT_EQ(res.passed, res.kernel.rfind("faulty_", 0) != 0) << res.kernel << ": " << res.error << " " << res.what;
    for (const auto& m : r.excluded) EXPECT_TRUE(has(m, "kernel faulty_")) << m;
    // Ops the forward uses: get_rows x2, rms_norm, add_rms_norm, 5 linear shapes, rope, kv_store,
    // matmul_silu (the fused gate/up stage), qkv_rope_store (the fused stage), attention x2,
    // silu_mul; the engine's sample_rows and sample_guard_stats.
    EXPECT_EQ(r.chosen.size(), 18u);
    const selftest_choice* ms = choice_of(r, "matmul_silu nvfp4 2x512x256");
    ASSERT_NE(ms, nullptr);
    EXPECT_EQ(ms->kernel, "matmul_silu_cpu");
    EXPECT_EQ(ms->classes, "mlp.gate_proj + mlp.up_proj");
    const selftest_choice* sr = choice_of(r, "sample_rows vocab=1024");
    ASSERT_NE(sr, nullptr);
    EXPECT_EQ(sr->kernel, "sample_rows_cpu");
    const selftest_choice* fused = choice_of(r, "qkv_rope_store 4+2x2 heads x64");
    ASSERT_NE(fused, nullptr);
    EXPECT_EQ(fused->kernel, "qkv_rope_store_cpu");
    const selftest_choice* q = choice_of(r, "linear nvfp4 256x256");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->kernel, fast("matmul_nvfp4_w4a16"));
    EXPECT_EQ(q->classes, "self_attn.q_proj, self_attn.o_proj");
    EXPECT_TRUE(has(q->line(), "linear nvfp4 256x256 → " + fast("matmul_nvfp4_w4a16") + " (self_attn.q_proj")) << q->line();
    const selftest_choice* lm = choice_of(r, "linear dense bf16 1024x256");
    ASSERT_NE(lm, nullptr);
    EXPECT_EQ(lm->kernel, fast("matmul_dense"));
    // Both the fast and the plain W4A16 kernel ran on every linear shape (all_kernels).
    int plain = 0;
    for (const auto& res : r.results) plain += res.kernel == "matmul_nvfp4_w4a16_cpu";
    EXPECT_EQ(plain, 4);  // 256x256, 128x256, 512x256, 256x512
}

// W4A4 (quant_algo NVFP4: activation global scales present): the matmuls run as matmul_nvfp4_w4a4
// and the activation quantizer gets its own bit-exact case.
TEST_F(selftest, w4a4_model_tests_the_activation_quantizer) {
    model_config c;
    model_weights w;
    make_selftest_model(c, w);
    w.quant_algo = "NVFP4";
    for (auto& kv : w.linears) {
        kv.second.has_input_scale = true;
        kv.second.input_global_quant = 448.0f * 6.0f / 4.0f;  // amax 4 maps to the top of e4m3·e2m1
        kv.second.input_scale = 1.0f / kv.second.input_global_quant;
    }
    auto be = make_cpu_backend();
    selftest_report r = run_selftest(c, w, *be, selftest_options{});
    const selftest_choice* q = choice_of(r, "quantize_nvfp4_act n=256");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->kernel, "quantize_nvfp4_act_cpu");
    EXPECT_TRUE(has(q->reason, "self-test NMSE 0 <= 0")) << q->reason;  // bit-exact
    const selftest_choice* down = choice_of(r, "linear nvfp4 256x512");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->op, "matmul_nvfp4_w4a4");
    EXPECT_EQ(down->kernel, fast("matmul_nvfp4_w4a4"));
    for (const auto& res : r.results) EXPECT_TRUE(res.passed) << res.kernel << ": " << res.error;
}

TEST_F(selftest, tiny_checkpoint_loads_with_one_line_per_layer_class) {
    std::string dir = tiny_model_dir();
    load_options lo;
    lo.progress = false;
    auto m = load_model(dir, lo);  // runs the self-test
    model_config c = load_model_config(dir);
    model_weights w = load_weights(dir);
    selftest_report r = run_selftest(c, w, *m->be, selftest_options{});
    EXPECT_TRUE(r.excluded.empty());
    // down_proj is [n_embd=64, n_ff=128]; lm_head stays dense (the checkpoint excludes it).
    const selftest_choice* down = choice_of(r, "linear nvfp4 64x128");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->classes, "mlp.down_proj");
    EXPECT_TRUE(has(down->reason, "highest-priority eligible; self-test NMSE")) << down->reason;
    EXPECT_NE(choice_of(r, "linear dense bf16 256x64"), nullptr);
    // --skip-selftest: nothing runs, the report says so.
    selftest_options skip;
    skip.skip = true;
    selftest_report s = run_selftest(c, w, *m->be, skip);
    EXPECT_TRUE(s.skipped);
    EXPECT_TRUE(s.results.empty());
}

// --dtype (load_options::act_dtype) sets the model's activation dtype, and the self-test checks the
// kernels at that dtype; float16 and unknown names are errors naming the value.
TEST_F(selftest, dtype_flag_sets_the_activation_dtype_and_the_selftest_dtype) {
    std::string dir = tiny_model_dir();
    for (auto [flag, want] : {std::pair<const char*, dtype>{"auto", dtype::F32}, {"float32", dtype::F32},
                              {"float", dtype::F32}, {"bfloat16", dtype::BF16}}) {
        load_options lo;
        lo.progress = false, lo.act_dtype = flag;
        auto m = load_model(dir, lo);  // runs the self-test at that dtype
        EXPECT_EQ(m->model->act_type(), want) << flag;
        selftest_options so;
        so.act = m->model->act_type(), so.log = false;
        model_config c = load_model_config(dir);
        model_weights w = load_weights(dir);
        selftest_report r = run_selftest(c, w, *m->be, so);
        ASSERT_FALSE(r.results.empty()) << flag;
        int at_dtype = 0;
        for (const auto& res : r.results) {
            EXPECT_TRUE(res.passed) << flag << ": " << res.kernel << ": " << res.error;
            at_dtype += has(res.what, std::string(" ") + dtype_name(want));
        }
        EXPECT_GT(at_dtype, 0) << flag << ": no self-test case at " << dtype_name(want);
    }
    for (auto [flag, msg] : {std::pair<const char*, const char*>{"float16", "--dtype float16: tetra's matmul kernels take "
                                                                            "bfloat16 or float32 activations"},
                             {"half", "--dtype half: tetra's matmul kernels"},
                             {"int8", "--dtype 'int8' is not a dtype; expected auto, bfloat16, float32 or float"}}) {
        load_options lo;
        lo.progress = false, lo.act_dtype = flag;
        std::string e = error_of([&] { load_model(dir, lo); });
        EXPECT_TRUE(has(e, msg)) << e;
    }
}

TEST_F(selftest, forced_kernel_the_device_cannot_run_is_an_error_with_the_reason) {
    model_config c;
    model_weights w;
    make_selftest_model(c, w);
    auto be = make_cpu_backend();
    kernel_registry reg;
    cpu::register_kernels(reg);
    kernel_req req;
    req.device = device_kind::CPU;
    req.features = FEAT_TCGEN05;  // a CUDA feature no CPU has
    reg.add(make_kernel<rms_norm_args>("rms_norm", "rms_norm_needs_tcgen05", req, 0, nullptr,
                                       [](backend&, const rms_norm_args&) {}));
    {
        env_kernel env("rms_norm:rms_norm_needs_tcgen05");
        std::string e = error_of([&] { run_selftest(c, w, *be, selftest_options{}, reg); });
        EXPECT_TRUE(has(e, "self-test: no working kernel for rms_norm n=256")) << e;
        EXPECT_TRUE(has(e, "TETRA_KERNEL forces rms_norm_needs_tcgen05 for op 'rms_norm', but it cannot run: needs "
                           "tcgen05, which this CPU lacks")) << e;
    }
    {
        env_kernel env("rms_norm:rms_norm_sm80");  // not a kernel of this build
        std::string e = error_of([&] { run_selftest(c, w, *be, selftest_options{}, reg); });
        EXPECT_TRUE(has(e, "TETRA_KERNEL: unknown kernel 'rms_norm_sm80' for op 'rms_norm'")) << e;
    }
    {
        env_kernel env("rms_norm:rms_norm_cpu");  // forcing an eligible kernel is honoured and reported
        selftest_report r = run_selftest(c, w, *be, selftest_options{}, reg);
        const selftest_choice* n = choice_of(r, "rms_norm n=256");
        ASSERT_NE(n, nullptr);
        EXPECT_EQ(n->kernel, "rms_norm_cpu");
        EXPECT_TRUE(has(n->reason, "forced by TETRA_KERNEL")) << n->reason;
    }
}

TEST_F(selftest, registry_exclusion_list) {
    kernel_registry reg;
    cpu::register_kernels(reg);
    EXPECT_TRUE(has(error_of([&] { reg.exclude("rms_norm", "matmul_dense_cpu", "x"); }),
                    "'matmul_dense_cpu' is not a kernel of op 'rms_norm'"));
    reg.exclude("matmul_dense", "matmul_dense_cpu", "broken on purpose");
    EXPECT_EQ(reg.exclusion("matmul_dense_cpu"), "broken on purpose");
    for (const kernel_candidate& k : reg.candidates("matmul_dense", cpu_device_info(), nullptr))
        if (k.kernel->name == "matmul_dense_cpu") {
            EXPECT_FALSE(k.eligible);
            EXPECT_EQ(k.why_not, "excluded: broken on purpose");
        }
    reg.clear_exclusions();
    EXPECT_EQ(reg.exclusion("matmul_dense_cpu"), "");
}

#ifdef TETRA_FAULT_INJECTION

// Faulty kernels registered above every real one (a registry of the test's own): the self-test
// excludes each, naming it, and the next eligible kernel (the real one) is chosen.
TEST_F(selftest, faulty_kernels_are_excluded_and_the_next_kernel_chosen) {
    model_config c;
    model_weights w;
    make_selftest_model(c, w);
    auto be = make_cpu_backend();
    kernel_registry reg;
    cpu::register_kernels(reg);
    cpu::register_faulty_kernels(reg, 1000);
    selftest_report r = run_selftest(c, w, *be, selftest_options{}, reg);
    const char* faulty[] = {"faulty_rms_norm_broadcast", "faulty_rms_norm_nan", "faulty_matmul_dense_broadcast",
                            "faulty_matmul_nvfp4_w4a16_broadcast", "faulty_matmul_nvfp4_w4a16_nan",
                            "faulty_matmul_nvfp4_w4a16_dropblock"};
    ASSERT_EQ(r.excluded.size(), 6u);
    for (const char* k : faulty) {
        EXPECT_TRUE(has(reg.exclusion(k), "self-test on cpu")) << k;
        bool named = false;
        for (const std::string& m : r.excluded) named |= has(m, std::string("kernel ") + k + " (op ");
        EXPECT_TRUE(named) << k;
    }
    for (const std::string& m : r.excluded) {  // device, cc, compiled targets and the measure
        EXPECT_TRUE(has(m, "is wrong on cpu")) << m;
        EXPECT_TRUE(has(m, "compute capability n/a, compiled targets n/a")) << m;
        EXPECT_TRUE(has(m, "NMSE") || has(m, "non-finite output (NaN")) << m;
    }
    std::map<std::string, const selftest_result*> res;
    for (const auto& x : r.results) res[x.kernel] = &x;
    EXPECT_TRUE(has(res["faulty_rms_norm_nan"]->error, "non-finite output (NaN at element 255 of 768)"));
    EXPECT_GT(res["faulty_rms_norm_broadcast"]->nmse, 0.5);  // a row of one value vs unit-variance rows
    // The subtle one: K = 256 has 16 blocks; dropping the last leaves ~1/16 of the energy as error.
    double drop = res["faulty_matmul_nvfp4_w4a16_dropblock"]->nmse;
    EXPECT_GT(drop, 0.02);
    EXPECT_LT(drop, 0.2);
    EXPECT_EQ(choice_of(r, "rms_norm n=256")->kernel, "rms_norm_cpu");
    EXPECT_EQ(choice_of(r, "linear nvfp4 256x256")->kernel, fast("matmul_nvfp4_w4a16"));
    EXPECT_EQ(choice_of(r, "linear dense bf16 1024x256")->kernel, fast("matmul_dense"));
    EXPECT_TRUE(has(choice_of(r, "rms_norm n=256")->reason, "faulty_rms_norm_nan excluded"));
}

TEST_F(selftest, no_kernel_left_fails_with_the_reason) {
    model_config c;
    model_weights w;
    make_selftest_model(c, w);
    auto be = make_cpu_backend();
    kernel_registry reg;
    cpu::register_kernels(reg);
    cpu::register_faulty_kernels(reg, 1000);
    reg.exclude("rms_norm", "rms_norm_cpu", "pretend the real kernel is broken on this device too");
    std::string e = error_of([&] { run_selftest(c, w, *be, selftest_options{}, reg); });
    EXPECT_TRUE(has(e, "self-test: no working kernel for rms_norm n=256 (op rms_norm")) << e;
    EXPECT_TRUE(has(e, "so this model cannot run here")) << e;
    EXPECT_TRUE(has(e, "no eligible kernel for op 'rms_norm'")) << e;
    EXPECT_TRUE(has(e, "faulty_rms_norm_broadcast: excluded: self-test on cpu: NMSE")) << e;
    EXPECT_TRUE(has(e, "faulty_rms_norm_nan: excluded: self-test on cpu: non-finite output")) << e;
}

// Forcing a faulty kernel through TETRA_KERNEL on the real load path: the self-test excludes it and,
// since it is forced, the model does not load; the message names kernel and measure.
TEST_F(selftest, forced_faulty_kernel_fails_load_model) {
    env_kernel env("matmul_nvfp4_w4a16:faulty_matmul_nvfp4_w4a16_dropblock");
    load_options lo;
    lo.progress = false;
    std::string e = error_of([&] { load_model(k_tiny, lo); });  // fails before the tokenizer is read
    EXPECT_TRUE(has(e, "self-test: no working kernel for linear nvfp4")) << e;
    EXPECT_TRUE(has(e, "TETRA_KERNEL forces faulty_matmul_nvfp4_w4a16_dropblock for op 'matmul_nvfp4_w4a16', but it "
                       "cannot run: excluded: self-test on cpu: NMSE")) << e;
}

namespace {

// Runs one request on the tiny model with the self-test skipped and `forced` kernels; returns the
// guard error (or "" when the request finished).
std::string guarded_request(const char* forced, bool debug_taps, guard_trip expect, uint64_t* counted) {
    std::string dir = tiny_model_dir();
    env_kernel env(forced);
    load_options lo;
    lo.progress = false;
    lo.skip_selftest = true;
    auto m = load_model(dir, lo);
    generator gen(*m->model, *m->be, *m->tok, m->max_model_len);
    return guarded_generate(gen, debug_taps, expect, counted);
}

}  // namespace

TEST_F(selftest, output_guard_stops_requests_on_faulty_kernels) {
    uint64_t n = 0;
    // lm_head is dense: a broadcasting dense matmul gives row-identical logits (the "!!!!!" case).
    std::string e = guarded_request("matmul_dense:faulty_matmul_dense_broadcast", false, guard_trip::ROW_IDENTICAL, &n);
    EXPECT_TRUE(has(e, "output guard (row_identical): degenerate logits at prefill: row 0: all 256 logits equal")) << e;
    EXPECT_EQ(n, 1u);
    // One NaN from the first rms_norm (layer 0 attn_norm) reaches the logits; debug taps name the tap.
    e = guarded_request("rms_norm:faulty_rms_norm_nan", true, guard_trip::NON_FINITE, &n);
    EXPECT_TRUE(has(e, "output guard (non_finite): non-finite logits at prefill")) << e;
    EXPECT_TRUE(has(e, "first bad tap: layer 0 tap 'attn_norm' [4, 64]: NaN at row 0 column 63")) << e;
    EXPECT_EQ(n, 1u);
    // Without faults the same request runs to its end.
    e = guarded_request("", false, guard_trip::NONE, &n);
    EXPECT_EQ(e, "");
}

#else

TEST_F(selftest, release_builds_have_no_faulty_kernels) {
    EXPECT_EQ(kernel_registry::instance().find("faulty_rms_norm_nan"), nullptr);
    EXPECT_EQ(kernel_registry::instance().find("faulty_matmul_nvfp4_w4a16_dropblock"), nullptr);
}

#endif
