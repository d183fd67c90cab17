// moe_route_cpu: the router oracle. Per token: p = softmax(logits) in f32 (max subtracted, exp by
// sampler_exp — tetra's own f32 arithmetic, so a GPU gets the same bits whatever the libm — Σ in
// expert order, one division per expert), the k largest p picked one at a time (strict >, so ties
// go to the lower expert index; a NaN is never picked over a number), optional renormalization
// p_s / Σ_s p_s with Σ in slot order. Tokens are independent: parallel over tokens.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "backend/moe.h"
#include "backend/sampling.h"

namespace tetra {
namespace cpu {

// exp(d) for d = logit − max: NaN (a NaN logit, or +inf − +inf) stays NaN (d + d: the quiet NaN),
// otherwise d ≤ 0, sampler_exp's domain.
static float route_exp(float d) { return std::isnan(d) ? d + d : sampler_exp(d); }

// logits: [n_tokens, n_expert] act; topk_ids: i32 [n_tokens, k]; topk_weights: f32 [n_tokens, k]
void moe_route_cpu(backend&, const moe_route_args& a) {
    const int64_t ne = a.n_expert, k = a.k;
    parallel_for_grain(a.n_tokens, 8, [&](int64_t t0, int64_t t1) {
        std::vector<float> p(static_cast<size_t>(ne));
        std::vector<uint8_t> taken(static_cast<size_t>(ne));
        for (int64_t t = t0; t < t1; ++t) {
            act_load_row(a.logits.data, a.logits.type, t * ne, ne, p.data());
            float mx = p[0];
            for (int64_t e = 1; e < ne; ++e) mx = p[size_t(e)] > mx ? p[size_t(e)] : mx;
            float sum = 0.0f;
            for (int64_t e = 0; e < ne; ++e) sum += p[size_t(e)] = route_exp(p[size_t(e)] - mx);
            for (int64_t e = 0; e < ne; ++e) p[size_t(e)] = p[size_t(e)] / sum;
            std::fill(taken.begin(), taken.end(), uint8_t(0));
            int32_t* ids = a.topk_ids.ptr<int32_t>() + t * k;
            float* w = a.topk_weights.ptr<float>() + t * k;
            for (int64_t s = 0; s < k; ++s) {
                int64_t best = -1;
                for (int64_t e = 0; e < ne; ++e) {
                    if (taken[size_t(e)]) continue;
                    if (best < 0 || p[size_t(e)] > p[size_t(best)] || (std::isnan(p[size_t(best)]) && !std::isnan(p[size_t(e)])))
                        best = e;
                }
                taken[size_t(best)] = 1;
                ids[s] = int32_t(best);
                w[s] = p[size_t(best)];
            }
            if (!a.norm_topk_prob) continue;
            float ws = 0.0f;
            for (int64_t s = 0; s < k; ++s) ws += w[s];
            for (int64_t s = 0; s < k; ++s) w[s] = w[s] / ws;
        }
    });
}

void register_moe_route(kernel_registry& r) {
    r.add(make_kernel<moe_route_args>("moe_route", "moe_route_cpu", plain_req(), 0, nullptr, moe_route_cpu));
}

}  // namespace cpu
}  // namespace tetra
