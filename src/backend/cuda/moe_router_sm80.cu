// moe_router_sm80: the MoE router in one launch at decode sizes (n_tokens ≤ 16): the bf16 router
// GEMV (one warp per expert row held in registers, f32 sums in a fixed order, the same in any
// batch), logits rounded to the act dtype and written; the last CTA to finish (integer ticket) routes
// every token from them with moe_route_sm80's own code (moe_route_device.cuh). Deterministic. On the
// H100 it measured slower end to end than matmul + moe_route (docs/moe.md): the model leaves it off.
#include <algorithm>

#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/moe_route_device.cuh"
#include "backend/moe.h"

namespace tetra {
namespace cuda {

namespace {

using moe_route_dev::route_token;
using moe_route_dev::route_words;
using moe_route_dev::with_epl;

constexpr int MAX_TOKENS = 16;  // accumulators per lane (one per token)
constexpr int WARPS = 4;        // expert rows per CTA; also the routing warps of the last CTA
constexpr int MAX_EXPERT = 256; // routing with ≤ 8 experts per lane (shared memory ≤ 4 warps · 3.4 KB)

// CTAs of the current launch done with their rows; the last one resets it to 0 for the next launch.
// Launches of this kernel on one device are serialized by the backend's stream (PDL: a dependent
// kernel passes pdl_wait only after this grid completed), so one counter serves every launch. Two
// streams launching it concurrently on one device would share the ticket: not supported.
__device__ unsigned int g_rows_done = 0;

// 8 consecutive activations (one 16-byte chunk of bf16/f16, two of f32), raw until they are used.
template <class T> struct chunk8 { uint4 q[sizeof(T) / 2]; };

template <class T> __device__ __forceinline__ chunk8<T> load_chunk(const T* p) {
    chunk8<T> c;
#pragma unroll
    for (int j = 0; j < int(sizeof(T) / 2); ++j) c.q[j] = reinterpret_cast<const uint4*>(p)[j];
    return c;
}

// acc += Σ_{i < 8} x[i] · w[i], one fused multiply-add at a time in i order (f32).
template <class T> __device__ __forceinline__ float dot8(const chunk8<T>& xc, const uint4& wq, float acc) {
    const T* xv = reinterpret_cast<const T*>(xc.q);
    const __nv_bfloat16* wv = reinterpret_cast<const __nv_bfloat16*>(&wq);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc = __fmaf_rn(to_f32(xv[i]), __bfloat162float(wv[i]), acc);
    return acc;
}

constexpr int CPL = 8;  // weight chunks per lane held in registers: one pass covers 32·CPL·8 = 2048 elements

// x: [n, kd] T; wr: [ne, kd] bf16; logits: [n, ne] T; ids: i32 [n, k]; w: f32 [n, k]. kd % 8 == 0.
// Warp r of CTA b computes expert e = b·WARPS + r. Passes of 2048 elements: lane l holds weight
// chunks c = 256·pass + l + 32·i (i < CPL, 8 elements each) in registers (the first pass loaded
// before waiting on the producer of x), and for every token in turn adds Σ_i dot8(x chunk c, w
// chunk c) to its accumulator (the next token's x chunks are loaded before this token's adds);
// then a xor butterfly combines the lanes. The order depends on nothing but kd: a token's logits
// are the same alone or in any batch.
template <class T, int EPL>
__global__ void __launch_bounds__(WARPS * 32) moe_router_kernel(const T* __restrict__ x, const __nv_bfloat16* wr,
                                                                T* logits, int32_t* __restrict__ ids,
                                                                float* __restrict__ w, int n, int kd, int ne, int k,
                                                                bool renorm, int words) {
    extern __shared__ __align__(16) float smem[];
    __shared__ bool last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int e = blockIdx.x * WARPS + warp, chunks = kd >> 3;
    const __nv_bfloat16* wrow = wr + size_t(min(e, ne - 1)) * size_t(kd);
    uint4 wq[CPL];
#pragma unroll
    for (int i = 0; i < CPL; ++i) {
        const int c = lane + 32 * i;
        wq[i] = c < chunks ? *reinterpret_cast<const uint4*>(wrow + 8 * c) : make_uint4(0, 0, 0, 0);
    }
    pdl_wait();
    pdl_trigger();
    float acc[MAX_TOKENS];
#pragma unroll
    for (int t = 0; t < MAX_TOKENS; ++t) acc[t] = 0.0f;
    for (int c0 = 0; c0 < chunks; c0 += 32 * CPL) {
        if (c0 > 0) {
#pragma unroll
            for (int i = 0; i < CPL; ++i) {
                const int c = c0 + lane + 32 * i;
                wq[i] = c < chunks ? *reinterpret_cast<const uint4*>(wrow + 8 * c) : make_uint4(0, 0, 0, 0);
            }
        }
        chunk8<T> xc[CPL], xn[CPL];
#pragma unroll
        for (int i = 0; i < CPL; ++i) {
            const int c = c0 + lane + 32 * i;
            if (c < chunks) xc[i] = load_chunk(x + 8 * c);
        }
#pragma unroll
        for (int t = 0; t < MAX_TOKENS; ++t) {
            if (t < n) {
#pragma unroll
                for (int i = 0; i < CPL; ++i) {
                    const int c = c0 + lane + 32 * i;
                    if (t + 1 < n && c < chunks) xn[i] = load_chunk(x + size_t(t + 1) * size_t(kd) + 8 * c);
                }
#pragma unroll
                for (int i = 0; i < CPL; ++i)
                    if (c0 + lane + 32 * i < chunks) acc[t] = dot8(xc[i], wq[i], acc[t]);
#pragma unroll
                for (int i = 0; i < CPL; ++i) xc[i] = xn[i];
            }
        }
    }
#pragma unroll
    for (int t = 0; t < MAX_TOKENS; ++t) {
        if (t < n) {
            float s = acc[t];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
            if (lane == 0 && e < ne) logits[size_t(t) * size_t(ne) + size_t(e)] = from_f32<T>(s);
        }
    }
    // Threadfence reduction: publish the rows, take a ticket; the last CTA sees every row.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned ticket = atomicAdd(&g_rows_done, 1u);
        last = ticket == gridDim.x - 1;
        if (last) g_rows_done = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int t = warp; t < n; t += WARPS) {
        const T* row = logits + size_t(t) * size_t(ne);
        route_token<EPL>([row](int i) { return to_f32(__ldcg(row + i)); }, ne, k, renorm,
                         smem + size_t(warp) * size_t(words), ids + size_t(t) * size_t(k), w + size_t(t) * size_t(k));
    }
}

}  // namespace

static void moe_router_launch(backend& be, const moe_router_args& a) {
    if (a.n_tokens == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        with_epl(a.n_expert, [&](auto epl) {
            constexpr int EPL = decltype(epl)::value;
            if constexpr (EPL <= 8) {
                const int words = route_words(int(a.n_expert), int(a.k), EPL);
                const size_t smem = size_t(WARPS) * size_t(words) * sizeof(float);
                launch_pdl(be, moe_router_kernel<T, EPL>, dim3(unsigned((a.n_expert + WARPS - 1) / WARPS)),
                           dim3(WARPS * 32), smem, a.x.ptr<const T>(), a.router->dense.ptr<const __nv_bfloat16>(),
                           a.logits.ptr<T>(), a.topk_ids.ptr<int32_t>(), a.topk_weights.ptr<float>(),
                           int(a.n_tokens), int(a.n_embd), int(a.n_expert), int(a.k), a.norm_topk_prob, words);
            }
        });
    });
}

// Decode sizes only (the GEMV keeps one accumulator per token in registers); larger batches use
// matmul + moe_route, whose GEMM reads the weight once for many rows.
static std::string moe_router_accepts(const moe_router_args& a) {
    if (a.n_tokens > MAX_TOKENS) return "n_tokens = " + std::to_string(a.n_tokens) + " > 16 (decode sizes only)";
    if (a.n_expert > MAX_EXPERT) return "n_expert = " + std::to_string(a.n_expert) + " > 256";
    if (a.k > 32) return "k = " + std::to_string(a.k) + " > 32 experts per token";
    if (a.n_embd % 8 != 0) return "n_embd = " + std::to_string(a.n_embd) + " is not a multiple of 8";
    if (a.router->dense.type != dtype::BF16) return "needs a bf16 router weight";
    return "";
}

void register_moe_router_sm80(kernel_registry& r) {
    kernel_req req = cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16});
    req.align = 16;
    r.add(make_kernel<moe_router_args>("moe_router", "moe_router_sm80", req, 10, moe_router_accepts, moe_router_launch));
}

}  // namespace cuda
}  // namespace tetra
