// matmul_silu_cpu: the oracle of the fused gate/up stage (backend::matmul_silu) — the two ops it
// stands for, in sequence through the backend: the matmul of x by the stacked [gate; up] weight into
// gu (whichever CPU matmul kernel the registry picks, each cross-checked against its own oracle),
// then silu_mul_gate_up(gu, out). A fused kernel must match this within the matmul tolerance.
#include "backend/cpu/cpu_kernels.h"

namespace tetra {
namespace cpu {

void register_matmul_silu(kernel_registry& r) {
    r.add(make_kernel<matmul_silu_args>("matmul_silu", "matmul_silu_cpu", plain_req(), 0, nullptr, matmul_silu_two_step));
}

}  // namespace cpu
}  // namespace tetra
