// moe_matmul_nvfp4_w4a16_sm80: the grouped W4A16 matmul on experts prepared by
// cuda_backend::prepare_linear (the sm80 packed layout of matmul_nvfp4_w4a16_sm80.cu). Grid (permuted
// rows, 16-row weight tiles): each CTA finds its row's expert by a binary search of expert_offsets
// on the device (no host sync, graph-capturable) and reads that expert's weight through a device
// table of per-expert pointers (uploaded once per experts vector, moe_expert_table_sm80.h). Four
// warps split the tile's 64-k chunks round-robin: e2m1 · e4m3 · 2^-8 decoded exactly to bf16
// (w4a16::a_regs), f32 FMAs against x in k order per lane, a fixed xor-tree over the 4 lanes of a
// row, the warps summed in order through shared memory, × scale_global · 2^8. No atomics; the split
// depends only on k, so every output element's summation order is independent of the batch.
// Correctness-first (CUDA cores, no mma.sync; measured in docs/moe.md): priority 10, below the
// mma.sync kernel (moe_matmul_nvfp4_w4a16_mma_sm80.cu), kept as fallback and cross-check. Also
// registers every CUDA MoE table (register_moe_kernels_cuda).
#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/matmul_launch.h"
#include "backend/cuda/matmul_nvfp4_w4a16_device.cuh"
#include "backend/cuda/moe_expert_table_sm80.h"
#include "backend/moe.h"

namespace tetra {
namespace cuda {

namespace {

constexpr int WARPS = 4;
using namespace w4a16;

__device__ __forceinline__ float lo_f32(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float hi_f32(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }

// The expert of permuted row r: the e with offsets[e] ≤ r < offsets[e + 1] (empty experts skipped);
// -1 when r is past offsets[ne].
__device__ __forceinline__ int expert_of_row(const int32_t* offsets, int ne, int r) {
    if (r >= offsets[ne]) return -1;
    int lo = 0, hi = ne - 1;
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (offsets[mid + 1] > r) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

// x: bf16 [n_rows, k]; out: bf16 [n_rows, n]; offsets: i32 [ne + 1]; table: [ne] packed weights.
// CTA = (row, 16-row weight tile); warp w takes chunks w, w + WARPS, … (a split that depends only
// on k); the four lanes of a row and then the warps are summed in a fixed order.
__global__ void __launch_bounds__(WARPS * 32) moe_w4a16_kernel(const __nv_bfloat16* x, __nv_bfloat16* out,
                                                               const int32_t* offsets, const moe_expert_ptrs* table,
                                                               int ne, int n, int k, int k_chunks, int k_groups) {
    __shared__ float red[WARPS][16];
    const int r = blockIdx.x, tile = blockIdx.y, warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int e = expert_of_row(offsets, ne, r);
    if (e < 0) return;  // uniform over the CTA
    const moe_expert_ptrs ex = table[e];
    const uint4* codes = static_cast<const uint4*>(ex.a) + size_t(tile) * k_chunks * 32 + lane;
    const uint4* scales = static_cast<const uint4*>(ex.b) + size_t(tile) * k_groups * 32 + lane;
    const __nv_bfloat16* xr = x + size_t(r) * k + 16 * t;
    float acc0 = 0.0f, acc1 = 0.0f;  // rows g and g + 8 of the tile, this lane's k
#pragma unroll 2
    for (int c = warp; c < k_chunks; c += WARPS) {
        const int kk = c * CHUNK_K + 16 * t;
        if (kk >= k) continue;  // zero padding of the packed layout
        const uint4 q = ld_stream(codes + size_t(c) * 32);
        const uint4 sc = __ldg(scales + size_t(c / GROUP_CHUNKS) * 32);
        const uint4* xv = reinterpret_cast<const uint4*>(xr + c * CHUNK_K);
        const uint4 x0 = __ldg(xv), x1 = __ldg(xv + 1);
        const uint32_t xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        const int ci = c % GROUP_CHUNKS;
        uint32_t s0, s1;
        scales_to_bf16x2(word_of(sc, ci >> 1) >> (16 * (ci & 1)), s0, s1);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            uint32_t a[4];
            a_regs(q, j, s0, s1, a);  // a0/a2: row g, k 4j+{0,1} / {2,3}; a1/a3: row g+8
            const uint32_t xa = xw[2 * j], xb = xw[2 * j + 1];
            acc0 = fmaf(lo_f32(a[0]), lo_f32(xa), acc0);
            acc0 = fmaf(hi_f32(a[0]), hi_f32(xa), acc0);
            acc0 = fmaf(lo_f32(a[2]), lo_f32(xb), acc0);
            acc0 = fmaf(hi_f32(a[2]), hi_f32(xb), acc0);
            acc1 = fmaf(lo_f32(a[1]), lo_f32(xa), acc1);
            acc1 = fmaf(hi_f32(a[1]), hi_f32(xa), acc1);
            acc1 = fmaf(lo_f32(a[3]), lo_f32(xb), acc1);
            acc1 = fmaf(hi_f32(a[3]), hi_f32(xb), acc1);
        }
    }
    acc0 += __shfl_xor_sync(0xffffffffu, acc0, 1);
    acc1 += __shfl_xor_sync(0xffffffffu, acc1, 1);
    acc0 += __shfl_xor_sync(0xffffffffu, acc0, 2);
    acc1 += __shfl_xor_sync(0xffffffffu, acc1, 2);
    if (t == 0) red[warp][g] = acc0, red[warp][g + 8] = acc1;
    __syncthreads();
    if (threadIdx.x >= 16) return;
    const int row = tile * 16 + threadIdx.x;
    float sum = red[0][threadIdx.x];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) sum += red[w][threadIdx.x];
    if (row < n) out[size_t(r) * n + row] = __float2bfloat16_rn(sum * ex.alpha);
}

void moe_w4a16_launch(backend& be, const moe_matmul_args& a) {
    if (a.n_rows == 0) return;
    cudaStream_t s = stream_of(be);
    const std::vector<linear_weight>& ex = *a.experts;
    const moe_expert_ptrs* table = moe_expert_table(ex, s, [](const linear_weight& w) {
        return moe_expert_ptrs{w.codes.data, w.scales.data, w.scale_global * 256.0f};
    });
    w4a16_sm80_dims d = w4a16_sm80_dims_of(a.n, a.k);
    dim3 grid(unsigned(a.n_rows), unsigned(d.n_tiles));
    moe_w4a16_kernel<<<grid, WARPS * 32, 0, s>>>(a.x.ptr<const __nv_bfloat16>(), a.out.ptr<__nv_bfloat16>(),
                                                 a.expert_offsets.ptr<const int32_t>(), table, int(ex.size()),
                                                 int(a.n), int(a.k), int(d.k_chunks), int(d.k_groups));
    CUDA_CHECK(cudaGetLastError());
}

// The experts must be in the sm80 packed layout: asked of the dense kernel's own accepts() (which
// knows prepared weights by pointer) for the first and last expert (moe_matmul checked that every
// expert has the same kind and shape; prepare_linear re-lays all of a model's NVFP4 weights).
std::string moe_w4a16_accepts(const moe_matmul_args& a) {
    if (a.x.type != dtype::BF16 || a.out.type != dtype::BF16) return "needs bf16 x and out";
    if (a.n_rows > INT32_MAX / 2) return "too many permuted rows for int indexing";
    if (a.n > INT32_MAX / 2 || a.k > INT32_MAX / 2) return "shape too large for int indexing";
    if ((a.n + 15) / 16 > 65535) return "more than 65535 weight tiles (grid.y)";
    return moe_w4a16_experts_why_not(a);
}

}  // namespace

void register_moe_route_sm80(kernel_registry& r);    // moe_route_sm80.cu
void register_moe_permute_sm80(kernel_registry& r);  // moe_permute_sm80.cu
void register_moe_combine_sm80(kernel_registry& r);  // moe_combine_sm80.cu
void register_moe_matmul_dense_sm80(kernel_registry& r);  // moe_matmul_dense_sm80.cu
void register_moe_matmul_nvfp4_w4a16_mma_sm80(kernel_registry& r);  // moe_matmul_nvfp4_w4a16_mma_sm80.cu

void register_moe_kernels_cuda(kernel_registry& r) {
    register_moe_route_sm80(r);
    register_moe_permute_sm80(r);
    kernel_req req = cuda_req(80, {dtype::BF16});
    req.align = 16;
    r.add(make_kernel<moe_matmul_args>("moe_matmul_nvfp4_w4a16", "moe_matmul_nvfp4_w4a16_sm80", req, 10,
                                       moe_w4a16_accepts, moe_w4a16_launch));
    register_moe_matmul_nvfp4_w4a16_mma_sm80(r);  // priority 20: the default; this one is the fallback
    register_moe_matmul_dense_sm80(r);
    register_moe_combine_sm80(r);
}

}  // namespace cuda
}  // namespace tetra
