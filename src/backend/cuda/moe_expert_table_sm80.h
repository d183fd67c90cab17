// The device table of per-expert weight pointers that the grouped MoE matmul kernels index by
// expert (moe_matmul_*_sm80.cu): built on the host from an experts vector, uploaded once, and
// reused while the vector's entries stay the same. Host-only C++ (include from .cu or .cpp).
#pragma once
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "backend/backend.h"

namespace tetra {
struct moe_matmul_args;
struct moe_matmul_silu_args;
namespace cuda {

// One expert's weight as the kernels read it: a = codes (or the dense weight), b = scales (or
// null), alpha = the f32 epilogue factor.
struct moe_expert_ptrs {
    const void* a = nullptr;
    const void* b = nullptr;
    float alpha = 1.0f;
    float pad = 0.0f;
};

// The entries of each weight kind, defined once: every kernel that asks for the same experts vector
// (the grouped matmuls: the mma, the CUDA-core and the dense kernel) gets the same cached table.
inline moe_expert_ptrs moe_w4a16_ptrs(const linear_weight& w) {
    return moe_expert_ptrs{w.codes.data, w.scales.data, w.scale_global * 256.0f};
}
inline moe_expert_ptrs moe_dense_ptrs(const linear_weight& w) { return moe_expert_ptrs{w.dense.data, nullptr, 1.0f}; }

// The device copy of `host` for the experts vector at `key` on the current device. Cached by
// (device, key, size) and compared entry by entry on every call: a changed entry rebuilds it (a
// blocking upload on `s`). A miss while `s` is capturing a graph is an error (the first, eager
// call of a step builds it; graphs are captured after an eager step).
const moe_expert_ptrs* moe_expert_table_upload(const void* key, const std::vector<moe_expert_ptrs>& host,
                                               cudaStream_t s);

// Builds the host entries with `fn(linear_weight) → moe_expert_ptrs` and uploads them.
template <class W, class F>
const moe_expert_ptrs* moe_expert_table(const std::vector<W>& experts, cudaStream_t s, F&& fn) {
    std::vector<moe_expert_ptrs> host;
    host.reserve(experts.size());
    for (const W& w : experts) host.push_back(fn(w));
    return moe_expert_table_upload(&experts, host, s);
}

// The grouped W4A16 kernels' shared accepts() part: "" when the experts are in the sm80 packed layout
// (w4a16_sm80_weight_why_not on the first and the last expert), else why not.
std::string moe_w4a16_experts_why_not(const moe_matmul_args& a);
// What the bf16 grouped kernels on tensor cores (mma, wgmma) need of any call before their own
// conditions and moe_w4a16_experts_why_not: bf16 x and out, int-sized shapes.
std::string moe_w4a16_bf16_why_not(const moe_matmul_args& a);
// What their fused moe_matmul_silu forms need on top of `plain` (the kernel's own accepts() for
// a.mm): W4A16, n_ff a multiple of 16 (the up half starts on a tile), a bf16 out.
std::string moe_silu_fused_why_not(const moe_matmul_silu_args& a, std::string (*plain)(const moe_matmul_args&));

// The grouped mma kernel's warps per weight tile (1, 2 or 4) for n_rows rows over n_expert experts
// of an [n, k] weight on a device of sm_count SMs (moe_matmul_nvfp4_w4a16_mma_sm80.cu, ks_for):
// for the test that every split gives the same bits.
int moe_w4a16_mma_ks(int64_t n, int64_t k, int64_t n_rows, int64_t n_expert, int sm_count);
// The rows of the grouped mma kernel's x window for call a on this device (silu: moe_matmul_silu's
// fused form): 8·NT, or a.rows_per_expert_max where that puts the grid in fewer waves.
int moe_w4a16_mma_x_rows(backend& be, const moe_matmul_args& a, bool silu);

}  // namespace cuda
}  // namespace tetra
