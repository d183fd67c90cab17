// tetra quantize (quantize.h). Two passes over the source tensors: (1) amax of every candidate
// linear weight (parallel over rows), group amax over fused partners, exclusion decisions;
// (2) promote each quantized weight to f32 and run the codec's recipe (parallel over rows inside
// nvfp4_quantize_*). Everything else is copied byte for byte. Output tensors keep the source order.
#include "io/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "io/exclude.h"
#include "io/quantize_config.h"
#include "io/safetensors.h"
#include "nvfp4/nvfp4.h"

namespace tetra {

namespace fs = std::filesystem;

namespace {

bool is_float(dtype t) { return t == dtype::BF16 || t == dtype::F16 || t == dtype::F32; }

// src[rows·cols] (bf16/f16/f32) → f32, parallel over rows.
void promote(const tensor& t, float* out) {
    const int64_t n = t.numel();
    parallel_for(n / 4096 + 1, [&](int64_t c0, int64_t c1) {
        int64_t b = std::min(n, c0 * 4096), e = std::min(n, c1 * 4096);
        if (t.type == dtype::F32) std::memcpy(out + b, t.ptr<float>() + b, size_t(e - b) * 4);
        else
            for (int64_t i = b; i < e; ++i) out[i] = load_f32(t.data, t.type, i);
    });
}

// max |x| over the tensor; false when a NaN/Inf is present.
bool tensor_amax(const tensor& t, float* amax) {
    const int64_t n = t.numel(), chunk = 1 << 16, n_chunks = (n + chunk - 1) / chunk;
    std::vector<float> part(size_t(n_chunks), 0.0f);
    std::vector<uint8_t> bad(size_t(n_chunks), 0);
    parallel_for(n_chunks, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
            float m = 0.0f;
            bool nonfinite = false;
            for (int64_t i = c * chunk, e = std::min(n, (c + 1) * chunk); i < e; ++i) {
                float a = std::fabs(load_f32(t.data, t.type, i));
                nonfinite |= !(a <= 3.4028235e38f);
                m = a > m ? a : m;
            }
            part[size_t(c)] = m;
            bad[size_t(c)] = nonfinite;
        }
    });
    *amax = 0.0f;
    for (int64_t c = 0; c < n_chunks; ++c) {
        if (bad[size_t(c)]) return false;
        *amax = std::max(*amax, part[size_t(c)]);
    }
    return true;
}

struct candidate {
    std::string module;
    tensor w;  // [n_out, n_in] bf16/f16/f32
    float amax = 0.0f;
    std::string group;
    bool quantize = true;
};

void check_dst(const quantize_options& opt) {
    std::error_code ec;
    TETRA_CHECK(fs::is_directory(opt.src, ec), "quantize: source '%s' is not a directory", opt.src.c_str());
    if (fs::exists(opt.dst, ec)) {
        TETRA_CHECK(fs::is_directory(opt.dst, ec), "quantize: destination '%s' exists and is not a directory",
                    opt.dst.c_str());
        TETRA_CHECK(!fs::equivalent(opt.src, opt.dst, ec), "quantize: destination '%s' is the source directory",
                    opt.dst.c_str());
        bool empty = fs::directory_iterator(opt.dst, ec) == fs::directory_iterator();
        TETRA_CHECK(empty || opt.force, "quantize: destination '%s' is not empty (use --force to overwrite)",
                    opt.dst.c_str());
        for (const auto& e : fs::directory_iterator(opt.dst, ec)) {  // stale outputs of an earlier run
            std::string n = e.path().filename().string();
            if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0) fs::remove(e.path(), ec);
            if (n == "model.safetensors.index.json" || n == "hf_quant_config.json") fs::remove(e.path(), ec);
        }
    }
    fs::create_directories(opt.dst, ec);
    TETRA_CHECK(fs::is_directory(opt.dst, ec), "quantize: cannot create '%s': %s", opt.dst.c_str(),
                ec.message().c_str());
}

// Pass 1: candidates, amax, exclusions (with reasons in warnings), fused-group amax.
std::vector<candidate> plan(const safetensors_model& st, const quantize_options& opt, quantize_result* res) {
    exclude_matcher defaults(quantize_default_exclude(), exclude_syntax::MODELOPT);
    exclude_matcher user(opt.exclude, exclude_syntax::MODELOPT);
    std::vector<candidate> cands;
    for (const std::string& n : st.names()) {
        const st_tensor_info* info = st.find(n);
        if (n.size() <= 7 || n.compare(n.size() - 7, 7, ".weight") != 0) continue;
        std::string m = n.substr(0, n.size() - 7);
        if (info->shape.size() != 2 || !is_float(info->type) || !quantize_is_linear_module(m)) continue;
        candidate c;
        c.module = m;
        c.w = st.get(n);
        c.group = quantize_fused_group(m);
        if (defaults.matches(m) || user.matches(m)) c.quantize = false;
        if (c.quantize && c.w.dim(1) % 16 != 0) {
            c.quantize = false;
            res->warnings.push_back(strfmt("'%s' has in-dim %lld, not a multiple of 16: kept dense and excluded",
                                           n.c_str(), (long long)c.w.dim(1)));
        }
        if (c.quantize)
            TETRA_CHECK(tensor_amax(c.w, &c.amax), "quantize: tensor '%s' in %s contains NaN or Inf", n.c_str(),
                        st.file_of(n).c_str());
        cands.push_back(std::move(c));
    }
    std::map<std::string, float> group_amax;
    for (const candidate& c : cands)
        if (c.quantize && !c.group.empty()) group_amax[c.group] = std::max(group_amax[c.group], c.amax);
    for (candidate& c : cands) {
        if (c.quantize && !c.group.empty()) c.amax = group_amax[c.group];
        if (c.quantize && c.amax == 0.0f) {
            c.quantize = false;
            res->warnings.push_back(strfmt("'%s.weight' is all zeros (no global scale exists): kept dense and excluded",
                                           c.module.c_str()));
        }
        (c.quantize ? res->quantized : res->excluded).push_back(c.module);
    }
    return cands;
}

void copy_side_files(const std::string& src, const std::string& dst) {
    static const char* const k_names[] = {"tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                                          "special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt",
                                          "merges.txt", "generation_config.json", "chat_template.json",
                                          "chat_template.jinja"};
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(src, ec)) {
        if (!e.is_regular_file()) continue;
        std::string n = e.path().filename().string();
        bool take = n.size() > 6 && n.compare(n.size() - 6, 6, ".jinja") == 0;
        for (const char* k : k_names) take |= n == k;
        if (!take) continue;
        fs::copy_file(e.path(), fs::path(dst) / n, fs::copy_options::overwrite_existing, ec);
        TETRA_CHECK(!ec, "quantize: cannot copy '%s' to '%s': %s", e.path().c_str(), dst.c_str(), ec.message().c_str());
    }
}

}  // namespace

quantize_result quantize_checkpoint(const quantize_options& opt) {
    TETRA_CHECK(opt.format == "modelopt" || opt.format == "compressed-tensors",
                "quantize: format '%s' is not supported; expected modelopt or compressed-tensors", opt.format.c_str());
    const bool ct = opt.format == "compressed-tensors";
    nlohmann::ordered_json config = quantize_read_source_config(opt.src);
    check_dst(opt);
    safetensors_model st = safetensors_model::open_dir(opt.src);
    quantize_result res;
    std::vector<candidate> cands = plan(st, opt, &res);
    for (const std::string& w : res.warnings) TETRA_LOG_WARN("quantize: %s", w.c_str());

    std::map<std::string, const candidate*> by_weight;
    for (const candidate& c : cands)
        if (c.quantize) by_weight[c.module + ".weight"] = &c;
    safetensors_writer out;
    out.set_metadata("format", "pt");
    std::vector<float> f32;
    std::vector<uint8_t> codes, scales;
    for (const std::string& n : st.names()) {
        auto it = by_weight.find(n);
        if (it == by_weight.end()) {
            out.add(n, st.get(n));  // bit-exact copy
            continue;
        }
        const candidate& c = *it->second;
        const int64_t rows = c.w.dim(0), cols = c.w.dim(1);
        f32.resize(size_t(rows * cols));
        codes.resize(size_t(rows * cols / 2));
        scales.resize(size_t(rows * cols / 16));
        promote(c.w, f32.data());
        if (ct) {
            float g = nvfp4_global_scale_ct(c.amax);
            nvfp4_quantize_ct(f32.data(), rows, cols, g, codes.data(), scales.data());
            out.add(c.module + ".weight_packed", dtype::U8, {rows, cols / 2}, codes.data());
            out.add(c.module + ".weight_scale", dtype::E4M3, {rows, cols / 16}, scales.data());
            out.add(c.module + ".weight_global_scale", dtype::F32, {1}, &g);
        } else {
            float s = nvfp4_scale_global_modelopt(c.amax);
            nvfp4_quantize_modelopt(f32.data(), rows, cols, s, codes.data(), scales.data());
            out.add(c.module + ".weight", dtype::U8, {rows, cols / 2}, codes.data());
            out.add(c.module + ".weight_scale", dtype::E4M3, {rows, cols / 16}, scales.data());
            out.add(c.module + ".weight_scale_2", dtype::F32, {}, &s);
        }
        res.n_tensors_out += 2;
    }
    res.n_tensors_out += int64_t(st.names().size());
    res.files = out.write(opt.dst, opt.max_shard_bytes);
    copy_side_files(opt.src, opt.dst);
    std::vector<std::string> cfg_files = quantize_write_configs(opt.dst, opt.format, config, res.excluded);
    res.files.insert(res.files.end(), cfg_files.begin(), cfg_files.end());
    return res;
}

}  // namespace tetra
