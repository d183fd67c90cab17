// faulty_matmul_nvfp4_w4a16_nan (test-only, TETRA_FAULT_INJECTION builds): the plain
// matmul_nvfp4_w4a16 kernel, then one NaN in the last element of the first output row; the rest is
// correct.
#include "backend/cpu/cpu_kernels.h"

namespace tetra {
namespace cpu {

void faulty_run_plain(backend& be, const std::string& op, const op_args& a);  // faulty_register.cpp
void faulty_poison_nan(const tensor& out);                                     // faulty_register.cpp

static void faulty_matmul_nvfp4_w4a16_nan(backend& be, const matmul_args& a) {
    faulty_run_plain(be, "matmul_nvfp4_w4a16", a);
    faulty_poison_nan(a.out);
}

kernel_entry faulty_matmul_nvfp4_w4a16_nan_entry(int priority) {
    return make_kernel<matmul_args>("matmul_nvfp4_w4a16", "faulty_matmul_nvfp4_w4a16_nan",
                             plain_req(), priority, nullptr, faulty_matmul_nvfp4_w4a16_nan);
}

}  // namespace cpu
}  // namespace tetra
