// engine/generation_config: sampling_params::validate(), resolve_seed() and the
// generation_config.json reader. Messages are worded for a 400 response: the field, the allowed
// range, the value received.
#include "engine/generation_config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tetra {

namespace {

[[noreturn]] void bad_param(const char* field, const char* expected, const std::string& got) {
    throw sampling_param_error(
        field, strfmt("invalid sampling parameter '%s': expected %s, got %s", field, expected,
                      got.c_str()));
}

std::string num(double v) { return strfmt("%g", v); }

}  // namespace

void sampling_params::validate() const {
    // Written as !(in range) so that NaN fails every check.
    if (!(temperature >= 0.0f && std::isfinite(temperature)))
        bad_param("temperature", "a finite value >= 0", num(temperature));
    if (!(top_k >= -1)) bad_param("top_k", "-1 or 0 (disabled) or a value >= 1", num(top_k));
    if (!(top_p > 0.0f && top_p <= 1.0f)) bad_param("top_p", "a value in (0, 1]", num(top_p));
    if (!(min_p >= 0.0f && min_p <= 1.0f)) bad_param("min_p", "a value in [0, 1]", num(min_p));
    if (!(repetition_penalty > 0.0f && std::isfinite(repetition_penalty)))
        bad_param("repetition_penalty", "a finite value > 0", num(repetition_penalty));
    if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
        bad_param("presence_penalty", "a value in [-2, 2]", num(presence_penalty));
    if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
        bad_param("frequency_penalty", "a value in [-2, 2]", num(frequency_penalty));
    if (!(max_tokens >= 1)) bad_param("max_tokens", "a value >= 1", num(max_tokens));
    if (!(min_tokens >= 0 && min_tokens <= max_tokens))
        bad_param("min_tokens", strfmt("a value in [0, max_tokens=%d]", max_tokens).c_str(),
                  num(min_tokens));
    if (logprobs && !(*logprobs >= 0 && *logprobs <= max_logprobs))
        bad_param("logprobs", strfmt("a value in [0, %d]", max_logprobs).c_str(), num(*logprobs));
    for (size_t i = 0; i < stop.size(); ++i)
        if (stop[i].empty()) bad_param("stop", "non-empty strings", strfmt("\"\" at index %zu", i));
    for (size_t i = 0; i < stop_token_ids.size(); ++i)
        if (stop_token_ids[i] < 0)
            bad_param("stop_token_ids", "token ids >= 0",
                      strfmt("%d at index %zu", stop_token_ids[i], i));
    for (size_t i = 0; i < eos_token_ids.size(); ++i)
        if (eos_token_ids[i] < 0)
            bad_param("eos_token_ids", "token ids >= 0",
                      strfmt("%d at index %zu", eos_token_ids[i], i));
}

uint64_t resolve_seed(const sampling_params& p) {
    if (p.seed) return *p.seed;
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ uint64_t(rd());
}

// ---- generation_config.json ----

namespace {

using json = nlohmann::json;

const char* type_name(const json& v) { return v.type_name(); }

int32_t as_token_id(const json& v, const std::string& source, const std::string& field) {
    TETRA_CHECK(v.is_number_integer(),
                "generation_config '%s': field '%s' must be an integer token id; got %s",
                source.c_str(), field.c_str(), type_name(v));
    int64_t x = v.get<int64_t>();
    TETRA_CHECK(x >= 0 && x <= std::numeric_limits<int32_t>::max(),
                "generation_config '%s': field '%s' must be a token id in [0, 2^31); got %lld",
                source.c_str(), field.c_str(), (long long)x);
    return int32_t(x);
}

std::optional<int32_t> opt_token_id(const json& j, const std::string& source, const char* field) {
    auto it = j.find(field);
    if (it == j.end() || it->is_null()) return std::nullopt;
    return as_token_id(*it, source, field);
}

// A float field with its allowed range [lo, hi] (lo_open: lo excluded).
std::optional<float> opt_float(const json& j, const std::string& source, const char* field,
                               double lo, bool lo_open, double hi) {
    auto it = j.find(field);
    if (it == j.end() || it->is_null()) return std::nullopt;
    TETRA_CHECK(it->is_number(), "generation_config '%s': field '%s' must be a number; got %s",
                source.c_str(), field, type_name(*it));
    double v = it->get<double>();
    bool ok = (lo_open ? v > lo : v >= lo) && v <= hi;
    TETRA_CHECK(ok, "generation_config '%s': field '%s' must be in %c%g, %g]; got %g",
                source.c_str(), field, lo_open ? '(' : '[', lo, hi, v);
    return float(v);
}

std::optional<int32_t> opt_int(const json& j, const std::string& source, const char* field,
                               int64_t lo) {
    auto it = j.find(field);
    if (it == j.end() || it->is_null()) return std::nullopt;
    TETRA_CHECK(it->is_number_integer(),
                "generation_config '%s': field '%s' must be an integer; got %s", source.c_str(),
                field, type_name(*it));
    int64_t v = it->get<int64_t>();
    TETRA_CHECK(v >= lo && v <= std::numeric_limits<int32_t>::max(),
                "generation_config '%s': field '%s' must be an integer >= %lld; got %lld",
                source.c_str(), field, (long long)lo, (long long)v);
    return int32_t(v);
}

}  // namespace

generation_config parse_generation_config(const std::string& json_text, const std::string& source) {
    json j;
    try {
        j = json::parse(json_text);
    } catch (const json::parse_error& e) {
        TETRA_FAIL("generation_config '%s': invalid JSON: %s", source.c_str(), e.what());
    }
    TETRA_CHECK(j.is_object(), "generation_config '%s': expected a JSON object at top level; got %s",
                source.c_str(), type_name(j));
    generation_config gc;
    auto eos = j.find("eos_token_id");
    if (eos != j.end() && !eos->is_null()) {
        if (eos->is_array()) {
            for (size_t i = 0; i < eos->size(); ++i)
                gc.eos_token_ids.push_back(
                    as_token_id((*eos)[i], source, strfmt("eos_token_id[%zu]", i)));
        } else {
            TETRA_CHECK(eos->is_number_integer(),
                        "generation_config '%s': field 'eos_token_id' must be an integer or a list "
                        "of integers; got %s",
                        source.c_str(), type_name(*eos));
            gc.eos_token_ids.push_back(as_token_id(*eos, source, "eos_token_id"));
        }
    }
    gc.bos_token_id = opt_token_id(j, source, "bos_token_id");
    gc.pad_token_id = opt_token_id(j, source, "pad_token_id");
    const double inf = std::numeric_limits<double>::infinity();
    gc.temperature = opt_float(j, source, "temperature", 0.0, false, inf);
    gc.top_p = opt_float(j, source, "top_p", 0.0, true, 1.0);
    gc.min_p = opt_float(j, source, "min_p", 0.0, false, 1.0);
    gc.repetition_penalty = opt_float(j, source, "repetition_penalty", 0.0, true, inf);
    gc.top_k = opt_int(j, source, "top_k", -1);
    gc.max_new_tokens = opt_int(j, source, "max_new_tokens", 1);
    return gc;
}

generation_config load_generation_config(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    TETRA_CHECK(f.good(), "generation_config '%s': cannot open file", path.c_str());
    std::stringstream ss;
    ss << f.rdbuf();
    TETRA_CHECK(!f.bad(), "generation_config '%s': read error", path.c_str());
    return parse_generation_config(ss.str(), path);
}

sampling_params default_sampling_params(const generation_config& gc,
                                        const std::vector<int32_t>& extra_eos_ids) {
    sampling_params p;
    if (gc.temperature) p.temperature = *gc.temperature;
    if (gc.top_p) p.top_p = *gc.top_p;
    if (gc.top_k) p.top_k = *gc.top_k;
    if (gc.min_p) p.min_p = *gc.min_p;
    if (gc.repetition_penalty) p.repetition_penalty = *gc.repetition_penalty;
    if (gc.max_new_tokens) p.max_tokens = *gc.max_new_tokens;
    auto add = [&](int32_t id) {
        for (int32_t e : p.eos_token_ids)
            if (e == id) return;
        p.eos_token_ids.push_back(id);
    };
    for (int32_t id : gc.eos_token_ids) add(id);
    for (int32_t id : extra_eos_ids) add(id);
    return p;
}

}  // namespace tetra
