// faulty_rms_norm_nan (test-only, TETRA_FAULT_INJECTION builds): the plain rms_norm kernel, then one
// NaN in the last element of the first output row; the rest is correct.
#include "backend/cpu/cpu_kernels.h"

namespace tetra {
namespace cpu {

void faulty_run_plain(backend& be, const std::string& op, const op_args& a);  // faulty_register.cpp
void faulty_poison_nan(const tensor& out);                                     // faulty_register.cpp

static void faulty_rms_norm_nan(backend& be, const rms_norm_args& a) {
    faulty_run_plain(be, "rms_norm", a);
    faulty_poison_nan(a.out);
}

kernel_entry faulty_rms_norm_nan_entry(int priority) {
    return make_kernel<rms_norm_args>("rms_norm", "faulty_rms_norm_nan",
                             plain_req(), priority, nullptr, faulty_rms_norm_nan);
}

}  // namespace cpu
}  // namespace tetra
