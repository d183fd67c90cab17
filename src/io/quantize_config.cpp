// Tables and config files of `tetra quantize` (quantize.h, quantize_config.h, docs/formats.md).
#include "io/quantize_config.h"

#include <cctype>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/quantize.h"

namespace tetra {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

const std::vector<std::string>& quantize_default_exclude() {
    // ModelOpt's quantizer-name patterns (*lm_head*, *proj_out.*, *block_sparse_moe.gate*, *router*,
    // *mlp.gate.*, *mlp.shared_expert_gate.*, *linear_attn.conv1d*, *mixer.conv1d*, *output_layer*,
    // output.*) restated on module names, plus MTP blocks.
    static const std::vector<std::string> k = {
        "*lm_head*", "*proj_out", "*block_sparse_moe.gate", "*router*", "*mlp.gate", "*shared_expert_gate*",
        "*conv1d*", "*output_layer*", "output", "*mtp*"};
    return k;
}

bool quantize_is_linear_module(const std::string& module) {
    static const char* const k_leaf[] = {
        "q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "query_key_value", "dense",
        "gate_proj", "up_proj", "down_proj", "gate_up_proj", "w1", "w2", "w3", "fc1", "fc2",
        "dense_h_to_4h", "dense_4h_to_h", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj",
        "in_proj", "out_proj", "x_proj", "dt_proj", "in_proj_qkvz", "in_proj_ba", "eh_proj",
        "lm_head", "gate", "router", "shared_expert_gate"};
    size_t dot = module.rfind('.');
    std::string leaf = dot == std::string::npos ? module : module.substr(dot + 1);
    for (const char* k : k_leaf)
        if (leaf == k) return true;
    return false;
}

std::string quantize_fused_group(const std::string& module) {
    static const struct { const char* leaf; const char* group; } k[] = {
        {"q_proj", "qkv"}, {"k_proj", "qkv"}, {"v_proj", "qkv"}, {"gate_proj", "gate_up"}, {"up_proj", "gate_up"},
        {"w1", "w13"}, {"w3", "w13"}, {"q_a_proj", "mla_a"}, {"kv_a_proj_with_mqa", "mla_a"}};
    size_t dot = module.rfind('.');
    std::string parent = dot == std::string::npos ? "" : module.substr(0, dot);
    std::string leaf = dot == std::string::npos ? module : module.substr(dot + 1);
    for (const auto& e : k)
        if (leaf == e.leaf) return parent + "|" + e.group;
    return "";
}

uint64_t parse_byte_size(const std::string& text) {
    size_t i = 0;
    while (i < text.size() && std::isdigit((unsigned char)text[i])) ++i;
    std::string unit = text.substr(i);
    for (char& c : unit) c = char(std::toupper((unsigned char)c));
    static const struct { const char* u; uint64_t mul; } k[] = {
        {"", 1}, {"B", 1}, {"KB", 1000ull}, {"MB", 1000000ull}, {"GB", 1000000000ull}, {"TB", 1000000000000ull},
        {"KIB", 1ull << 10}, {"MIB", 1ull << 20}, {"GIB", 1ull << 30}, {"TIB", 1ull << 40}};
    for (const auto& e : k) {
        if (i == 0 || i > 15 || unit != e.u) continue;
        uint64_t v = std::stoull(text.substr(0, i));
        TETRA_CHECK(v > 0, "size '%s' must be > 0", text.c_str());
        return v * e.mul;
    }
    TETRA_FAIL("size '%s' is not a byte count; expected e.g. 5GB, 500MB, 2GiB or 123456", text.c_str());
}

ojson quantize_read_source_config(const std::string& src) {
    const std::string path = src + "/config.json";
    std::ifstream f(path);
    TETRA_CHECK(f.good(), "quantize: '%s' not found (an HF checkpoint directory needs config.json)", path.c_str());
    ojson cfg;
    try {
        cfg = ojson::parse(f);
    } catch (const ojson::exception& e) {
        TETRA_FAIL("quantize: '%s' is not valid JSON: %s", path.c_str(), e.what());
    }
    TETRA_CHECK(cfg.is_object(), "quantize: '%s' must hold a JSON object", path.c_str());
    TETRA_CHECK(!cfg.contains("quantization_config") && !fs::exists(src + "/hf_quant_config.json"),
                "quantize: '%s' is already quantized (quantization_config or hf_quant_config.json present); "
                "expected an unquantized BF16/F16/F32 checkpoint", src.c_str());
    return cfg;
}

namespace {

void write_json(const std::string& path, const ojson& j) {
    std::ofstream f(path, std::ios::trunc);
    f << j.dump(2) << "\n";
    TETRA_CHECK(f.good(), "quantize: cannot write '%s'", path.c_str());
}

ojson weights_args(bool ct) {
    ojson w = ojson::object();
    if (ct) {
        w["num_bits"] = 4;
        w["type"] = "float";
        w["symmetric"] = true;
        w["group_size"] = 16;
        w["strategy"] = "tensor_group";
        w["block_structure"] = nullptr;
        w["dynamic"] = false;
        w["actorder"] = nullptr;
        w["scale_dtype"] = "torch.float8_e4m3fn";
        w["zp_dtype"] = "torch.float8_e4m3fn";
        w["observer"] = "minmax";
        w["observer_kwargs"] = ojson::object();
    } else {
        w["dynamic"] = false;
        w["num_bits"] = 4;
        w["type"] = "float";
        w["group_size"] = 16;
    }
    return w;
}

}  // namespace

std::vector<std::string> quantize_write_configs(const std::string& dst, const std::string& format, ojson config,
                                                const std::vector<std::string>& excluded) {
    const ojson producer = {{"name", "tetra"}, {"version", "0.1.0"}};
    ojson qc = ojson::object();
    if (format == "compressed-tensors") {
        ojson g = ojson::object();
        g["targets"] = {"Linear"};
        g["weights"] = weights_args(true);
        g["input_activations"] = nullptr;
        g["output_activations"] = nullptr;
        g["format"] = "nvfp4-pack-quantized";
        qc["config_groups"] = {{"group_0", g}};
        qc["quant_method"] = "compressed-tensors";
        qc["kv_cache_scheme"] = nullptr;
        qc["format"] = "nvfp4-pack-quantized";
        qc["quantization_status"] = "compressed";
        qc["global_compression_ratio"] = nullptr;
        qc["ignore"] = excluded;
        config["quantization_config"] = qc;
        write_json(dst + "/config.json", config);
        return {"config.json"};
    }
    ojson g = ojson::object();
    g["weights"] = weights_args(false);
    g["targets"] = {"Linear"};
    qc["config_groups"] = {{"group_0", g}};
    qc["ignore"] = excluded;
    qc["quant_algo"] = "W4A16_NVFP4";
    qc["kv_cache_scheme"] = nullptr;
    qc["producer"] = producer;
    qc["quant_method"] = "modelopt";
    config["quantization_config"] = qc;
    write_json(dst + "/config.json", config);
    ojson hq = ojson::object();
    hq["producer"] = producer;
    hq["quantization"] = {{"quant_algo", "W4A16_NVFP4"}, {"kv_cache_quant_algo", nullptr}, {"group_size", 16},
                          {"exclude_modules", excluded}};
    write_json(dst + "/hf_quant_config.json", hq);
    return {"config.json", "hf_quant_config.json"};
}

}  // namespace tetra
