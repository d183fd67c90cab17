// Helpers for checkpoint/quantize tests: temporary directories and crafted checkpoints written
// with the safetensors writer (NVFP4 tensors with hand-chosen bytes, so expectations are literals).
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

namespace tetra {

inline std::string temp_dir(const std::string& tag) {
    std::string t = (std::filesystem::temp_directory_path() / ("tetra_" + tag + "_XXXXXX")).string();
    char* p = mkdtemp(&t[0]);
    EXPECT_NE(p, nullptr);
    return t;
}

inline void write_text(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::trunc);
    f << text;
}

inline std::string read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline void write_json(const std::string& path, const nlohmann::json& j) { write_text(path, j.dump(2)); }

inline nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_text(path)); }

// A crafted checkpoint under construction.
struct ckpt_builder {
    safetensors_writer w;
    std::vector<std::vector<uint8_t>> keep;  // backing bytes (the writer copies, but keep it simple)

    void bytes(const std::string& name, dtype t, std::vector<int64_t> shape, uint8_t fill) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        keep.emplace_back(size_t(n) * dtype_size(t), fill);
        w.add(name, t, shape, keep.back().data());
    }
    void f32(const std::string& name, std::vector<int64_t> shape, float v) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        std::vector<float> x(size_t(n), v);
        w.add(name, dtype::F32, shape, x.data());
    }
    // bf16 [out, in] with every element = v.
    void dense(const std::string& name, int64_t out, int64_t in, float v = 0.25f) {
        std::vector<uint16_t> x(size_t(out * in), f32_to_bf16(v));
        w.add(name, dtype::BF16, {out, in}, x.data());
    }
    // ModelOpt NVFP4 linear: codes all `code_byte`, scales all `scale_byte`, weight_scale_2 = s2.
    void modelopt(const std::string& m, int64_t out, int64_t in, uint8_t code_byte, uint8_t scale_byte, float s2) {
        bytes(m + ".weight", dtype::U8, {out, in / 2}, code_byte);
        bytes(m + ".weight_scale", dtype::E4M3, {out, in / 16}, scale_byte);
        f32(m + ".weight_scale_2", {}, s2);
    }
    // compressed-tensors NVFP4 linear; weight_global_scale = g (quant direction, S = 1/g).
    void ct(const std::string& m, int64_t out, int64_t in, uint8_t code_byte, uint8_t scale_byte, float g) {
        bytes(m + ".weight_packed", dtype::U8, {out, in / 2}, code_byte);
        bytes(m + ".weight_scale", dtype::E4M3, {out, in / 16}, scale_byte);
        f32(m + ".weight_global_scale", {1}, g);
    }
    void write(const std::string& dir) { w.write(dir); }
};

inline nlohmann::json modelopt_hf_quant_config(const std::string& algo, const std::vector<std::string>& exclude) {
    return {{"producer", {{"name", "modelopt"}, {"version", "0.29.0"}}},
            {"quantization", {{"quant_algo", algo}, {"kv_cache_quant_algo", nullptr}, {"group_size", 16},
                              {"exclude_modules", exclude}}}};
}

inline nlohmann::json ct_quantization_config(bool w4a4, const std::vector<std::string>& ignore,
                                             const std::string& format = "nvfp4-pack-quantized") {
    nlohmann::json args = {{"num_bits", 4}, {"type", "float"}, {"strategy", "tensor_group"}, {"group_size", 16},
                           {"symmetric", true}, {"dynamic", false}};
    nlohmann::json g = {{"targets", {"Linear"}}, {"weights", args}, {"format", format}};
    if (w4a4) {
        nlohmann::json in = args;
        in["dynamic"] = "local";
        g["input_activations"] = in;
    } else {
        g["input_activations"] = nullptr;
    }
    return {{"quant_method", "compressed-tensors"}, {"format", format}, {"quantization_status", "compressed"},
            {"config_groups", {{"group_0", g}}}, {"ignore", ignore}};
}

// Runs f and returns the tetra::error message ("" and a test failure when nothing is thrown).
template <typename F> std::string error_of(F&& f) {
    try {
        f();
    } catch (const error& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected a tetra::error";
    return "";
}

}  // namespace tetra
