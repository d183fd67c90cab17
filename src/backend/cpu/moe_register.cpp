// Registration of the CPU MoE op tables (backend/moe.h): one call per op file (moe_*_cpu.cpp).
#include "backend/moe.h"

namespace tetra {
namespace cpu {

void register_moe_route(kernel_registry& r);    // moe_route_cpu.cpp
void register_moe_permute(kernel_registry& r);  // moe_permute_cpu.cpp
void register_moe_route_permute(kernel_registry& r);  // moe_route_permute_cpu.cpp
void register_moe_matmul(kernel_registry& r);   // moe_matmul_dense_cpu.cpp (all six entries)
void register_moe_combine(kernel_registry& r);  // moe_combine_cpu.cpp
void register_moe_matmul_silu(kernel_registry& r);  // moe_matmul_silu_cpu.cpp

void register_moe_kernels(kernel_registry& r) {
    register_moe_route(r);
    register_moe_permute(r);
    register_moe_route_permute(r);
    register_moe_matmul(r);
    register_moe_combine(r);
    register_moe_matmul_silu(r);
}

}  // namespace cpu
}  // namespace tetra
