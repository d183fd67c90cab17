// moe_route_sm80: the router on the GPU, one warp per token, mirroring moe_route_cpu's f32 operation
// order: max (order-free; NaN iff logit 0 is NaN, as the CPU's running max), exp(l - max) by
// sampler_exp's arithmetic (backend/sampling.h, as the CPU oracle), Σ sequential in expert order
// (lane 0), one IEEE division per expert, top-k by rank under the CPU scan's order (no dependent
// argmax rounds), renormalization Σ in slot order. The per-token code: moe_route_device.cuh.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/moe_route_device.cuh"
#include "backend/moe.h"

namespace tetra {
namespace cuda {

namespace {

using moe_route_dev::route_token;
using moe_route_dev::route_words;
using moe_route_dev::with_epl;

// logits: [n_tokens, ne] T; ids: i32 [n_tokens, k]; w: f32 [n_tokens, k]. One warp per token
// (moe_route_device.cuh's route_token), `words` of shared memory per warp.
template <class T, int EPL>
__global__ void __launch_bounds__(128) moe_route_kernel(const T* __restrict__ logits, int32_t* __restrict__ ids,
                                                        float* __restrict__ w, int n_tokens, int ne, int k, bool renorm,
                                                        int words) {
    extern __shared__ __align__(16) float smem[];
    pdl_wait();
    pdl_trigger();
    const int warp = threadIdx.x >> 5;
    const int t = blockIdx.x * int(blockDim.x >> 5) + warp;
    if (t >= n_tokens) return;
    const T* row = logits + size_t(t) * size_t(ne);
    route_token<EPL>([row](int e) { return to_f32(row[e]); }, ne, k, renorm, smem + size_t(warp) * size_t(words),
                     ids + size_t(t) * size_t(k), w + size_t(t) * size_t(k));
}

}  // namespace

static void moe_route_launch(backend& be, const moe_route_args& a) {
    if (a.n_tokens == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        with_epl(a.n_expert, [&](auto epl) {
            constexpr int EPL = decltype(epl)::value;
            // Up to 4 warps (tokens) per CTA; one for ne > 256 (≤ 25 KB of shared memory per warp).
            const int64_t warps = EPL > 8 ? 1 : std::min<int64_t>(4, a.n_tokens);
            const int words = route_words(int(a.n_expert), int(a.k), EPL);
            const size_t smem = size_t(warps) * size_t(words) * sizeof(float);
            launch_pdl(be, moe_route_kernel<T, EPL>, dim3(unsigned((a.n_tokens + warps - 1) / warps)),
                       dim3(unsigned(warps * 32)), smem, a.logits.ptr<const T>(), a.topk_ids.ptr<int32_t>(),
                       a.topk_weights.ptr<float>(), int(a.n_tokens), int(a.n_expert), int(a.k), a.norm_topk_prob,
                       words);
        });
    });
}

// k ≤ 32 (one slot per lane), n_expert ≤ 2048 (64 experts per lane).
static std::string moe_route_accepts(const moe_route_args& a) {
    if (a.k > 32) return "k = " + std::to_string(a.k) + " > 32 experts per token";
    if (a.n_expert > 2048) return "n_expert = " + std::to_string(a.n_expert) + " > 2048";
    if (a.n_tokens > INT32_MAX / 2) return "too many tokens for int indexing";
    return "";
}

void register_moe_router_sm80(kernel_registry& r);  // moe_router_sm80.cu (the fused router, same arithmetic)

void register_moe_route_sm80(kernel_registry& r) {
    register_moe_router_sm80(r);
    r.add(make_kernel<moe_route_args>("moe_route", "moe_route_sm80", cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}),
                                      10, moe_route_accepts, moe_route_launch));
}

}  // namespace cuda
}  // namespace tetra
