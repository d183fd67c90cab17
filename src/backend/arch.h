// The arch feature table, in one place (DESIGN.md §4): which hardware features a kernel can use is
// decided by BOTH the device's compute capability AND the image the CUDA driver will load for it
// from the compiled target list (sm_120a cubins do not run on sm_121; compute_120a PTX cannot be
// JIT-compiled for sm_121; family `f` targets run on later members of their family; plain PTX
// JIT-compiles forward but without any a/f feature). Pure functions; no CUDA headers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tetra {

// Compute capability as major·10 + minor: 75, 80, 86, 89, 90, 100, 103, 110, 120, 121.
inline int cc_major(int cc) { return cc / 10; }
inline int cc_minor(int cc) { return cc % 10; }

enum class target_suffix : uint8_t { NONE, A, F };  // sm_90 | sm_90a (arch-specific) | sm_120f (family)

// One compiled image: SASS (sm_XY[a|f]) or PTX (compute_XY[a|f]).
struct compiled_target {
    int cc = 0;
    target_suffix suffix = target_suffix::NONE;
    bool ptx = false;
    std::string str() const;  // canonical spelling: "sm_120a", "compute_90"
    bool operator==(const compiled_target& o) const {
        return cc == o.cc && suffix == o.suffix && ptx == o.ptx;
    }
};

// Parses "sm_90a", "sm_120f", "compute_90", "compute_120a", and CMake spellings "90a", "120f-real"
// (SASS), "90-virtual" (PTX). A bare "90" means SASS. Throws tetra::error naming the bad string.
compiled_target parse_compiled_target(const std::string& s);
// A comma/semicolon/space separated list, e.g. "sm_80,sm_90a;compute_90". Empty → empty list.
std::vector<compiled_target> parse_compiled_targets(const std::string& list);
std::string compiled_targets_str(const std::vector<compiled_target>& list);

// Whether the image can run on a device of capability `device_cc`:
//   sm_XY  : same major, device minor ≥ Y           (binary compatibility within a major)
//   sm_XYf : same family (same major here), device ≥ XY
//   sm_XYa : device == XY only
//   compute_XY  : device ≥ XY (JIT, any later major)
//   compute_XYf : same family, device ≥ XY;   compute_XYa : device == XY
bool target_runs_on(const compiled_target& t, int device_cc);

// The image the driver loads for device_cc from `compiled` (modelled rule, documented in arch.cpp:
// a compatible SASS image beats PTX; then the highest cc; at equal cc a > f > plain). Returns false
// if nothing in the list runs on the device.
bool select_image(const std::vector<compiled_target>& compiled, int device_cc, compiled_target* out);

// Hardware features a kernel may require. CUDA features hold for the loaded image; CPU features
// for the host CPU at run time.
enum arch_feature : uint32_t {
    FEAT_CP_ASYNC = 1u << 0,        // cp.async (≥ sm_80)
    FEAT_MMA_BF16 = 1u << 1,        // mma.sync bf16 (≥ sm_80)
    FEAT_MMA_FP8 = 1u << 2,         // mma.sync e4m3/e5m2 (≥ sm_89)
    FEAT_TMA = 1u << 3,             // cp.async.bulk.tensor (≥ sm_90)
    FEAT_WGMMA = 1u << 4,           // wgmma (exactly sm_90a)
    FEAT_TCGEN05 = 1u << 5,         // tcgen05 / TMEM (sm_100a, sm_103a, sm_110a)
    FEAT_MMA_FP4_BLOCK = 1u << 6,   // mma.sync kind::mxf4nvf4 block_scale (sm_120a/121a/120f/121f)
    FEAT_CVT_E2M1 = 1u << 7,        // cvt e2m1x2 (a/f targets of 10.x–12.x)
    // griddepcontrol (programmatic dependent launch, ≥ sm_90): a kernel built for an older image
    // has no pdl_wait(), so launching it with the PDL attribute would let it race its predecessor
    FEAT_PDL = 1u << 8,
    FEAT_CPU_AVX2_FMA_F16C = 1u << 16,  // x86 AVX2 + FMA + F16C
};
std::string arch_features_str(uint32_t features);  // "cp.async,mma.bf16,..." ("none" if 0)

// Features of image `t` (assumed loaded on a device it runs on).
uint32_t target_features(const compiled_target& t);
// Features a kernel can use on `device_cc` given what was compiled (0 if no image runs).
uint32_t cuda_features(int device_cc, const std::vector<compiled_target>& compiled);
// Host CPU features, detected at run time (__builtin_cpu_supports).
uint32_t cpu_features();

// What the registry knows about the device it selects kernels for.
struct device_info {
    device_kind kind = device_kind::CPU;
    std::string name;                        // "cpu", "NVIDIA H100 80GB HBM3"
    int cc = 0;                              // CUDA only
    std::vector<compiled_target> compiled;   // CUDA only: images in this binary
    uint32_t features = 0;                   // cuda_features(cc, compiled) | cpu_features()
    int64_t smem_per_block = 0;              // CUDA only: opt-in shared memory per block (bytes)
    int sm_count = 0;                        // CUDA only: multiprocessors
    int64_t memory_bytes = 0;                // CUDA only: global memory
};

device_info cpu_device_info();  // kind CPU, features = cpu_features()

}  // namespace tetra
