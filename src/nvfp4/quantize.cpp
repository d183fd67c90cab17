// NVFP4 block quantization (ModelOpt §3.4, compressed-tensors §4.3, activations §3.5) and
// dequantization (§3.3) on the CPU. Every step is one fp32 operation in the order the reference
// code performs it, so the bytes equal the producers' CPU results; parallel over rows.
// Not reproduced: CT's Triton cast_to_fp4 (rounds the scaled value to bf16 first) and vLLM's
// rcp.approx activation kernel — both can differ by one code at exact E2M1 midpoints.
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/thread_pool.h"
#include "nvfp4/nvfp4.h"

namespace tetra {

namespace {

constexpr int64_t k_block = 16;
constexpr float k_e2m1_max = 6.0f;
constexpr float k_scale_max = 6.0f * 448.0f;  // 2688.0, exact; ModelOpt and CT both use it whole

// max |x| over one block; NaN if any element is NaN (torch.amax propagates NaN).
float block_amax(const float* x) {
    float m = 0.0f;
    bool nan = false;
    for (int64_t i = 0; i < k_block; ++i) {
        float a = std::fabs(x[i]);
        m = a > m ? a : m;
        nan |= a != a;
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

void check_shape(const char* what, int64_t rows, int64_t cols) {
    TETRA_CHECK(rows >= 0, "%s: rows must be >= 0; got %lld", what, (long long)rows);
    TETRA_CHECK(cols >= 0 && cols % k_block == 0,
                "%s: cols must be a non-negative multiple of 16; got %lld", what, (long long)cols);
}

void check_scale(const char* what, const char* name, float v) {
    TETRA_CHECK(std::isfinite(v) && v > 0.0f, "%s: %s must be finite and > 0; got %g", what, name,
                double(v));
}

// ModelOpt NVFP4QTensor.quantize for one row w[cols] (fp32):
//   s_b = f32(amax_b) / (6 · S)         6·S is an fp32 product, then one fp32 division
//   s_b == 0 → 1.0                      (all-zero block → byte 0x38)
//   byte = e4m3(s_b)                    RNE; no clamp (the 2025-12 snapshot; later ModelOpt
//                                       clamps s_b >= 2^-9, which turns byte 0x00 into 0x01)
//   q = w / (f32(e4m3(byte)) · S)       fp32 product, then fp32 division
//   code = e2m1_encode_modelopt(q)      sign = (q < 0), −0 → 0x0
void quantize_row_modelopt(const float* w, int64_t cols, float scale_global, uint8_t* codes,
                           uint8_t* scales) {
    const float six_s = 6.0f * scale_global;
    for (int64_t b = 0; b < cols / k_block; ++b) {
        const float* x = w + b * k_block;
        float s_b = block_amax(x) / six_s;
        if (s_b == 0.0f) s_b = 1.0f;
        uint8_t byte = e4m3_encode(s_b);
        scales[b] = byte;
        const float divisor = e4m3_decode(byte) * scale_global;
        uint8_t* out = codes + b * (k_block / 2);
        for (int64_t j = 0; j < k_block / 2; ++j)
            out[j] = e2m1_pack(e2m1_encode_modelopt(x[2 * j] / divisor),
                               e2m1_encode_modelopt(x[2 * j + 1] / divisor));
    }
}

// compressed-tensors calculate_qparams + _quantize for one row, with G = global_ct:
//   local = G · (amax_b / 6)            fp32 division, then fp32 product
//   clamp ±448 → e4m3 RNE               (e4m3_encode saturates, so the clamp is implied)
//   scale == 0 → 0.125 (byte 0x20)
//   q = x / (scale / G)                 fp32 division scale/G, then x / that
//   clamp ±6, code = e2m1_encode(q)     (e2m1_encode saturates; signbit, so −0 → 0x8)
// The Triton pack kernel casts q to bf16 before rounding (double rounding near midpoints); that
// is a kernel artefact, not the recipe, and is not reproduced here.
void quantize_row_ct(const float* w, int64_t cols, float global_ct, uint8_t* codes,
                     uint8_t* scales) {
    for (int64_t b = 0; b < cols / k_block; ++b) {
        const float* x = w + b * k_block;
        uint8_t byte = e4m3_encode(global_ct * (block_amax(x) / k_e2m1_max));
        if (e4m3_decode(byte) == 0.0f) byte = 0x20;  // eps of float8_e4m3fn in CT = 0.125
        scales[b] = byte;
        const float divisor = e4m3_decode(byte) / global_ct;
        uint8_t* out = codes + b * (k_block / 2);
        for (int64_t j = 0; j < k_block / 2; ++j)
            out[j] = e2m1_pack(e2m1_encode(x[2 * j] / divisor), e2m1_encode(x[2 * j + 1] / divisor));
    }
}

}  // namespace

float nvfp4_scale_global_modelopt(float amax) {
    // ModelOpt: amax.float() / (6.0 * 448.0) — one fp32 division by the constant 2688.0 on CPU.
    // (torch on CUDA computes tensor / python-scalar as a * f32(1/2688), which can differ by
    // one ulp; checkpoints store the value, so loaders never recompute it.)
    return amax / k_scale_max;
}

float nvfp4_global_scale_ct(float amax) {
    // generate_gparam: 448·6 / clamp(amax, min=FLT_MIN), then nan_to_num(nan=posinf=neginf=1).
    // clamp keeps NaN (torch.clamp propagates it), which then yields NaN → 1.0.
    float m = amax != amax ? amax : (amax < std::numeric_limits<float>::min()
                                         ? std::numeric_limits<float>::min() : amax);
    float g = k_scale_max / m;
    return std::isfinite(g) ? g : 1.0f;
}

void nvfp4_quantize_modelopt(const float* w, int64_t rows, int64_t cols, float scale_global,
                             uint8_t* codes, uint8_t* scales) {
    check_shape("nvfp4_quantize_modelopt", rows, cols);
    check_scale("nvfp4_quantize_modelopt", "scale_global (weight_scale_2)", scale_global);
    parallel_for(rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            quantize_row_modelopt(w + r * cols, cols, scale_global, codes + r * (cols / 2),
                                  scales + r * (cols / k_block));
    });
}

void nvfp4_quantize_ct(const float* w, int64_t rows, int64_t cols, float global_ct,
                       uint8_t* codes, uint8_t* scales) {
    check_shape("nvfp4_quantize_ct", rows, cols);
    check_scale("nvfp4_quantize_ct", "global_ct (weight_global_scale)", global_ct);
    parallel_for(rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            quantize_row_ct(w + r * cols, cols, global_ct, codes + r * (cols / 2),
                            scales + r * (cols / k_block));
    });
}

void nvfp4_dequantize_row(const uint8_t* codes_row, const uint8_t* scales_row, float scale_global,
                          int64_t cols, float* out) {
    // ModelOpt order: per_block = f32(e4m3) · S (one rounding), then e2m1 · per_block.
    for (int64_t b = 0; b < cols / k_block; ++b) {
        const float per_block = e4m3_decode(scales_row[b]) * scale_global;
        const uint8_t* c = codes_row + b * (k_block / 2);
        float* o = out + b * k_block;
        for (int64_t j = 0; j < k_block / 2; ++j) {
            o[2 * j] = e2m1_decode(c[j] & 0xF) * per_block;
            o[2 * j + 1] = e2m1_decode(c[j] >> 4) * per_block;
        }
    }
}

void nvfp4_dequantize(const uint8_t* codes, const uint8_t* scales, float scale_global,
                      int64_t rows, int64_t cols, float* out) {
    check_shape("nvfp4_dequantize", rows, cols);
    parallel_for(rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            nvfp4_dequantize_row(codes + r * (cols / 2), scales + r * (cols / k_block),
                                 scale_global, cols, out + r * cols);
    });
}

void nvfp4_quantize_activation_row(const float* x, int64_t cols, float global_quant,
                                   uint8_t* codes, uint8_t* scales) {
    // vLLM cvt_warp_fp16_to_fp4 with exact fp32 arithmetic in place of rcp.approx:
    //   SF = e4m3(G · (amax_b / 6)) saturating; no zero replacement (byte 0x00 stays);
    //   codes = e2m1_encode(x / (SF / G)); SF == 0 → outputScale 0, so codes = e2m1(x · 0),
    //   i.e. 0x0, 0x8 for negative x (and −0), 0x7 for NaN.
    check_shape("nvfp4_quantize_activation_row", 1, cols);
    check_scale("nvfp4_quantize_activation_row", "global_quant (input_global_scale_inv)",
                global_quant);
    for (int64_t b = 0; b < cols / k_block; ++b) {
        const float* xb = x + b * k_block;
        uint8_t byte = e4m3_encode(global_quant * (block_amax(xb) / k_e2m1_max));
        scales[b] = byte;
        const float sf = e4m3_decode(byte);
        uint8_t* out = codes + b * (k_block / 2);
        if (sf == 0.0f) {
            for (int64_t j = 0; j < k_block / 2; ++j)
                out[j] = e2m1_pack(e2m1_encode(xb[2 * j] * 0.0f), e2m1_encode(xb[2 * j + 1] * 0.0f));
            continue;
        }
        const float divisor = sf / global_quant;
        for (int64_t j = 0; j < k_block / 2; ++j)
            out[j] = e2m1_pack(e2m1_encode(xb[2 * j] / divisor), e2m1_encode(xb[2 * j + 1] / divisor));
    }
}

}  // namespace tetra
