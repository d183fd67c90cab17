// moe_matmul_nvfp4_w4a16_wgmma_sm90: the grouped W4A16 matmul of a long batch (a prefill chunk's
// MoE layer) on the fused large-M wgmma kernel (matmul_nvfp4_w4a16_wgmma_sm90.cu, its GROUPED form):
// each CTA takes a pass of up to 128 rows of one expert (found on the device from expert_offsets)
// against 128 weight rows, the weight decoded in registers as wgmma's A operand, x by TMA. The mma
// kernel (moe_matmul_nvfp4_w4a16_mma_sm80) stays the choice for decode batches, where an expert has
// a few rows and the weight stream is the cost; here the rows per expert make it compute.
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/matmul_launch.h"
#include "backend/cuda/moe_expert_table_sm80.h"
#include "backend/moe.h"
#include "backend/ops.h"

namespace tetra {
namespace cuda {

namespace {

// Mean rows per expert from which the grouped wgmma kernel runs (below: the mma kernel). Measured on
// an H100 with Qwen3-30B-A3B shapes (docs/perf.md, session 27).
constexpr int64_t k_rows_per_expert_min = 16;

std::string wgmma_accepts(const moe_matmul_args& a) {
    std::string why = moe_w4a16_bf16_why_not(a);
    if (!why.empty()) return why;
    if (a.k % 16 != 0) return "k = " + std::to_string(a.k) + " is not a multiple of 16";
    const int64_t ne = int64_t(a.experts->size());
    if (a.n_rows < k_rows_per_expert_min * ne)
        return strfmt("%lld rows over %lld experts: fewer than %lld per expert (the mma kernel)", (long long)a.n_rows,
                      (long long)ne, (long long)k_rows_per_expert_min);
    return moe_w4a16_experts_why_not(a);
}

// The launch: x_perm of every row in the backend's scratch, then one grid.
void wgmma_run(backend& be, const moe_matmul_args& a, void* out, int64_t n_ff) {
    if (a.n_rows == 0) return;
    cudaStream_t s = stream_of(be);
    const moe_expert_ptrs* table = moe_expert_table(*a.experts, s, moe_w4a16_ptrs);
    const size_t ws_bytes = w4a16_wgmma_workspace_bytes(a.n_rows, a.k);
    void* ws = scratch(be, ws_bytes);
    moe_matmul_nvfp4_w4a16_wgmma_launch(a.x.data, a.n_rows, a.expert_offsets.ptr<const int32_t>(), table,
                                        int64_t(a.experts->size()), a.n, a.k, out, n_ff, ws, ws_bytes, s);
}

void wgmma_launch(backend& be, const moe_matmul_args& a) { wgmma_run(be, a, a.out.data, 0); }

std::string silu_wgmma_accepts(const moe_matmul_silu_args& a) { return moe_silu_fused_why_not(a, wgmma_accepts); }

void silu_wgmma_launch(backend& be, const moe_matmul_silu_args& a) { wgmma_run(be, a.mm, a.out.data, a.n_ff); }

}  // namespace

// Priority 25 (moe_matmul) / 15 (moe_matmul_silu): above the mma kernel's 20 / 10 where accepts() holds
// (an sm_90a image on an sm_90 device, ≥ 16 rows per expert on average).
void register_moe_matmul_nvfp4_w4a16_wgmma_sm90(kernel_registry& r) {
    kernel_req req = cuda_req(80, {dtype::BF16});
    req.align = 16;
    req.features = FEAT_WGMMA;
    r.add(make_kernel<moe_matmul_args>("moe_matmul_nvfp4_w4a16", "moe_matmul_nvfp4_w4a16_wgmma_sm90", req, 25,
                                       wgmma_accepts, wgmma_launch));
    r.add(make_kernel<moe_matmul_silu_args>("moe_matmul_silu", "moe_matmul_silu_nvfp4_w4a16_wgmma_sm90", req, 15,
                                            silu_wgmma_accepts, silu_wgmma_launch));
}

}  // namespace cuda
}  // namespace tetra
