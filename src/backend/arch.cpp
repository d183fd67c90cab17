// Arch feature table: compiled-target parsing, image compatibility, the driver's image choice and
// the features each image provides (reference/kernels.md §1.1, §1.6 are the sources).
#include "backend/arch.h"

#include <cctype>

#include "core/error.h"

namespace tetra {

std::string compiled_target::str() const {
    const char* sfx = suffix == target_suffix::A ? "a" : suffix == target_suffix::F ? "f" : "";
    return std::string(ptx ? "compute_" : "sm_") + std::to_string(cc) + sfx;
}

compiled_target parse_compiled_target(const std::string& s) {
    compiled_target t;
    std::string rest = s;
    bool cmake_style = true;
    if (rest.rfind("sm_", 0) == 0) {
        rest = rest.substr(3);
        cmake_style = false;
    } else if (rest.rfind("compute_", 0) == 0) {
        rest = rest.substr(8);
        t.ptx = true;
        cmake_style = false;
    }
    if (cmake_style) {  // CMake CUDA_ARCHITECTURES: "90a", "120f-real", "90-virtual"
        size_t dash = rest.find('-');
        if (dash != std::string::npos) {
            std::string kind = rest.substr(dash + 1);
            TETRA_CHECK(kind == "real" || kind == "virtual",
                        "compiled target '%s': expected suffix -real or -virtual, got -%s", s.c_str(),
                        kind.c_str());
            t.ptx = kind == "virtual";
            rest = rest.substr(0, dash);
        }
    }
    size_t i = 0;
    while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) ++i;
    TETRA_CHECK(i >= 2 && i <= 3, "compiled target '%s': expected sm_XY[a|f], compute_XY[a|f] or XY[a|f]",
                s.c_str());
    t.cc = std::stoi(rest.substr(0, i));
    std::string sfx = rest.substr(i);
    if (sfx == "a") t.suffix = target_suffix::A;
    else if (sfx == "f") t.suffix = target_suffix::F;
    else TETRA_CHECK(sfx.empty(), "compiled target '%s': unknown suffix '%s' (expected a or f)", s.c_str(), sfx.c_str());
    TETRA_CHECK(t.cc >= 30, "compiled target '%s': compute capability %d is not a CUDA architecture", s.c_str(), t.cc);
    return t;
}

std::vector<compiled_target> parse_compiled_targets(const std::string& list) {
    std::vector<compiled_target> out;
    std::string cur;
    auto flush = [&] {
        if (!cur.empty()) out.push_back(parse_compiled_target(cur));
        cur.clear();
    };
    for (char c : list) {
        if (c == ',' || c == ';' || c == ' ') flush();
        else cur += c;
    }
    flush();
    return out;
}

std::string compiled_targets_str(const std::vector<compiled_target>& list) {
    std::string s;
    for (const auto& t : list) s += (s.empty() ? "" : ",") + t.str();
    return s.empty() ? "(none)" : s;
}

// Families (CUDA 12.9+ family-specific targets): the members share the major version
// (sm_10x = {100, 103}, sm_11x = {110}, sm_12x = {120, 121}).
static bool same_family(int a, int b) { return cc_major(a) == cc_major(b); }

bool target_runs_on(const compiled_target& t, int device_cc) {
    switch (t.suffix) {
        case target_suffix::A: return device_cc == t.cc;
        case target_suffix::F: return same_family(t.cc, device_cc) && device_cc >= t.cc;
        case target_suffix::NONE:
            return t.ptx ? device_cc >= t.cc : same_family(t.cc, device_cc) && device_cc >= t.cc;
    }
    return false;
}

// Modelled driver choice: a compatible SASS image is used before any PTX is JIT-compiled; among
// candidates of the same kind the highest cc wins, and at equal cc the arch-specific image (a)
// beats the family image (f) beats the plain one. This is conservative for kernel selection: a
// feature counts only if the image that actually loads has it.
static int suffix_rank(target_suffix s) { return s == target_suffix::A ? 2 : s == target_suffix::F ? 1 : 0; }

bool select_image(const std::vector<compiled_target>& compiled, int device_cc, compiled_target* out) {
    const compiled_target* best = nullptr;
    for (const auto& t : compiled) {
        if (!target_runs_on(t, device_cc)) continue;
        if (!best) { best = &t; continue; }
        if (t.ptx != best->ptx) { if (!t.ptx) best = &t; continue; }
        if (t.cc != best->cc) { if (t.cc > best->cc) best = &t; continue; }
        if (suffix_rank(t.suffix) > suffix_rank(best->suffix)) best = &t;
    }
    if (best && out) *out = *best;
    return best != nullptr;
}

uint32_t target_features(const compiled_target& t) {
    uint32_t f = 0;
    bool af = t.suffix != target_suffix::NONE;
    if (t.cc >= 80) f |= FEAT_CP_ASYNC | FEAT_MMA_BF16;
    if (t.cc >= 89) f |= FEAT_MMA_FP8;
    if (t.cc >= 90) f |= FEAT_TMA | FEAT_PDL;
    if (t.cc == 90 && t.suffix == target_suffix::A) f |= FEAT_WGMMA;
    if ((t.cc == 100 || t.cc == 103 || t.cc == 110) && t.suffix == target_suffix::A) f |= FEAT_TCGEN05;
    if ((t.cc == 120 || t.cc == 121) && af) f |= FEAT_MMA_FP4_BLOCK;
    if (t.cc >= 100 && t.cc < 130 && af) f |= FEAT_CVT_E2M1;
    return f;
}

uint32_t cuda_features(int device_cc, const std::vector<compiled_target>& compiled) {
    compiled_target img;
    if (!select_image(compiled, device_cc, &img)) return 0;
    return target_features(img);
}

uint32_t cpu_features() {
#if defined(__x86_64__) || defined(__i386__)
    static const uint32_t f = (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                               __builtin_cpu_supports("f16c"))
                                  ? uint32_t(FEAT_CPU_AVX2_FMA_F16C)
                                  : 0u;
    return f;
#else
    return 0;
#endif
}

std::string arch_features_str(uint32_t features) {
    static const struct { uint32_t bit; const char* name; } k_names[] = {
        {FEAT_CP_ASYNC, "cp.async"},     {FEAT_MMA_BF16, "mma.bf16"},
        {FEAT_MMA_FP8, "mma.fp8"},       {FEAT_TMA, "tma"},
        {FEAT_WGMMA, "wgmma"},           {FEAT_TCGEN05, "tcgen05"},
        {FEAT_MMA_FP4_BLOCK, "mma.fp4.block_scale"}, {FEAT_CVT_E2M1, "cvt.e2m1"},
        {FEAT_PDL, "pdl"},
        {FEAT_CPU_AVX2_FMA_F16C, "avx2+fma+f16c"},
    };
    std::string s;
    for (const auto& n : k_names)
        if (features & n.bit) s += (s.empty() ? "" : ",") + std::string(n.name);
    return s.empty() ? "none" : s;
}

device_info cpu_device_info() {
    device_info d;
    d.kind = device_kind::CPU;
    d.name = "cpu";
    d.features = cpu_features();
    return d;
}

}  // namespace tetra
