#include "model/model_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace tetra {

using json = nlohmann::json;

const std::vector<std::string>& supported_architectures() {
    static const std::vector<std::string> k = {"LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM"};
    return k;
}

namespace {

int64_t get_int(const json& j, const char* key, const std::string& path, int64_t def, bool required) {
    if (!j.contains(key) || j[key].is_null()) {
        TETRA_CHECK(!required, "%s: missing required field '%s'", path.c_str(), key);
        return def;
    }
    TETRA_CHECK(j[key].is_number_integer(), "%s: field '%s' must be an integer, got %s", path.c_str(), key,
                j[key].dump().c_str());
    int64_t v = j[key].get<int64_t>();
    TETRA_CHECK(v > 0, "%s: field '%s' must be positive, got %lld", path.c_str(), key, (long long)v);
    return v;
}

float get_float(const json& j, const char* key, const std::string& path, float def) {
    if (!j.contains(key) || j[key].is_null()) return def;
    TETRA_CHECK(j[key].is_number(), "%s: field '%s' must be a number, got %s", path.c_str(), key,
                j[key].dump().c_str());
    return j[key].get<float>();
}

bool get_bool(const json& j, const char* key, const std::string& path, bool def) {
    if (!j.contains(key) || j[key].is_null()) return def;
    TETRA_CHECK(j[key].is_boolean(), "%s: field '%s' must be true or false, got %s", path.c_str(), key,
                j[key].dump().c_str());
    return j[key].get<bool>();
}

void parse_rope(const json& j, const std::string& path, rope_config* rope) {
    // transformers >= 5 writes rope_parameters {rope_theta, rope_type, factor, ...} instead of
    // rope_theta + rope_scaling; reading only the old keys would silently run theta 10000.
    bool v5 = j.contains("rope_parameters") && j["rope_parameters"].is_object();
    rope->theta = get_float(v5 ? j["rope_parameters"] : j, "rope_theta", path, get_float(j, "rope_theta", path, 10000.0f));
    const char* key = v5 ? "rope_parameters" : "rope_scaling";
    if (!j.contains(key) || j[key].is_null()) return;
    const json& s = j[key];
    TETRA_CHECK(s.is_object(), "%s: field '%s' must be an object or null", path.c_str(), key);
    std::string type = s.value("rope_type", s.value("type", std::string()));
    if (type == "default" || type.empty()) return;
    TETRA_CHECK(type == "llama3", "%s: rope_scaling type '%s' is not supported (supported: llama3, default)",
                path.c_str(), type.c_str());
    rope->type = type;
    rope->factor = get_float(s, "factor", path + " rope_scaling", 8.0f);
    rope->low_freq_factor = get_float(s, "low_freq_factor", path + " rope_scaling", 1.0f);
    rope->high_freq_factor = get_float(s, "high_freq_factor", path + " rope_scaling", 4.0f);
    rope->original_max_position = get_int(s, "original_max_position_embeddings", path + " rope_scaling", 8192, false);
}

// A non-negative integer field (0 allowed, unlike get_int).
int64_t get_count(const json& j, const char* key, const std::string& path, int64_t def) {
    if (!j.contains(key) || j[key].is_null()) return def;
    TETRA_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() >= 0,
                "%s: field '%s' must be a non-negative integer, got %s", path.c_str(), key, j[key].dump().c_str());
    return j[key].get<int64_t>();
}

// The MoE fields of Qwen3MoeForCausalLM (HF Qwen3MoeConfig names and defaults; docs/moe.md).
void parse_moe(const json& j, const std::string& path, model_config* c) {
    c->n_expert = get_count(j, "num_experts", path, get_count(j, "num_local_experts", path, 128));
    c->n_expert_used = get_count(j, "num_experts_per_tok", path, 8);
    c->n_ff_exp = get_count(j, "moe_intermediate_size", path, 768);
    c->n_ff_shexp = get_count(j, "shared_expert_intermediate_size", path, 0);
    c->norm_topk_prob = get_bool(j, "norm_topk_prob", path, false);
    c->decoder_sparse_step = get_int(j, "decoder_sparse_step", path, 1, false);
    if (c->n_expert > 0)
        TETRA_CHECK(c->n_expert_used >= 1 && c->n_expert_used <= c->n_expert && c->n_ff_exp >= 1,
                    "%s: num_experts_per_tok %lld must be in [1, num_experts = %lld] and moe_intermediate_size %lld "
                    "must be >= 1",
                    path.c_str(), (long long)c->n_expert_used, (long long)c->n_expert, (long long)c->n_ff_exp);
    if (!j.contains("mlp_only_layers") || j["mlp_only_layers"].is_null()) return;
    const json& m = j["mlp_only_layers"];
    TETRA_CHECK(m.is_array(), "%s: field 'mlp_only_layers' must be a list of layer indices, got %s", path.c_str(),
                m.dump().c_str());
    for (const auto& x : m) {
        TETRA_CHECK(x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() < c->n_layer,
                    "%s: mlp_only_layers entry %s is not a layer index in [0, %lld)", path.c_str(), x.dump().c_str(),
                    (long long)c->n_layer);
        c->mlp_only_layers.push_back(x.get<int64_t>());
    }
}

void parse_eos(const json& j, model_config* c) {
    if (j.contains("eos_token_id")) {
        const json& e = j["eos_token_id"];
        if (e.is_number_integer()) c->eos_token_ids.push_back(e.get<int32_t>());
        else if (e.is_array())
            for (const auto& x : e)
                if (x.is_number_integer()) c->eos_token_ids.push_back(x.get<int32_t>());
    }
    if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) c->bos_token_id = j["bos_token_id"].get<int32_t>();
}

}  // namespace

model_config parse_model_config(const std::string& text, const std::string& path) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::parse_error& e) {
        TETRA_FAIL("%s: invalid JSON: %s", path.c_str(), e.what());
    }
    TETRA_CHECK(j.is_object(), "%s: expected a JSON object at top level", path.c_str());
    model_config c;
    c.path = path;
    TETRA_CHECK(j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
                    j["architectures"][0].is_string(),
                "%s: missing field 'architectures' (a list naming the model class)", path.c_str());
    c.architecture = j["architectures"][0].get<std::string>();
    bool known = false;
    std::string list;
    for (const auto& a : supported_architectures()) {
        known |= a == c.architecture;
        list += (list.empty() ? "" : ", ") + a;
    }
    TETRA_CHECK(known, "%s: architecture '%s' is not supported (supported: %s)", path.c_str(),
                c.architecture.c_str(), list.c_str());
    c.model_type = j.value("model_type", std::string());
    c.n_embd = get_int(j, "hidden_size", path, 0, true);
    c.n_ff = get_int(j, "intermediate_size", path, 0, true);
    c.n_head = get_int(j, "num_attention_heads", path, 0, true);
    c.n_head_kv = get_int(j, "num_key_value_heads", path, c.n_head, false);
    c.n_layer = get_int(j, "num_hidden_layers", path, 0, true);
    c.n_vocab = get_int(j, "vocab_size", path, 0, true);
    c.max_position = get_int(j, "max_position_embeddings", path, 4096, false);
    TETRA_CHECK(c.n_embd % c.n_head == 0 || j.contains("head_dim"),
                "%s: hidden_size %lld is not divisible by num_attention_heads %lld and head_dim is not given",
                path.c_str(), (long long)c.n_embd, (long long)c.n_head);
    c.head_dim = get_int(j, "head_dim", path, c.n_embd / c.n_head, false);
    TETRA_CHECK(c.n_head % c.n_head_kv == 0, "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                path.c_str(), (long long)c.n_head, (long long)c.n_head_kv);
    TETRA_CHECK(c.head_dim % 2 == 0, "%s: head_dim %lld must be even for rotary embeddings", path.c_str(),
                (long long)c.head_dim);
    c.rms_norm_eps = get_float(j, "rms_norm_eps", path, 1e-6f);
    parse_rope(j, path, &c.rope);
    c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", path, false);
    bool qwen2 = c.architecture == "Qwen2ForCausalLM";
    c.attention_bias = qwen2 || get_bool(j, "attention_bias", path, false);
    c.qk_norm = c.architecture == "Qwen3ForCausalLM" || c.architecture == "Qwen3MoeForCausalLM";
    if (c.architecture == "Qwen3MoeForCausalLM") parse_moe(j, path, &c);
    std::string act = j.value("hidden_act", std::string("silu"));
    TETRA_CHECK(act == "silu", "%s: hidden_act '%s' is not supported (supported: silu)", path.c_str(), act.c_str());
    c.torch_dtype = j.value("torch_dtype", j.value("dtype", std::string()));
    parse_eos(j, &c);
    return c;
}

model_config load_model_config(const std::string& dir) {
    std::string path = dir + "/config.json";
    std::ifstream f(path);
    TETRA_CHECK(f.good(), "%s: cannot open (is '%s' an HF model directory?)", path.c_str(), dir.c_str());
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_model_config(ss.str(), path);
}

bool model_config::is_moe_layer(int64_t il) const {
    if (n_expert <= 0 || (il + 1) % decoder_sparse_step != 0) return false;
    for (int64_t m : mlp_only_layers)
        if (m == il) return false;
    return true;
}

std::string model_config::summary() const {
    std::string moe;
    if (n_expert > 0)
        moe = strfmt(", %lld experts (top %lld%s), n_ff_exp %lld%s", (long long)n_expert, (long long)n_expert_used,
                     norm_topk_prob ? ", renormalized" : "", (long long)n_ff_exp,
                     n_ff_shexp > 0 ? strfmt(", shared expert n_ff %lld", (long long)n_ff_shexp).c_str() : "");
    return strfmt("%s: %lld layers, n_embd %lld, n_ff %lld, n_head %lld, n_head_kv %lld, head_dim %lld, n_vocab %lld%s%s",
                  architecture.c_str(), (long long)n_layer, (long long)n_embd, (long long)n_ff, (long long)n_head,
                  (long long)n_head_kv, (long long)head_dim, (long long)n_vocab,
                  tie_word_embeddings ? ", tied embeddings" : "", moe.c_str());
}

}  // namespace tetra
