// quantize_nvfp4_act_cpu: NVFP4 activation quantization per row (W4A4 input) by the codec's
// nvfp4_quantize_activation_row on the f32 value of each element — the oracle every GPU
// quantizer must match bit for bit.
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "core/thread_pool.h"
#include "nvfp4/nvfp4.h"

namespace tetra {
namespace cpu {

// x: [n_rows, n] act; codes: u8 [n_rows, n/2]; scales: e4m3 [n_rows, n/16]
static void quantize_nvfp4_act_cpu(backend&, const quantize_nvfp4_act_args& a) {
    int64_t n_rows = a.x.dim(0), n = a.x.dim(1);
    parallel_for(n_rows, [&](int64_t b, int64_t e) {
        std::vector<float> row(static_cast<size_t>(n));
        for (int64_t r = b; r < e; ++r) {
            for (int64_t j = 0; j < n; ++j) row[size_t(j)] = act_load(a.x.data, a.x.type, r * n + j);
            nvfp4_quantize_activation_row(row.data(), n, a.global_quant, a.codes.ptr<uint8_t>() + r * (n / 2),
                                          a.scales.ptr<uint8_t>() + r * (n / 16));
        }
    });
}

void register_quantize_nvfp4_act(kernel_registry& r) {
    r.add(make_kernel<quantize_nvfp4_act_args>("quantize_nvfp4_act", "quantize_nvfp4_act_cpu", plain_req(), 0,
                                               nullptr, quantize_nvfp4_act_cpu));
}

}  // namespace cpu
}  // namespace tetra
