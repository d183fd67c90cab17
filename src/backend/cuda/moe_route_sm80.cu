// moe_route_sm80: the router on the GPU, one warp per token, mirroring moe_route_cpu's f32 operation
// order: max (order-free; NaN iff logit 0 is NaN, as the CPU's running max), exp(l - max) rounded
// from a double exp (≈ the CPU's glibc expf, which is correctly rounded all but ~2^-20 of the time),
// Σ sequential in expert order (lane 0), one IEEE division per expert, k rounds of a warp argmax
// (non-NaN first, larger p, then lower index: the CPU's strict-> scan), renormalization Σ in slot order.
#include "backend/cuda/cuda_device.cuh"
#include "backend/moe.h"

namespace tetra {
namespace cuda {

namespace {

constexpr int WARPS = 4;

// The CPU scan's preference: a beats b if a is a number and b is NaN, or both are numbers and
// a > b, or (equal or both NaN) and a has the lower index. Taken / absent entries have idx < 0.
__device__ __forceinline__ bool better(float pa, int ia, float pb, int ib) {
    if (ib < 0) return ia >= 0;
    if (ia < 0) return false;
    bool na = isnan(pa), nb = isnan(pb);
    if (na != nb) return nb;
    if (!na && pa != pb) return pa > pb;
    return ia < ib;
}

// logits: [n_tokens, ne] T; ids: i32 [n_tokens, k]; w: f32 [n_tokens, k]. Dynamic smem: WARPS·ne f32.
template <class T>
__global__ void __launch_bounds__(WARPS * 32) moe_route_kernel(const T* logits, int32_t* ids, float* w, int n_tokens,
                                                               int ne, int k, bool renorm) {
    extern __shared__ float smem[];
    pdl_wait();
    pdl_trigger();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int t = blockIdx.x * WARPS + warp;
    if (t >= n_tokens) return;
    float* p = smem + size_t(warp) * ne;
    const T* row = logits + size_t(t) * ne;
    float mx = -INFINITY;
    for (int e = lane; e < ne; e += 32) {
        p[e] = to_f32(row[e]);
        mx = fmaxf(mx, p[e]);
    }
    mx = warp_max(mx);
    __syncwarp();
    if (isnan(p[0])) mx = p[0];  // the CPU's running max starts at p[0] and never leaves a NaN
    for (int e = lane; e < ne; e += 32) p[e] = float(exp(double(__fsub_rn(p[e], mx))));
    __syncwarp();
    float sum = 0.0f;
    if (lane == 0) {
#pragma unroll 8
        for (int e = 0; e < ne; ++e) sum = __fadd_rn(sum, p[e]);
    }
    sum = __shfl_sync(0xffffffffu, sum, 0);
    for (int e = lane; e < ne; e += 32) p[e] = __fdiv_rn(p[e], sum);
    __syncwarp();
    float sel = 0.0f, wsum = 0.0f;  // lane s < k keeps slot s's weight
    uint64_t taken = 0;             // bit j: this lane's entry lane + 32·j was picked (ne ≤ 2048)
    for (int s = 0; s < k; ++s) {
        float bp = 0.0f;
        int bi = -1;
        for (int e = lane, j = 0; e < ne; e += 32, ++j)
            if (!((taken >> j) & 1) && better(p[e], e, bp, bi)) bp = p[e], bi = e;
        for (int o = 16; o > 0; o >>= 1) {
            float op = __shfl_xor_sync(0xffffffffu, bp, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (better(op, oi, bp, bi)) bp = op, bi = oi;
        }
        if (lane == 0) ids[size_t(t) * k + s] = bi;
        if (lane == s) sel = bp;
        if (lane == (bi & 31)) taken |= uint64_t(1) << (bi >> 5);
        if (lane == 0) wsum = __fadd_rn(wsum, bp);
    }
    if (renorm) {
        wsum = __shfl_sync(0xffffffffu, wsum, 0);
        sel = __fdiv_rn(sel, wsum);
    }
    if (lane < k) w[size_t(t) * k + lane] = sel;
}

}  // namespace

static void moe_route_launch(backend& be, const moe_route_args& a) {
    if (a.n_tokens == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        size_t smem = size_t(WARPS) * size_t(a.n_expert) * sizeof(float);
        launch_pdl(be, moe_route_kernel<T>, dim3(unsigned((a.n_tokens + WARPS - 1) / WARPS)), dim3(WARPS * 32), smem,
                   a.logits.ptr<const T>(), a.topk_ids.ptr<int32_t>(), a.topk_weights.ptr<float>(), int(a.n_tokens),
                   int(a.n_expert), int(a.k), a.norm_topk_prob);
    });
}

// k ≤ 32 (one slot per lane), n_expert ≤ 2048 (WARPS·n_expert f32 of shared memory).
static std::string moe_route_accepts(const moe_route_args& a) {
    if (a.k > 32) return "k = " + std::to_string(a.k) + " > 32 experts per token";
    if (a.n_expert > 2048) return "n_expert = " + std::to_string(a.n_expert) + " > 2048";
    if (a.n_tokens > INT32_MAX / 2) return "too many tokens for int indexing";
    return "";
}

void register_moe_route_sm80(kernel_registry& r) {
    r.add(make_kernel<moe_route_args>("moe_route", "moe_route_sm80", cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}),
                                      10, moe_route_accepts, moe_route_launch));
}

}  // namespace cuda
}  // namespace tetra
