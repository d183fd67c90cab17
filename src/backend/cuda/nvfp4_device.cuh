// NVFP4 codecs on the device, bit-exact with src/nvfp4 (codec.cpp, quantize.cpp): the E4M3
// encoder (RNE, saturating at 448, NaN → 0x7F) and decoder, the software E2M1 encoder (RNE,
// satfinite, NaN → 0x7, −0 → 0x8), and the per-16-block activation quantizer
// (nvfp4_quantize_activation_row). The hardware cvt.rn.satfinite.e2m1x2.f32 is used only when
// HW is requested AND the image is an a/f target of the 10.x–12.x families (kernels.md §1.6).
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {

// e2m1_encode of src/nvfp4/codec.cpp: magnitude by the RNE threshold ladder (ties to even).
__device__ __forceinline__ uint32_t e2m1_encode_sw(float x) {
    uint32_t u = __float_as_uint(x);
    float a = __uint_as_float(u & 0x7FFFFFFFu);
    bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
    uint32_t sign = (u >> 28) & 0x8u;
    uint32_t mag = uint32_t(a > 0.25f) + uint32_t(a >= 0.75f) + uint32_t(a > 1.25f) + uint32_t(a >= 1.75f) +
                   uint32_t(a > 2.5f) + uint32_t(a >= 3.5f) + uint32_t(a > 5.0f);
    return nan ? 0x7u : (sign | mag);
}

// Two codes in one byte: `even` in the low nibble, `odd` in the high one.
__device__ __forceinline__ uint32_t e2m1_pack2_sw(float even, float odd) {
    return e2m1_encode_sw(even) | (e2m1_encode_sw(odd) << 4);
}

#if defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000 && \
    __CUDA_ARCH_FAMILY_SPECIFIC__ < 1300
#define TETRA_HW_E2M1 1
// cvt puts its first source in bits [7:4] and the second in [3:0] (PTX cvt.md), so odd goes first.
__device__ __forceinline__ uint32_t e2m1_pack2_hw(float even, float odd) {
    uint16_t r;
    asm("{\n\t.reg .b8 t;\n\tcvt.rn.satfinite.e2m1x2.f32 t, %1, %2;\n\tmov.b16 %0, {t, t};\n\t}"
        : "=h"(r)
        : "f"(odd), "f"(even));
    return uint32_t(r) & 0xFFu;
}
#else
#define TETRA_HW_E2M1 0
#endif

// e4m3_encode of src/nvfp4/codec.cpp (integer RNE; the subnormal add is kept unfused).
__device__ __forceinline__ uint32_t e4m3_encode_dev(float x) {
    uint32_t u = __float_as_uint(x);
    uint32_t s = (u >> 24) & 0x80u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0x7Fu;
    if (a > 0x43E00000u) return s | 0x7Eu;
    if (a >= 0x3C800000u) {
        uint32_t r = a + 0x7FFFFu + ((a >> 20) & 1u);
        return s | ((r >> 20) - (120u << 3));
    }
    float t = __fadd_rn(__fmul_rn(__uint_as_float(a), 512.0f), 8388608.0f);
    return s | (__float_as_uint(t) - 0x4B000000u);
}

__device__ __forceinline__ float e4m3_decode_dev(uint32_t b) {
    uint32_t e = (b >> 3) & 15u, m = b & 7u;
    float mag = e == 0 ? float(m) * 0x1p-9f : __uint_as_float(((e + 120u) << 23) | (m << 20));
    if ((b & 0x7Fu) == 0x7Fu) mag = __uint_as_float(0x7FC00000u);
    return (b & 0x80u) ? -mag : mag;
}

// One 16-block of one row (nvfp4_quantize_activation_row): v[16] f32 → 8 code bytes + 1 scale.
// SF = e4m3(G·(amax/6)); SF == 0 → codes e2m1(x·0); else codes = e2m1(x / (SF/G)) (IEEE division).
// Blocks with a NaN (SF byte 0x7F) and SF == 0 always take the software encoder, so the hardware
// path only ever sees non-NaN quotients (its NaN convention never matters).
template <bool HW>
__device__ __forceinline__ void quantize_block16(const float* v, float g, uint8_t* codes, uint8_t* scale) {
    float amax = 0.0f;
    bool nan = false;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        float a = fabsf(v[i]);
        amax = a > amax ? a : amax;
        nan |= a != a;
    }
    if (nan) amax = __uint_as_float(0x7FC00000u);
    uint32_t byte = e4m3_encode_dev(__fmul_rn(g, __fdiv_rn(amax, 6.0f)));
    *scale = uint8_t(byte);
    float sf = e4m3_decode_dev(byte);
    bool sw = !HW || !TETRA_HW_E2M1 || sf == 0.0f || sf != sf;
    float divisor = __fdiv_rn(sf, g);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        float e = sf == 0.0f ? __fmul_rn(v[2 * j], 0.0f) : __fdiv_rn(v[2 * j], divisor);
        float o = sf == 0.0f ? __fmul_rn(v[2 * j + 1], 0.0f) : __fdiv_rn(v[2 * j + 1], divisor);
#if TETRA_HW_E2M1
        codes[j] = uint8_t(sw ? e2m1_pack2_sw(e, o) : e2m1_pack2_hw(e, o));
#else
        (void)sw;
        codes[j] = uint8_t(e2m1_pack2_sw(e, o));
#endif
    }
}

// One thread per 16-block over the whole [n_rows, n] input. x: [n_rows, n] T; codes: u8
// [n_rows, n/2]; scales: u8 [n_rows, n/16].
template <bool HW, class T>
__device__ __forceinline__ void quantize_nvfp4_act_body(const T* x, uint8_t* codes, uint8_t* scales,
                                                        int64_t n_blocks, float g) {
    for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b < n_blocks; b += int64_t(gridDim.x) * blockDim.x) {
        float v[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = to_f32(x[b * 16 + i]);
        uint8_t c[8];
        quantize_block16<HW>(v, g, c, scales + b);
#pragma unroll
        for (int j = 0; j < 8; ++j) codes[b * 8 + j] = c[j];
    }
}

}  // namespace cuda
}  // namespace tetra
