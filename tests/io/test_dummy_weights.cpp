// --load-format dummy (io/dummy_weights.h). Oracles: the NVFP4 dummy must equal tetra's codec
// (nvfp4_quantize_modelopt, the ModelOpt recipe) applied to the bf16 dummy of the same seed, with
// S = amax/(6·448) over each fused group computed here; the normals must match the N(0, 1) CDF
// (erf) and moments; the AVX2 loops must give the scalar loops' bytes; any thread count the same
// bytes; and the model built from the weights must run on the CPU backend with finite, varied logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/runner.h"
#include "io/checkpoint.h"
#include "io/dummy_fill.h"
#include "io/dummy_weights.h"
#include "io/quantize.h"
#include "nvfp4/nvfp4.h"

namespace tetra {
namespace {

const std::string k_models = std::string(TETRA_SOURCE_DIR) + "/tests/data/models/";

// SmolLM2-135M's shapes (n_embd 576, n_ff 1536, 9 heads / 3 kv heads of 64, vocab 49152, tied)
// with 2 layers instead of 30.
const char* const k_smollm2_2l = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 2, "num_attention_heads": 9,
  "num_key_value_heads": 3, "vocab_size": 49152, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
  "rope_theta": 100000, "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2})";

struct cfg_case {
    const char* name;
    model_config cfg;
    std::string vars() const { return std::string("config=") + name; }
};

std::vector<cfg_case> cases() {
    return {{"smollm2_2l", parse_model_config(k_smollm2_2l, "smollm2_2l/config.json")},
            {"llama3_rope_untied", load_model_config(k_models + "llama3_rope_untied")},
            {"qwen3_qknorm_tied", load_model_config(k_models + "qwen3_qknorm_tied")},
            // Qwen3-MoE: dense and sparse layers (mlp_only_layers), untied; shared expert, tied.
            {"qwen3_moe_tiny", load_model_config(std::string(TETRA_SOURCE_DIR) + "/tests/data/moe/qwen3_moe_tiny")},
            {"qwen3_moe_shared", load_model_config(std::string(TETRA_SOURCE_DIR) + "/tests/data/moe/qwen3_moe_shared")}};
}

dummy_options opts(const std::string& quant, uint64_t seed = 7, bool simd = true) {
    dummy_options o;
    o.quant = quant;
    o.seed = seed;
    o.simd = simd;
    return o;
}

bool same_bytes(const tensor& a, const tensor& b) {
    return a.type == b.type && a.shape == b.shape && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

// Every byte of two weight sets equal (names, shapes, dtypes, scale_global included).
::testing::AssertionResult identical(const model_weights& a, const model_weights& b) {
    if (a.tensors.size() != b.tensors.size() || a.linears.size() != b.linears.size())
        return ::testing::AssertionFailure() << "tensor counts differ";
    for (const auto& kv : a.tensors)
        if (!b.tensors.count(kv.first) || !same_bytes(kv.second, b.tensors.at(kv.first)))
            return ::testing::AssertionFailure() << "tensor " << kv.first << " differs";
    for (const auto& kv : a.linears) {
        auto it = b.linears.find(kv.first);
        if (it == b.linears.end() || !same_bytes(kv.second.codes, it->second.codes) ||
            !same_bytes(kv.second.scales, it->second.scales) || kv.second.scale_global != it->second.scale_global)
            return ::testing::AssertionFailure() << "linear " << kv.first << " differs";
    }
    return ::testing::AssertionSuccess();
}

std::vector<float> to_f32(const tensor& t) {
    std::vector<float> v(size_t(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = load_f32(t.data, t.type, i);
    return v;
}

// Teacher-forced logits of `ids` through the CPU backend: f32 [ids.size(), n_vocab].
std::vector<float> cpu_logits(const model_config& cfg, model_weights& w, const std::vector<int32_t>& ids) {
    auto be = make_cpu_backend();
    model_options mo;
    mo.max_tokens = int64_t(ids.size());
    auto m = create_model(cfg, w, *be, mo);
    kv_cache kv = kv_cache::create(*be, cfg, 4, 16, m->act_type());
    block_pool pool(kv.n_blocks);
    std::vector<int32_t> table;
    EXPECT_TRUE(pool.grow(table, int64_t(ids.size()), 16));
    model_runner runner(*m, *be, kv);
    seq_chunk c;
    c.block_table = &table;
    c.tokens = ids.data();
    c.n = int64_t(ids.size());
    c.all_logits = true;
    return runner.run({c});
}

TEST(dummy_weights, model_runs_with_finite_varied_logits) {
    for (const cfg_case& c : cases()) {
        for (const char* q : {"nvfp4", "bf16"}) {
            std::string v = c.vars() + " quant=" + q;
            model_weights w = make_dummy_weights(c.cfg, opts(q));
            EXPECT_EQ(w.format, "dummy") << v;
            EXPECT_EQ(w.dir, std::string("dummy:") + c.cfg.architecture + " seed=7 quant=" + q) << v;
            EXPECT_EQ(w.quant_algo, std::string(q) == "nvfp4" ? "W4A16_NVFP4" : "") << v;
            const int64_t n_vocab = c.cfg.n_vocab;
            std::vector<int32_t> ids = {1, 17, 5, int32_t(n_vocab - 1), 42, 300, 7, 0};
            std::vector<float> l = cpu_logits(c.cfg, w, ids);
            ASSERT_EQ(l.size(), ids.size() * size_t(n_vocab)) << v;
            for (size_t r = 0; r < ids.size(); ++r) {
                double sum = 0, sq = 0;
                size_t n_finite = 0;
                for (int64_t i = 0; i < n_vocab; ++i) {
                    float x = l[r * size_t(n_vocab) + size_t(i)];
                    n_finite += std::isfinite(x);
                    sum += x, sq += double(x) * x;
                }
                double mean = sum / double(n_vocab), sd = std::sqrt(std::max(0.0, sq / double(n_vocab) - mean * mean));
                EXPECT_EQ(n_finite, size_t(n_vocab)) << v << " row " << r;
                // Napkin: the final norm makes h ~ unit rms; logit = h·e with e ~ N(0, 0.02) over
                // n_embd terms → sd ≈ 0.02·sqrt(n_embd) (0.16 at 64, 0.48 at 576). Degenerate
                // outputs (all equal, zero) have sd 0.
                EXPECT_GT(sd, 0.25 * 0.02 * std::sqrt(double(c.cfg.n_embd))) << v << " row " << r;
                EXPECT_LT(sd, 4.0 * 0.02 * std::sqrt(double(c.cfg.n_embd))) << v << " row " << r;
            }
            // Different inputs give different outputs (rows 0 and 1 hold different tokens).
            EXPECT_NE(std::memcmp(l.data(), l.data() + n_vocab, size_t(n_vocab) * 4), 0) << v;
        }
    }
}

TEST(dummy_weights, seeds_determine_bytes_and_threads_do_not) {
    for (const cfg_case& c : cases()) {
        for (const char* q : {"nvfp4", "bf16"}) {
            std::string v = c.vars() + " quant=" + q;
            const int threads = num_threads();
            model_weights a = make_dummy_weights(c.cfg, opts(q, 7));
            set_num_threads(1);
            model_weights one = make_dummy_weights(c.cfg, opts(q, 7));
            set_num_threads(3);
            model_weights three = make_dummy_weights(c.cfg, opts(q, 7));
            set_num_threads(threads);
            EXPECT_TRUE(identical(a, one)) << v << " (1 thread vs default)";
            EXPECT_TRUE(identical(a, three)) << v << " (3 threads vs default)";
            model_weights b = make_dummy_weights(c.cfg, opts(q, 8));
            // Every tensor differs under another seed (not only some).
            for (const auto& kv : a.tensors)
                EXPECT_FALSE(same_bytes(kv.second, b.tensors.at(kv.first))) << v << " " << kv.first;
            for (const auto& kv : a.linears)
                EXPECT_FALSE(same_bytes(kv.second.codes, b.linears.at(kv.first).codes)) << v << " " << kv.first;
        }
    }
}

TEST(dummy_weights, simd_and_scalar_paths_give_the_same_bytes) {
    ASSERT_TRUE(dummy_simd_available()) << "this CPU has no AVX2+FMA: the comparison would be scalar vs scalar";
    // The tiny checkpoints' configs (the scalar path's software fma is slow on big shapes) ...
    for (const cfg_case& c : cases()) {
        if (c.cfg.n_embd > 256) continue;
        for (const char* q : {"nvfp4", "bf16"})
            EXPECT_TRUE(identical(make_dummy_weights(c.cfg, opts(q, 3, true)), make_dummy_weights(c.cfg, opts(q, 3, false))))
                << c.vars() << " quant=" << q;
    }
    // ... and rows far into a large tensor, with a tail (cols % 16 != 0) and a non-zero mean.
    const int64_t cols = 4096 + 7;
    std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
    for (int64_t row : {int64_t(0), int64_t(1), int64_t(127), int64_t(128255), int64_t(1) << 33}) {
        const uint64_t key = dummy_tensor_key(99, "model.layers.31.mlp.down_proj.weight");
        dummy_normal_row(key, row, cols, 0.02f, 1.0f, a.data(), true);
        dummy_normal_row(key, row, cols, 0.02f, 1.0f, b.data(), false);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "row " << row;
    }
}

TEST(dummy_weights, nvfp4_is_the_codec_quantization_of_the_bf16_model) {
    for (const cfg_case& c : cases()) {
        model_weights q = make_dummy_weights(c.cfg, opts("nvfp4", 11));
        model_weights d = make_dummy_weights(c.cfg, opts("bf16", 11));
        // Group amax over the bf16 tensors, as ModelOpt ties q/k/v and gate/up (computed here).
        std::map<std::string, float> amax;
        for (const auto& kv : q.linears) {
            std::string g = quantize_fused_group(kv.first);
            float m = 0;
            for (float x : to_f32(d.get(kv.first + ".weight"))) m = std::max(m, std::fabs(x));
            amax[g.empty() ? kv.first : g] = std::max(amax[g.empty() ? kv.first : g], m);
        }
        size_t n_linear = 0;
        for (const auto& kv : q.linears) {
            std::string v = c.vars() + " linear=" + kv.first, g = quantize_fused_group(kv.first);
            const linear_weight& lw = kv.second;
            ASSERT_EQ(lw.kind, linear_kind::NVFP4) << v;
            EXPECT_FALSE(lw.has_input_scale) << v;
            const tensor& src = d.get(kv.first + ".weight");
            ASSERT_EQ(src.shape, (std::vector<int64_t>{lw.n_out, lw.n_in})) << v;
            EXPECT_EQ(lw.scale_global, nvfp4_scale_global_modelopt(amax[g.empty() ? kv.first : g])) << v;
            std::vector<float> f = to_f32(src);
            std::vector<uint8_t> codes(size_t(lw.n_out * lw.n_in / 2)), scales(size_t(lw.n_out * lw.n_in / 16));
            nvfp4_quantize_modelopt(f.data(), lw.n_out, lw.n_in, lw.scale_global, codes.data(), scales.data());
            EXPECT_EQ(std::memcmp(codes.data(), lw.codes.data, codes.size()), 0) << v;
            EXPECT_EQ(std::memcmp(scales.data(), lw.scales.data, scales.size()), 0) << v;
            // Realistic scales: no zero or invalid block scale; 448 (0x7E) only near the group amax
            // (the block holding it maps to exactly 448, blocks within 3.6 % of it round up to it:
            // a handful in a tiny tensor, a tail fraction in a large one).
            scale_health h = scale_health_of(lw.scales.ptr<uint8_t>(), lw.scales.numel());
            EXPECT_EQ(h.n_zero + h.n_invalid, 0) << v;
            EXPECT_LE(h.n_saturated, 4 + h.n_blocks / 100) << v;
            ++n_linear;
        }
        // NVFP4: q/k/v/o and the MLP's gate/up/down, per routed and shared expert in MoE layers
        // (the routers mlp.gate and mlp.shared_expert_gate stay bf16, as ModelOpt excludes them).
        size_t want = 0;
        for (int64_t il = 0; il < c.cfg.n_layer; ++il)
            want += c.cfg.is_moe_layer(il) ? size_t(4 + 3 * c.cfg.n_expert + (c.cfg.n_ff_shexp > 0 ? 3 : 0)) : 7;
        EXPECT_EQ(n_linear, want) << c.vars();
        // lm_head (untied) stays bf16 and is listed as excluded, as ModelOpt writes it.
        EXPECT_EQ(q.has("lm_head.weight"), !c.cfg.tie_word_embeddings) << c.vars();
        EXPECT_EQ(q.is_excluded("lm_head"), !c.cfg.tie_word_embeddings) << c.vars();
        for (const auto& kv : q.tensors) EXPECT_EQ(kv.second.type, dtype::BF16) << c.vars() << " " << kv.first;
    }
}

TEST(dummy_weights, quantizer_matches_the_codec_on_ties_and_edges) {
    // E2M1 midpoints (0.25 … 5 of the divisor), exact codes, zeros (−0 included), a zero block,
    // a block with one large value, tiny blocks (subnormal e4m3 scales) and big ones.
    const int64_t cols = 16 * 8;
    std::vector<float> w(size_t(cols), 0.0f);
    const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f};
    for (int i = 0; i < 16; ++i) w[size_t(i)] = (i % 2 ? -1.0f : 1.0f) * mids[i % 8];     // amax 6: divisor 1·S
    for (int i = 0; i < 16; ++i) w[size_t(16 + i)] = float(i) * 0.5f - 4.0f;             // exact codes
    w[size_t(16 + 8)] = -0.0f;                                                            // −0 → code 0x0
    // block 2 stays all zero
    for (int i = 0; i < 16; ++i) w[size_t(48 + i)] = i == 5 ? 1000.0f : 0.001f * float(i);
    for (int i = 0; i < 16; ++i) w[size_t(64 + i)] = 1e-7f * float(i + 1) * (i % 3 ? 1 : -1);
    for (int i = 0; i < 16; ++i) w[size_t(80 + i)] = 3e4f * float(16 - i);
    for (int i = 0; i < 32; ++i) w[size_t(96 + i)] = 0.02f * std::sin(float(i) * 1.7f);
    for (float s : {1.0f, 0.5f, 1.0f / 2688.0f, 3.7e-5f, 17.0f}) {
        std::vector<uint8_t> c1(cols / 2), s1(cols / 16), c2(cols / 2), s2(cols / 16);
        nvfp4_quantize_modelopt(w.data(), 1, cols, s, c1.data(), s1.data());
        dummy_quantize_row_modelopt(w.data(), cols, s, c2.data(), s2.data(), /*simd=*/true);
        EXPECT_EQ(c1, c2) << "scale_global=" << s;
        EXPECT_EQ(s1, s2) << "scale_global=" << s;
    }
}

TEST(dummy_weights, values_are_normal) {
    // 2^20 values of one row-major tensor (256 rows × 4096), sigma 1 so the bf16 step is relative.
    const int64_t rows = 256, cols = 4096;
    std::vector<float> z(size_t(rows * cols));
    const uint64_t key = dummy_tensor_key(5, "t");
    for (int64_t r = 0; r < rows; ++r) dummy_normal_row(key, r, cols, 1.0f, 0.0f, z.data() + r * cols);
    const double n = double(z.size());
    double s1 = 0, s2 = 0, s4 = 0, amax = 0;
    for (float x : z) s1 += x, s2 += double(x) * x, s4 += double(x) * x * x * x, amax = std::max(amax, double(std::fabs(x)));
    double mean = s1 / n, var = s2 / n - mean * mean;
    EXPECT_LT(std::fabs(mean), 5.0 / std::sqrt(n));        // 5 standard errors
    EXPECT_NEAR(var, 1.0, 5.0 * std::sqrt(2.0 / n) + 1e-5);  // Var of s² ≈ 2/n; bf16 adds ~1e-6
    EXPECT_NEAR(s4 / n / (var * var), 3.0, 5.0 * std::sqrt(24.0 / n));  // kurtosis: se ≈ sqrt(24/n)
    EXPECT_LE(amax, 5.9);                                    // u1 ≥ 2^-25 bounds r ≤ 5.887
    EXPECT_GT(amax, 4.0);                                    // P(max of 2^20 < 4) ≈ 1e-14
    // CDF at ±0.5, ±1, ±2, ±3 against erf, within 5 binomial standard errors.
    for (double x : {-3.0, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 3.0}) {
        double p = 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))), k = 0;
        for (float v : z) k += v <= x;
        EXPECT_NEAR(k / n, p, 5.0 * std::sqrt(p * (1 - p) / n)) << "x=" << x;
    }
    // Adjacent values and adjacent rows are uncorrelated (the hash, not the row key, varies).
    double c_next = 0, c_row = 0;
    for (int64_t i = 0; i + cols < int64_t(z.size()); ++i)
        c_next += double(z[size_t(i)]) * z[size_t(i + 1)], c_row += double(z[size_t(i)]) * z[size_t(i + cols)];
    EXPECT_LT(std::fabs(c_next / n), 5.0 / std::sqrt(n));
    EXPECT_LT(std::fabs(c_row / n), 5.0 / std::sqrt(n));
}

TEST(dummy_weights, bad_options_and_architectures_are_errors) {
    model_config c = parse_model_config(k_smollm2_2l, "x/config.json");
    try {
        make_dummy_weights(c, opts("fp8"));
        ADD_FAILURE() << "quant fp8 accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("quant 'fp8'"), std::string::npos) << e.what();
    }
    c.architecture = "MambaForCausalLM";
    try {
        make_dummy_weights(c, opts("bf16"));
        ADD_FAILURE() << "MambaForCausalLM accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("MambaForCausalLM"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace tetra
