// quantize_nvfp4_act_sm80: NVFP4 activation quantization with the software E2M1 encoder (any
// image ≥ sm_80), bit-exact with the CPU nvfp4_quantize_activation_row (nvfp4_device.cuh).
// Since rows are whole 16-blocks, the [n_rows, n] input is one flat sequence of blocks.
#include "backend/cuda/nvfp4_device.cuh"

namespace tetra {
namespace cuda {

// x: [n_blocks·16] T; codes: u8 [n_blocks·8]; scales: u8 [n_blocks]
template <class T>
__global__ void quantize_nvfp4_act_sm80_kernel(const T* x, uint8_t* codes, uint8_t* scales, int64_t n_blocks,
                                               float g) {
    quantize_nvfp4_act_body<false>(x, codes, scales, n_blocks, g);
}

static void quantize_nvfp4_act_sm80_launch(backend& be, const quantize_nvfp4_act_args& a) {
    int64_t n_blocks = a.x.numel() / 16;
    if (n_blocks == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        quantize_nvfp4_act_sm80_kernel<T><<<grid_1d(n_blocks, 128), 128, 0, stream_of(be)>>>(
            a.x.ptr<const T>(), a.codes.ptr<uint8_t>(), a.scales.ptr<uint8_t>(), n_blocks, a.global_quant);
        CUDA_CHECK(cudaGetLastError());
    });
}

void register_quantize_nvfp4_act_sm80(kernel_registry& r) {
    r.add(make_kernel<quantize_nvfp4_act_args>("quantize_nvfp4_act", "quantize_nvfp4_act_sm80",
                                               cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 10, nullptr,
                                               quantize_nvfp4_act_sm80_launch));
}

}  // namespace cuda
}  // namespace tetra
