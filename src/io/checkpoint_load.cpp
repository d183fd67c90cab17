// load_checkpoint: safetensors tensors → model_weights. Quantized linears are found by their marker
// tensor (ModelOpt `<m>.weight_scale`, compressed-tensors `<m>.weight_packed`), validated against
// the config and their siblings (§3.2, §4.2), and kept as zero-copy views of the mapping. Every
// other tensor goes to model_weights::tensors unchanged, unless it is a second form of a quantized
// module or a quantization tensor of the other format (a load error). Fused groups keep per-module scales.
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "nvfp4/nvfp4.h"
#include "io/safetensors.h"

namespace tetra {

namespace {

struct names_of {  // tensor-name suffixes of one format
    const char* codes;          // packed E2M1
    const char* global;         // fp32 global scale
    const char* input;          // fp32 activation global scale (W4A4 only)
    bool global_is_reciprocal;  // CT stores the quant direction G = 1/S
};
const names_of k_modelopt{".weight", ".weight_scale_2", ".input_scale", false};
const names_of k_ct{".weight_packed", ".weight_global_scale", ".input_global_scale", true};

bool ends_with(const std::string& s, const std::string& suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

const char* st_name(dtype t) { return dtype_safetensors_name(t); }

// A 0-dim or [1] F32 tensor, finite and > 0.
float read_scalar(const safetensors_model& st, const std::string& name, const char* meaning) {
    tensor t = st.get(name);
    TETRA_CHECK(t.type == dtype::F32, "checkpoint %s: tensor '%s' (%s) has dtype %s; expected F32", st.dir().c_str(),
                name.c_str(), meaning, st_name(t.type));
    TETRA_CHECK(t.numel() == 1 && t.rank() <= 1, "checkpoint %s: tensor '%s' (%s) has shape %s; expected a scalar ([] or [1])",
                st.dir().c_str(), name.c_str(), meaning, t.shape_str().c_str());
    float v;
    std::memcpy(&v, t.data, 4);
    TETRA_CHECK(std::isfinite(v) && v > 0.0f, "checkpoint %s: tensor '%s' (%s) is %g; expected finite and > 0",
                st.dir().c_str(), name.c_str(), meaning, double(v));
    return v;
}

// Validates and maps one quantized module; records the consumed tensor names.
linear_weight load_linear(const safetensors_model& st, const std::string& m, const names_of& nm, bool w4a4,
                          std::set<std::string>* used) {
    const std::string& dir = st.dir();
    const std::string n_codes = m + nm.codes, n_scales = m + ".weight_scale", n_global = m + nm.global;
    for (const std::string& n : {n_codes, n_scales, n_global})
        TETRA_CHECK(st.has(n), "checkpoint %s: module '%s' is NVFP4 but tensor '%s' is missing", dir.c_str(), m.c_str(),
                    n.c_str());
    linear_weight lw;
    lw.kind = linear_kind::NVFP4;
    lw.scales = st.get(n_scales);
    lw.codes = st.get(n_codes);
    TETRA_CHECK(lw.scales.type == dtype::E4M3, "checkpoint %s: tensor '%s' has dtype %s; expected F8_E4M3 (NVFP4 block scales)",
                dir.c_str(), n_scales.c_str(), st_name(lw.scales.type));
    TETRA_CHECK(lw.scales.rank() == 2, "checkpoint %s: tensor '%s' has shape %s; expected [out, in/16]", dir.c_str(),
                n_scales.c_str(), lw.scales.shape_str().c_str());
    lw.n_out = lw.scales.dim(0);
    lw.n_in = lw.scales.dim(1) * 16;
    const std::string want = shape_str({lw.n_out, lw.n_in / 2});
    TETRA_CHECK(lw.codes.type == dtype::U8, "checkpoint %s: tensor '%s' has dtype %s; expected U8 (packed E2M1, shape %s)",
                dir.c_str(), n_codes.c_str(), st_name(lw.codes.type), want.c_str());
    TETRA_CHECK(lw.codes.rank() == 2 && lw.codes.dim(0) == lw.n_out && lw.codes.dim(1) * 2 == lw.n_in,
                "checkpoint %s: tensor '%s' has shape %s; expected %s ([out, in/2] for '%s' of shape %s = [out, in/16])",
                dir.c_str(), n_codes.c_str(), lw.codes.shape_str().c_str(), want.c_str(), n_scales.c_str(),
                lw.scales.shape_str().c_str());
    float g = read_scalar(st, n_global, nm.global_is_reciprocal ? "weight global scale" : "weight_scale_2");
    lw.scale_global = nm.global_is_reciprocal ? nvfp4_ct_to_dequant(g) : g;  // S = 1/G, fp32
    used->insert({n_codes, n_scales, n_global});
    const std::string n_in = m + nm.input;
    if (w4a4) {
        TETRA_CHECK(st.has(n_in), "checkpoint %s: quant_algo NVFP4 (W4A4) but tensor '%s' is missing", dir.c_str(),
                    n_in.c_str());
        float v = read_scalar(st, n_in, "activation global scale");
        lw.has_input_scale = true;
        lw.input_scale = nm.global_is_reciprocal ? nvfp4_ct_to_dequant(v) : v;
        lw.input_global_quant = nm.global_is_reciprocal ? v : nvfp4_dequant_to_ct(v);
        used->insert(n_in);
    } else {
        TETRA_CHECK(!st.has(n_in), "checkpoint %s: tensor '%s' is present but the config is weight-only (W4A16_NVFP4); "
                    "expected no activation scale", dir.c_str(), n_in.c_str());
    }
    const std::string n_shape = m + ".weight_shape";  // older compressed-tensors packers write it
    if (nm.global_is_reciprocal && st.has(n_shape)) {
        tensor s = st.get(n_shape);
        bool ok = (s.type == dtype::I64 || s.type == dtype::I32) && s.numel() == 2;
        int64_t a = 0, b = 0;
        if (ok) {
            a = s.type == dtype::I64 ? s.ptr<int64_t>()[0] : s.ptr<int32_t>()[0];
            b = s.type == dtype::I64 ? s.ptr<int64_t>()[1] : s.ptr<int32_t>()[1];
        }
        TETRA_CHECK(ok && a == lw.n_out && b == lw.n_in, "checkpoint %s: tensor '%s' does not hold [%lld, %lld]",
                    dir.c_str(), n_shape.c_str(), (long long)lw.n_out, (long long)lw.n_in);
        used->insert(n_shape);
    }
    return lw;
}

// MIXED_PRECISION: the module (or an alias of it) is in quantized_layers; true for other formats.
bool listed(const std::vector<std::string>& quantized_layers, const std::string& m) {
    if (quantized_layers.empty()) return true;
    for (const std::string& a : exclude_aliases(m))
        for (const std::string& q : quantized_layers)
            if (a == q) return true;
    return false;
}

// Unquantized checkpoints must not carry NVFP4 tensors that nothing would interpret.
void check_dense(const safetensors_model& st, const checkpoint_config& c) {
    for (const std::string& n : st.names()) {
        const st_tensor_info* t = st.find(n);
        bool q = ends_with(n, ".weight_packed") || ends_with(n, ".weight_scale_2") ||
                 ends_with(n, ".weight_global_scale") || (ends_with(n, ".weight_scale") && t->type == dtype::E4M3);
        TETRA_CHECK(!q, "checkpoint %s: tensor '%s' looks quantized but %s declares no quantization "
                    "(no quantization_config, no hf_quant_config.json)", st.dir().c_str(), n.c_str(), c.source.c_str());
    }
}

// A quantized checkpoint's tensors that no module consumed must not hold a second form of a module
// or a quantization tensor of the other format: either would be silently ignored (issue 6 point 6).
// c.format is "modelopt" or "compressed-tensors".
void check_leftovers(const safetensors_model& st, const checkpoint_config& c, const model_weights& w,
                     const std::set<std::string>& used) {
    const bool mo = c.format == "modelopt";
    // Suffixes that only the other format writes (its codes, global and activation scales).
    const std::vector<std::string> foreign = mo ? std::vector<std::string>{".weight_packed", ".weight_global_scale",
                                                                           ".input_global_scale"}
                                                : std::vector<std::string>{".weight_scale_2", ".input_scale"};
    for (const std::string& n : st.names()) {
        if (used.count(n)) continue;
        const st_tensor_info* t = st.find(n);
        if (!mo && ends_with(n, ".weight") && w.linears.count(n.substr(0, n.size() - 7))) {
            const std::string m = n.substr(0, n.size() - 7);
            TETRA_FAIL("checkpoint %s: module '%s' is stored twice: packed NVFP4 ('%s.weight_packed') and as tensor "
                       "'%s' (%s %s); expected only the packed form (%s is %s %s)",
                       st.dir().c_str(), m.c_str(), m.c_str(), n.c_str(), st_name(t->type),
                       shape_str(t->shape).c_str(), c.source.c_str(), c.format.c_str(), c.quant_algo.c_str());
        }
        if (mo && ends_with(n, ".weight") && t->type == dtype::U8)
            TETRA_FAIL("checkpoint %s: tensor '%s' is U8 %s (packed NVFP4 codes) but '%s_scale' is missing; expected "
                       "a dense BF16/F16/F32 weight or a complete NVFP4 module", st.dir().c_str(), n.c_str(),
                       shape_str(t->shape).c_str(), n.c_str());
        for (const std::string& suf : foreign) {
            if (!ends_with(n, suf)) continue;
            const std::string m = n.substr(0, n.size() - suf.size());
            TETRA_FAIL("checkpoint %s: tensor '%s' (%s %s) is a %s tensor, but %s declares %s %s%s; expected no "
                       "such tensor", st.dir().c_str(), n.c_str(), st_name(t->type), shape_str(t->shape).c_str(),
                       mo ? "compressed-tensors" : "ModelOpt", c.source.c_str(), c.format.c_str(),
                       c.quant_algo.c_str(),
                       w.linears.count(m) ? strfmt(" and module '%s' is already loaded from its %s tensors", m.c_str(),
                                                   c.format.c_str()).c_str()
                                          : "");
        }
    }
}

}  // namespace

model_weights load_checkpoint(const std::string& dir) {
    checkpoint_config c = read_checkpoint_config(dir);
    safetensors_model st = safetensors_model::open_dir(dir);
    model_weights w;
    w.dir = dir;
    w.format = c.format;
    w.quant_algo = c.quant_algo;
    w.exclude = c.exclude;
    w.quantized_layers = c.quantized_layers;
    std::set<std::string> used;
    if (c.format == "dense") {
        check_dense(st, c);
    } else {
        const names_of& nm = c.format == "modelopt" ? k_modelopt : k_ct;
        const std::string marker = c.format == "modelopt" ? ".weight_scale" : ".weight_packed";
        exclude_matcher ex(c.exclude, exclude_syntax_of(c.format));
        for (const std::string& n : st.names()) {
            std::string m;
            if (ends_with(n, marker)) m = n.substr(0, n.size() - marker.size());
            else if (ends_with(n, nm.global) || (c.format != "modelopt" && ends_with(n, ".weight_scale")))
                m = n.substr(0, n.rfind('.'));
            if (m.empty() || w.linears.count(m)) continue;
            if (const std::string* p = ex.match(m, /*strict=*/true))
                TETRA_FAIL("checkpoint %s: module '%s' is excluded by pattern '%s' (%s) but stored quantized "
                           "(tensor '%s'); expected a dense '%s.weight'",
                           dir.c_str(), m.c_str(), p->c_str(), c.source.c_str(), n.c_str(), m.c_str());
            w.linears[m] = load_linear(st, m, nm, c.quant_algo == "NVFP4", &used);
            TETRA_CHECK(listed(c.quantized_layers, m), "checkpoint %s: module '%s' is stored quantized but %s does not list it "
                        "in quantized_layers", dir.c_str(), m.c_str(), c.source.c_str());
        }
        TETRA_CHECK(!w.linears.empty(), "checkpoint %s: %s declares %s %s but no tensor ends in '%s'", dir.c_str(),
                    c.source.c_str(), c.format.c_str(), c.quant_algo.c_str(), marker.c_str());
        check_leftovers(st, c, w, used);
    }
    for (const std::string& n : st.names())
        if (!used.count(n)) w.tensors[n] = st.get(n);
    return w;
}

}  // namespace tetra
