// moe_matmul_nvfp4_w4a16_sm80: the grouped W4A16 matmul on experts prepared by
// cuda_backend::prepare_linear (the sm80 packed layout of matmul_nvfp4_w4a16_sm80.cu). Grid (permuted
// rows, 16-row weight tiles): each CTA finds its row's expert by a binary search of expert_offsets
// on the device (no host sync, graph-capturable) and reads that expert's weight through a device
// table of per-expert pointers (uploaded once per experts vector, moe_expert_table_sm80.h). Four
// warps split the tile's 64-k chunks round-robin: e2m1 · e4m3 · 2^-8 decoded exactly
// (w4a16::chunk_weights), f32 FMAs against x in k order per lane, a fixed xor-tree over the 4 lanes
// of a row, the warps summed in order through shared memory, × scale_global · 2^8. No atomics; the
// split depends only on k, so every output element's summation order is independent of the batch.
// bf16 or f32 activations. Correctness-first (CUDA cores, no mma.sync; measured in docs/moe.md):
// priority 10, below the bf16-only mma.sync kernel (moe_matmul_nvfp4_w4a16_mma_sm80.cu), kept as
// fallback and cross-check, and the kernel of f32-activation runs (--dtype float32). Also registers
// every CUDA MoE table (register_moe_kernels_cuda).
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

// x: T [n_rows, k]; out: T [n_rows, n] (T: bf16 or f32); offsets: i32 [ne + 1]; table: [ne] packed
// weights. CTA = (row, 16-row weight tile); warp w takes chunks w, w + WARPS, … (a split that depends
// only on k); the four lanes of a row and then the warps are summed in a fixed order.
template <class T>
__global__ void __launch_bounds__(WARPS * 32) moe_w4a16_kernel(const T* x, T* out, const int32_t* offsets,
                                                               const moe_expert_ptrs* table, int ne, int n, int k,
                                                               int k_chunks, int k_groups) {
    __shared__ float red[WARPS][16];
    const int r = blockIdx.x, tile = blockIdx.y, warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int e = expert_of_row(offsets, ne, r);
    if (e < 0) return;  // uniform over the CTA
    const moe_expert_ptrs ex = table[e];
    const uint4* codes = static_cast<const uint4*>(ex.a) + lane;
    const int n_tiles = (n + 15) / 16;
    const uint4* scales = static_cast<const uint4*>(ex.b) + size_t(tile) * k_groups * 32 + lane;
    const T* xr = x + size_t(r) * k + 16 * t;
    float acc0 = 0.0f, acc1 = 0.0f;  // rows g and g + 8 of the tile, this lane's k
#pragma unroll 2
    for (int c = warp; c < k_chunks; c += WARPS) {
        if (c * CHUNK_K + 16 * t >= k) continue;  // zero padding of the packed layout
        const uint4 q = ld_stream(codes + chunk_index(tile, c, n_tiles) * 32);
        const uint4 sc = __ldg(scales + size_t(c / GROUP_CHUNKS) * 32);
        uint32_t s0, s1;
        chunk_scales(sc, c % GROUP_CHUNKS, s0, s1);
        float w0[16], w1[16], xf[16];
        chunk_weights(q, s0, s1, w0, w1);
        x16_f32(xr + c * CHUNK_K, xf);
        acc0 = dot16(w0, xf, acc0);
        acc1 = dot16(w1, xf, acc1);
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
    if (row < n) out[size_t(r) * n + row] = from_f32<T>(sum * ex.alpha);
}

void moe_w4a16_launch(backend& be, const moe_matmul_args& a) {
    if (a.n_rows == 0) return;
    cudaStream_t s = stream_of(be);
    const std::vector<linear_weight>& ex = *a.experts;
    const moe_expert_ptrs* table = moe_expert_table(ex, s, moe_w4a16_ptrs);
    w4a16_sm80_dims d = w4a16_sm80_dims_of(a.n, a.k);
    dim3 grid(unsigned(a.n_rows), unsigned(d.n_tiles));
    const int32_t* offsets = a.expert_offsets.ptr<const int32_t>();
    if (a.x.type == dtype::F32)
        moe_w4a16_kernel<float><<<grid, WARPS * 32, 0, s>>>(a.x.ptr<const float>(), a.out.ptr<float>(), offsets, table,
                                                            int(ex.size()), int(a.n), int(a.k), int(d.k_chunks),
                                                            int(d.k_groups));
    else
        moe_w4a16_kernel<__nv_bfloat16><<<grid, WARPS * 32, 0, s>>>(
            a.x.ptr<const __nv_bfloat16>(), a.out.ptr<__nv_bfloat16>(), offsets, table, int(ex.size()), int(a.n),
            int(a.k), int(d.k_chunks), int(d.k_groups));
    CUDA_CHECK(cudaGetLastError());
}

// The experts must be in the sm80 packed layout: asked of the dense kernel's own accepts() (which
// knows prepared weights by pointer) for the first and last expert (moe_matmul checked that every
// expert has the same kind and shape; prepare_linear re-lays all of a model's NVFP4 weights).
std::string moe_w4a16_accepts(const moe_matmul_args& a) {
    if (a.x.type != a.out.type || (a.x.type != dtype::BF16 && a.x.type != dtype::F32))
        return "needs bf16 or f32 x and out of one dtype";
    if (a.n_rows > INT32_MAX / 2) return "too many permuted rows for int indexing";
    if (a.n > INT32_MAX / 2 || a.k > INT32_MAX / 2) return "shape too large for int indexing";
    if ((a.n + 15) / 16 > 65535) return "more than 65535 weight tiles (grid.y)";
    return moe_w4a16_experts_why_not(a);
}

}  // namespace

void register_moe_route_sm80(kernel_registry& r);    // moe_route_sm80.cu
void register_moe_permute_sm80(kernel_registry& r);  // moe_permute_sm80.cu
void register_moe_route_front_sm90(kernel_registry& r);  // moe_route_front_sm90.cu
void register_moe_combine_sm80(kernel_registry& r);  // moe_combine_sm80.cu
void register_moe_matmul_dense_sm80(kernel_registry& r);  // moe_matmul_dense_sm80.cu
void register_moe_matmul_nvfp4_w4a16_mma_sm80(kernel_registry& r);  // moe_matmul_nvfp4_w4a16_mma_sm80.cu
void register_moe_matmul_nvfp4_w4a16_wgmma_sm90(kernel_registry& r);  // moe_matmul_nvfp4_w4a16_wgmma_glue.cpp

void register_moe_kernels_cuda(kernel_registry& r) {
    register_moe_route_sm80(r);
    register_moe_permute_sm80(r);
    register_moe_route_front_sm90(r);  // moe_route_permute with a front, decode batches on sm_90+
    kernel_req req = cuda_req(80, {dtype::BF16, dtype::F32});
    req.align = 16;
    r.add(make_kernel<moe_matmul_args>("moe_matmul_nvfp4_w4a16", "moe_matmul_nvfp4_w4a16_sm80", req, 10,
                                       moe_w4a16_accepts, moe_w4a16_launch));
    register_moe_matmul_nvfp4_w4a16_mma_sm80(r);  // priority 20: the default; this one is the fallback
    register_moe_matmul_nvfp4_w4a16_wgmma_sm90(r);  // priority 25: long batches on sm_90a
    register_moe_matmul_dense_sm80(r);
    register_moe_combine_sm80(r);
}

}  // namespace cuda
}  // namespace tetra
