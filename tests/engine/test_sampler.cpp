// engine/sampler, sampling_params::validate and generation_config.json. Oracles: goldens from an
// independent numpy implementation of the spec (tools/gen_sampler_goldens.py, bit-exact tokens),
// naive double-precision filters written here, hand-computed penalties, a chi-square test of the
// sampling distribution, and real generation_config.json contents under tests/data/sampler/.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/generation_config.h"
#include "engine/sampler.h"

using namespace tetra;
using json = nlohmann::json;

static const float ninf = -std::numeric_limits<float>::infinity();
static std::string data_path(const char* f) {
    return std::string(TETRA_SOURCE_DIR) + "/tests/data/sampler/" + f;
}
static json load_goldens() {
    std::ifstream f(data_path("goldens.json"));
    EXPECT_TRUE(f.good());
    return json::parse(f);
}
static float bits_f32(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}
static uint32_t f32_bits(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

// The golden logit generators (mirror of make_logits in tools/gen_sampler_goldens.py).
static std::vector<float> make_logits(const std::string& dist, uint64_t seed, int32_t n,
                                      float spread) {
    std::vector<float> l(n);
    const float half = spread * 0.5f;
    for (int32_t i = 0; i < n; ++i) {
        uint64_t h = sampler_random_bits(seed, i);
        float u = float(h >> 40) * (1.0f / 16777216.0f);
        if (dist == "uniform") {
            float a = u * spread;
            l[i] = a - half;
        } else if (dist == "peaked" || dist == "peaked_masked") {
            float u2 = u * u, u4 = u2 * u2, u8 = u4 * u4;
            float a = u8 * spread;
            l[i] = a - half;
            if (dist == "peaked_masked" && ((h >> 40) & 7) == 0) l[i] = ninf;
        } else if (dist == "ties") {
            l[i] = float(h >> 61) * spread;
        } else {
            ADD_FAILURE() << "unknown dist " << dist;
        }
    }
    return l;
}

static sampling_params params_from(const json& j) {
    sampling_params p;
    p.temperature = j.value("temperature", 1.0f);
    p.top_k = j.value("top_k", 0);
    p.top_p = j.value("top_p", 1.0f);
    p.min_p = j.value("min_p", 0.0f);
    p.repetition_penalty = j.value("repetition_penalty", 1.0f);
    p.presence_penalty = j.value("presence_penalty", 0.0f);
    p.frequency_penalty = j.value("frequency_penalty", 0.0f);
    p.min_tokens = j.value("min_tokens", 0);
    p.eos_token_ids = j.value("eos_token_ids", std::vector<int32_t>{});
    p.stop_token_ids = j.value("stop_token_ids", std::vector<int32_t>{});
    return p;
}

// ---- bit-exact pieces ----

TEST(sampler, random_bits_golden) {
    json g = load_goldens();
    ASSERT_GE(g["random_bits"].size(), 6u);
    for (const auto& r : g["random_bits"])
        EXPECT_EQ(sampler_random_bits(r[0].get<uint64_t>(), r[1].get<int64_t>()),
                  r[2].get<uint64_t>())
            << "seed " << r[0] << " step " << r[1];
    // Published first output of SplitMix64 seeded with 0 (Vigna's reference splitmix64.c).
    EXPECT_EQ(sampler_random_bits(0, 0), 0xE220A8397B1DCDAFull);
}

TEST(sampler, exp_golden_bits_and_accuracy) {
    json g = load_goldens();
    ASSERT_GE(g["exp"].size(), 400u);
    for (const auto& e : g["exp"]) {
        float d = bits_f32(e[0].get<uint32_t>());
        EXPECT_EQ(f32_bits(sampler_exp(d)), e[1].get<uint32_t>()) << "d = " << d;
    }
    EXPECT_EQ(sampler_exp(0.0f), 1.0f);  // w of the most likely token must be exactly 1
    EXPECT_EQ(sampler_exp(ninf), 0.0f);
    EXPECT_EQ(sampler_exp(-87.5f), 0.0f);
    double worst = 0;
    for (int i = 0; i <= 870000; ++i) {  // d in [-87, 0] by 1e-4
        float d = -float(i) * 1e-4f;
        double ref = std::exp(double(d));
        worst = std::max(worst, std::fabs(double(sampler_exp(d)) - ref) / ref);
    }
    EXPECT_LT(worst, 4e-7) << "header promises relative error < 4e-7";
}

// Every golden case: same tokens, same kept-set size and weight total, bit for bit.
TEST(sampler, goldens_match_reference_implementation) {
    json g = load_goldens();
    ASSERT_GE(g["cases"].size(), 100u);
    sampler s;
    for (const auto& c : g["cases"]) {
        std::string name = c["name"];
        int32_t n = c["n_vocab"];
        auto logits = make_logits(c["dist"], c["logit_seed"], n, c["spread"].get<float>());
        sampling_params p = params_from(c["params"]);
        ASSERT_NO_THROW(p.validate()) << name;
        token_history h;
        h.add_prompt(c["prompt"].get<std::vector<int32_t>>());
        for (int32_t t : c["output"].get<std::vector<int32_t>>()) h.add_output(t);
        uint64_t seed = c["seed"];
        const auto& steps = c["steps"];
        for (size_t i = 0; i < steps.size(); ++i) {
            std::vector<float> l = logits;
            auto r = s.sample(l.data(), n, p, h, seed, steps[i].get<int64_t>());
            EXPECT_EQ(r.token, c["tokens"][i].get<int32_t>()) << name << " step " << steps[i];
        }
        if (!p.greedy()) {
            std::vector<float> l = logits;
            apply_min_tokens(l.data(), n, p, h);
            apply_penalties(l.data(), n, p, h);
            auto kept = s.kept(l.data(), n, p);
            uint64_t total = 0;
            for (const auto& k : kept) total += k.q;
            EXPECT_EQ(int64_t(kept.size()), c["n_kept"].get<int64_t>()) << name;
            EXPECT_EQ(total, c["q_total"].get<uint64_t>()) << name;
        }
    }
}

// ---- greedy ----

TEST(sampler, greedy_argmax_and_tie_rule) {
    sampler s;
    sampling_params p;
    p.temperature = 0.0f;
    token_history h;
    struct tc { std::vector<float> l; int32_t want; };
    std::vector<tc> cases = {
        {{1, 3, 3, 2}, 1}, {{5, 5, 5}, 0}, {{ninf, ninf, -1e30f}, 2}, {{-0.0f, 0.0f}, 0},
        {{-2, -1, -1.5f}, 1}, {{7}, 0},
    };
    for (const auto& c : cases) {
        for (uint64_t seed : {1ull, 2ull}) {
            auto l = c.l;
            EXPECT_EQ(s.sample(l.data(), int32_t(l.size()), p, h, seed, 3).token, c.want);
        }
    }
    p.temperature = 0.5e-5f;  // below vLLM's epsilon: still greedy
    std::vector<float> l = {0, 1, 0.9999f};
    EXPECT_EQ(s.sample(l.data(), 3, p, h, 9, 0).token, 1);
}

// ---- filters against naive double references ----

// Naive reference: softmax in double over the ids surviving so far, order by prob desc / id asc.
struct naive {
    std::vector<double> x;  // l / T in double
    std::vector<int32_t> order(const std::vector<int32_t>& ids) const {
        auto o = ids;
        std::sort(o.begin(), o.end(), [&](int32_t a, int32_t b) {
            return x[a] != x[b] ? x[a] > x[b] : a < b;
        });
        return o;
    }
    std::vector<double> probs(const std::vector<int32_t>& ids) const {
        double m = -INFINITY, z = 0;
        for (int32_t i : ids) m = std::max(m, x[i]);
        std::vector<double> p;
        for (int32_t i : ids) p.push_back(std::exp(x[i] - m));
        for (double v : p) z += v;
        for (double& v : p) v /= z;
        return p;
    }
};

static std::vector<float> gauss_logits(int32_t n, uint64_t seed, float sd) {
    std::vector<float> l(n);
    for (int32_t i = 0; i < n; ++i) {  // sum of 4 uniforms: bell-shaped, deterministic
        double s = 0;
        for (int k = 0; k < 4; ++k) s += double(sampler_random_bits(seed, 4 * i + k) >> 11) * 0x1p-53;
        l[i] = float((s - 2.0) * sd);
    }
    return l;
}

static std::vector<int32_t> kept_ids(sampler& s, std::vector<float> l, const sampling_params& p) {
    std::vector<int32_t> ids;
    for (const auto& k : s.kept(l.data(), int32_t(l.size()), p)) ids.push_back(k.id);
    return ids;
}

TEST(sampler, top_k_matches_naive) {
    sampler s;
    for (int32_t n : {10, 257, 5000}) {
        auto l = gauss_logits(n, 11 + n, 3.0f);
        for (int32_t k : {1, 2, 7, 50, 2000}) {
            if (k >= n) continue;
            sampling_params p;
            p.top_k = k;
            std::vector<float> sorted(l);
            std::sort(sorted.begin(), sorted.end(), std::greater<float>());
            std::set<int32_t> want;
            for (int32_t i = 0; i < n; ++i)
                if (l[i] >= sorted[k - 1]) want.insert(i);
            auto got = kept_ids(s, l, p);
            EXPECT_EQ(std::set<int32_t>(got.begin(), got.end()), want) << "n " << n << " k " << k;
        }
    }
    // ties at the boundary are kept (vLLM semantics)
    sampling_params p;
    p.top_k = 2;
    auto got = kept_ids(s, {1, 3, 2, 2, 0}, p);
    EXPECT_EQ(got, (std::vector<int32_t>{1, 2, 3}));
}

TEST(sampler, top_p_keeps_smallest_prefix_with_mass_ge_p) {
    sampler s;
    for (int32_t n : {12, 300, 4000}) {
        for (float temp : {0.7f, 1.0f, 1.6f}) {
            auto l = gauss_logits(n, 77 + n, 2.5f);
            naive ref;
            for (float v : l) ref.x.push_back(double(v) / temp);
            std::vector<int32_t> all(n);
            std::iota(all.begin(), all.end(), 0);
            auto ord = ref.order(all);
            auto pr = ref.probs(ord);
            // p halfway between two cumulative masses: the expected prefix is unambiguous.
            std::vector<double> cum(n);
            std::partial_sum(pr.begin(), pr.end(), cum.begin());
            for (int32_t j : {1, 2, 5, n / 3, n / 2}) {
                if (j < 1 || j >= n - 1) continue;
                float top_p = float((cum[j - 1] + cum[j]) / 2);
                if (!(double(top_p) > cum[j - 1] + 1e-6 && double(top_p) < cum[j] - 1e-6)) continue;
                sampling_params p;
                p.temperature = temp;
                p.top_p = top_p;
                std::vector<int32_t> want(ord.begin(), ord.begin() + j + 1);
                EXPECT_EQ(kept_ids(s, l, p), want) << "n " << n << " T " << temp << " j " << j;
            }
        }
    }
}

TEST(sampler, min_p_matches_naive) {
    sampler s;
    for (int32_t n : {9, 500}) {
        auto l = gauss_logits(n, 5 + n, 2.0f);
        naive ref;
        for (float v : l) ref.x.push_back(double(v) / 0.9);
        std::vector<int32_t> all(n);
        std::iota(all.begin(), all.end(), 0);
        auto ord = ref.order(all);
        auto pr = ref.probs(ord);
        for (int32_t j : {1, 3, n / 4, n / 2}) {
            double ratio_hi = pr[j - 1] / pr[0], ratio_lo = pr[j] / pr[0];
            if (ratio_hi - ratio_lo < 1e-5) continue;
            sampling_params p;
            p.temperature = 0.9f;
            p.min_p = float((ratio_hi + ratio_lo) / 2);  // keeps exactly the first j
            std::vector<int32_t> want(ord.begin(), ord.begin() + j);
            EXPECT_EQ(kept_ids(s, l, p), want) << "n " << n << " j " << j;
        }
    }
}

TEST(sampler, filter_order_top_k_then_top_p_then_min_p) {
    // probs (T=1) of ids 0..5 from logits log(w): 0.4 0.2 0.15 0.1 0.1 0.05
    std::vector<float> w = {0.4f, 0.2f, 0.15f, 0.1f, 0.1f, 0.05f}, l;
    for (float v : w) l.push_back(std::log(v));
    sampler s;
    sampling_params p;
    p.top_k = 4;  // keeps 0,1,2 and both tied 0.1s (3, 4): mass 0.95
    EXPECT_EQ(kept_ids(s, l, p), (std::vector<int32_t>{0, 1, 2, 3, 4}));
    p.top_p = 0.6f;  // renormalized over the top-k set: 0.4/0.95=0.421, +0.2/0.95 -> 0.632 >= 0.6
    EXPECT_EQ(kept_ids(s, l, p), (std::vector<int32_t>{0, 1}));
    p.top_p = 0.66f;  // 0.632 < 0.66 <= 0.789: one more
    EXPECT_EQ(kept_ids(s, l, p), (std::vector<int32_t>{0, 1, 2}));
    p.min_p = 0.45f;  // relative to max 0.4: keep prob >= 0.18 -> 0, 1
    EXPECT_EQ(kept_ids(s, l, p), (std::vector<int32_t>{0, 1}));
    // Without top-k the same top_p is measured on the full distribution: 0.4+0.2+0.15=0.75 >= 0.66
    sampling_params q;
    q.top_p = 0.66f;
    EXPECT_EQ(kept_ids(s, l, q), (std::vector<int32_t>{0, 1, 2}));
    q.top_p = 0.62f;  // 0.6 < 0.62 -> still three; vs 0.632 in the top-k case -> two
    EXPECT_EQ(kept_ids(s, l, q), (std::vector<int32_t>{0, 1, 2}));
    // Weight below 2^-40 of the max (about 27.7 nats) is never sampled (fixed-point weights).
    EXPECT_EQ(kept_ids(s, {0.0f, -28.0f, -27.0f}, sampling_params{}),
              (std::vector<int32_t>{0, 2}));
}

// ---- penalties and min_tokens, hand-computed ----

TEST(sampler, penalties_hand_computed) {
    std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f, 4.0f};
    token_history h;
    h.add_prompt({0, 1, 0, 4});
    for (int32_t t : {1, 2, 2, 99}) h.add_output(t);  // 99: outside the vocab, ignored
    sampling_params p;
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    apply_penalties(l.data(), 6, p, h);
    EXPECT_EQ(l[0], 1.0f);    // prompt only: 2 / 2
    EXPECT_EQ(l[1], -2.75f);  // prompt+output once: -1 * 2 - 0.5 * 1 - 0.25
    EXPECT_EQ(l[2], -1.0f);   // output twice: 0.5 / 2 - 0.5 * 2 - 0.25
    EXPECT_EQ(l[3], 3.0f);    // unseen
    EXPECT_EQ(l[4], 0.0f);    // prompt, logit 0: 0 * 2
    EXPECT_EQ(l[5], 4.0f);
    EXPECT_EQ(h.n_output, 4);
    // negative presence/frequency (encourage repetition) and repetition < 1
    std::vector<float> m = {1.0f, -1.0f, 1.0f};
    token_history h2;
    h2.add_output(0);
    h2.add_output(1);
    sampling_params q;
    q.repetition_penalty = 0.5f;
    q.presence_penalty = -1.0f;
    apply_penalties(m.data(), 3, q, h2);
    EXPECT_EQ(m[0], 3.0f);    // 1 / 0.5 + 1
    EXPECT_EQ(m[1], 0.5f);    // -1 * 0.5 + 1
    EXPECT_EQ(m[2], 1.0f);
}

TEST(sampler, min_tokens_suppresses_eos_and_stop_ids) {
    sampler s;
    sampling_params p;
    p.temperature = 0.0f;
    p.min_tokens = 2;
    p.eos_token_ids = {3};
    p.stop_token_ids = {1};
    token_history h;
    std::vector<float> l = {0, 5, 1, 9};
    EXPECT_EQ(s.sample(l.data(), 4, p, h, 0, 0).token, 2);  // 3 and 1 suppressed
    h.add_output(2);
    l = {0, 5, 1, 9};
    EXPECT_EQ(s.sample(l.data(), 4, p, h, 0, 1).token, 2);
    h.add_output(2);
    l = {0, 5, 1, 9};
    EXPECT_EQ(s.sample(l.data(), 4, p, h, 0, 2).token, 3);  // reached: EOS allowed
}

// ---- determinism and the distribution ----

TEST(sampler, same_seed_same_sequence_different_seeds_differ) {
    sampler s;
    auto logits = gauss_logits(1000, 3, 1.0f);
    sampling_params p;
    p.top_p = 0.95f;
    auto run = [&](uint64_t seed) {
        std::vector<int32_t> toks;
        for (int64_t step = 0; step < 64; ++step) {
            auto l = logits;
            toks.push_back(s.sample(l.data(), 1000, p, token_history{}, seed, step).token);
        }
        return toks;
    };
    auto a = run(42), b = run(42), c = run(43);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    int same = 0;
    for (size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
    EXPECT_LT(same, 16) << "seeds 42 and 43 should give nearly independent draws";
    EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 20u) << "steps must vary the draw";
}

// Chi-square goodness of fit, 20000 draws (seed 2024, steps 0..19999). With 7 degrees of
// freedom the 0.001 upper quantile is 24.32: a correct sampler fails this with probability 0.1%,
// and since seed and steps are fixed the outcome is deterministic.
static double chi_square(const std::vector<float>& l, const sampling_params& p,
                         const std::vector<double>& expect) {
    sampler s;
    const int draws = 20000;
    std::vector<int> count(l.size(), 0);
    for (int64_t step = 0; step < draws; ++step) {
        auto x = l;
        ++count[s.sample(x.data(), int32_t(x.size()), p, token_history{}, 2024, step).token];
    }
    double chi = 0;
    for (size_t i = 0; i < l.size(); ++i) {
        double e = expect[i] * draws;
        if (e == 0) {
            EXPECT_EQ(count[i], 0) << "token " << i << " has zero probability";
            continue;
        }
        chi += (count[i] - e) * (count[i] - e) / e;
    }
    return chi;
}

TEST(sampler, distribution_chi_square) {
    std::vector<float> l = {1.0f, 0.5f, 0.0f, -0.3f, -1.0f, 2.0f, 0.2f, -2.0f};
    const double t = 0.8;
    std::vector<double> e(8);
    double z = 0;
    for (int i = 0; i < 8; ++i) z += e[i] = std::exp(l[i] / t);
    for (double& v : e) v /= z;
    sampling_params p;
    p.temperature = float(t);
    double chi = chi_square(l, p, e);
    EXPECT_LT(chi, 24.32);
    // Under top-k = 4 the four most likely (ids 5, 0, 1, 6) are renormalized; 3 dof -> 16.27.
    std::vector<double> ek(8, 0.0);
    double zk = 0;
    for (int i : {5, 0, 1, 6}) zk += ek[i] = std::exp(l[i] / t);
    for (double& v : ek) v /= zk;
    p.top_k = 4;
    EXPECT_LT(chi_square(l, p, ek), 16.27);
}

// ---- logprobs ----

TEST(sampler, raw_logprobs_top_n_and_rank) {
    std::vector<float> raw = {1.0f, 3.0f, 3.0f, -2.0f, 0.5f, ninf};
    double m = 3.0, z = 0;
    for (float v : raw) z += std::exp(double(v) - m);
    auto lp = [&](int i) { return double(raw[i]) - m - std::log(z); };
    sampler s;
    sampling_params p;
    p.temperature = 0.0f;
    p.logprobs = 3;
    p.repetition_penalty = 10.0f;  // changes the choice but not the (raw) logprobs
    token_history h;
    h.add_prompt({1, 2});
    auto l = raw;
    auto r = s.sample(l.data(), 6, p, h, 0, 0);
    EXPECT_EQ(r.token, 0);
    EXPECT_NEAR(r.logprob, lp(0), 1e-6);
    EXPECT_EQ(r.rank, 3);  // ids 1, 2 and itself have raw logit >= 1.0
    ASSERT_EQ(r.top_logprobs.size(), 3u);
    EXPECT_EQ(r.top_logprobs[0].id, 1);  // tie 1/2 -> lower id first
    EXPECT_EQ(r.top_logprobs[1].id, 2);
    EXPECT_EQ(r.top_logprobs[2].id, 0);
    for (const auto& t : r.top_logprobs) EXPECT_NEAR(t.logprob, lp(t.id), 1e-6);
    p.logprobs = 0;  // only the sampled token
    l = raw;
    r = s.sample(l.data(), 6, p, h, 0, 0);
    EXPECT_TRUE(r.top_logprobs.empty());
    EXPECT_NEAR(r.logprob, lp(0), 1e-6);
    // big vocab: against a double reference
    auto big = gauss_logits(50000, 8, 4.0f);
    double bm = *std::max_element(big.begin(), big.end()), bz = 0;
    for (float v : big) bz += std::exp(double(v) - bm);
    sampling_params q;
    q.logprobs = 20;
    auto bl = big;
    r = s.sample(bl.data(), 50000, q, token_history{}, 5, 0);
    ASSERT_EQ(r.top_logprobs.size(), 20u);
    std::vector<float> sorted(big);
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(big[r.top_logprobs[i].id], sorted[i]);
        EXPECT_NEAR(r.top_logprobs[i].logprob, double(sorted[i]) - bm - std::log(bz), 1e-5);
    }
    EXPECT_NEAR(r.logprob, double(big[r.token]) - bm - std::log(bz), 1e-5);
}

// ---- bad input ----

TEST(sampler, bad_logits_are_errors) {
    sampler s;
    sampling_params p;
    std::vector<float> l = {0.0f, NAN, 1.0f};
    try {
        s.sample(l.data(), 3, p, token_history{}, 0, 0);
        ADD_FAILURE() << "NaN accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("token 1"), std::string::npos) << e.what();
    }
    l = {ninf, ninf};
    EXPECT_THROW(s.sample(l.data(), 2, p, token_history{}, 0, 0), error);
    p.temperature = 0;
    l = {ninf, ninf};
    EXPECT_THROW(s.sample(l.data(), 2, p, token_history{}, 0, 0), error);
    l = {1.0f, INFINITY};
    EXPECT_THROW(s.sample(l.data(), 2, p, token_history{}, 0, 0), error);
    EXPECT_THROW(s.sample(l.data(), 0, p, token_history{}, 0, 0), error);
    sampling_params tiny;
    tiny.temperature = 2e-5f;
    l = {1e35f, 0.0f};  // 1e35 / 2e-5 overflows f32
    EXPECT_THROW(s.sample(l.data(), 2, tiny, token_history{}, 0, 0), error);
}

// ---- large vocabulary (CPU time per call printed, measured as this thread's CPU time) ----

static double thread_cpu_ms() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) * 1e3 + double(t.tv_nsec) * 1e-6;
}

// A Qwen-sized vocabulary in every mode: the same (seed, step) gives the same token and a valid id.
// The CPU time is printed for information (speed is a benchmark's job, not a unit test's).
TEST(sampler, large_vocab_152064_every_mode) {
    auto logits = gauss_logits(152064, 99, 4.0f);
    sampler s;
    for (int mode = 0; mode < 4; ++mode) {
        sampling_params p;
        if (mode == 1) { p.top_k = 50; p.top_p = 0.9f; }
        if (mode == 2) { p.top_p = 0.95f; p.min_p = 0.01f; p.temperature = 0.7f; }
        if (mode == 3) { p.repetition_penalty = 1.1f; p.logprobs = 5; }
        std::vector<double> ms;
        for (int rep = 0; rep < 5; ++rep) {
            auto l1 = logits, l2 = logits;
            double t0 = thread_cpu_ms();
            sample_result a = s.sample(l1.data(), 152064, p, token_history{}, 1, rep);
            ms.push_back(thread_cpu_ms() - t0);
            sample_result b = s.sample(l2.data(), 152064, p, token_history{}, 1, rep);
            ASSERT_GE(a.token, 0);
            ASSERT_LT(a.token, 152064);
            EXPECT_EQ(a.token, b.token) << "mode " << mode << " rep " << rep;
        }
        std::sort(ms.begin(), ms.end());
        printf("sampler n_vocab 152064 mode %d: median %.3f ms CPU\n", mode, ms[ms.size() / 2]);
    }
}

// ---- sampling_params::validate: every field, message names field, range and value ----

TEST(sampling_params, validate_messages) {
    EXPECT_NO_THROW(sampling_params{}.validate());
    struct tc { void (*set)(sampling_params&); const char* field; const char* text; };
    std::vector<tc> cases = {
        {[](sampling_params& p) { p.temperature = -0.5f; }, "temperature", "expected a finite value >= 0, got -0.5"},
        {[](sampling_params& p) { p.temperature = NAN; }, "temperature", "got nan"},
        {[](sampling_params& p) { p.temperature = INFINITY; }, "temperature", "got inf"},
        {[](sampling_params& p) { p.top_k = -2; }, "top_k", "got -2"},
        {[](sampling_params& p) { p.top_p = 0.0f; }, "top_p", "expected a value in (0, 1], got 0"},
        {[](sampling_params& p) { p.top_p = 1.5f; }, "top_p", "got 1.5"},
        {[](sampling_params& p) { p.min_p = -0.1f; }, "min_p", "expected a value in [0, 1]"},
        {[](sampling_params& p) { p.min_p = 1.01f; }, "min_p", "got 1.01"},
        {[](sampling_params& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty", "expected a finite value > 0, got 0"},
        {[](sampling_params& p) { p.presence_penalty = 2.5f; }, "presence_penalty", "expected a value in [-2, 2], got 2.5"},
        {[](sampling_params& p) { p.frequency_penalty = -3.0f; }, "frequency_penalty", "got -3"},
        {[](sampling_params& p) { p.max_tokens = 0; }, "max_tokens", "expected a value >= 1, got 0"},
        {[](sampling_params& p) { p.min_tokens = 17; }, "min_tokens", "expected a value in [0, max_tokens=16], got 17"},
        {[](sampling_params& p) { p.min_tokens = -1; }, "min_tokens", "got -1"},
        {[](sampling_params& p) { p.logprobs = 21; }, "logprobs", "expected a value in [0, 20], got 21"},
        {[](sampling_params& p) { p.logprobs = -1; }, "logprobs", "got -1"},
        {[](sampling_params& p) { p.stop = {"x", ""}; }, "stop", "got \"\" at index 1"},
        {[](sampling_params& p) { p.stop_token_ids = {3, -5}; }, "stop_token_ids", "got -5 at index 1"},
    };
    for (const auto& c : cases) {
        sampling_params p;
        c.set(p);
        try {
            p.validate();
            ADD_FAILURE() << c.field << ": accepted";
        } catch (const sampling_param_error& e) {
            std::string msg = e.what();
            EXPECT_EQ(e.param, c.field);
            EXPECT_NE(msg.find(std::string("invalid sampling parameter '") + c.field + "'"),
                      std::string::npos) << msg;
            EXPECT_NE(msg.find(c.text), std::string::npos) << msg;
        }
    }
    // boundaries that are valid
    sampling_params p;
    p.temperature = 0.0f;
    p.top_k = -1;
    p.top_p = 1.0f;
    p.min_p = 1.0f;
    p.presence_penalty = -2.0f;
    p.frequency_penalty = 2.0f;
    p.max_tokens = 1;
    p.min_tokens = 1;
    p.logprobs = 0;
    EXPECT_NO_THROW(p.validate());
    p.logprobs = 20;
    p.top_k = 0;
    EXPECT_NO_THROW(p.validate());
}

TEST(sampling_params, resolve_seed) {
    sampling_params p;
    p.seed = 1234;
    EXPECT_EQ(resolve_seed(p), 1234u);
    p.seed.reset();
    std::set<uint64_t> seen;
    for (int i = 0; i < 8; ++i) seen.insert(resolve_seed(p));
    EXPECT_GT(seen.size(), 6u) << "unseeded requests must draw fresh seeds";
}

// ---- generation_config.json ----

TEST(generation_config, real_files) {
    auto q3 = load_generation_config(data_path("generation_config_qwen3.json"));
    EXPECT_EQ(q3.eos_token_ids, (std::vector<int32_t>{151645, 151643}));
    EXPECT_EQ(q3.bos_token_id, 151643);
    EXPECT_EQ(q3.pad_token_id, 151643);
    EXPECT_EQ(q3.temperature, 0.6f);
    EXPECT_EQ(q3.top_k, 20);
    EXPECT_EQ(q3.top_p, 0.95f);
    EXPECT_FALSE(q3.repetition_penalty);
    EXPECT_FALSE(q3.min_p);
    auto sp = default_sampling_params(q3, {151645, 151643, 7});
    EXPECT_EQ(sp.temperature, 0.6f);
    EXPECT_EQ(sp.top_k, 20);
    EXPECT_EQ(sp.top_p, 0.95f);
    EXPECT_EQ(sp.repetition_penalty, 1.0f);
    EXPECT_EQ(sp.max_tokens, 16);
    EXPECT_EQ(sp.eos_token_ids, (std::vector<int32_t>{151645, 151643, 7}));
    EXPECT_NO_THROW(sp.validate());

    auto q25 = load_generation_config(data_path("generation_config_qwen25.json"));
    EXPECT_EQ(q25.repetition_penalty, 1.05f);
    EXPECT_EQ(default_sampling_params(q25).repetition_penalty, 1.05f);
    EXPECT_EQ(default_sampling_params(q25).top_p, 0.8f);

    auto ll = load_generation_config(data_path("generation_config_llama31.json"));
    EXPECT_EQ(ll.eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
    EXPECT_FALSE(ll.pad_token_id);
    EXPECT_FALSE(ll.top_k);
    EXPECT_EQ(default_sampling_params(ll, {128009}).eos_token_ids,
              (std::vector<int32_t>{128001, 128008, 128009}));

    auto sm = load_generation_config(data_path("generation_config_smollm2.json"));
    EXPECT_EQ(sm.eos_token_ids, (std::vector<int32_t>{2}));
    EXPECT_EQ(sm.bos_token_id, 1);
    EXPECT_FALSE(sm.temperature);
    auto smp = default_sampling_params(sm);
    EXPECT_EQ(smp.temperature, 1.0f);
    EXPECT_EQ(smp.top_p, 1.0f);
}

TEST(generation_config, nulls_and_max_new_tokens) {
    auto g = parse_generation_config(
        R"({"eos_token_id": null, "pad_token_id": null, "max_new_tokens": 256, "min_p": 0.1})", "t");
    EXPECT_TRUE(g.eos_token_ids.empty());
    EXPECT_FALSE(g.pad_token_id);
    EXPECT_EQ(default_sampling_params(g).max_tokens, 256);
    EXPECT_EQ(default_sampling_params(g).min_p, 0.1f);
}

TEST(generation_config, errors_name_file_and_field) {
    struct tc { const char* json; const char* text; };
    std::vector<tc> cases = {
        {R"({"eos_token_id": "2"})", "field 'eos_token_id' must be an integer or a list of integers; got string"},
        {R"({"eos_token_id": [1, 2.5]})", "field 'eos_token_id[1]' must be an integer token id; got number"},
        {R"({"eos_token_id": [-3]})", "field 'eos_token_id[0]' must be a token id in [0, 2^31); got -3"},
        {R"({"bos_token_id": true})", "field 'bos_token_id' must be an integer token id; got boolean"},
        {R"({"temperature": "hot"})", "field 'temperature' must be a number; got string"},
        {R"({"temperature": -1})", "field 'temperature' must be in [0, inf]; got -1"},
        {R"({"top_p": 0})", "field 'top_p' must be in (0, 1]; got 0"},
        {R"({"top_k": 2.5})", "field 'top_k' must be an integer; got number"},
        {R"({"top_k": -5})", "field 'top_k' must be an integer >= -1; got -5"},
        {R"({"repetition_penalty": 0})", "field 'repetition_penalty' must be in (0, inf]; got 0"},
        {R"({"max_new_tokens": 0})", "field 'max_new_tokens' must be an integer >= 1; got 0"},
        {R"([1, 2])", "expected a JSON object at top level; got array"},
        {R"({"eos_token_id": )", "invalid JSON"},
    };
    for (const auto& c : cases) {
        try {
            parse_generation_config(c.json, "/m/generation_config.json");
            ADD_FAILURE() << c.json << ": accepted";
        } catch (const error& e) {
            std::string msg = e.what();
            EXPECT_NE(msg.find("generation_config '/m/generation_config.json'"), std::string::npos)
                << msg;
            EXPECT_NE(msg.find(c.text), std::string::npos) << msg;
        }
    }
    try {
        load_generation_config("/nonexistent/generation_config.json");
        ADD_FAILURE() << "missing file accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("'/nonexistent/generation_config.json': cannot open"),
                  std::string::npos) << e.what();
    }
}
