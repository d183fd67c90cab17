// `tetra inspect DIR [--json]`: what a checkpoint is (format, quant algo, exclusions), every stored
// tensor (dtype, shape), and block-scale health per NVFP4 linear and in total: shares of saturated
// (0x7E = 448), subnormal (exponent bits 0, non-zero) and zero (0x00) block scales, and the range
// of scale_global (dequant direction, w = e2m1 · e4m3 · scale_global).
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

namespace tetra {

namespace {

struct inspect_args {
    std::string dir;
    bool json = false;
};

double pct(int64_t n, int64_t d) { return d ? 100.0 * double(n) / double(d) : 0.0; }

nlohmann::ordered_json health_json(const scale_health& h) {
    return {{"blocks", h.n_blocks}, {"saturated", h.n_saturated}, {"subnormal", h.n_subnormal},
            {"zero", h.n_zero}, {"invalid", h.n_invalid}};
}

void run_inspect(const inspect_args& a) {
    model_weights w = load_checkpoint(a.dir);
    safetensors_model st = safetensors_model::open_dir(a.dir);
    scale_health total;
    float g_min = 0.0f, g_max = 0.0f;
    std::vector<std::pair<std::string, scale_health>> per;
    for (const auto& kv : w.linears) {
        const linear_weight& lw = kv.second;
        per.emplace_back(kv.first, scale_health_of(lw.scales.ptr<uint8_t>(), lw.scales.numel()));
        total.add(per.back().second);
        g_min = per.size() == 1 ? lw.scale_global : std::min(g_min, lw.scale_global);
        g_max = per.size() == 1 ? lw.scale_global : std::max(g_max, lw.scale_global);
    }
    if (a.json) {
        nlohmann::ordered_json j;
        j["dir"] = a.dir;
        j["format"] = w.format;
        j["quant_algo"] = w.quant_algo;
        j["exclude"] = w.exclude;
        j["tensors"] = nlohmann::ordered_json::array();
        for (const std::string& n : st.names()) {
            const st_tensor_info* t = st.find(n);
            j["tensors"].push_back({{"name", n}, {"dtype", dtype_safetensors_name(t->type)}, {"shape", t->shape}});
        }
        j["linears"] = nlohmann::ordered_json::array();
        for (const auto& p : per) {
            nlohmann::ordered_json l = health_json(p.second);
            l["module"] = p.first;
            l["scale_global"] = w.linears.at(p.first).scale_global;
            j["linears"].push_back(l);
        }
        j["total"] = health_json(total);
        if (!per.empty()) j["total"]["scale_global_min"] = g_min, j["total"]["scale_global_max"] = g_max;
        std::printf("%s\n", j.dump(2).c_str());
        return;
    }
    std::printf("checkpoint: %s\nformat:     %s\nquant_algo: %s\n", a.dir.c_str(), w.format.c_str(),
                w.quant_algo.empty() ? "(none)" : w.quant_algo.c_str());
    std::printf("exclusions (%zu):%s\n", w.exclude.size(), w.exclude.empty() ? " (none)" : "");
    for (const std::string& e : w.exclude) std::printf("  %s\n", e.c_str());
    std::vector<std::string> names = st.names();
    size_t width = 4;
    for (const std::string& n : names) width = std::max(width, n.size());
    std::printf("\ntensors (%zu):\n  %-*s  %-8s  %s\n", names.size(), int(width), "name", "dtype", "shape");
    for (const std::string& n : names) {
        const st_tensor_info* t = st.find(n);
        std::printf("  %-*s  %-8s  %s\n", int(width), n.c_str(), dtype_safetensors_name(t->type),
                    shape_str(t->shape).c_str());
    }
    if (per.empty()) return;
    std::printf("\nblock-scale health (%zu NVFP4 linears):\n  %-*s  %9s  %9s  %9s  %9s  %s\n", per.size(), int(width),
                "module", "blocks", "sat448%", "subnorm%", "zero%", "scale_global");
    for (const auto& p : per) {
        const scale_health& h = p.second;
        std::printf("  %-*s  %9lld  %9.3f  %9.3f  %9.3f  %.9g\n", int(width), p.first.c_str(), (long long)h.n_blocks,
                    pct(h.n_saturated, h.n_blocks), pct(h.n_subnormal, h.n_blocks), pct(h.n_zero, h.n_blocks),
                    double(w.linears.at(p.first).scale_global));
    }
    std::printf("\ntotal: %lld blocks; saturated %lld (%.3f%%), subnormal %lld (%.3f%%), zero %lld (%.3f%%)",
                (long long)total.n_blocks, (long long)total.n_saturated, pct(total.n_saturated, total.n_blocks),
                (long long)total.n_subnormal, pct(total.n_subnormal, total.n_blocks), (long long)total.n_zero,
                pct(total.n_zero, total.n_blocks));
    if (total.n_invalid) std::printf(", invalid (sign/NaN) %lld", (long long)total.n_invalid);
    std::printf("\nscale_global: min %.9g, max %.9g\n", double(g_min), double(g_max));
}

}  // namespace

void register_inspect(CLI::App& app) {
    auto a = std::make_shared<inspect_args>();
    auto* cmd = app.add_subcommand("inspect", "show a checkpoint's format, exclusions, tensors and NVFP4 scale health");
    cmd->add_option("DIR", a->dir, "HF checkpoint directory")->required();
    cmd->add_flag("--json", a->json, "print JSON instead of tables");
    cmd->callback([a] { run_inspect(*a); });
}

}  // namespace tetra
