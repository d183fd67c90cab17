// decode_layers_cpu: the decoder layers of a batch-1 decode step as the sequence of ops they stand
// for (decode_layers_composed, backend.cpp), through this backend's own kernels: the CPU forward is
// the same with or without the op, bit for bit, and the fused CUDA kernel's oracle.
#include "backend/cpu/cpu_kernels.h"

namespace tetra {
namespace cpu {

void register_decode_layers(kernel_registry& r) {
    r.add(make_kernel<decode_layers_args>("decode_layers", "decode_layers_cpu", plain_req(), 0, nullptr,
                                          decode_layers_composed));
}

}  // namespace cpu
}  // namespace tetra
