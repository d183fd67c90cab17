// The real model end to end on the CPU engine: SmolLM2-135M-Instruct in bf16 and its NVFP4
// (ModelOpt W4A16) quantization, both prepared in cache_dir() by scripts/prepare_model.sh. Greedy
// chat answers must name Paris; teacher-forced perplexity over tests/data/text/devils_dictionary.txt
// is checked against HF transformers on the same weights (bf16; NVFP4 dequantized) and, for NVFP4,
// against the value tetra recorded. NVFP4 costs ~30 % perplexity here (45.45 -> 59.11): a 135M
// model whose bf16 weights are themselves dequantized Q4_1 (the GGUF source), quantized again.
// A missing model is a failure that says how to prepare it, never a skip.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/env.h"
#include "engine/generator.h"
#include "engine/loaded_model.h"

namespace tetra {
namespace {

const std::string k_text = std::string(TETRA_SOURCE_DIR) + "/tests/data/text/devils_dictionary.txt";

// The whole text as HF's tokenizer encodes it (add_special_tokens=False; SmolLM2 adds no BOS):
// `python3 tools/compare_hf.py tokens --model <bf16 dir> --text tests/data/text/devils_dictionary.txt`
// gives 975 ids whose sum is 4,144,443. Checked below, so the perplexities refer to the same ids.
constexpr size_t k_n_ids = 975;
constexpr int64_t k_ids_sum = 4144443;

// Perplexities over those 975 ids (974 predictions), 2026-11-22, docs/validation.md:
// HF transformers 5.23.0 / torch 2.15.0 on CPU in float32, `tools/compare_hf.py compare` on the ids
// tetra dumped: the bf16 model, and the NVFP4 model dequantized to f32 by tools/dequant_nvfp4.py
// (the weights tetra runs, through transformers).
constexpr double k_hf_ppl_bf16 = 45.4522;
constexpr double k_hf_ppl_nvfp4_dequantized = 59.1098;
// Measured by tetra (`tetra perplexity`, CPU backend, the same arithmetic as this test) at commit
// 3b6e9b8 on 2026-11-22; the NVFP4 model is `tetra quantize --format modelopt` of the bf16 one.
constexpr double k_tetra_ppl_nvfp4 = 59.1098;

std::string model_dir(const std::string& name) {
    std::string d = cache_dir() + "/models/" + name;
    struct stat st;
    bool ok = ::stat((d + "/config.json").c_str(), &st) == 0;
    EXPECT_TRUE(ok) << "model '" << d << "' is missing: run `bash scripts/prepare_model.sh build/cli/tetra` "
                    << "(with the path of your tetra binary) to prepare SmolLM2-135M-Instruct and its NVFP4 version";
    return ok ? d : std::string();
}

std::unique_ptr<loaded_model> load(const std::string& dir) {
    load_options o;
    o.progress = false;
    o.max_tokens = 256;
    o.max_model_len = 1024;
    return load_model(dir, o);
}

std::string chat_answer(loaded_model& m) {
    auto msgs = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "What is the capital of France?"}}});
    std::vector<int32_t> ids = m.tok->encode(apply_chat_template(m, msgs, true), false);
    sampling_params p = m.defaults;
    p.temperature = 0;  // greedy
    p.max_tokens = 48;
    generator gen(*m.model, *m.be, *m.tok, m.max_model_len);
    generation_result r = gen.generate(ids, p);
    std::printf("  %s: %zu prompt tokens -> \"%s\" (%zu tokens, %.1f tok/s)\n", m.dir.c_str(), ids.size(),
                r.text.c_str(), r.tokens.size(), r.decode_s > 0 ? double(r.tokens.size()) / r.decode_s : 0.0);
    return r.text;
}

double text_perplexity(loaded_model& m) {
    std::ifstream f(k_text, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    std::vector<int32_t> ids = m.tok->encode(ss.str(), true);
    int64_t sum = 0;
    for (int32_t id : ids) sum += id;
    EXPECT_EQ(ids.size(), k_n_ids) << "tokenization of " << k_text << " changed; the recorded perplexities refer to HF's ids";
    EXPECT_EQ(sum, k_ids_sum) << "tokenization of " << k_text << " differs from HF's";
    generator gen(*m.model, *m.be, *m.tok, m.max_model_len);
    auto t0 = std::chrono::steady_clock::now();
    double ppl = std::exp(gen.mean_nll(ids));
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  %s: perplexity %.4f over %zu tokens (%.1f s)\n", m.dir.c_str(), ppl, ids.size(), s);
    return ppl;
}

TEST(smollm2_slow, bf16_answers_paris_and_matches_hf_perplexity) {
    std::string dir = model_dir("SmolLM2-135M-Instruct");
    ASSERT_FALSE(dir.empty());
    auto m = load(dir);
    EXPECT_NE(chat_answer(*m).find("Paris"), std::string::npos);
    double ppl = text_perplexity(*m);
    // Same bf16 weights, f32 compute on both sides: only summation order differs (the logits
    // agree to ~1e-3, docs/validation.md), so 1 % is a loose but meaningful bound.
    EXPECT_NEAR(ppl, k_hf_ppl_bf16, 0.01 * k_hf_ppl_bf16);
}

TEST(smollm2_slow, nvfp4_answers_paris_and_keeps_its_perplexity) {
    std::string dir = model_dir("SmolLM2-135M-Instruct-NVFP4");
    ASSERT_FALSE(dir.empty());
    auto m = load(dir);
    EXPECT_EQ(m->weights.format, "modelopt");
    EXPECT_NE(chat_answer(*m).find("Paris"), std::string::npos);
    double ppl = text_perplexity(*m);
    // Regression guard: the quantizer and the NVFP4 matmul are deterministic, so the value moves only
    // when they change; 2 % allows summation-order changes in the kernels, not a real loss.
    EXPECT_LE(ppl, 1.02 * k_tetra_ppl_nvfp4);
    // The same weights through transformers (f32 both sides; only summation order differs).
    EXPECT_NEAR(ppl, k_hf_ppl_nvfp4_dequantized, 0.01 * k_hf_ppl_nvfp4_dequantized);
}

}  // namespace
}  // namespace tetra
