// faulty_rms_norm_broadcast (test-only, TETRA_FAULT_INJECTION builds): the plain rms_norm kernel, then
// every element of each output row becomes the row's first element (the "!!!!!" signature).
#include "backend/cpu/cpu_kernels.h"

namespace tetra {
namespace cpu {

void faulty_run_plain(backend& be, const std::string& op, const op_args& a);  // faulty_register.cpp
void faulty_broadcast_rows(const tensor& out);                                     // faulty_register.cpp

static void faulty_rms_norm_broadcast(backend& be, const rms_norm_args& a) {
    faulty_run_plain(be, "rms_norm", a);
    faulty_broadcast_rows(a.out);
}

kernel_entry faulty_rms_norm_broadcast_entry(int priority) {
    return make_kernel<rms_norm_args>("rms_norm", "faulty_rms_norm_broadcast",
                             plain_req(), priority, nullptr, faulty_rms_norm_broadcast);
}

}  // namespace cpu
}  // namespace tetra
