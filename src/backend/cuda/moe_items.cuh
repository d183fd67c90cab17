// The work items of the grouped MoE matmul kernels (moe_matmul_nvfp4_w4a16_mma_sm80,
// moe_matmul_nvfp4_w4a16_wgmma_sm90): the passes of rb rows of each non-empty expert, in expert
// order, found on the device from expert_offsets (no host sync). The grid is sized by the host bound
// moe_items_bound(); surplus CTAs find no item and exit.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {

// At most this many passes of rb rows: each non-empty expert rounds up once.
inline int64_t moe_items_bound(int64_t n_rows, int64_t n_expert, int64_t rb) {
    const int64_t j = n_rows < n_expert ? n_rows : n_expert;
    return j + (n_rows - j) / rb;
}

// Work item `item` → expert e, first permuted row r0, rows nr (1..rb): items are the passes of rb
// rows of each non-empty expert, in expert order. Every lane gets the result; false when item is
// past the last pass (uniform over the CTA: every warp reads the same offsets). A lane covers four
// experts per round, so 128 experts cost one round of independent loads.
__device__ inline bool find_item(const int32_t* off, int ne, int rb, int item, int lane, int& e, int& r0, int& nr) {
    int before = 0;  // passes of the experts below this round
    for (int e0 = 0; e0 < ne; e0 += 128) {
        int o[5], pass[4], mine = 0;
#pragma unroll
        for (int j = 0; j < 5; ++j) o[j] = __ldg(off + min(e0 + 4 * lane + j, ne));
#pragma unroll
        for (int j = 0; j < 4; ++j) pass[j] = (o[j + 1] - o[j] + rb - 1) / rb, mine += pass[j];
        int incl = mine;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            int v = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= d) incl += v;
        }
        const int total = __shfl_sync(0xffffffffu, incl, 31);
        if (item < before + total) {
            const int src = __ffs(__ballot_sync(0xffffffffu, item < before + incl)) - 1;
            int ee = 0, rr = 0, nn = 0, it = item - (before + incl - mine);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (it >= 0 && it < pass[j]) ee = e0 + 4 * lane + j, rr = o[j] + it * rb, nn = min(rb, o[j + 1] - rr);
                it -= pass[j];
            }
            e = __shfl_sync(0xffffffffu, ee, src), r0 = __shfl_sync(0xffffffffu, rr, src);
            nr = __shfl_sync(0xffffffffu, nn, src);
            return true;
        }
        before += total;
    }
    return false;
}

}  // namespace cuda
}  // namespace tetra
