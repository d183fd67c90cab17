// --load-format dummy at full scale: Llama-3.1-8B's config.json, NVFP4. The published parameter
// count (8,030,261,248) is the oracle for the tensor plan; the scale statistics are checked over
// all 224 linears, and the wall time and throughput are printed (docs/perf.md records them).
#include <gtest/gtest.h>

#include <chrono>

#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "io/dummy_weights.h"

namespace tetra {
namespace {

const char* const k_llama31_8b = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
  "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
  "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "tie_word_embeddings": false,
  "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16"})";

TEST(dummy_weights_slow, llama31_8b_nvfp4) {
    model_config cfg = parse_model_config(k_llama31_8b, "Llama-3.1-8B/config.json");
    dummy_options o;
    o.seed = 1;
    auto t0 = std::chrono::steady_clock::now();
    model_weights w = make_dummy_weights(cfg, o);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int64_t params = 0, bytes = 0;
    scale_health h;
    for (const auto& kv : w.linears) {
        params += kv.second.n_out * kv.second.n_in;
        bytes += int64_t(kv.second.codes.nbytes() + kv.second.scales.nbytes());
        h.add(scale_health_of(kv.second.scales.ptr<uint8_t>(), kv.second.scales.numel()));
    }
    for (const auto& kv : w.tensors) params += kv.second.numel(), bytes += int64_t(kv.second.nbytes());
    std::printf("  Llama-3.1-8B dummy NVFP4: %.2f s on %d threads, %.1f GB written, %.2f ns/param/thread\n", s,
                num_threads(), double(bytes) / 1e9, s * 1e9 * num_threads() / double(params));
    EXPECT_EQ(params, 8030261248);
    EXPECT_EQ(w.linears.size(), 224u);
    EXPECT_EQ(h.n_zero + h.n_invalid, 0);
    EXPECT_LE(h.n_saturated, h.n_blocks / 10000);  // only blocks next to a group's amax reach 448
    EXPECT_LE(h.n_subnormal, h.n_blocks / 10000);
}

}  // namespace
}  // namespace tetra
