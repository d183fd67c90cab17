// model_weights accessors and load_weights (weights.h). Dense views for linear() are built on
// first use and cached in dense_linears so the returned reference stays valid.
#include "io/weights.h"

#include <algorithm>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/exclude.h"

namespace tetra {

const tensor& model_weights::get(const std::string& name) const {
    auto it = tensors.find(name);
    if (it != tensors.end()) return it->second;
    bool is_linear_part = false;
    for (const auto& kv : linears)
        if (name.compare(0, kv.first.size() + 1, kv.first + ".") == 0) is_linear_part = true;
    TETRA_CHECK(!is_linear_part, "checkpoint %s: tensor '%s' belongs to an NVFP4 linear; use linear()", dir.c_str(),
                name.c_str());
    TETRA_FAIL("checkpoint %s: tensor '%s' not found (%zu tensors, format %s)", dir.c_str(), name.c_str(),
               tensors.size(), format.c_str());
}

bool model_weights::is_excluded(const std::string& module) const {
    if (!quantized_layers.empty()) {
        std::vector<std::string> names = exclude_aliases(module);
        bool listed = false;
        for (const std::string& n : names)
            listed |= std::find(quantized_layers.begin(), quantized_layers.end(), n) != quantized_layers.end();
        if (!listed) return true;
    }
    if (exclude.empty()) return false;
    return exclude_matcher(exclude, exclude_syntax_of(format)).matches(module);
}

const linear_weight& model_weights::linear(const std::string& module, bool dense_ok) {
    auto q = linears.find(module);
    if (q != linears.end()) return q->second;
    const std::string name = module + ".weight";
    TETRA_CHECK(tensors.count(name), "checkpoint %s: linear '%s' not found: no NVFP4 tensors and no tensor '%s'",
                dir.c_str(), module.c_str(), name.c_str());
    const tensor& t = tensors.at(name);
    TETRA_CHECK(t.rank() == 2 && (t.type == dtype::BF16 || t.type == dtype::F16 || t.type == dtype::F32),
                "checkpoint %s: tensor '%s' has dtype %s and shape %s; expected a 2-D BF16/F16/F32 [out, in] weight",
                dir.c_str(), name.c_str(), dtype_safetensors_name(t.type), t.shape_str().c_str());
    // Checked on every call (not only when the view is first built): dense_ok is per call site.
    TETRA_CHECK(quant_algo.empty() || dense_ok || is_excluded(module),
                "checkpoint %s: module '%s' is stored dense (tensor '%s', %s %s) but the %s %s config does not exclude "
                "it; expected NVFP4 tensors for it", dir.c_str(), module.c_str(), name.c_str(),
                dtype_safetensors_name(t.type), t.shape_str().c_str(), format.c_str(), quant_algo.c_str());
    auto d = dense_linears.find(module);
    if (d != dense_linears.end()) return d->second;
    linear_weight lw;
    lw.kind = linear_kind::DENSE;
    lw.n_out = t.dim(0);
    lw.n_in = t.dim(1);
    lw.dense = t;
    return dense_linears.emplace(module, lw).first->second;
}

model_weights load_weights(const std::string& dir) { return load_checkpoint(dir); }

}  // namespace tetra
