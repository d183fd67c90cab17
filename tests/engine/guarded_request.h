// Test helpers shared by the fault-injection tests on the CPU (test_selftest) and on the GPU
// (test_fault_injection_gpu): a scoped TETRA_KERNEL, and one greedy request run until the output
// guard stops it.
#pragma once
#include <stdlib.h>

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "core/log.h"
#include "engine/generator.h"
#include "engine/output_guard.h"

namespace tetra {

struct env_kernel {  // scoped TETRA_KERNEL
    explicit env_kernel(const std::string& v) { setenv("TETRA_KERNEL", v.c_str(), 1); }
    ~env_kernel() { unsetenv("TETRA_KERNEL"); }
};

// One greedy request of up to 8 tokens from a fixed prompt; returns the output guard's message
// ("" when the request finished; a trip of another kind than `expect` fails the test) and sets
// *counted to the trips of `expect` the request caused. debug_taps: the guard names the first
// bad tap (logging at DEBUG for the request).
inline std::string guarded_generate(generator& gen, bool debug_taps, guard_trip expect, uint64_t* counted) {
    sampling_params p;
    p.temperature = 0;
    p.max_tokens = 8;
    uint64_t before = output_guard::trips(expect);
    log_level old = get_log_level();
    if (debug_taps) set_log_level(log_level::DEBUG);
    std::string msg;
    try {
        gen.generate({1, 17, 42, 99}, p);
    } catch (const output_guard_error& e) {
        EXPECT_EQ(e.trip, expect) << e.what();
        msg = e.what();
    }
    set_log_level(old);
    *counted = output_guard::trips(expect) - before;
    return msg;
}

}  // namespace tetra
