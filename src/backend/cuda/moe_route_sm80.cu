// moe_route_sm80: the router on the GPU, one warp per token, mirroring moe_route_cpu's f32 operation
// order: max (order-free; NaN iff logit 0 is NaN, as the CPU's running max), exp(l - max) by
// sampler_exp's arithmetic (backend/sampling.h, as the CPU oracle), Σ sequential in expert order
// (lane 0), one IEEE division per expert, top-k by rank under the CPU scan's order (no dependent
// argmax rounds), renormalization Σ in slot order.
#include "backend/cuda/moe_route_device.cuh"
#include "backend/moe.h"

namespace tetra {
namespace cuda {

using route::moe_route_kernel;
using route::route_words;
using route::with_epl;

void moe_route_launch(backend& be, const moe_route_args& a) {
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
std::string moe_route_accepts(const moe_route_args& a) {
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
