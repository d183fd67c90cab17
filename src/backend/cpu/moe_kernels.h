// CPU MoE kernel internals (backend/moe.h ops): the grouped-matmul driver shared by the six
// moe_matmul_* entries, and those entries (one file each, named as the kernel). Not an interface.
#pragma once
#include "backend/cpu/cpu_kernels.h"
#include "backend/moe.h"

namespace tetra {
namespace cpu {

// Runs kernel `inner` (a matmul_* entry of the process registry) on every non-empty expert slice of
// a: rows [offsets[e], offsets[e+1]) of x and out with expert e's weight, experts in ascending order.
// Offsets that do not span [0, n_rows) monotonically are an error naming them.
void moe_matmul_grouped(backend& be, const moe_matmul_args& a, const char* inner);

// AVX2 entries' requirements: those of the matmul kernels they run (f32 activations, AVX2+FMA+F16C).
kernel_req moe_matmul_avx2_req();

kernel_entry moe_matmul_dense_cpu_entry();
kernel_entry moe_matmul_dense_avx2_entry();
kernel_entry moe_matmul_nvfp4_w4a16_cpu_entry();
kernel_entry moe_matmul_nvfp4_w4a16_avx2_entry();
kernel_entry moe_matmul_nvfp4_w4a4_cpu_entry();
kernel_entry moe_matmul_nvfp4_w4a4_avx2_entry();

}  // namespace cpu
}  // namespace tetra
