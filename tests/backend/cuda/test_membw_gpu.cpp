// The CUDA read-bandwidth probe (backend/membw.h) on device 0: every GPU this backend supports
// (sm_80+, HBM or GDDR6X) reads well above 100 GB/s; a probe whose loads were dropped or whose
// timing is broken reports absurd values (≫ 10 TB/s, 0, NaN).
#include <gtest/gtest.h>

#include <cmath>

#include "backend/membw.h"

namespace tetra {
namespace {

TEST(membw_gpu, cuda_probe_is_plausible) {
    auto be = make_cuda_backend(0);
    for (size_t bytes : {size_t(256) << 20, size_t(0)}) {  // 256 MiB, and the default (1 GiB)
        double bw = measure_read_bandwidth(*be, bytes);
        std::printf("  %s read bandwidth, %s: %.1f GB/s\n", be->device().name.c_str(),
                    bytes ? "256 MiB" : "default", bw / 1e9);
        EXPECT_TRUE(std::isfinite(bw)) << bytes;
        EXPECT_GT(bw, 100e9) << bytes;
        EXPECT_LT(bw, 10e12) << bytes;
    }
}

}  // namespace
}  // namespace tetra
