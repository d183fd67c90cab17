// `tetra quantize`: unquantized HF checkpoint (BF16/F16/F32, sharded or not) → NVFP4 weight-only
// (W4A16_NVFP4) in ModelOpt or compressed-tensors layout, with the producers' recipes
// (reference/nvfp4-format.md §3.4, §4.3) and config files (§3.1, §4.1). Which tensors are quantized
// and which modules are excluded is documented in docs/formats.md ("tetra quantize").
// tools/nvfp4_ref.py is the independent reference that the tests compare against byte for byte.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tetra {

struct quantize_options {
    std::string src, dst;
    std::string format = "modelopt";      // "modelopt" | "compressed-tensors"
    std::vector<std::string> exclude;     // user patterns (ModelOpt wildcard syntax, or "re:")
    bool force = false;                   // allow a non-empty dst
    uint64_t max_shard_bytes = 5000000000ull;  // "5GB" (decimal, as huggingface_hub)
};

struct quantize_result {
    std::vector<std::string> quantized;  // module names, sorted
    std::vector<std::string> excluded;   // linear modules left dense = the config's exclusion list
    std::vector<std::string> warnings;   // one line each (also logged)
    std::vector<std::string> files;      // written into dst (relative names)
    int64_t n_tensors_out = 0;
};

// Module-name patterns excluded by default (ModelOpt's _default_disabled_quantizer_cfg restated
// on module names, plus MTP blocks): lm_head, routers and gates, conv1d, output layers, *mtp*.
const std::vector<std::string>& quantize_default_exclude();

// True when the module's last name component is a known linear projection (docs/formats.md).
bool quantize_is_linear_module(const std::string& module);

// Fused group the module's amax is shared with: "<parent>|qkv", "<parent>|gate_up",
// "<parent>|w13", "<parent>|mla_a"; "" when the module is not part of a fused group.
std::string quantize_fused_group(const std::string& module);

// "5GB" → 5e9, "500MB", "10KB", "2GiB" → 2·2^30, "123" → 123. Errors name the text.
uint64_t parse_byte_size(const std::string& text);

// Throws tetra::error on bad input (names the file/tensor); never leaves a partial config.json
// without its safetensors (config files are written last).
quantize_result quantize_checkpoint(const quantize_options& opt);

}  // namespace tetra
