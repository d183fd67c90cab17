// Helpers of the grouped MoE gpu tests (test_moe_ops_gpu, test_moe_wgmma_gpu): random experts on
// the host and prepared for the GPU, a tensor's bytes, one row of a tensor.
#pragma once
#include <cstring>
#include <vector>

#include "backend/cuda/gpu_harness.h"

namespace tetra_test {

inline std::vector<uint8_t> bytes_of(const tensor& t) {
    const uint8_t* p = static_cast<const uint8_t*>(t.data);
    return std::vector<uint8_t>(p, p + t.nbytes());
}

inline tensor row_of(const tensor& t, int64_t i) {
    tensor r = tensor::alloc(t.type, {1, t.dim(1)});
    std::memcpy(r.data, static_cast<const uint8_t*>(t.data) + size_t(i) * t.nbytes() / size_t(t.dim(0)), r.nbytes());
    return r;
}

// n_expert random linears [n, k] (random_linear, gpu_harness.h): NVFP4 with scale_global 1/(64 + e)
// for expert e, or dense bf16.
inline std::vector<linear_weight> random_experts(rng& r, int64_t ne, int64_t n, int64_t k, bool nvfp4) {
    std::vector<linear_weight> ex;
    for (int64_t e = 0; e < ne; ++e) ex.push_back(random_linear(r, n, k, nvfp4, 1.0f / float(64 + e)));
    return ex;
}

inline std::vector<linear_weight> prepare_all(const std::vector<linear_weight>& host) {
    std::vector<linear_weight> out;
    for (const linear_weight& w : host) out.push_back(gpu_be().prepare_linear(w));
    return out;
}

}  // namespace tetra_test
