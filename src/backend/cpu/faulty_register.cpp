// Test-only faulty CPU kernels (compiled only with the CMake option TETRA_FAULT_INJECTION): each runs
// its op's plain kernel, then breaks the output in one documented way, so the only difference from
// the oracle is the fault. They prove that the start-up self-test and the output guard catch bad
// kernels (docs/no-silent-garbage.md). Never part of a release build.
#include "backend/cpu/cpu_kernels.h"
#include "core/error.h"

namespace tetra {
namespace cpu {

kernel_entry faulty_rms_norm_broadcast_entry(int priority);
kernel_entry faulty_rms_norm_nan_entry(int priority);
kernel_entry faulty_matmul_dense_broadcast_entry(int priority);
kernel_entry faulty_matmul_nvfp4_w4a16_broadcast_entry(int priority);
kernel_entry faulty_matmul_nvfp4_w4a16_nan_entry(int priority);
kernel_entry faulty_matmul_nvfp4_w4a16_dropblock_entry(int priority);

void register_faulty_kernels(kernel_registry& r, int priority) {
    r.add(faulty_rms_norm_broadcast_entry(priority));
    r.add(faulty_rms_norm_nan_entry(priority));
    r.add(faulty_matmul_dense_broadcast_entry(priority));
    r.add(faulty_matmul_nvfp4_w4a16_broadcast_entry(priority));
    r.add(faulty_matmul_nvfp4_w4a16_nan_entry(priority));
    r.add(faulty_matmul_nvfp4_w4a16_dropblock_entry(priority));
}

// Runs the plain kernel <op>_cpu of the process registry on `a` (the correct result).
void faulty_run_plain(backend& be, const std::string& op, const op_args& a) {
    const kernel_entry* k = kernel_registry::instance().find(op + "_cpu");
    TETRA_ASSERT(k != nullptr);
    k->launch(be, a);
}

// The "!!!!!" signature: every element of each row of out (rows of length out.dim(-1)) becomes the
// row's first element, as when every thread of a row reads one lane.
// out: [.., n] f32|bf16|f16 (host)
void faulty_broadcast_rows(const tensor& out) {
    int64_t n = out.dim(-1), n_rows = n ? out.numel() / n : 0;
    for (int64_t i = 0; i < n_rows; ++i) {
        float v = act_load(out.data, out.type, i * n);
        for (int64_t j = 1; j < n; ++j) act_store(out.data, out.type, i * n + j, v);
    }
}

// One NaN, in the last element of the first row (the rest stays correct).
// out: [.., n] f32|bf16|f16 (host)
void faulty_poison_nan(const tensor& out) {
    if (out.numel() == 0) return;
    act_store(out.data, out.type, out.dim(-1) - 1, __builtin_nanf(""));
}

}  // namespace cpu
}  // namespace tetra
