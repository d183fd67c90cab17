// --load-format dummy (vLLM's flag): seeded random weights built from config.json alone, in the
// canonical form a real checkpoint loads to (weights.h), for benchmarking without a download.
// Every value is a pure function of (seed, tensor name, element index): any thread count gives the
// same bytes. quant "nvfp4" is a ModelOpt W4A16_NVFP4 checkpoint of the "bf16" model of the same
// seed, quantized by the codec's ModelOpt recipe (real block amax, e4m3 scales, shared qkv/gate_up
// weight_scale_2). Not a trained model: logits are finite and varied, text is noise.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/weights.h"
#include "model/model_config.h"

namespace tetra {

struct dummy_options {
    uint64_t seed = 0;
    std::string quant = "nvfp4";  // "nvfp4" (ModelOpt W4A16_NVFP4) | "bf16" (unquantized)
    bool simd = true;             // false: the portable scalar loops (same bytes; for tests)
};

// Standard deviations: linears and embeddings N(0, 0.02) (HF initializer_range), norm weights
// 1 + N(0, 0.02); all rounded to bf16 (the values the NVFP4 quantizer sees).
constexpr float k_dummy_sigma = 0.02f;

enum class dummy_kind : uint8_t { LINEAR, EMBEDDING, NORM, BIAS };

// One tensor of the architecture: LINEAR is a module name (no ".weight"), the rest full names.
struct dummy_tensor {
    std::string name;
    std::vector<int64_t> shape;  // LINEAR: [n_out, n_in]
    dummy_kind kind;
};

// Every tensor create_model reads for cfg's architecture (errors for unsupported ones).
std::vector<dummy_tensor> dummy_plan(const model_config& cfg);

// The weights: format "dummy", dir "dummy:<arch> seed=<s> quant=<q>", quant_algo "W4A16_NVFP4"
// (nvfp4: linears NVFP4 except ModelOpt's default exclusions such as lm_head, which stay bf16 and
// are listed in exclude) or "" (bf16). Parallel over rows (core/thread_pool).
model_weights make_dummy_weights(const model_config& cfg, const dummy_options& opt);

}  // namespace tetra
