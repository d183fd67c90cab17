// Architecture checks against HF transformers on tiny random-weight checkpoints
// (tests/data/models/*, made by tools/make_random_model.py): llama3 rope scaling + GQA + untied
// lm_head, and Qwen3 qk-norm + head_dim != n_embd/n_head + tied embeddings. The engine runs
// teacher-forced over the same token ids as the checked-in transformers logits (float32 there,
// float32 here), prefilled in one chunk, in chunks that end mid KV block, and one token per step
// (the decode path). Then the checkpoints are quantized with tetra's quantizer and the NVFP4 models
// are checked against transformers on the dequantized weights (tight) and on bf16 (sanity).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "engine/loaded_model.h"
#include "logit_compare.h"
#include "io/quantize.h"

namespace tetra {
namespace {

const std::string k_models = std::string(TETRA_SOURCE_DIR) + "/tests/data/models/";

struct reference : test_logits::reference_ids {
    std::vector<float> logits;  // f32 [ids.size(), n_vocab]
};

reference read_reference(const std::string& dir) {
    reference r;
    static_cast<test_logits::reference_ids&>(r) = test_logits::read_reference_ids(dir);
    r.logits = test_logits::read_f32(dir + "/ref_logits.bin", r.ids.size() * size_t(r.n_vocab));
    return r;
}

using test_logits::compare;
using test_logits::engine_logits;
using test_logits::logit_stats;

struct arch_case {
    const char* model;
    const char* arch;
    std::string vars() const { return std::string("model=") + model; }
};

const arch_case k_cases[] = {
    {"llama3_rope_untied", "LlamaForCausalLM"},
    {"qwen3_qknorm_tied", "Qwen3ForCausalLM"},
};

// The same bf16 weights upcast exactly on both sides and f32 arithmetic on both sides: the logits
// differ only by summation order (~1e-7 relative per dot product, over 2 layers). Logits have rms ~4
// (tools/make_random_model.py); measured here: max |dlogit| 1.2e-5, NMSE 2.9e-13. The bounds leave
// 15x / 30x headroom, while the smallest architectural mistake the generator measured (qk-norm
// weight ignored) moves the logits by NMSE 8.5e-3 and dropping llama3 rope scaling by 0.13.
constexpr double k_bf16_max_abs = 2e-4, k_bf16_nmse = 1e-11;

TEST(random_models, bf16_matches_transformers_teacher_forced) {
    for (const arch_case& c : k_cases) {
        std::string dir = k_models + c.model;
        reference ref = read_reference(dir);
        ASSERT_GE(ref.ids.size(), 64u) << c.vars();
        // 64 rows in one step; 24-row chunks (boundaries mid KV block of 16); one row per step (decode).
        for (int64_t chunk : {int64_t(ref.ids.size()), int64_t(24), int64_t(1)}) {
            logit_stats s = compare(engine_logits(dir, chunk, ref.ids), ref.logits, ref.n_vocab);
            std::string v = c.vars() + " max_tokens=" + std::to_string(chunk) + ": " + s.str();
            std::printf("  %s\n", v.c_str());
            EXPECT_GE(s.agreement, 0.99) << v;
            EXPECT_LE(s.max_abs, k_bf16_max_abs) << v;
            EXPECT_LE(s.nmse, k_bf16_nmse) << v;
        }
    }
}

TEST(random_models, config_is_the_architecture_under_test) {
    // Guards the guard: the checkpoints really have the features the logits test is meant to cover.
    load_options o;
    o.progress = false;
    auto l = load_model(k_models + "llama3_rope_untied", o);
    EXPECT_EQ(l->config.architecture, "LlamaForCausalLM");
    EXPECT_EQ(l->config.rope.type, "llama3");
    EXPECT_FALSE(l->config.tie_word_embeddings);
    EXPECT_LT(l->config.n_head_kv, l->config.n_head);
    auto q = load_model(k_models + "qwen3_qknorm_tied", o);
    EXPECT_EQ(q->config.architecture, "Qwen3ForCausalLM");
    EXPECT_TRUE(q->config.qk_norm);
    EXPECT_TRUE(q->config.tie_word_embeddings);
    EXPECT_NE(q->config.head_dim * q->config.n_head, q->config.n_embd);
    EXPECT_LT(q->config.n_head_kv, q->config.n_head);
}

// NVFP4 weight-only (W4A16) of the same checkpoints, quantized by tetra's quantizer (lm_head and
// embeddings stay bf16), then run by the engine.
std::vector<float> quantize_and_run(const arch_case& c, const std::vector<int32_t>& ids) {
    // A fresh directory per call: ctest runs each TEST as its own process, possibly in parallel.
    std::string dst = (std::filesystem::temp_directory_path() / ("tetra_rm_nvfp4_" + std::string(c.model) + "_XXXXXX")).string();
    EXPECT_NE(mkdtemp(&dst[0]), nullptr) << dst;
    quantize_options qo;
    qo.force = true;  // dst exists (empty)
    qo.src = k_models + c.model;
    qo.dst = dst;
    quantize_result qr = quantize_checkpoint(qo);
    EXPECT_EQ(qr.quantized.size(), 14u) << c.vars();  // 2 layers x (q k v o gate up down)
    std::vector<float> got = engine_logits(dst, 32, ids);
    std::filesystem::remove_all(dst);
    return got;
}

// Against transformers on the bf16 weights: 4-bit weights (E2M1 with an e4m3 scale per 16) leave
// ~10 % relative error per gaussian weight, which through 14 linears moves these logits by NMSE
// ~0.043 and flips 20-40 % of the argmaxes (transformers itself on the dequantized weights gives
// NMSE 0.0427, agreement 0.78 for qwen3: tools/make_random_model.py). So this is a sanity bound
// (a wrong scale, nibble order or layout gives NMSE ~1), and the next test is the precise one.
constexpr double k_nvfp4_vs_bf16_nmse = 0.1, k_nvfp4_vs_bf16_agreement = 0.5;

TEST(random_models, nvfp4_quantized_stays_near_bf16_reference) {
    for (const arch_case& c : k_cases) {
        reference ref = read_reference(k_models + c.model);
        logit_stats s = compare(quantize_and_run(c, ref.ids), ref.logits, ref.n_vocab);
        std::string v = c.vars() + " nvfp4 vs bf16 reference: " + s.str();
        std::printf("  %s\n", v.c_str());
        EXPECT_GE(s.agreement, k_nvfp4_vs_bf16_agreement) << v;
        EXPECT_LE(s.nmse, k_nvfp4_vs_bf16_nmse) << v;
        EXPECT_GT(s.nmse, 1e-4) << v << " (were the weights quantized at all?)";
    }
}

// Against transformers on the dequantized NVFP4 weights (ref_logits_nvfp4.bin: quantized by the
// independent numpy quantizer tools/nvfp4_ref.py, which test_quantize proves byte-identical to
// tetra's): the same weights on both sides again, so only summation order (and at most one f32
// rounding in w = e2m1 * e4m3 * scale_global) differs; the bf16 bounds apply.
TEST(random_models, nvfp4_matches_transformers_on_dequantized_weights) {
    const arch_case& c = k_cases[1];  // qwen3_qknorm_tied (tied lm_head stays dense bf16)
    reference ref = read_reference(k_models + c.model);
    std::vector<float> want(ref.logits.size());
    std::ifstream bf(k_models + c.model + "/ref_logits_nvfp4.bin", std::ios::binary);
    bf.read(reinterpret_cast<char*>(want.data()), std::streamsize(want.size() * sizeof(float)));
    ASSERT_EQ(size_t(bf.gcount()), want.size() * sizeof(float)) << "ref_logits_nvfp4.bin is short";
    logit_stats s = compare(quantize_and_run(c, ref.ids), want, ref.n_vocab);
    std::string v = c.vars() + " nvfp4 vs HF on dequantized weights: " + s.str();
    std::printf("  %s\n", v.c_str());
    EXPECT_GE(s.agreement, 0.99) << v;
    EXPECT_LE(s.max_abs, k_bf16_max_abs) << v;
    EXPECT_LE(s.nmse, k_bf16_nmse) << v;
}

}  // namespace
}  // namespace tetra
