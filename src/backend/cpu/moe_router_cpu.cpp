// moe_router_cpu: the fused router's oracle, which is by definition the composition the model ran
// before the fusion: backend::matmul (the registry's dense CPU kernel, logits rounded to the act
// dtype) into `logits`, then moe_route on those logits. Through the op wrappers, so the kernels
// selected (TETRA_KERNEL included) are exactly those of the unfused path: bit-identical.
#include "backend/cpu/cpu_kernels.h"
#include "backend/moe.h"

namespace tetra {
namespace cpu {

// x: [n_tokens, n_embd] act; router->dense: [n_expert, n_embd]; logits: [n_tokens, n_expert] act;
// topk_ids: i32 [n_tokens, k]; topk_weights: f32 [n_tokens, k]
static void moe_router_cpu(backend& be, const moe_router_args& a) {
    be.matmul(a.x, *a.router, a.logits, matmul_mode::DENSE);
    moe_route(be, a.logits, a.norm_topk_prob, a.topk_ids, a.topk_weights);
}

void register_moe_router(kernel_registry& r) {
    r.add(make_kernel<moe_router_args>("moe_router", "moe_router_cpu", plain_req(), 0, nullptr, moe_router_cpu));
}

}  // namespace cpu
}  // namespace tetra
