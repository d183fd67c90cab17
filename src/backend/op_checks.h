// op_checks: the argument checks and the launch shared by the backend's op wrappers (backend.cpp,
// moe.cpp, sampling.cpp); ptr_align also serves the self-test, which fills op args itself. Every failed check is a tetra::error naming the op, the operand and
// expected vs actual; run_op selects the kernel through the registry (pointer alignment of the
// operands in op_args::align) and records it in the op profile when profiling is on.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"

namespace tetra {
namespace op_checks {

// t lives on b's device and has data (or no elements).
void check_on(const backend& b, const tensor& t, const char* op, const char* name);
// t is an activation: f32, bf16 or f16.
void check_act(const tensor& t, const char* op, const char* name);
void check_dtype(const tensor& t, dtype want, const char* op, const char* name);
void check_shape(const tensor& t, const std::vector<int64_t>& want, const char* op, const char* name);
void check_rank(const tensor& t, int rank, const char* op, const char* name);
// a and b share no byte (either may be empty).
bool disjoint(const tensor& a, const tensor& b);
// The lowest set bit of the operands' addresses, capped at 256.
int64_t ptr_align(std::initializer_list<const tensor*> ts);
// a.align from ts, then the registry's kernel for (op, b's device, a); ts are the op's operands (the
// last one's shape goes into the profile key).
void run_op(backend& b, const char* op, op_args& a, std::initializer_list<const tensor*> ts);

}  // namespace op_checks
}  // namespace tetra
