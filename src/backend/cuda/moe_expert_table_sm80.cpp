// moe_expert_table_upload (moe_expert_table_sm80.h): a process-wide cache of per-expert pointer
// tables in device memory, one per (device, experts vector, size), rebuilt when an entry changes.
// Entries are never freed before exit except on a rebuild (after a device sync): a graph captured
// with an old table belongs to weights that no longer exist.
// Also moe_w4a16_experts_why_not, the grouped W4A16 kernels' shared check of the experts' layout.
#include "backend/cuda/moe_expert_table_sm80.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/matmul_launch.h"
#include "backend/moe.h"
#include "backend/ops.h"

namespace tetra {
namespace cuda {

namespace {
struct table_entry {
    std::vector<moe_expert_ptrs> host;
    void* dev = nullptr;
};
}  // namespace

const moe_expert_ptrs* moe_expert_table_upload(const void* key, const std::vector<moe_expert_ptrs>& host,
                                               cudaStream_t s) {
    static std::mutex mu;
    static auto* cache = new std::map<std::tuple<int, const void*, size_t>, table_entry>();
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(mu);
    table_entry& t = (*cache)[{dev, key, host.size()}];
    const size_t bytes = host.size() * sizeof(moe_expert_ptrs);
    if (t.dev && std::memcmp(t.host.data(), host.data(), bytes) == 0) return static_cast<moe_expert_ptrs*>(t.dev);
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(s, &cap));
    TETRA_CHECK(cap == cudaStreamCaptureStatusNone,
                "moe_matmul: the expert pointer table of %zu experts is built while a CUDA graph is being captured; "
                "run one eager step with these experts first",
                host.size());
    if (t.dev) {
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaFree(t.dev));
        t.dev = nullptr;
    }
    CUDA_CHECK(cudaMalloc(&t.dev, bytes > 0 ? bytes : 1));
    CUDA_CHECK(cudaMemcpyAsync(t.dev, host.data(), bytes, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    t.host = host;
    return static_cast<moe_expert_ptrs*>(t.dev);
}

std::string moe_w4a16_experts_why_not(const moe_matmul_args& a) {
    for (size_t e : {size_t(0), a.experts->size() - 1}) {
        std::string why = w4a16_sm80_weight_why_not((*a.experts)[e]);
        if (!why.empty()) return "expert " + std::to_string(e) + ": " + why;
    }
    return "";
}

std::string moe_w4a16_bf16_why_not(const moe_matmul_args& a) {
    if (a.x.type != dtype::BF16 || a.out.type != dtype::BF16) return "needs bf16 x and out";
    if (a.n > INT32_MAX / 2 || a.k > INT32_MAX / 2 || a.n_rows > INT32_MAX / 2)
        return "shape too large for int indexing";
    return "";
}

std::string moe_silu_fused_why_not(const moe_matmul_silu_args& a, std::string (*plain)(const moe_matmul_args&)) {
    if (a.mode != matmul_mode::W4A16) return std::string("mode ") + matmul_mode_name(a.mode) + " (fused: W4A16 only)";
    if (a.n_ff % 16 != 0) return "n_ff = " + std::to_string(a.n_ff) + " is not a multiple of 16";
    if (a.out.type != dtype::BF16) return "needs a bf16 out";
    return plain(a.mm);
}

}  // namespace cuda
}  // namespace tetra
