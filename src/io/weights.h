// Canonical weights (DESIGN.md §3): every checkpoint format is mapped at load into one in-memory
// form per linear layer, keyed by the HF module name ("model.layers.3.mlp.up_proj"). Tensors are
// zero-copy views of the mmap'd safetensors files where the bytes already have the canonical layout.
// The same container is filled by the dummy-weight generator (--load-format dummy).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tetra {

enum class linear_kind : uint8_t { DENSE, NVFP4 };

struct linear_weight {
    linear_kind kind = linear_kind::DENSE;
    int64_t n_out = 0, n_in = 0;
    tensor dense;               // DENSE: [n_out, n_in] bf16 | f16 | f32
    tensor codes;               // NVFP4: u8 [n_out, n_in/2], even element in the low nibble
    tensor scales;              // NVFP4: e4m3 [n_out, n_in/16], row-major (not swizzled)
    float scale_global = 1.0f;  // NVFP4: dequant direction, w = e2m1 · e4m3 · scale_global
    // W4A4 only (quant_algo NVFP4): activation global scales, both directions exactly as the
    // checkpoint defines them (ModelOpt stores input_scale = S, G = 1/S; CT stores G, S = 1/G).
    bool has_input_scale = false;
    float input_scale = 0.0f;         // S_x, dequant direction
    float input_global_quant = 0.0f;  // G_x, quant direction (what the activation quantizer uses)
};

struct model_weights {
    std::string dir;
    std::string format;      // "modelopt" | "compressed-tensors" | "dense" | "dummy"
    std::string quant_algo;  // "NVFP4" | "W4A16_NVFP4" | "" (dense)
    std::vector<std::string> exclude;            // patterns from the config, verbatim
    // ModelOpt MIXED_PRECISION (all layers NVFP4): the modules the config lists as quantized; a
    // module not listed counts as excluded. Empty for every other checkpoint.
    std::vector<std::string> quantized_layers;
    std::map<std::string, linear_weight> linears;  // quantized linears found in the checkpoint
    std::map<std::string, tensor> tensors;         // every other tensor by full HF name
    std::map<std::string, linear_weight> dense_linears;  // DENSE views handed out by linear()

    // The linear for `module` (HF name without ".weight"). NVFP4 if the checkpoint quantized it;
    // otherwise a DENSE view of tensors[module + ".weight"]. When the checkpoint is quantized and the
    // module is neither excluded by the config nor `dense_ok` (embeddings, lm_head, routers — modules
    // that are never Linear targets), a dense tensor is a load error naming it.
    const linear_weight& linear(const std::string& module, bool dense_ok = false);
    const tensor& get(const std::string& name) const;  // error naming the tensor and dir
    bool has(const std::string& name) const { return tensors.count(name) != 0; }
    // Matches `exclude` with the format's syntax (io/exclude.h: ModelOpt wildcards, CT exact/re:).
    bool is_excluded(const std::string& module) const;
};

// Detect the format of an HF model directory (config.json, hf_quant_config.json, *.safetensors)
// and load it. Unsupported quant methods are errors listing what is supported.
model_weights load_weights(const std::string& dir);

}  // namespace tetra
