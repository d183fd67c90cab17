// The whole forward on the CUDA backend against the CPU oracle, on seeded dummy NVFP4 weights of
// real configurations (configs/): every tap (per layer) within an NMSE bound of the f32 oracle, then
// 64 greedy steps whose tokens must equal the bf16-activation CPU oracle's, with and without graphs.
// Tolerance: the GPU keeps activations in bf16 (each op's output rounded to 8 significant bits,
// relative error ≤ 2^-9) while the CPU oracle keeps f32; over 30+ layers the rounding adds up to
// an NMSE of ~1e-4 (measured values are printed). 1e-2 leaves room for that and still fails any
// real bug (a wrong or broadcast row gives NMSE ~1). Greedy identity is checked on the logits'
// argmax; the test prints the smallest top-1/top-2 gap seen on the CPU so a near-tie is visible.
#include <gtest/gtest.h>

#include <execinfo.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <map>
#include <optional>

#include "backend/backend.h"
#include "engine/runner.h"
#include "io/dummy_weights.h"
#include "model/model.h"
#include "model/model_config.h"

namespace tetra {
namespace {

// A crash prints its stack (the executable is its own diagnosis on the GPU machine).
void on_crash(int sig) {
    void* frames[64];
    int n = backtrace(frames, 64);
    std::fprintf(stderr, "signal %d, stack:\n", sig);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    std::_Exit(128 + sig);
}
const bool g_crash_handler = [] {
    std::signal(SIGSEGV, on_crash);
    std::signal(SIGABRT, on_crash);
    return true;
}();

struct side {
    std::unique_ptr<backend> be;
    std::unique_ptr<causal_lm> lm;
    std::unique_ptr<kv_cache> kv;
};

side make_side(std::unique_ptr<backend> be, const model_config& c, model_weights& w, int64_t n_blocks,
               std::optional<dtype> act = std::nullopt) {
    side s;
    s.be = std::move(be);
    model_options mo;
    mo.max_tokens = 64;
    mo.act = act;
    s.lm = create_model(c, w, *s.be, mo);
    s.kv = std::make_unique<kv_cache>(kv_cache::create(*s.be, c, n_blocks, 16, s.lm->act_type()));
    return s;
}

std::vector<double> host_values(backend& be, const tensor& t) {
    tensor h = tensor::alloc(t.type, t.shape);
    be.download(t, h.data);
    std::vector<double> v(size_t(h.numel()));
    for (int64_t i = 0; i < h.numel(); ++i)
        v[size_t(i)] = h.type == dtype::F32 ? h.ptr<float>()[i]
                       : h.type == dtype::BF16 ? bf16_to_f32(h.ptr<uint16_t>()[i])
                                              : f16_to_f32(h.ptr<uint16_t>()[i]);
    return v;
}

double nmse(const std::vector<double>& got, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) return INFINITY;
        num += (got[i] - ref[i]) * (got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return num / (den > 0 ? den : 1);
}

void check_config(const std::string& name) {
    ASSERT_GT(cuda_device_count(), 0) << "gpu test needs a CUDA device";
    model_config c = load_model_config(std::string(TETRA_SOURCE_DIR) + "/configs/" + name);
    dummy_options dop;
    dop.seed = 7;
    dop.quant = "nvfp4";
    model_weights w = make_dummy_weights(c, dop);
    std::fprintf(stderr, "[%s] dummy weights ready\n", name.c_str());
    const int64_t n_blocks = 16;  // 256 tokens per side
    side cpu = make_side(make_cpu_backend(), c, w, n_blocks), gpu = make_side(make_cuda_backend(0), c, w, n_blocks);
    side cpu16 = make_side(make_cpu_backend(), c, w, n_blocks, dtype::BF16);

    std::fprintf(stderr, "[%s] models ready\n", name.c_str());
    // 1. Taps of a 24-token prefill.
    std::vector<int32_t> table;
    for (int32_t b = 0; b < n_blocks; ++b) table.push_back(b);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 24; ++i) prompt.push_back(int32_t((i * 7919 + 13) % c.n_vocab));
    std::map<std::string, std::vector<double>> ref;
    auto key = [](const std::string& n, int il) { return n + "#" + std::to_string(il); };
    cpu.lm->set_tap([&](const std::string& n, int il, const tensor& t) { ref[key(n, il)] = host_values(*cpu.be, t); });
    double worst = 0;
    std::string worst_at;
    int n_taps = 0;
    gpu.lm->set_tap([&](const std::string& n, int il, const tensor& t) {
        auto it = ref.find(key(n, il));
        ASSERT_NE(it, ref.end()) << "tap " << key(n, il) << " only on the GPU";
        double e = nmse(host_values(*gpu.be, t), it->second);
        ++n_taps;
        if (e > worst) worst = e, worst_at = key(n, il);
        EXPECT_LT(e, 1e-2) << name << ": tap " << key(n, il) << " NMSE " << e;
    });
    {
        model_runner rc(*cpu.lm, *cpu.be, *cpu.kv), rg(*gpu.lm, *gpu.be, *gpu.kv);
        seq_chunk ch{&table, 0, prompt.data(), int64_t(prompt.size())};
        rc.run({ch});
        rg.run({ch});
    }
    std::printf("[%s] %d taps compared, worst NMSE %.3g at %s\n", name.c_str(), n_taps, worst, worst_at.c_str());
    EXPECT_GT(n_taps, 4 * int(c.n_layer));
    cpu.lm->set_tap(nullptr);
    gpu.lm->set_tap(nullptr);

    // 2. 64 greedy steps after the prompt: the CPU oracle with bf16 activations (rounding where the
    // GPU rounds; f32 accumulation) vs the GPU with graphs vs without. Against the f32 CPU the
    // tokens are only reported: on a random model the top-2 logits of a 150k vocabulary come within
    // the bf16 rounding of the activations (~1e-2) in a few of 65 steps, and a flip there is not a bug.
    auto greedy = [&](side& s, bool graphs, double* min_gap) {
        model_runner r(*s.lm, *s.be, *s.kv);
        r.set_graphs(graphs);
        std::vector<int32_t> out;
        const std::vector<float>& l0 = r.run({seq_chunk{&table, 0, prompt.data(), int64_t(prompt.size())}});
        auto pick = [&](const std::vector<float>& l) {
            int32_t best = 0;
            for (int64_t i = 1; i < c.n_vocab; ++i)
                if (l[size_t(i)] > l[size_t(best)]) best = int32_t(i);
            if (min_gap) {
                float second = -INFINITY;
                for (int64_t i = 0; i < c.n_vocab; ++i)
                    if (i != best) second = std::max(second, l[size_t(i)]);
                *min_gap = std::min(*min_gap, double(l[size_t(best)] - second));
            }
            return best;
        };
        int32_t tok = pick(l0);
        for (int i = 0; i < 64; ++i) {
            out.push_back(tok);
            if (graphs && !min_gap) {  // device argmax path (what the engine's greedy decode uses)
                tok = r.run_argmax({seq_chunk{&table, int64_t(prompt.size()) + i, &out.back(), 1}})[0];
            } else {
                tok = pick(r.run({seq_chunk{&table, int64_t(prompt.size()) + i, &out.back(), 1}}));
            }
        }
        if (graphs) EXPECT_GT(r.graph_replays(), 50) << "decode steps did not replay a graph";
        return out;
    };
    double gap = INFINITY, gap32 = INFINITY;
    std::vector<int32_t> t_cpu32 = greedy(cpu, false, &gap32);
    std::vector<int32_t> t_cpu = greedy(cpu16, false, &gap);
    std::vector<int32_t> t_gpu_nograph = greedy(gpu, false, nullptr);
    std::vector<int32_t> t_gpu = greedy(gpu, true, nullptr);
    int agree32 = 0;
    while (agree32 < int(t_cpu32.size()) && t_cpu32[size_t(agree32)] == t_gpu[size_t(agree32)]) ++agree32;
    std::printf("[%s] smallest top-1/top-2 logit gap over 65 steps: CPU bf16 %.4f, CPU f32 %.4f; GPU equals the "
                "f32 CPU for the first %d of 64 steps\n", name.c_str(), gap, gap32, agree32);
    int first_diff = -1;
    for (size_t i = 0; i < t_cpu.size(); ++i)
        if (t_cpu[i] != t_gpu[i]) {
            first_diff = int(i);
            break;
        }
    EXPECT_EQ(t_cpu, t_gpu) << name << ": GPU (graphs) greedy tokens differ from the bf16 CPU oracle at step "
                            << first_diff;
    EXPECT_EQ(t_gpu_nograph, t_gpu) << name << ": graph replay changed the tokens";
}

TEST(forward_gpu, smollm2_135m_taps_and_64_greedy_steps) { check_config("smollm2-135m-nvfp4"); }
TEST(forward_gpu, qwen3_0_6b_taps_and_64_greedy_steps) { check_config("qwen3-0.6b-nvfp4"); }

}  // namespace
}  // namespace tetra
