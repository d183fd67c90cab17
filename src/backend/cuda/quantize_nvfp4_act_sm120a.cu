// quantize_nvfp4_act_sm120a: NVFP4 activation quantization with the hardware E2M1 convert
// (cvt.rn.satfinite.e2m1x2.f32 → SASS F2FP.SATFINITE.E2M1, checked by scripts/check_sass.sh),
// emitted only in a/f images of the 10.x–12.x families; selected only where the loaded image has
// FEAT_CVT_E2M1. Other images compile the software encoder here (never launched there).
#include "backend/cuda/nvfp4_device.cuh"

namespace tetra {
namespace cuda {

// x: [n_blocks·16] T; codes: u8 [n_blocks·8]; scales: u8 [n_blocks]
template <class T>
__global__ void quantize_nvfp4_act_sm120a_kernel(const T* x, uint8_t* codes, uint8_t* scales, int64_t n_blocks,
                                                 float g) {
    quantize_nvfp4_act_body<true>(x, codes, scales, n_blocks, g);
}

static void quantize_nvfp4_act_sm120a_launch(backend& be, const quantize_nvfp4_act_args& a) {
    int64_t n_blocks = a.x.numel() / 16;
    if (n_blocks == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        quantize_nvfp4_act_sm120a_kernel<T><<<grid_1d(n_blocks, 128), 128, 0, stream_of(be)>>>(
            a.x.ptr<const T>(), a.codes.ptr<uint8_t>(), a.scales.ptr<uint8_t>(), n_blocks, a.global_quant);
        CUDA_CHECK(cudaGetLastError());
    });
}

void register_quantize_nvfp4_act_sm120a(kernel_registry& r) {
    r.add(make_kernel<quantize_nvfp4_act_args>("quantize_nvfp4_act", "quantize_nvfp4_act_sm120a",
                                               cuda_req(100, {dtype::F32, dtype::BF16, dtype::F16}, FEAT_CVT_E2M1),
                                               20, nullptr, quantize_nvfp4_act_sm120a_launch));
}

}  // namespace cuda
}  // namespace tetra
