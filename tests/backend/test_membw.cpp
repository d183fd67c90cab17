// The CPU read-bandwidth probe (backend/membw.h): a plausible positive number. The bounds are wide
// on purpose (any machine this runs on reads between 1 GB/s and 2 TB/s from DRAM per socket); a
// probe whose loads were optimized away reports ≫ 2 TB/s, and a broken timer 0 or NaN.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/membw.h"
#include "core/error.h"

namespace tetra {
namespace {

TEST(membw, cpu_probe_is_plausible) {
    auto be = make_cpu_backend();
    for (size_t bytes : {size_t(64) << 20, size_t(0)}) {  // 64 MiB, and the 256 MiB default
        double bw = measure_read_bandwidth(*be, bytes);
        std::printf("  cpu read bandwidth, %zu MiB: %.2f GB/s\n", (bytes ? bytes : size_t(256) << 20) >> 20, bw / 1e9);
        EXPECT_TRUE(std::isfinite(bw)) << bytes;
        EXPECT_GT(bw, 1e9) << bytes;
        EXPECT_LT(bw, 2e12) << bytes;
    }
}

TEST(membw, tiny_buffers_are_errors) {
    auto be = make_cpu_backend();
    try {
        measure_read_bandwidth(*be, 4096);
        ADD_FAILURE() << "4096 bytes accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("4096 bytes"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace tetra
