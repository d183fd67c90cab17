// moe_matmul_silu_cpu: the oracle of the experts' fused gate/up stage (backend/moe.h) — the two ops
// it stands for, in sequence through the backend: the grouped matmul into gu (whichever CPU kernel
// the registry picks, each cross-checked against its own oracle), then silu_mul_gate_up(gu, out).
#include "backend/cpu/cpu_kernels.h"
#include "backend/moe.h"

namespace tetra {
namespace cpu {

void register_moe_matmul_silu(kernel_registry& r) {
    r.add(make_kernel<moe_matmul_silu_args>("moe_matmul_silu", "moe_matmul_silu_cpu", plain_req(), 0, nullptr,
                                            moe_matmul_silu_two_step));
}

}  // namespace cpu
}  // namespace tetra
