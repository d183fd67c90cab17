// Config side of `tetra quantize`: reading the source config.json and writing the producers'
// quantization configs (reference/nvfp4-format.md §3.1 ModelOpt, §4.1 compressed-tensors NVFP4A16).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tetra {

// config.json of an unquantized checkpoint (error if missing, invalid, or already quantized).
nlohmann::ordered_json quantize_read_source_config(const std::string& src);

// config.json with quantization_config (+ hf_quant_config.json for ModelOpt), W4A16 NVFP4,
// `excluded` written verbatim (sorted module names). Returns the file names written.
std::vector<std::string> quantize_write_configs(const std::string& dst, const std::string& format,
                                                nlohmann::ordered_json config, const std::vector<std::string>& excluded);

}  // namespace tetra
