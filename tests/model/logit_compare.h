// Test helpers shared by the whole-model tests against transformers' reference logits
// (test_random_models.cpp, test_qwen3_moe.cpp, test_qwen3_moe_gpu.cpp): reading a golden directory,
// top-1 agreement / max |Δlogit| / NMSE of two logits matrices, and the engine's teacher-forced
// logits of a model directory.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "engine/loaded_model.h"

namespace tetra {
namespace test_logits {

// A golden directory's ref_ids.json: the token ids the reference logits were computed for.
struct reference_ids {
    std::vector<int32_t> ids;
    int64_t n_vocab = 0;
};

inline reference_ids read_reference_ids(const std::string& dir) {
    reference_ids r;
    std::ifstream jf(dir + "/ref_ids.json");
    EXPECT_TRUE(jf.good()) << dir << "/ref_ids.json";
    nlohmann::json j = nlohmann::json::parse(jf);
    r.ids = j.at("token_ids").get<std::vector<int32_t>>();
    r.n_vocab = j.at("n_vocab").get<int64_t>();
    return r;
}

// n raw f32 values from path (a short file is a test failure naming it).
inline std::vector<float> read_f32(const std::string& path, size_t n) {
    std::vector<float> v(n);
    std::ifstream f(path, std::ios::binary);
    f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(float)));
    EXPECT_EQ(size_t(f.gcount()), n * sizeof(float)) << path << " is short";
    return v;
}

struct logit_stats {
    double agreement = 0, max_abs = 0, nmse = 0;
    std::string str() const {
        char b[128];
        std::snprintf(b, sizeof b, "top-1 agreement %.4f, max |dlogit| %.3g, NMSE %.3g", agreement, max_abs, nmse);
        return b;
    }
};

// got, want: f32 [n_rows, n_vocab]
inline logit_stats compare(const std::vector<float>& got, const std::vector<float>& want, int64_t n_vocab) {
    logit_stats s;
    EXPECT_EQ(got.size(), want.size());
    if (got.size() != want.size() || want.empty()) return s;
    size_t n_rows = want.size() / size_t(n_vocab), agree = 0;
    double err = 0, ref = 0;
    for (size_t r = 0; r < n_rows; ++r) {
        const float *g = got.data() + r * size_t(n_vocab), *w = want.data() + r * size_t(n_vocab);
        int64_t ag = 0, aw = 0;
        for (int64_t i = 0; i < n_vocab; ++i) {
            if (g[i] > g[ag]) ag = i;
            if (w[i] > w[aw]) aw = i;
            double d = double(g[i]) - double(w[i]);
            s.max_abs = std::max(s.max_abs, std::isfinite(d) ? std::fabs(d) : double(INFINITY));
            err += d * d;
            ref += double(w[i]) * double(w[i]);
        }
        agree += ag == aw;
    }
    s.agreement = double(agree) / double(n_rows);
    s.nmse = err / ref;
    return s;
}

// Logits of every position of `ids` (teacher-forced) from the model in `dir` on the default device.
inline std::vector<float> engine_logits(const std::string& dir, int64_t max_tokens, const std::vector<int32_t>& ids) {
    load_options o;
    o.progress = false;
    o.max_tokens = max_tokens;
    auto m = load_model(dir, o);
    generator gen(*m->model, *m->be, *m->tok, m->max_model_len);
    return gen.all_logits(ids);
}

}  // namespace test_logits
}  // namespace tetra
