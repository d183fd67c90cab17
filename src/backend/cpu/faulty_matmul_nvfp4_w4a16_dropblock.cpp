// faulty_matmul_nvfp4_w4a16_dropblock (test-only, TETRA_FAULT_INJECTION builds): the subtle fault. The
// plain W4A16 matmul with the last 16-element scale block of every weight row read as scale 0, as a
// kernel whose K loop stops one block early would. Output stays finite and plausible; only its
// error against the oracle (about 1/(n_in/16) of the signal energy) gives it away.
#include <vector>

#include "backend/cpu/cpu_kernels.h"

namespace tetra {
namespace cpu {

// x: [M, K] act; w: NVFP4 [N, K]; out: [M, N] act
static void faulty_matmul_nvfp4_w4a16_dropblock(backend&, const matmul_args& a) {
    const linear_weight& w = *a.w;
    int64_t n_blocks = w.n_in / 16;
    std::vector<uint8_t> scales(static_cast<const uint8_t*>(w.scales.data),
                                static_cast<const uint8_t*>(w.scales.data) + w.n_out * n_blocks);
    for (int64_t n = 0; n < w.n_out; ++n) scales[size_t(n * n_blocks + n_blocks - 1)] = 0;  // e4m3 0x00 = 0
    linear_weight dropped = w;
    dropped.scales = tensor::view(w.scales.type, w.scales.shape, scales.data());
    nvfp4_matmul_plain(a.x.data, a.x.type, a.m, dropped, a.out);
}

kernel_entry faulty_matmul_nvfp4_w4a16_dropblock_entry(int priority) {
    return make_kernel<matmul_args>("matmul_nvfp4_w4a16", "faulty_matmul_nvfp4_w4a16_dropblock", plain_req(), priority,
                                    nullptr, faulty_matmul_nvfp4_w4a16_dropblock);
}

}  // namespace cpu
}  // namespace tetra
