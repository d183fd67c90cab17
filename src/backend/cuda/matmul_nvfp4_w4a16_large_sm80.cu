// matmul_nvfp4_w4a16_large_sm80: the W4A16 NVFP4 path for M > 64 (prefill). The weight is
// dequantized to bf16 (e2m1 · e4m3 · 2^-8, exact; scale_global · 2^8 goes into the GEMM's alpha)
// and multiplied by cuBLASLt: in one pass where the bf16 copy fits the workspace, else in passes
// through two ping-pong buffers with the next pass's dequant on a side stream. The dequant runs at
// ~83–86 % of the read bandwidth on an H100; measurements and what was tried: docs/perf.md.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/matmul_launch.h"
#include "backend/cuda/matmul_nvfp4_w4a16_device.cuh"

namespace tetra {
namespace cuda {

namespace {

constexpr int WARPS = 8, THREADS = WARPS * 32;
using namespace w4a16;

__device__ __forceinline__ uint32_t ld_stream_u32(const uint32_t* p) {
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ uint4 shfl_xor4(const uint4& v, int mask) {
    return make_uint4(__shfl_xor_sync(0xffffffffu, v.x, mask), __shfl_xor_sync(0xffffffffu, v.y, mask),
                      __shfl_xor_sync(0xffffffffu, v.z, mask), __shfl_xor_sync(0xffffffffu, v.w, mask));
}

// Weight rows [n0, n0 + rows) dequantized to bf16 (value · 2^-8): one warp per (16-row tile,
// 64-k chunk): the lane's 16 B of codes and the one 32-bit word of its group's scales that holds
// this chunk's two (rows g, g+8), then k = 16t … 16t+15 of rows g and g+8 (two 16-B halves
// each). Lanes of rows g and g^1 swap their second halves, so each of the four stores writes four
// whole 128-B rows: half-row stores (eight rows per store) measured 63–67 % of the read
// bandwidth, whole rows 83–92 % (H100, docs/perf.md).
__global__ void __launch_bounds__(THREADS) w4a16_dequant_kernel(const uint4* codes, const uint4* scales, int n, int k,
                                                                 int k_chunks, int k_groups, int tile0, int n0,
                                                                 int rows, __nv_bfloat16* dst) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t item = int64_t(blockIdx.x) * WARPS + (threadIdx.x >> 5);
    const int n_tiles_here = (n0 + rows + 15) / 16 - tile0;
    if (item >= int64_t(n_tiles_here) * k_chunks) return;  // the whole warp
    const int tile = tile0 + int(item / k_chunks), chunk = int(item % k_chunks), ci = chunk % GROUP_CHUNKS;
    const uint4 c = ld_stream(codes + chunk_index(tile, chunk, (n + 15) / 16) * 32 + lane);
    const uint4* sp = scales + (size_t(tile) * k_groups + chunk / GROUP_CHUNKS) * 32 + lane;
    uint32_t s0, s1;
    scales_to_bf16x2(ld_stream_u32(reinterpret_cast<const uint32_t*>(sp) + (ci >> 1)) >> (16 * (ci & 1)), s0, s1);
    uint32_t r0[8], r1[8];  // rows g and g+8: k = 16t + 0..15 of the chunk, in order
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        uint32_t a[4];
        a_regs(c, j, s0, s1, a);
        r0[2 * j] = a[0], r1[2 * j] = a[1], r0[2 * j + 1] = a[2], r1[2 * j + 1] = a[3];
    }
    const uint4 first[2] = {make_uint4(r0[0], r0[1], r0[2], r0[3]), make_uint4(r1[0], r1[1], r1[2], r1[3])};
    const uint4 second[2] = {make_uint4(r0[4], r0[5], r0[6], r0[7]), make_uint4(r1[4], r1[5], r1[6], r1[7])};
    // The partner (g ^ 1, same t) has the same k: both store or both return, after the exchange.
    const uint4 theirs[2] = {shfl_xor4(second[0], 4), shfl_xor4(second[1], 4)};
    const int kk = chunk * CHUNK_K + 16 * t;
    if (kk >= k) return;  // k is a multiple of 16: the lane's 16 values are all in or all out
    const int end = min(n0 + rows, n);
    const bool odd = g & 1;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int q = 0; q < 2; ++q) {  // the pair's even row (q = 0: the even lane's own first half,
                                       // the odd lane its second), then its odd row
            const int row = tile * 16 + ((g & ~1) | q) + 8 * h;
            const bool own = odd == bool(q);
            if (row >= n0 && row < end)
                *reinterpret_cast<uint4*>(dst + size_t(row - n0) * k + kk + (own ? 0 : 8)) = own ? first[h] : theirs[h];
        }
}

// The large-M path's dequant passes: the whole weight in one pass where its bf16 copy fits the
// workspace (one GEMM over every row), else equal passes of a multiple of 256 rows in two
// ping-pong halves (the next pass's dequant may start while the current GEMM runs). rows = 0:
// the workspace is too small.
struct dequant_passes {
    int64_t rows = 0;
    size_t buffer_bytes = 0;  // the second buffer starts here
};

dequant_passes plan_dequant_passes(const w4a16_sm80_workspace& ws, int64_t n, int64_t k) {
    dequant_passes p;
    if (size_t(n) * size_t(k) * 2 <= ws.dequant_bytes) {
        p.rows = n, p.buffer_bytes = 0;
        return p;
    }
    p.buffer_bytes = ws.dequant_bytes / 2 / 256 * 256;
    const int64_t fit = int64_t(p.buffer_bytes / (size_t(k) * 2)) / 256 * 256;
    if (fit == 0) return p;
    const int64_t passes = (n + fit - 1) / fit;
    p.rows = ((n + passes - 1) / passes + 255) / 256 * 256;  // ≤ fit: fit is a multiple of 256
    return p;
}

// A second stream per device for the large-M path: the weight of pass i+1 is dequantized there
// while the GEMM of pass i runs on the caller's stream (fork/join through events, so the sequence
// can be captured in a CUDA graph). One caller stream at a time per device.
struct side_stream {
    cudaStream_t s = nullptr;
    cudaEvent_t fork = nullptr, deq_done[2] = {}, gemm_done[2] = {};
};

side_stream& side_for_device() {
    static std::mutex mu;
    static std::map<int, side_stream>* by_dev = new std::map<int, side_stream>();
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(mu);
    side_stream& ss = (*by_dev)[dev];
    if (!ss.s) {
        CUDA_CHECK(cudaStreamCreateWithFlags(&ss.s, cudaStreamNonBlocking));
        for (cudaEvent_t* e : {&ss.fork, &ss.deq_done[0], &ss.deq_done[1], &ss.gemm_done[0], &ss.gemm_done[1]})
            CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    }
    return ss;
}

}  // namespace

void w4a16_sm80_dequant_launch(const w4a16_sm80_weight& w, int64_t n0, int64_t rows, void* dst, cudaStream_t s) {
    w4a16_sm80_dims d = w4a16_sm80_dims_of(w.n, w.k);
    TETRA_CHECK(n0 >= 0 && rows > 0 && n0 + rows <= w.n && n0 % 16 == 0,
                "w4a16_sm80_dequant: rows [%lld, %lld) of %lld (start must be a multiple of 16)", (long long)n0,
                (long long)(n0 + rows), (long long)w.n);
    int64_t tile0 = n0 / 16, tiles = (n0 + rows + 15) / 16 - tile0, items = tiles * d.k_chunks;
    w4a16_dequant_kernel<<<unsigned((items + WARPS - 1) / WARPS), THREADS, 0, s>>>(
        static_cast<const uint4*>(w.codes), static_cast<const uint4*>(w.scales), int(w.n), int(w.k), int(d.k_chunks),
        int(d.k_groups), int(tile0), int(n0), int(rows), static_cast<__nv_bfloat16*>(dst));
    CUDA_CHECK(cudaGetLastError());
}

void matmul_nvfp4_w4a16_sm80_large_launch(const void* x, int64_t m, const w4a16_sm80_weight& w, void* out,
                                          const w4a16_sm80_workspace& ws, cudaStream_t s) {
    const dequant_passes dp = plan_dequant_passes(ws, w.n, w.k);
    const int64_t rows = dp.rows;
    TETRA_CHECK(rows > 0 && ws.dequant && ws.cublas,
                "matmul_nvfp4_w4a16_sm80: large-M path needs a dequant workspace of ≥ 2 × 256 rows × %lld bf16 or "
                "the whole weight, and a cuBLASLt workspace (size it with w4a16_sm80_workspace_need)",
                (long long)w.k);
    const float alpha = w.scale_global * 256.0f;
    if (rows >= w.n) {  // one pass: nothing to overlap, so no side stream
        w4a16_sm80_dequant_launch(w, 0, w.n, ws.dequant, s);
        gemm_bf16_tn_launch(x, ws.dequant, out, m, w.n, w.k, w.n, alpha, ws.cublas, ws.cublas_bytes, s);
        return;
    }
    side_stream& ss = side_for_device();
    CUDA_CHECK(cudaEventRecord(ss.fork, s));
    CUDA_CHECK(cudaStreamWaitEvent(ss.s, ss.fork, 0));
    int pass = 0;
    for (int64_t n0 = 0; n0 < w.n; n0 += rows, ++pass) {
        int64_t r = std::min(rows, w.n - n0);
        int b = pass & 1;
        void* buf = static_cast<char*>(ws.dequant) + size_t(b) * dp.buffer_bytes;
        if (pass >= 2) CUDA_CHECK(cudaStreamWaitEvent(ss.s, ss.gemm_done[b], 0));  // buffer free again
        w4a16_sm80_dequant_launch(w, n0, r, buf, ss.s);
        CUDA_CHECK(cudaEventRecord(ss.deq_done[b], ss.s));
        CUDA_CHECK(cudaStreamWaitEvent(s, ss.deq_done[b], 0));
        gemm_bf16_tn_launch(x, buf, static_cast<__nv_bfloat16*>(out) + n0, m, r, w.k, w.n, alpha, ws.cublas,
                            ws.cublas_bytes, s);
        CUDA_CHECK(cudaEventRecord(ss.gemm_done[b], s));
    }
}

}  // namespace cuda
}  // namespace tetra
