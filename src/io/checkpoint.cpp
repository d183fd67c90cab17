// Checkpoint detection and loading (see checkpoint.h, docs/formats.md). Config parsing follows what
// the producers write (reference/nvfp4-format.md §3.1, §4.1) and what vLLM accepts; tensor checks
// follow §3.2 / §4.2. Every error names the file or tensor and gives expected vs actual.
#include "io/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"

namespace tetra {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* const k_supported_checkpoints =
    "supported: ModelOpt NVFP4 (quant_method \"modelopt\", quant_algo NVFP4 or W4A16_NVFP4, or "
    "MIXED_PRECISION whose quantized layers are all NVFP4), compressed-tensors nvfp4-pack-quantized "
    "(NVFP4 / NVFP4A16), and unquantized BF16/F16/F32 checkpoints";

namespace {

json read_json_file(const std::string& path) {
    std::ifstream f(path);
    TETRA_CHECK(f.good(), "checkpoint: cannot read '%s'", path.c_str());
    try {
        return json::parse(f);
    } catch (const json::exception& e) {
        TETRA_FAIL("checkpoint: '%s' is not valid JSON: %s", path.c_str(), e.what());
    }
}

std::string upper(std::string s) {
    for (char& c : s) c = char(std::toupper((unsigned char)c));
    return s;
}

std::string str_field(const json& j, const char* key, const std::string& where) {
    if (!j.contains(key) || j[key].is_null()) return "";
    TETRA_CHECK(j[key].is_string(), "checkpoint: %s: field '%s' must be a string; got %s", where.c_str(), key,
                j[key].type_name());
    return j[key].get<std::string>();
}

std::vector<std::string> str_list(const json& j, const char* key, const std::string& where) {
    std::vector<std::string> out;
    if (!j.contains(key) || j[key].is_null()) return out;
    TETRA_CHECK(j[key].is_array(), "checkpoint: %s: field '%s' must be a list of strings; got %s",
                where.c_str(), key, j[key].type_name());
    for (const json& v : j[key]) {
        TETRA_CHECK(v.is_string(), "checkpoint: %s: '%s' entries must be strings; got %s", where.c_str(), key,
                    v.dump().c_str());
        out.push_back(v.get<std::string>());
    }
    return out;
}

void check_group_size(const json& j, const std::string& where) {
    if (!j.contains("group_size") || j["group_size"].is_null()) return;
    TETRA_CHECK(j["group_size"].is_number_integer() && j["group_size"].get<int64_t>() == 16,
                "checkpoint: %s: group_size is %s; NVFP4 requires 16", where.c_str(), j["group_size"].dump().c_str());
}

bool is_nvfp4_algo(const std::string& a) { return a == "NVFP4" || a == "W4A16_NVFP4"; }

// MIXED_PRECISION: every entry of quantized_layers must be the same NVFP4 algorithm.
void parse_mixed(const json& q, const std::string& where, checkpoint_config* c) {
    TETRA_CHECK(q.contains("quantized_layers") && q["quantized_layers"].is_object(),
                "checkpoint: %s: quant_algo MIXED_PRECISION needs an object 'quantized_layers'", where.c_str());
    std::string algo;
    for (const auto& kv : q["quantized_layers"].items()) {
        std::string a = kv.value().is_object() ? upper(str_field(kv.value(), "quant_algo", where)) : "";
        TETRA_CHECK(is_nvfp4_algo(a),
                    "checkpoint: %s: MIXED_PRECISION layer '%s' has quant_algo '%s'; only MIXED_PRECISION "
                    "checkpoints whose quantized layers are all NVFP4 are supported (%s)",
                    where.c_str(), kv.key().c_str(), a.c_str(), k_supported_checkpoints);
        TETRA_CHECK(algo.empty() || a == algo,
                    "checkpoint: %s: MIXED_PRECISION layers mix quant_algo %s and %s (layer '%s'); expected one "
                    "NVFP4 algorithm for all layers", where.c_str(), algo.c_str(), a.c_str(), kv.key().c_str());
        check_group_size(kv.value(), where + " quantized_layers." + kv.key());
        algo = a;
        c->quantized_layers.push_back(kv.key());
    }
    TETRA_CHECK(!algo.empty(), "checkpoint: %s: MIXED_PRECISION with an empty 'quantized_layers'", where.c_str());
    c->quant_algo = algo;
}

// hf_quant_config.json ({"quantization": {...}}) or config.json's flat quantization_config.
checkpoint_config parse_modelopt(const json& j, const std::string& where) {
    checkpoint_config c;
    c.format = "modelopt";
    c.source = where;
    bool nested = j.contains("quantization");
    const json& q = nested ? j["quantization"] : j;
    TETRA_CHECK(q.is_object(), "checkpoint: %s: 'quantization' must be an object", where.c_str());
    std::string algo = upper(str_field(q, "quant_algo", where));
    TETRA_CHECK(!algo.empty(), "checkpoint: %s: missing 'quant_algo'; %s", where.c_str(), k_supported_checkpoints);
    c.exclude = str_list(q, q.contains("exclude_modules") ? "exclude_modules" : "ignore", where);
    if (algo == "MIXED_PRECISION") {
        parse_mixed(q, where, &c);
        return c;
    }
    TETRA_CHECK(is_nvfp4_algo(algo), "checkpoint: %s: ModelOpt quant_algo '%s' is not supported; %s", where.c_str(),
                algo.c_str(), k_supported_checkpoints);
    c.quant_algo = algo;
    check_group_size(q, where);
    if (q.contains("config_groups") && q["config_groups"].is_object())
        for (const auto& g : q["config_groups"].items())
            if (g.value().is_object() && g.value().contains("weights") && g.value()["weights"].is_object())
                check_group_size(g.value()["weights"], where + " config_groups." + g.key() + ".weights");
    return c;
}

// One compressed-tensors quantization args object (weights or input_activations) must be NVFP4.
void check_ct_args(const json& a, const std::string& where) {
    TETRA_CHECK(a.is_object(), "checkpoint: %s must be an object", where.c_str());
    auto num = [&](const char* k) { return a.contains(k) && a[k].is_number_integer() ? a[k].get<int64_t>() : -1; };
    std::string type = str_field(a, "type", where), strategy = str_field(a, "strategy", where);
    bool ok = num("num_bits") == 4 && type == "float" && strategy == "tensor_group" && num("group_size") == 16 &&
              !(a.contains("symmetric") && a["symmetric"] == false);
    TETRA_CHECK(ok,
                "checkpoint: %s is {num_bits: %s, type: %s, strategy: %s, group_size: %s}; expected the NVFP4 "
                "scheme {4, float, tensor_group, 16, symmetric}; %s",
                where.c_str(), a.value("num_bits", json()).dump().c_str(), type.c_str(), strategy.c_str(),
                a.value("group_size", json()).dump().c_str(), k_supported_checkpoints);
}

checkpoint_config parse_ct(const json& qc, const std::string& where) {
    checkpoint_config c;
    c.format = "compressed-tensors";
    c.source = where;
    std::string top = str_field(qc, "format", where);
    std::string status = str_field(qc, "quantization_status", where);
    TETRA_CHECK(status.empty() || status == "compressed",
                "checkpoint: %s: quantization_status is '%s'; expected 'compressed' (packed weights on disk)",
                where.c_str(), status.c_str());
    if (qc.contains("sparsity_config") && qc["sparsity_config"].is_object() && !qc["sparsity_config"].empty()) {
        std::string sf = str_field(qc["sparsity_config"], "format", where + " sparsity_config");
        TETRA_CHECK(sf.empty() || sf == "dense", "checkpoint: %s: sparsity format '%s' is not supported; %s",
                    where.c_str(), sf.c_str(), k_supported_checkpoints);
    }
    TETRA_CHECK(qc.contains("config_groups") && qc["config_groups"].is_object() && !qc["config_groups"].empty(),
                "checkpoint: %s: compressed-tensors needs a non-empty 'config_groups' object", where.c_str());
    int w4a4 = -1;
    for (const auto& g : qc["config_groups"].items()) {
        std::string gw = where + " config_groups." + g.key();
        TETRA_CHECK(g.value().is_object(), "checkpoint: %s must be an object", gw.c_str());
        std::string fmt = str_field(g.value(), "format", gw);
        if (fmt.empty()) fmt = top;
        TETRA_CHECK(fmt == "nvfp4-pack-quantized",
                    "checkpoint: %s: compressed-tensors format '%s' is not supported; %s", gw.c_str(),
                    fmt.c_str(), k_supported_checkpoints);
        TETRA_CHECK(g.value().contains("weights") && !g.value()["weights"].is_null(),
                    "checkpoint: %s: missing 'weights'", gw.c_str());
        check_ct_args(g.value()["weights"], gw + ".weights");
        bool has_in = g.value().contains("input_activations") && !g.value()["input_activations"].is_null();
        if (has_in) check_ct_args(g.value()["input_activations"], gw + ".input_activations");
        TETRA_CHECK(w4a4 < 0 || w4a4 == int(has_in),
                    "checkpoint: %s: groups mix NVFP4 (W4A4) and NVFP4A16 (weight-only); expected one scheme",
                    where.c_str());
        w4a4 = int(has_in);
    }
    c.quant_algo = w4a4 ? "NVFP4" : "W4A16_NVFP4";
    c.exclude = str_list(qc, "ignore", where);
    return c;
}

}  // namespace

checkpoint_config read_checkpoint_config(const std::string& dir) {
    const std::string cfg_path = dir + "/config.json", hq_path = dir + "/hf_quant_config.json";
    json cfg = fs::exists(cfg_path) ? read_json_file(cfg_path) : json();
    json hq = fs::exists(hq_path) ? read_json_file(hq_path) : json();
    const bool has_qc = cfg.is_object() && cfg.contains("quantization_config") && !cfg["quantization_config"].is_null();
    if (has_qc) {
        const json& qc = cfg["quantization_config"];
        const std::string where = cfg_path + " quantization_config";
        TETRA_CHECK(qc.is_object(), "checkpoint: %s must be an object", where.c_str());
        std::string method = str_field(qc, "quant_method", where);
        for (char& ch : method) ch = char(std::tolower((unsigned char)ch));
        if (method == "modelopt") {
            checkpoint_config c = parse_modelopt(qc, where);
            if (hq.is_object()) {  // both files: they must agree
                checkpoint_config h = parse_modelopt(hq, hq_path);
                TETRA_CHECK(h.quant_algo == c.quant_algo, "checkpoint: %s says quant_algo %s but %s says %s",
                            where.c_str(), c.quant_algo.c_str(), hq_path.c_str(), h.quant_algo.c_str());
            }
            return c;
        }
        if (method == "compressed-tensors") {
            TETRA_CHECK(!hq.is_object(), "checkpoint: %s declares compressed-tensors but %s (ModelOpt) exists too",
                        where.c_str(), hq_path.c_str());
            return parse_ct(qc, where);
        }
        TETRA_FAIL("checkpoint: %s: quant_method '%s' is not supported; %s", where.c_str(), method.c_str(),
                   k_supported_checkpoints);
    }
    if (hq.is_object()) return parse_modelopt(hq, hq_path);
    checkpoint_config c;
    c.format = "dense";
    c.source = fs::exists(cfg_path) ? cfg_path : dir;
    return c;
}

exclude_syntax exclude_syntax_of(const std::string& format) {
    return format == "compressed-tensors" ? exclude_syntax::COMPRESSED_TENSORS : exclude_syntax::MODELOPT;
}

void scale_health::add(const scale_health& o) {
    n_blocks += o.n_blocks, n_saturated += o.n_saturated, n_subnormal += o.n_subnormal;
    n_zero += o.n_zero, n_invalid += o.n_invalid;
}

scale_health scale_health_of(const uint8_t* s, int64_t n) {
    scale_health h;
    h.n_blocks = n;
    for (int64_t i = 0; i < n; ++i) {
        uint8_t b = s[i];
        if (b == 0x7E) ++h.n_saturated;
        else if (b == 0x00) ++h.n_zero;
        else if ((b & 0x80) || b == 0x7F) ++h.n_invalid;
        else if ((b & 0x78) == 0) ++h.n_subnormal;
    }
    return h;
}

}  // namespace tetra
