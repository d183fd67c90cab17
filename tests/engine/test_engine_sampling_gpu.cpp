// Device sampling in the serving engine on CUDA (dummy NVFP4 weights of configs/smollm2-135m-nvfp4):
// the same seeded requests (greedy, temperature, top-k/top-p, min-p, penalties, min_tokens, n = 2,
// a logprobs request that keeps its steps on the host) through llm_engine with host sampling forced
// and with device sampling must give identical token streams (THE ALGORITHM is bit-exact), and the
// device path must have drawn the tokens. Then the output guard from device statistics: the
// verdict of check_stats on sample_guard_stats of crafted rows equals check() on the rows.
// (Named test_forward_gpu_* so that tests/CMakeLists.txt links the engine into it.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "backend/sampling.h"
#include "core/dtype.h"
#include "engine/llm_engine.h"
#include "engine/loaded_model.h"
#include "engine/output_guard.h"

namespace tetra {
namespace {

loaded_model& smollm() {
    static std::unique_ptr<loaded_model> m = [] {
        load_options o;
        o.device = "cuda";
        o.load_format = "dummy";
        o.seed = 3;
        o.require_tokenizer = false;
        o.progress = false;
        o.skip_selftest = true;
        o.max_tokens = 256;
        o.max_model_len = 512;
        return load_model(std::string(TETRA_SOURCE_DIR) + "/configs/smollm2-135m-nvfp4", o);
    }();
    return *m;
}

using streams = std::map<std::string, std::vector<int32_t>>;  // "request/index" -> tokens

streams run_engine(bool device_sampling, engine_stats* stats) {
    loaded_model& m = smollm();
    const int32_t n_vocab = int32_t(m.config.n_vocab);
    engine_config cfg;
    cfg.max_num_seqs = 16;
    cfg.num_kv_blocks_override = 256;
    cfg.device_sampling = device_sampling;
    llm_engine eng(m, cfg);
    std::vector<std::pair<std::string, engine_request>> reqs;
    auto add = [&](const std::string& id, sampling_params p, int32_t n = 1, int32_t max_tokens = 24) {
        engine_request r;
        r.request_id = id;
        for (int i = 0; i < 5 + int(reqs.size()) * 3; ++i) r.prompt.push_back(int32_t((i * 7919 + id.size() * 131) % n_vocab));
        p.max_tokens = max_tokens;
        p.ignore_eos = true;
        r.params = p;
        r.n = n;
        reqs.emplace_back(id, r);
    };
    sampling_params p;
    p.temperature = 0.0f;
    add("greedy", p);
    p = {};
    p.temperature = 0.8f, p.seed = 1;
    add("temp", p);
    p = {};
    p.temperature = 1.2f, p.top_k = 50, p.top_p = 0.9f, p.seed = 2;
    add("topk_topp", p);
    p = {};
    p.temperature = 0.7f, p.min_p = 0.05f, p.repetition_penalty = 1.2f, p.frequency_penalty = 0.3f;
    p.presence_penalty = 0.4f, p.seed = 3;
    add("minp_penalties", p);
    p = {};
    p.temperature = 1.0f, p.min_tokens = 8, p.seed = 4;
    p.eos_token_ids = {0, 1, 2, 3};  // suppressed for 8 tokens (ignore_eos: they do not stop it later)
    add("min_tokens", p);
    p = {};
    p.temperature = 1.0f, p.top_p = 0.5f, p.seed = 5;
    add("n2", p, 2);
    p = {};
    p.temperature = 0.9f, p.logprobs = 2, p.seed = 6;
    add("logprobs", p, 1, 4);  // its 4 steps (prefill + 3 decodes) sample on the host, the rest on the device
    std::vector<std::shared_ptr<request_stream>> ss;
    for (auto& [id, r] : reqs) ss.push_back(eng.add_request(r));
    while (eng.step()) {
    }
    streams out;
    for (auto& s : ss) {
        request_output o;
        while (s->next(o, 0)) {
            EXPECT_TRUE(o.error.empty()) << s->request_id() << ": " << o.error;
            auto& v = out[s->request_id() + "/" + std::to_string(o.index)];
            v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        }
    }
    *stats = eng.stats();
    return out;
}

TEST(engine_sampling_gpu, device_tokens_equal_host_tokens) {
    ASSERT_GT(cuda_device_count(), 0) << "gpu test needs a CUDA device";
    engine_stats sh, sd;
    streams host = run_engine(false, &sh), dev = run_engine(true, &sd);
    ASSERT_EQ(host.size(), 8u);  // 7 requests, one with n = 2
    for (const auto& [key, toks] : host) {
        EXPECT_EQ(toks.size(), key == "logprobs/0" ? 4u : 24u) << key;
        EXPECT_EQ(dev[key], toks) << key << ": device sampling diverged from host sampling";
    }
    EXPECT_EQ(sh.device_sampled_tokens, 0);
    // every token but those of the steps that carried the logprobs request came from the device
    EXPECT_GE(sd.device_sampled_tokens, 20 * 7) << "device path not taken";
    EXPECT_LT(sd.device_sampled_tokens, sd.generation_tokens_total) << "the logprobs steps must stay on the host";
    std::printf("device-sampled tokens: %lld of %lld\n", (long long)sd.device_sampled_tokens,
                (long long)sd.generation_tokens_total);
    EXPECT_EQ(sd.finished_error, 0);
}

// 64 streams on a Qwen-sized vocabulary (configs/qwen3-0.6b-nvfp4, 151936 ids): host vs device
// sampling in one process, same build: identical tokens; the throughput of each is printed (the
// host path downloads 64 x 151936 f32 per step and samples on one thread).
TEST(engine_sampling_gpu, qwen3_0_6b_64_streams_host_vs_device) {
    load_options o;
    o.device = "cuda", o.load_format = "dummy", o.seed = 5, o.require_tokenizer = false, o.progress = false;
    o.skip_selftest = true, o.max_tokens = 256, o.max_model_len = 256;
    std::unique_ptr<loaded_model> m = load_model(std::string(TETRA_SOURCE_DIR) + "/configs/qwen3-0.6b-nvfp4", o);
    const int32_t n_vocab = int32_t(m->config.n_vocab);
    std::map<bool, streams> got;
    for (bool device : {false, true}) {
        engine_config cfg;
        cfg.max_num_seqs = 64;
        cfg.num_kv_blocks_override = 512;
        cfg.device_sampling = device;
        llm_engine eng(*m, cfg);
        std::vector<std::shared_ptr<request_stream>> ss;
        for (int i = 0; i < 64; ++i) {
            engine_request r;
            r.request_id = "r" + std::to_string(i);
            for (int j = 0; j < 16; ++j) r.prompt.push_back(int32_t((i * 1000003 + j * 7919) % n_vocab));
            r.params.temperature = 0.8f, r.params.top_p = 0.95f, r.params.top_k = i % 2 ? 0 : 40;
            r.params.seed = uint64_t(i), r.params.max_tokens = 48, r.params.ignore_eos = true;
            ss.push_back(eng.add_request(r));
        }
        const double t0 = llm_engine::now();
        while (eng.step()) {
        }
        const double dt = llm_engine::now() - t0;
        for (auto& s : ss) {
            request_output out;
            while (s->next(out, 0)) {
                EXPECT_TRUE(out.error.empty()) << out.error;
                auto& v = got[device][s->request_id()];
                v.insert(v.end(), out.new_token_ids.begin(), out.new_token_ids.end());
            }
        }
        engine_stats st = eng.stats();
        std::printf("qwen3-0.6b dummy, 64 streams x 48 tokens, %s sampling: %.2f s, %.0f tok/s (%lld device-sampled)\n",
                    device ? "device" : "host", dt, double(st.generation_tokens_total) / dt,
                    (long long)st.device_sampled_tokens);
        EXPECT_EQ(st.generation_tokens_total, 64 * 48);
    }
    EXPECT_EQ(got[true], got[false]);
}

// check_stats(stats from the device) == check(rows) on crafted rows, f32 and bf16.
TEST(engine_sampling_gpu, guard_verdict_from_device_stats_equals_check) {
    backend& be = *smollm().be;
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t n : {2, 9, 1003, 49152})
        for (dtype t : {dtype::F32, dtype::BF16}) {
            std::vector<std::vector<float>> rows;
            std::vector<std::string> what;
            auto spread = [&](uint32_t seed, float offset) {
                std::vector<float> v(static_cast<size_t>(n));
                uint32_t s = seed;
                for (auto& x : v) {
                    s = s * 1664525u + 1013904223u;
                    x = offset + float(s >> 8) / float(1 << 24) * 10.0f - 5.0f;
                }
                return v;
            };
            auto add = [&](std::vector<float> v, const std::string& w) { rows.push_back(std::move(v)), what.push_back(w); };
            add(spread(1, 0.0f), "healthy");
            auto v = spread(2, 0.0f);
            v[size_t(std::min<int64_t>(17, n - 1))] = nan;
            add(v, "NaN at 17");
            v = spread(3, 0.0f);
            v[size_t(std::min<int64_t>(17, n - 1))] = inf;
            add(v, "+inf at 17");
            v = spread(4, 0.0f);
            v[0] = -inf;
            add(v, "-inf at 0");
            add(std::vector<float>(size_t(n), 5.25f), "constant");
            v.assign(size_t(n), 4.0f);
            for (size_t i = 0; i < v.size(); i += 2) v[i] += 0x1p-14f;  // std 2^-15 (bf16: rounds to constant)
            add(v, "near-constant");
            v = spread(5, 0.0f);
            v[size_t(n - 1)] = 1e20f;
            add(v, "overflow");
            for (const auto& row : rows) {
                const size_t i = &row - rows.data();
                tensor h = tensor::alloc(t, {1, n});
                std::vector<float> exact(row.size());  // the row as the device sees it
                for (int64_t j = 0; j < n; ++j) {
                    if (t == dtype::F32) h.ptr<float>()[j] = row[size_t(j)];
                    else h.ptr<uint16_t>()[j] = f32_to_bf16(row[size_t(j)]);
                    exact[size_t(j)] = t == dtype::F32 ? row[size_t(j)] : bf16_to_f32(h.ptr<uint16_t>()[j]);
                }
                tensor d = be.upload(h), st = be.alloc(dtype::I32, {1, guard_stats_words});
                sample_guard_stats(be, d, st);
                guard_row_stats s;
                be.download(st, &s);
                guard_verdict want = output_guard::check(exact.data(), n), got = output_guard::check_stats(&s, n);
                const std::string vars = what[i] + " n=" + std::to_string(n) + " " + dtype_name(t);
                EXPECT_EQ(int(got.trip), int(want.trip)) << vars << ": " << got.detail << " vs " << want.detail;
                EXPECT_EQ(got.col, want.col) << vars;
                EXPECT_EQ(got.detail, want.detail) << vars;
                if (what[i] != "healthy") EXPECT_FALSE(want.ok()) << vars << ": the crafted fault must trip";
            }
        }
}

}  // namespace
}  // namespace tetra
