// matmul_f32_sm80: the matmuls of f32-activation runs (--dtype float32) on CUDA cores. The tensor-core
// kernels take bf16 activations only; these keep x, the accumulation and out in f32 so a CUDA run
// can match an f32 reference (transformers in f32) to the last bit that matters.
//   matmul_nvfp4_w4a16_f32_sm80: NVFP4 weight in the sm80 packed layout (prepare_linear), decoded
//     exactly (e2m1 · e4m3 · 2^-8, w4a16::chunk_weights); CTA = (R x rows, 16-row weight tile), four
//     warps take the 64-k chunks round-robin, one FMA chain per lane in k order, a fixed xor-tree over
//     the 4 lanes of a row, the warps summed in order, × scale_global · 2^8.
//   matmul_dense_f32_sm80: bf16 weight (lm_head, routers, bf16 checkpoints) × f32 x; a warp per output
//     column and R rows, lanes over k (8 consecutive k per lane per step when k % 8 == 0), xor-tree.
// Every output element's summation order depends only on k: a row gives the same bits alone or in a
// batch. Correctness first: each weight tile is read once per R rows (fine for decode and the short
// prefills of tests; bf16 activations are the fast path).
#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/matmul_launch.h"
#include "backend/cuda/matmul_nvfp4_w4a16_device.cuh"
#include "backend/ops.h"

namespace tetra {
namespace cuda {

namespace {

using namespace w4a16;

constexpr int W4_WARPS = 4, W4_ROWS = 4;

// x: f32 [m, k]; out: f32 [m, n]; codes/scales: the packed weight. grid (ceil(m / W4_ROWS), n_tiles).
__global__ void __launch_bounds__(W4_WARPS * 32) w4a16_f32_kernel(const float* x, float* out, const uint4* codes,
                                                                 const uint4* scales, int m, int n, int k,
                                                                 int k_chunks, int k_groups, float alpha) {
    __shared__ float red[W4_WARPS][W4_ROWS][16];
    const int r0 = blockIdx.x * W4_ROWS, tile = blockIdx.y, warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int rows = min(W4_ROWS, m - r0);
    const int64_t n_tiles = (n + 15) / 16;
    scales += size_t(tile) * k_groups * 32 + lane;
    float acc[W4_ROWS][2] = {};
    for (int c = warp; c < k_chunks; c += W4_WARPS) {
        const int kk = c * CHUNK_K + 16 * t;
        if (kk >= k) continue;  // zero padding of the packed layout
        const uint4 q = ld_stream(codes + chunk_index(tile, c, n_tiles) * 32 + lane);
        const uint4 sc = __ldg(scales + size_t(c / GROUP_CHUNKS) * 32);
        uint32_t s0, s1;
        chunk_scales(sc, c % GROUP_CHUNKS, s0, s1);
        float w0[16], w1[16];
        chunk_weights(q, s0, s1, w0, w1);
#pragma unroll
        for (int r = 0; r < W4_ROWS; ++r) {
            if (r >= rows) break;
            float xf[16];
            x16_f32(x + size_t(r0 + r) * k + kk, xf);
            acc[r][0] = dot16(w0, xf, acc[r][0]);
            acc[r][1] = dot16(w1, xf, acc[r][1]);
        }
    }
#pragma unroll
    for (int r = 0; r < W4_ROWS; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            acc[r][h] += __shfl_xor_sync(0xffffffffu, acc[r][h], 1);
            acc[r][h] += __shfl_xor_sync(0xffffffffu, acc[r][h], 2);
        }
    if (t == 0)
#pragma unroll
        for (int r = 0; r < W4_ROWS; ++r) red[warp][r][g] = acc[r][0], red[warp][r][g + 8] = acc[r][1];
    __syncthreads();
    if (threadIdx.x >= W4_ROWS * 16) return;
    const int r = threadIdx.x >> 4, i = threadIdx.x & 15, row = tile * 16 + i;
    if (r >= rows || row >= n) return;
    float sum = red[0][r][i];
#pragma unroll
    for (int w = 1; w < W4_WARPS; ++w) sum += red[w][r][i];
    out[size_t(r0 + r) * n + row] = sum * alpha;
}

constexpr int D_WARPS = 8, D_ROWS = 4;

// x: f32 [m, k]; w: bf16 [n, k]; out: f32 [m, n]. grid (ceil(n / D_WARPS), ceil(m / D_ROWS)).
// VEC: k % 8 == 0 and 16-byte aligned rows; lane l takes k = 8l … 8l + 7, then + 256, …
template <bool VEC>
__global__ void __launch_bounds__(D_WARPS * 32) dense_f32_kernel(const float* x, float* out,
                                                                const __nv_bfloat16* w, int m, int n, int k) {
    const int lane = threadIdx.x & 31, j = blockIdx.x * D_WARPS + (threadIdx.x >> 5), r0 = blockIdx.y * D_ROWS;
    if (j >= n) return;  // whole warps
    const int rows = min(D_ROWS, m - r0);
    const __nv_bfloat16* wr = w + size_t(j) * k;
    float acc[D_ROWS] = {};
    if (VEC) {
        for (int i = 8 * lane; i < k; i += 256) {
            float wf[8];
            bf16x8_to_f32(ld_stream(reinterpret_cast<const uint4*>(wr + i)), wf);
#pragma unroll
            for (int r = 0; r < D_ROWS; ++r) {
                if (r >= rows) break;
                const float4* xv = reinterpret_cast<const float4*>(x + size_t(r0 + r) * k + i);
                const float4 a = __ldg(xv), b = __ldg(xv + 1);
                const float xf[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[r] = fmaf(wf[e], xf[e], acc[r]);
            }
        }
    } else {
        for (int i = lane; i < k; i += 32) {
            const float wf = __bfloat162float(wr[i]);
#pragma unroll
            for (int r = 0; r < D_ROWS; ++r)
                if (r < rows) acc[r] = fmaf(wf, x[size_t(r0 + r) * k + i], acc[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < D_ROWS; ++r) {
        const float v = warp_sum(acc[r]);
        if (lane == 0 && r < rows) out[size_t(r0 + r) * n + j] = v;
    }
}

std::string f32_shape_why_not(const matmul_args& a) {
    if (a.x.type != dtype::F32 || a.out.type != dtype::F32) return "needs f32 x and out";
    if (a.n > INT32_MAX / 2 || a.k > INT32_MAX / 2 || a.m > INT32_MAX / 2) return "shape too large for int indexing";
    return "";
}

std::string accepts_w4a16_f32(const matmul_args& a) {
    std::string why = f32_shape_why_not(a);
    if (!why.empty()) return why;
    if ((a.n + 15) / 16 > 65535) return "more than 65535 weight tiles (grid.y)";
    return w4a16_sm80_weight_why_not(*a.w);
}

void launch_w4a16_f32(backend& be, const matmul_args& a) {
    if (a.m == 0) return;
    w4a16_sm80_dims d = w4a16_sm80_dims_of(a.n, a.k);
    dim3 grid(unsigned((a.m + W4_ROWS - 1) / W4_ROWS), unsigned(d.n_tiles));
    w4a16_f32_kernel<<<grid, W4_WARPS * 32, 0, stream_of(be)>>>(
        a.x.ptr<const float>(), a.out.ptr<float>(), static_cast<const uint4*>(a.w->codes.data),
        static_cast<const uint4*>(a.w->scales.data), int(a.m), int(a.n), int(a.k), int(d.k_chunks), int(d.k_groups),
        a.w->scale_global * 256.0f);
    CUDA_CHECK(cudaGetLastError());
}

std::string accepts_dense_f32(const matmul_args& a) {
    if (a.w->kind != linear_kind::DENSE) return "weight is not dense";
    if (a.w->dense.type != dtype::BF16) return "needs a bf16 weight";
    std::string why = f32_shape_why_not(a);
    if (!why.empty()) return why;
    if ((a.m + D_ROWS - 1) / D_ROWS > 65535) return "more than 65535 row groups (grid.y)";
    return "";
}

void launch_dense_f32(backend& be, const matmul_args& a) {
    if (a.m == 0) return;
    dim3 grid(unsigned((a.n + D_WARPS - 1) / D_WARPS), unsigned((a.m + D_ROWS - 1) / D_ROWS));
    const auto* w = static_cast<const __nv_bfloat16*>(a.w->dense.data);
    const bool vec = a.k % 8 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 && a.x.data &&
                     reinterpret_cast<uintptr_t>(a.x.data) % 16 == 0;
    if (vec)
        dense_f32_kernel<true><<<grid, D_WARPS * 32, 0, stream_of(be)>>>(a.x.ptr<const float>(), a.out.ptr<float>(), w,
                                                                         int(a.m), int(a.n), int(a.k));
    else
        dense_f32_kernel<false><<<grid, D_WARPS * 32, 0, stream_of(be)>>>(a.x.ptr<const float>(), a.out.ptr<float>(),
                                                                          w, int(a.m), int(a.n), int(a.k));
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void register_matmul_f32_sm80(kernel_registry& r) {
    kernel_req w4 = cuda_req(80, {dtype::F32});
    w4.align = 16;
    r.add(make_kernel<matmul_args>("matmul_nvfp4_w4a16", "matmul_nvfp4_w4a16_f32_sm80", w4, 10, accepts_w4a16_f32,
                                   launch_w4a16_f32));
    r.add(make_kernel<matmul_args>("matmul_dense", "matmul_dense_f32_sm80", cuda_req(80, {dtype::F32}), 10,
                                   accepts_dense_f32, launch_dense_f32));
}

}  // namespace cuda
}  // namespace tetra
