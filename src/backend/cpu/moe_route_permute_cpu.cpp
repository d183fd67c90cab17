// moe_route_permute_cpu: the router and the permutation as one op (backend/moe.h) — the two
// oracles in sequence (moe_route_cpu, then moe_permute_cpu on its ids), so the fused op's outputs
// are theirs by construction; a front (moe_route_front) runs add_rms_norm and the router matmul
// through the registry first.
#include "backend/cpu/cpu_kernels.h"
#include "backend/moe.h"

namespace tetra {
namespace cpu {

static void moe_route_permute_cpu(backend& be, const moe_route_permute_args& a) {
    moe_route_front_before(be, a);
    moe_route_cpu(be, a.route);
    moe_permute_cpu(be, a.permute);
}

void register_moe_route_permute(kernel_registry& r) {
    r.add(make_kernel<moe_route_permute_args>("moe_route_permute", "moe_route_permute_cpu", plain_req(), 0, nullptr,
                                              moe_route_permute_cpu));
}

}  // namespace cpu
}  // namespace tetra
