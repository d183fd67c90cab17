// Internal to engine/selftest: the self-test's op cases (inputs, oracle outputs as f32) and how they
// are built from a model's config and weights (selftest_cases.cpp); selftest.cpp runs them. Not a
// public API: include only from src/engine/selftest*.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"
#include "engine/selftest.h"

namespace tetra {
namespace selftest_detail {

using launch_fn = std::function<void(op_args&)>;

// Deterministic uniform values in [-1, 1) (xorshift64*).
struct rng {
    uint64_t s;
    explicit rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    float uniform() {
        s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
        return float(int64_t((s * 0x2545F4914F6CDD1Dull) >> 40) - (int64_t(1) << 23)) / float(1 << 23);
    }
};

struct op_case {
    std::string op;
    std::string what;      // printable vars
    std::string label;     // the load-log subject: "linear nvfp4 576x1536", "rms_norm n=576"
    std::string classes;   // linears: the module classes sharing this case
    double tol = 0;
    int n_sizes = 1;       // matmul: test sizes, smallest first (a kernel may reject small tiles)
    // Builds fresh inputs on `be` for test size `size`, fills the args, calls launch(args) and
    // returns every output as f32 (host), concatenated.
    std::function<std::vector<float>(backend& be, int size, const launch_fn& launch)> run;
    // Matmul: selection probes at real shapes (M → args); empty for the other ops (the run's args,
    // with the model's real feature sizes, select the same kernel the forward will).
    std::function<void(backend& be, int64_t m, const launch_fn& select)> probe;
    std::vector<int64_t> probe_m;
    std::string size_str(int size) const { return size_strs.empty() ? what : size_strs[size_t(size)]; }
    std::vector<std::string> size_strs;
    // A fused op the forward uses only when a kernel is eligible (else it runs the unfused ops,
    // which have their own cases): no eligible kernel is not a failure.
    bool optional = false;
};

// Every case the forward of this model needs (ops in the order the forward meets them).
std::vector<op_case> build_cases(const model_config& c, model_weights& w, dtype act, const selftest_options& o);

// A host tensor of dtype t (f32|bf16|f16) with scale·uniform values (rounded to t), seeded.
tensor host_random(dtype t, std::vector<int64_t> shape, uint64_t seed, float scale = 1.0f);

}  // namespace selftest_detail
}  // namespace tetra
