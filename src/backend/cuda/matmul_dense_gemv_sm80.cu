// matmul_dense_bf16_gemv_sm80: out[m, n] = x[m, k] · wᵀ on CUDA cores (f32 sums) for router-sized
// bf16 weights, and for vocabulary projections (lm_head) at m ≤ 2, where its many one-warp CTAs read
// the weight at its bandwidth floor against cuBLASLt's ~90 % (docs/perf.md, session 17). Takes part
// in PDL, unlike cuBLASLt: a CTA copies its weight tile (C rows of w) to shared memory before
// pdl_wait() and triggers right after, so the weight streams while the previous kernel ends and the
// next (moe_route) launches early. Order depends on k alone: lane l chains k = 256·s + 8·l + e with
// fmaf from +0, then a 32-lane xor-tree, so a row's bits do not depend on m, the other rows or the
// launch geometry (columns and rows per CTA, rows per warp: chosen by m and the shape) — among the
// calls this kernel takes (a vocabulary projection at m > 2 goes to cuBLASLt).
#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/matmul_launch.h"
#include "backend/ops.h"

namespace tetra {
namespace cuda {

namespace {

constexpr int MAX_WARPS = 4;                 // warps per CTA
constexpr int64_t TILE_BYTES_MAX = 48 << 10; // C·k·2 bytes of shared memory (no opt-in needed)
// Eligibility: router-sized weights by their shape alone (the same kernel at every batch size of
// such a weight), and vocabulary projections at decode (n ≥ 16384, at most 2 logit rows: at 4 and 8
// rows cuBLASLt was faster; docs/perf.md, session 17).
constexpr int64_t GEMV_N_MAX = 512, GEMV_K_MAX = 16384, GEMV_NK_MAX = int64_t(1) << 22;
constexpr int64_t GEMV_VOCAB_N_MIN = 16384, GEMV_VOCAB_M_MAX = 2;

// x: bf16 [m, k]; w: bf16 [n, k]; out: bf16 [m, n]; k % 8 == 0, 16-byte aligned x and w. grid
// (ceil(n / C), row blocks, grid-strided); blockDim = 32 · warps. Dynamic shared memory C·k·2 bytes:
// rows [C·blockIdx.x, +C) of w (zeros past n). Warp w takes row groups of R rows; per row group and
// 256-k segment a lane reads 16 B of each of the R x rows and of each of the C tile rows.
template <int R, int C>
__global__ void __launch_bounds__(MAX_WARPS * 32, 1) dense_gemv_kernel(const __nv_bfloat16* __restrict__ x,
                                                                   const __nv_bfloat16* __restrict__ w,
                                                                   __nv_bfloat16* __restrict__ out, int m, int n,
                                                                   int k, int rows_per_cta) {
    extern __shared__ uint4 tile[];  // [C][k / 8]
    const int kv = k >> 3, col0 = blockIdx.x * C, cols = min(C, n - col0);
    const uint4* src = reinterpret_cast<const uint4*>(w) + size_t(col0) * size_t(kv);
    // The weight tile (L2 evict_first: read once per step): independent of the previous kernel, so
    // before pdl_wait().
    for (int i = threadIdx.x; i < C * kv; i += blockDim.x) {
        if (i < cols * kv) cp_async16_weight(tile + i, src + i);
        else tile[i] = make_uint4(0, 0, 0, 0);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    pdl_wait();
    pdl_trigger();
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = int(blockDim.x >> 5);
    const int segs = k >> 8, tail = k & 255;  // full 256-k segments; the tail (a multiple of 8) after
    const int row_blocks = (m + rows_per_cta - 1) / rows_per_cta;
    for (int rb = blockIdx.y; rb < row_blocks; rb += gridDim.y) {
        const int rb_end = min(m, (rb + 1) * rows_per_cta);
        for (int r0 = rb * rows_per_cta + warp * R; r0 < rb_end; r0 += n_warps * R) {
            const int rows = min(R, m - r0);
            const uint4* xr[R];
#pragma unroll
            for (int i = 0; i < R; ++i) xr[i] = reinterpret_cast<const uint4*>(x + size_t(r0 + min(i, rows - 1)) * size_t(k));
            float acc[R][C];
#pragma unroll
            for (int i = 0; i < R; ++i)
#pragma unroll
                for (int c = 0; c < C; ++c) acc[i][c] = 0.0f;
            // 8 k of every row and column (v = 16-byte index in a row): loads, then the FMAs in k order.
            auto load = [&](int v, uint4 (&xq)[R], uint4 (&wq)[C]) {
#pragma unroll
                for (int i = 0; i < R; ++i) xq[i] = __ldg(xr[i] + v);
#pragma unroll
                for (int c = 0; c < C; ++c) wq[c] = tile[c * kv + v];
            };
            auto fma8 = [&](const uint4 (&xq)[R], const uint4 (&wq)[C]) {
                float xf[R][8];
#pragma unroll
                for (int i = 0; i < R; ++i) bf16x8_to_f32(xq[i], xf[i]);
#pragma unroll
                for (int c = 0; c < C; ++c) {
                    float wf[8];
                    bf16x8_to_f32(wq[c], wf);
#pragma unroll
                    for (int i = 0; i < R; ++i)
#pragma unroll
                        for (int e = 0; e < 8; ++e) acc[i][c] = fmaf(wf[e], xf[i][e], acc[i][c]);
                }
            };
            // G segments' loads in flight at once (the loop is latency-bound below a few hundred
            // rows), as many as (R + C)·G 16-byte registers allow.
            constexpr int G = R == 1 ? (C == 1 ? 8 : C == 2 ? 4 : 2) : (C == 1 ? 4 : C <= 4 ? 2 : 1);
            int s = 0;
#pragma unroll 1
            for (; s + G <= segs; s += G) {
                uint4 xq[G][R], wq[G][C];
#pragma unroll
                for (int g = 0; g < G; ++g) load((s + g) * 32 + lane, xq[g], wq[g]);
#pragma unroll
                for (int g = 0; g < G; ++g) fma8(xq[g], wq[g]);
            }
            for (; s < segs; ++s) {
                uint4 xq[R], wq[C];
                load(s * 32 + lane, xq, wq);
                fma8(xq, wq);
            }
            if (lane * 8 < tail) {
                uint4 xq[R], wq[C];
                load(segs * 32 + lane, xq, wq);
                fma8(xq, wq);
            }
#pragma unroll
            for (int i = 0; i < R; ++i)
#pragma unroll
                for (int c = 0; c < C; ++c) {
                    const float v = warp_sum(acc[i][c]);
                    if (lane == (i * C + c) % 32 && i < rows && c < cols)
                        out[size_t(r0 + i) * size_t(n) + size_t(col0 + c)] = __float2bfloat16_rn(v);
                }
        }
    }
}

// Launch geometry (never the arithmetic). R = 4 rows per warp from m = 4 (else 1); up to 4 warps of
// one row group each per CTA (many short warps: the loop is latency-bound up to a few hundred
// rows); C = columns per CTA, doubled while the tile fits and the grid still fills twice the SMs
// (x is re-read by fewer CTAs); with a grid over 32 CTAs per SM, each warp takes 4 row groups so a
// tile serves 4x the rows.
struct gemv_geometry {
    int r = 1, c = 1, warps = 1, rows_per_cta = 1;
    int64_t row_blocks = 1;
};

gemv_geometry geometry_of(int64_t m, int64_t n, int64_t k, int sm_count) {
    gemv_geometry g;
    g.r = m >= 4 ? 4 : 1;
    g.warps = int(std::min<int64_t>(MAX_WARPS, (m + g.r - 1) / g.r));
    g.rows_per_cta = g.warps * g.r;
    g.row_blocks = (m + g.rows_per_cta - 1) / g.rows_per_cta;
    while (g.c < 8 && 2 * g.c * k * 2 <= TILE_BYTES_MAX &&
           (n + 2 * g.c - 1) / (2 * g.c) * g.row_blocks >= 2 * int64_t(sm_count))
        g.c *= 2;
    if ((n + g.c - 1) / g.c * g.row_blocks >= 32 * int64_t(sm_count)) {
        g.rows_per_cta *= 4;
        g.row_blocks = (m + g.rows_per_cta - 1) / g.rows_per_cta;
    }
    return g;
}

template <int R, int C>
void launch_c(backend& be, const matmul_args& a, const gemv_geometry& g) {
    dim3 grid(unsigned((a.n + C - 1) / C), unsigned(std::min<int64_t>(g.row_blocks, 65535)));
    launch_pdl(be, dense_gemv_kernel<R, C>, grid, dim3(unsigned(32 * g.warps)), size_t(C) * size_t(a.k) * 2,
               static_cast<const __nv_bfloat16*>(a.x.data), static_cast<const __nv_bfloat16*>(a.w->dense.data),
               static_cast<__nv_bfloat16*>(a.out.data), int(a.m), int(a.n), int(a.k), g.rows_per_cta);
}

template <int R>
void launch_r(backend& be, const matmul_args& a, const gemv_geometry& g) {
    switch (g.c) {
        case 1: launch_c<R, 1>(be, a, g); break;
        case 2: launch_c<R, 2>(be, a, g); break;
        case 4: launch_c<R, 4>(be, a, g); break;
        default: launch_c<R, 8>(be, a, g); break;
    }
}

void launch_dense_gemv(backend& be, const matmul_args& a) {
    if (a.m == 0) return;
    const gemv_geometry g = geometry_of(a.m, a.n, a.k, be.device().sm_count);
    if (g.r == 4) launch_r<4>(be, a, g);
    else launch_r<1>(be, a, g);
}

std::string accepts_dense_gemv(const matmul_args& a) {
    if (a.w->kind != linear_kind::DENSE) return "weight is not dense";
    if (a.w->dense.type != dtype::BF16) return "needs a bf16 weight";
    if (a.x.type != dtype::BF16 || a.out.type != dtype::BF16) return "needs bf16 x and out";
    const bool vocab = a.n >= GEMV_VOCAB_N_MIN && a.k <= GEMV_K_MAX && a.m <= GEMV_VOCAB_M_MAX;
    if (!vocab && (a.n > GEMV_N_MAX || a.k > GEMV_K_MAX || a.n * a.k > GEMV_NK_MAX))
        return strfmt("weight [%lld, %lld] at m = %lld is not router-sized (n <= %lld, k <= %lld, n*k <= %lld) nor a "
                      "vocabulary projection at decode (n >= %lld, m <= %lld); cuBLASLt takes it",
                      (long long)a.n, (long long)a.k, (long long)a.m, (long long)GEMV_N_MAX, (long long)GEMV_K_MAX,
                      (long long)GEMV_NK_MAX, (long long)GEMV_VOCAB_N_MIN, (long long)GEMV_VOCAB_M_MAX);
    if (a.k % 8 != 0) return strfmt("k = %lld is not a multiple of 8 (16-byte weight rows)", (long long)a.k);
    return "";
}

}  // namespace

// Priority 20, above cuBLASLt (10): for the shapes it accepts (chosen by the weight's shape alone).
void register_matmul_dense_bf16_gemv_sm80(kernel_registry& r) {
    kernel_req req = cuda_req(80, {dtype::BF16});
    req.align = 16;
    req.smem = TILE_BYTES_MAX;
    r.add(make_kernel<matmul_args>("matmul_dense", "matmul_dense_bf16_gemv_sm80", req, 20, accepts_dense_gemv,
                                   launch_dense_gemv));
}

}  // namespace cuda
}  // namespace tetra
