// Checkpoint formats → canonical weights (DESIGN.md §3, docs/formats.md). Detects ModelOpt NVFP4
// (hf_quant_config.json or config.json quant_method "modelopt"), compressed-tensors
// nvfp4-pack-quantized, and unquantized BF16/F16/F32 checkpoints; validates every NVFP4 tensor's
// dtype and shape against the config and its siblings. Nothing is dequantized here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/exclude.h"
#include "io/weights.h"

namespace tetra {

// What the checkpoint's config files declare.
struct checkpoint_config {
    std::string format;      // "modelopt" | "compressed-tensors" | "dense"
    std::string quant_algo;  // "NVFP4" (W4A4) | "W4A16_NVFP4" | "" (dense)
    std::vector<std::string> exclude;           // exclude_modules / ignore, verbatim
    std::vector<std::string> quantized_layers;  // ModelOpt MIXED_PRECISION only
    std::string source;      // the file that declared it (for messages)
};

// The list printed by every "unsupported" error.
extern const char* const k_supported_checkpoints;

// Reads config.json and hf_quant_config.json of `dir` (either may be absent). Unsupported methods
// and algorithms are errors listing what is supported.
checkpoint_config read_checkpoint_config(const std::string& dir);

exclude_syntax exclude_syntax_of(const std::string& format);

// read_checkpoint_config + safetensors + validation; load_weights() calls this.
model_weights load_checkpoint(const std::string& dir);

// Block-scale health of e4m3 scale bytes (tetra inspect).
struct scale_health {
    int64_t n_blocks = 0;
    int64_t n_saturated = 0;  // 0x7E (448): the block's amax may have been clipped
    int64_t n_subnormal = 0;  // exponent bits 0, mantissa non-zero (< 2^-6: coarse steps)
    int64_t n_zero = 0;       // 0x00: the whole block dequantizes to 0
    int64_t n_invalid = 0;    // sign bit set or NaN (0x7F/0xFF): never written by producers
    void add(const scale_health& o);
};
scale_health scale_health_of(const uint8_t* scales, int64_t n);

}  // namespace tetra
