// Qwen3MoeForCausalLM on the CUDA backend against HF transformers (issue #7): the checked-in tiny
// random-weight checkpoints of tests/data/moe (tools/gen_moe_goldens.py) as bf16, and `tetra quantize`d
// in-process to ModelOpt and compressed-tensors NVFP4, teacher-forced over their 64 reference
// positions (one 64-token prefill, and one token per step through the decode/graph path), against
// ref_logits*.bin (transformers in f32 on the same, dequantized, weights). The CPU model with bf16
// activations (rounding where the GPU rounds) is run too: it is the measured baseline of the bounds.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "engine/runner.h"
#include "io/quantize.h"
#include "io/weights.h"
#include "model/model.h"
#include "model/model_config.h"
#include "logit_compare.h"

namespace tetra {
namespace {

const std::string k_moe = std::string(TETRA_SOURCE_DIR) + "/tests/data/moe/";
const char* const k_models[] = {"qwen3_moe_tiny", "qwen3_moe_shared"};

// Bounds, GPU vs transformers in f32 on the same (dequantized) weights. The GPU keeps activations in
// bf16 (each op's output rounded to 8 significant bits, bf16 KV cache); so does the CPU engine with
// model_options.act = bf16, which measures (cpu_bf16_oracle_*, numbers in docs/validation.md):
//  - routing flips: these random routers have top-k margins down to 2e-5 in probability
//    (ref_ids.json min_router_margin), so bf16 rounding can pick another expert for a token, which
//    moves that row by row-NMSE 3e-3..8e-2 (max |dlogit| up to 3.8) and its neighbours a little; at
//    most 2 such rows (row NMSE > k_row_nmse; normal rounding stays below 1.3e-3) of 64 per case;
//  - every other row: NMSE <= 1.9e-4 over the rows, max |dlogit| <= 0.48;
//  - top-1: 0-3 of 64 differ, each where transformers' own top-1/top-2 gap is <= 0.19, or in a flip row.
// So on these 64 positions a bf16-activation engine reaches 95-100 % top-1, not >= 99 % (on random
// weights transformers' own bf16 run lands at 93.6-94.5 % of its f32 top-1: scripts/device-moe-hf.sh,
// docs/validation.md; the f32 CPU engine keeps 100 %, tests/model/test_qwen3_moe.cpp).
// Asserted (2-4x the measurement): <= k_max_flips flip rows; the other rows within k_nmse (aggregate)
// and k_max_abs; a differing top-1 only in a flip row or where transformers' gap is <= k_tie; at most
// k_max_diff differing top-1 in all.
// k_nmse sits 3.6x below the smallest MoE mistake tools/gen_moe_goldens.py measured (NMSE 1.8e-3:
// norm_topk_prob flipped on the shared model, which moves every row), a wrong row or expert kernel
// gives NMSE ~1 on the rows it touches (an expert serves 16-24 of the 64 tokens on average).
constexpr double k_row_nmse = 2e-3, k_nmse = 5e-4, k_max_abs = 1.0, k_tie = 0.4;
constexpr int64_t k_max_flips = 4, k_max_diff = 5;

using test_logits::read_f32;

struct stats {
    int64_t rows = 0, agree = 0, flips = 0, unexplained = 0;  // unexplained: differing top-1 outside the rules
    double max_abs = 0, mean_abs = 0, nmse = 0;      // all rows
    double max_abs_ok = 0, nmse_ok = 0;              // rows that are not routing flips
    int64_t worst_pos = -1, worst_tok = -1;
    std::string flip_rows, disagreements;
    double agreement() const { return rows ? double(agree) / double(rows) : 0; }
    std::string str() const {
        char b[320];
        std::snprintf(b, sizeof b,
                      "top-1 %lld/%lld (%.4f); all rows: max |dlogit| %.4f (pos %lld token %lld), mean |dlogit| %.2e, "
                      "NMSE %.3g; %lld flip rows%s; other rows: max |dlogit| %.4f, NMSE %.3g",
                      (long long)agree, (long long)rows, agreement(), max_abs, (long long)worst_pos, (long long)worst_tok,
                      mean_abs, nmse, (long long)flips, flip_rows.c_str(), max_abs_ok, nmse_ok);
        return b + (disagreements.empty() ? "" : "; differing top-1: " + disagreements);
    }
};

int64_t argmax(const float* row, int64_t n) { return std::max_element(row, row + n) - row; }

// got, want: f32 [rows, n_vocab]
stats compare(const std::vector<float>& got, const std::vector<float>& want, int64_t n_vocab) {
    stats s;
    EXPECT_EQ(got.size(), want.size());
    if (got.size() != want.size() || want.empty()) return s;
    s.rows = int64_t(want.size()) / n_vocab;
    double err = 0, ref = 0, err_ok = 0, ref_ok = 0, sum_abs = 0;
    for (int64_t r = 0; r < s.rows; ++r) {
        const float *g = got.data() + r * n_vocab, *w = want.data() + r * n_vocab;
        double re = 0, rr = 0, rmax = 0;
        for (int64_t i = 0; i < n_vocab; ++i) {
            double d = double(g[i]) - double(w[i]), a = std::isfinite(d) ? std::fabs(d) : INFINITY;
            if (a > s.max_abs || s.worst_pos < 0) s.max_abs = a, s.worst_pos = r, s.worst_tok = i;
            rmax = std::max(rmax, a), sum_abs += a, re += d * d, rr += double(w[i]) * double(w[i]);
        }
        err += re, ref += rr;
        const bool flip = !(re / rr <= k_row_nmse);
        char b[200];
        if (flip) {
            ++s.flips;
            std::snprintf(b, sizeof b, " %lld(%.2g)", (long long)r, re / rr);
            s.flip_rows += b;
        } else {
            err_ok += re, ref_ok += rr, s.max_abs_ok = std::max(s.max_abs_ok, rmax);
        }
        int64_t ag = argmax(g, n_vocab), aw = argmax(w, n_vocab);
        if (ag == aw) {
            ++s.agree;
            continue;
        }
        const double gap = double(w[aw]) - double(w[ag]);
        s.unexplained += !flip && !(gap <= k_tie);
        std::snprintf(b, sizeof b, "%spos %lld: ours %lld, ref %lld (ref gap %.4f%s)", s.disagreements.empty() ? "" : "; ",
                      (long long)r, (long long)ag, (long long)aw, gap, flip ? ", flip row" : "");
        s.disagreements += b;
    }
    s.mean_abs = sum_abs / double(want.size());
    s.nmse = err / ref;
    s.nmse_ok = ref_ok > 0 ? err_ok / ref_ok : 0;
    return s;
}

// Asserts the bounds above; `what` names the case in every message.
void check(const stats& s, const std::string& what) {
    std::printf("  %s: %s\n", what.c_str(), s.str().c_str());
    const std::string m = what + ": " + s.str();
    EXPECT_LE(s.flips, k_max_flips) << m;
    EXPECT_LE(s.nmse_ok, k_nmse) << m;
    EXPECT_LE(s.max_abs_ok, k_max_abs) << m;
    EXPECT_EQ(s.unexplained, 0) << m << " (a top-1 differs outside a flip row with a gap > " << k_tie << ")";
    EXPECT_LE(s.rows - s.agree, k_max_diff) << m;
}

struct quantized_dir {
    std::string dir;
    ~quantized_dir() {
        if (!dir.empty()) std::filesystem::remove_all(dir);
    }
};

// `tetra quantize` of a golden checkpoint into a fresh temporary directory.
void quantize_into(quantized_dir& q, const std::string& name, const std::string& format) {
    q.dir = (std::filesystem::temp_directory_path() / ("tetra_moe_gpu_" + name + "_XXXXXX")).string();
    ASSERT_NE(mkdtemp(&q.dir[0]), nullptr) << q.dir;
    quantize_options o;
    o.force = true, o.src = k_moe + name, o.dst = q.dir, o.format = format;
    quantize_checkpoint(o);
}

struct engine {
    std::unique_ptr<backend> be;
    std::unique_ptr<causal_lm> lm;
    std::unique_ptr<kv_cache> kv;
};

engine make_engine(std::unique_ptr<backend> be, const model_config& c, model_weights& w, std::optional<dtype> act) {
    engine e;
    e.be = std::move(be);
    model_options mo;
    mo.max_tokens = 64;
    mo.act = act;
    e.lm = create_model(c, w, *e.be, mo);
    e.kv = std::make_unique<kv_cache>(kv_cache::create(*e.be, c, 8, 16, e.lm->act_type()));  // 128 positions
    return e;
}

// Teacher-forced logits f32 [ids.size(), n_vocab]: chunk == 0 is one prefill returning every row;
// chunk == 1 feeds one token per step asking for the last row only (the decode path; CUDA graphs).
std::vector<float> teacher_forced(engine& e, const std::vector<int32_t>& ids, int64_t chunk) {
    std::vector<int32_t> table;
    for (int32_t b = 0; b < 8; ++b) table.push_back(b);
    model_runner r(*e.lm, *e.be, *e.kv);
    const int64_t n = int64_t(ids.size()), step = chunk ? chunk : n;
    std::vector<float> out;
    for (int64_t p0 = 0; p0 < n; p0 += step) {
        seq_chunk c{&table, p0, ids.data() + p0, std::min(step, n - p0)};
        c.all_logits = chunk != 1;
        const std::vector<float>& l = r.run({c});
        out.insert(out.end(), l.begin(), l.end());
    }
    return out;
}

struct weights_case {
    const char* label;   // printed
    const char* format;  // "" (the bf16 checkpoint) or a `tetra quantize` format
    const char* ref;     // reference logits file in the golden directory
};
const weights_case k_cases[] = {{"bf16", "", "ref_logits.bin"},
                                {"nvfp4 modelopt", "modelopt", "ref_logits_nvfp4.bin"},
                                {"nvfp4 compressed-tensors", "compressed-tensors", "ref_logits_nvfp4_ct.bin"}};

// f32 activations (--dtype float32: the CUDA-core f32 matmuls, f32 KV cache) against transformers in
// f32: the bar, top-1 ≥ 99 % in every case, and the CPU f32 engine's bounds
// (tests/model/test_qwen3_moe.cpp: only the summation order differs, NMSE ≤ 1e-11, max |dlogit| ≤
// 2e-4, 8 orders below the smallest MoE mistake), with no routing flip.
constexpr double k_f32_nmse = 1e-11, k_f32_max_abs = 2e-4;
void check_f32(const stats& s, const std::string& what) {
    std::printf("  %s: %s\n", what.c_str(), s.str().c_str());
    const std::string m = what + ": " + s.str();
    EXPECT_GE(s.agreement(), 0.99) << m;
    EXPECT_EQ(s.flips, 0) << m;
    EXPECT_LE(s.nmse, k_f32_nmse) << m;
    EXPECT_LE(s.max_abs, k_f32_max_abs) << m;
}

// Every golden model x weights case: the engine under test (make_test) teacher-forced in both
// chunkings vs transformers (bounds: `checker`); with make_oracle, also vs that engine's logits (one
// prefill).
using engine_factory = std::function<engine(const model_config&, model_weights&)>;
using checker_fn = std::function<void(const stats&, const std::string&)>;
void run_all(const std::string& side, const engine_factory& make_test, const engine_factory& make_oracle = nullptr,
             const checker_fn& checker = check) {
    for (const char* name : k_models) {
        test_logits::reference_ids ref = test_logits::read_reference_ids(k_moe + name);
        ASSERT_EQ(ref.ids.size(), 64u) << name;
        for (const weights_case& wc : k_cases) {
            quantized_dir q;
            if (*wc.format) {
                ASSERT_NO_FATAL_FAILURE(quantize_into(q, name, wc.format));
            }
            const std::string dir = *wc.format ? q.dir : k_moe + name;
            model_config c = load_model_config(dir);
            model_weights w = load_weights(dir);
            std::vector<float> want = read_f32(k_moe + name + "/" + wc.ref, ref.ids.size() * size_t(ref.n_vocab));
            std::vector<float> oracle;
            if (make_oracle) {
                engine o = make_oracle(c, w);
                oracle = teacher_forced(o, ref.ids, 0);
            }
            engine e = make_test(c, w);
            for (int64_t chunk : {int64_t(0), int64_t(1)}) {
                std::string what = side + " " + name + " " + wc.label + (chunk ? " (1 token/step)" : " (64-token prefill)");
                std::vector<float> got = teacher_forced(e, ref.ids, chunk);
                checker(compare(got, want, ref.n_vocab), what + " vs transformers");
                if (make_oracle) checker(compare(got, oracle, ref.n_vocab), what + " vs cpu-bf16");
            }
        }
    }
}

engine cpu_bf16(const model_config& c, model_weights& w) { return make_engine(make_cpu_backend(), c, w, dtype::BF16); }

// The GPU vs transformers, and vs the CPU engine with bf16 activations (the same rounding points:
// the same bounds hold, since GPU and oracle each sit that far from the f32 reference).
TEST(qwen3_moe_gpu, cuda_matches_transformers_teacher_forced) {
    ASSERT_GT(cuda_device_count(), 0) << "gpu test needs a CUDA device";
    run_all("cuda", [](const model_config& c, model_weights& w) { return make_engine(make_cuda_backend(0), c, w, std::nullopt); },
            cpu_bf16);
}

// --dtype float32 on the GPU vs transformers in f32: top-1 ≥ 99 % (issue #7's bar; bf16 activations
// cannot reach it on these random weights, see the bounds above).
TEST(qwen3_moe_gpu, cuda_f32_matches_transformers_top1_99) {
    ASSERT_GT(cuda_device_count(), 0) << "gpu test needs a CUDA device";
    run_all(
        "cuda-f32",
        [](const model_config& c, model_weights& w) {
            engine e = make_engine(make_cuda_backend(0), c, w, dtype::F32);
            EXPECT_EQ(e.lm->act_type(), dtype::F32);
            return e;
        },
        nullptr, check_f32);
}

// The measured baseline of the bounds: the CPU engine with bf16 activations vs transformers.
TEST(qwen3_moe_gpu, cpu_bf16_oracle_matches_transformers_teacher_forced) { run_all("cpu-bf16", cpu_bf16); }

}  // namespace
}  // namespace tetra
