// moe_matmul_dense_sm80: the grouped matmul for bf16 experts (prepare_linear uploads dense weights
// as bf16). Grid (permuted rows, output-column groups): the row's expert by a binary search of
// expert_offsets on the device, its weight through the per-expert pointer table
// (moe_expert_table_sm80.h). One warp per output column: lane l sums k = l, l + 32, … in f32
// (FMA, ascending), then a fixed xor-tree over the warp. Deterministic, batch-independent; simple
// (no tensor cores): MoE models with dense experts are rare, this keeps them runnable on the GPU.
// bf16 or f32 activations (x and out of one dtype).
#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/moe_expert_table_sm80.h"
#include "backend/moe.h"

namespace tetra {
namespace cuda {

namespace {

constexpr int WARPS = 8;

// x: T [n_rows, k]; out: T [n_rows, n]; offsets: i32 [ne + 1]; table: [ne] bf16 [n, k] weights.
template <class T>
__global__ void __launch_bounds__(WARPS * 32) moe_dense_kernel(const T* x, T* out, const int32_t* offsets,
                                                               const moe_expert_ptrs* table, int ne, int n, int k) {
    const int r = blockIdx.x, lane = threadIdx.x & 31, j = blockIdx.y * WARPS + (threadIdx.x >> 5);
    if (j >= n || r >= offsets[ne]) return;
    int lo = 0, hi = ne - 1;  // the expert e with offsets[e] ≤ r < offsets[e + 1]
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (offsets[mid + 1] > r) hi = mid;
        else lo = mid + 1;
    }
    const __nv_bfloat16* w = static_cast<const __nv_bfloat16*>(table[lo].a) + size_t(j) * k;
    const T* xr = x + size_t(r) * k;
    float acc = 0.0f;
    for (int i = lane; i < k; i += 32) acc = fmaf(__bfloat162float(w[i]), to_f32(xr[i]), acc);
    acc = warp_sum(acc);
    if (lane == 0) out[size_t(r) * n + j] = from_f32<T>(acc);
}

void moe_dense_launch(backend& be, const moe_matmul_args& a) {
    if (a.n_rows == 0) return;
    cudaStream_t s = stream_of(be);
    const std::vector<linear_weight>& ex = *a.experts;
    const moe_expert_ptrs* table =
        moe_expert_table(ex, s, moe_dense_ptrs);
    dim3 grid(unsigned(a.n_rows), unsigned((a.n + WARPS - 1) / WARPS));
    const int32_t* offsets = a.expert_offsets.ptr<const int32_t>();
    if (a.x.type == dtype::F32)
        moe_dense_kernel<float><<<grid, WARPS * 32, 0, s>>>(a.x.ptr<const float>(), a.out.ptr<float>(), offsets, table,
                                                            int(ex.size()), int(a.n), int(a.k));
    else
        moe_dense_kernel<__nv_bfloat16><<<grid, WARPS * 32, 0, s>>>(a.x.ptr<const __nv_bfloat16>(),
                                                                    a.out.ptr<__nv_bfloat16>(), offsets, table,
                                                                    int(ex.size()), int(a.n), int(a.k));
    CUDA_CHECK(cudaGetLastError());
}

std::string moe_dense_accepts(const moe_matmul_args& a) {
    if (a.x.type != a.out.type || (a.x.type != dtype::BF16 && a.x.type != dtype::F32))
        return "needs bf16 or f32 x and out of one dtype";
    for (const linear_weight& w : *a.experts)
        if (w.dense.type != dtype::BF16) return "needs bf16 expert weights (prepare_linear uploads them as bf16)";
    if (a.n_rows > INT32_MAX / 2) return "too many permuted rows for int indexing";
    if (a.n > INT32_MAX / 2 || a.k > INT32_MAX / 2) return "shape too large for int indexing";
    if ((a.n + WARPS - 1) / WARPS > 65535) return strfmt("n = %lld: more than 65535 column groups (grid y)", (long long)a.n);
    return "";
}

}  // namespace

void register_moe_matmul_dense_sm80(kernel_registry& r) {
    r.add(make_kernel<moe_matmul_args>("moe_matmul_dense", "moe_matmul_dense_sm80", cuda_req(80, {dtype::BF16, dtype::F32}),
                                       10, moe_dense_accepts, moe_dense_launch));
}

}  // namespace cuda
}  // namespace tetra
