// Test-only CUDA kernels that are wrong on purpose (fault_injection_sm80.cu): the CUDA twins of
// cpu/faulty_*.cpp, compiled only in -DTETRA_FAULT_INJECTION=ON builds with the CUDA backend. They
// prove the start-up self-test and the output guard catch a bad device kernel
// (docs/no-silent-garbage.md §3). Never part of a release build.
#pragma once
#include "backend/registry.h"

namespace tetra {
namespace cuda {

#ifdef TETRA_FAULT_INJECTION
// Adds faulty_matmul_nvfp4_w4a16_{broadcast,nan,dropblock}_sm80 and faulty_matmul_dense_broadcast_sm80.
// Priority -100 in the process registry (cuda_backend.cpp: chosen only when forced with
// TETRA_KERNEL); tests register them above every real kernel in a registry of their own.
void register_faulty_kernels(kernel_registry& r, int priority = -100);
#endif

}  // namespace cuda
}  // namespace tetra
