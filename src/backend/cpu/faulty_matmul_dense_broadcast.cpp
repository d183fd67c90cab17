// faulty_matmul_dense_broadcast (test-only, TETRA_FAULT_INJECTION builds): the plain matmul_dense
// kernel, then every element of each output row becomes the row's first element (the "!!!!!"
// signature).
#include "backend/cpu/cpu_kernels.h"

namespace tetra {
namespace cpu {

void faulty_run_plain(backend& be, const std::string& op, const op_args& a);  // faulty_register.cpp
void faulty_broadcast_rows(const tensor& out);                                     // faulty_register.cpp

static void faulty_matmul_dense_broadcast(backend& be, const matmul_args& a) {
    faulty_run_plain(be, "matmul_dense", a);
    faulty_broadcast_rows(a.out);
}

kernel_entry faulty_matmul_dense_broadcast_entry(int priority) {
    return make_kernel<matmul_args>("matmul_dense", "faulty_matmul_dense_broadcast",
                             plain_req(), priority, nullptr, faulty_matmul_dense_broadcast);
}

}  // namespace cpu
}  // namespace tetra
