// NVFP4 codec on the CPU, exact (reference/nvfp4-format.md is normative):
//   E2M1 element codes (RNE, satfinite), E4M3 block scales (RNE, saturating at 448),
//   block quantization by the ModelOpt (§3.4) and compressed-tensors (§4.3) recipes,
//   dequantization (§3.3), global-scale conventions, and the 128x4 scale swizzle (§5).
// Layout everywhere: codes u8[rows, cols/2] with the even element in the low nibble,
// scales e4m3[rows, cols/16] row-major; cols must be a multiple of 16.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tetra {

// ---- E2M1 -------------------------------------------------------------------------------
// RNE on |x|, satfinite (|x| > 6 and ±Inf → ±6), NaN → 0x7, −0 → 0x8 (sign kept, as PTX cvt).
uint8_t e2m1_encode(float x);
// ModelOpt-compatible: identical except the sign bit is (x < 0), so −0 → 0x0.
uint8_t e2m1_encode_modelopt(float x);
float e2m1_decode(uint8_t code);  // code & 0xF
inline uint8_t e2m1_pack(uint8_t even, uint8_t odd) { return uint8_t((even & 0xF) | (odd & 0xF) << 4); }

// ---- E4M3 (e4m3fn) ------------------------------------------------------------------------
// RNE in normal and subnormal ranges; |x| > 448 and ±Inf saturate to ±448 (0x7E/0xFE); NaN → 0x7F.
uint8_t e4m3_encode(float x);
float e4m3_decode(uint8_t b);  // 0x7F/0xFF → NaN

// ---- global scales ------------------------------------------------------------------------
// Dequant-direction global scale S (ModelOpt weight_scale_2 / input_scale) = amax / (6·448), fp32.
float nvfp4_scale_global_modelopt(float amax);
// Quant-direction global scale G (compressed-tensors *_global_scale) = 6·448 / max(amax, tiny);
// NaN/Inf → 1.0.
float nvfp4_global_scale_ct(float amax);
// Conventions: S = 1 / G. Conversions are fp32 reciprocals (not bit-identical round trips).
inline float nvfp4_ct_to_dequant(float global_scale_ct) { return 1.0f / global_scale_ct; }
inline float nvfp4_dequant_to_ct(float scale_global) { return 1.0f / scale_global; }

enum class nvfp4_recipe : uint8_t { MODELOPT, COMPRESSED_TENSORS };

// Quantize w[rows, cols] (fp32 values; callers promote bf16/f16 first) → codes u8[rows, cols/2],
// scales e4m3[rows, cols/16]. Each recipe takes its own stored global scale, in its own direction:
// ModelOpt the dequant-direction S (weight_scale_2), compressed-tensors the quant-direction G
// (weight_global_scale); both must be finite and > 0 (tetra::error otherwise). Every step is one
// fp32 operation in the reference order (exact, bit-equal to the producers' CPU path):
// ModelOpt: s_b = amax_b / (6·S) → e4m3 (0 → 1.0 = 0x38), q = w / (e4m3(s_b)·S), e2m1_encode_modelopt.
// CT:       s_b = G·(amax_b/6) clamped ±448 → e4m3, 0 → 0x20, q = w / (e4m3(s_b)/G), e2m1_encode.
// (CT's Triton pack kernel rounds q to bf16 first; that double rounding is not reproduced.)
void nvfp4_quantize_modelopt(const float* w, int64_t rows, int64_t cols, float scale_global,
                             uint8_t* codes, uint8_t* scales);
void nvfp4_quantize_ct(const float* w, int64_t rows, int64_t cols, float global_ct,
                       uint8_t* codes, uint8_t* scales);

// w[r,c] = e2m1(code) · e4m3(scale) · scale_global  (§3.3), fp32 out [rows, cols], rounded in
// ModelOpt's order: per_block = f32(e4m3) · scale_global first, then e2m1 · per_block.
void nvfp4_dequantize(const uint8_t* codes, const uint8_t* scales, float scale_global,
                      int64_t rows, int64_t cols, float* out);
// One row, for matmul kernels: out[cols].
void nvfp4_dequantize_row(const uint8_t* codes_row, const uint8_t* scales_row, float scale_global,
                          int64_t cols, float* out);

// ---- activations (W4A4 oracle, §3.5) --------------------------------------------------------
// Quantize one activation row x[cols] to NVFP4 with the quant-direction global scale G
// (vLLM's input_global_scale_inv: 1/input_scale for ModelOpt, input_global_scale for CT):
// per block SF = e4m3(G·(amax_b/6)) (saturating), codes = e2m1_encode(x · (G / SF)) computed as
// x / (SF / G) with exact fp32 division (SF == 0 → all codes 0 / 0x8 for −0). The row dequantizes
// to e2m1(code)·SF/G.
void nvfp4_quantize_activation_row(const float* x, int64_t cols, float global_quant,
                                   uint8_t* codes, uint8_t* scales);

// ---- 128x4 scale swizzle (§5) -------------------------------------------------------------
int64_t nvfp4_swizzle_padded_rows(int64_t rows);      // ceil(rows/128)·128
int64_t nvfp4_swizzle_padded_kblocks(int64_t kb);     // ceil(kb/4)·4
// Byte offset of S[m, kb] in the swizzled buffer; kb_pad = padded number of K-blocks.
int64_t nvfp4_swizzle_offset(int64_t m, int64_t kb, int64_t kb_pad);
// linear [rows, kb] → swizzled [rows_pad · kb_pad] (padding bytes zero) and back.
void nvfp4_swizzle_scales(const uint8_t* linear, int64_t rows, int64_t kb, uint8_t* swizzled);
void nvfp4_unswizzle_scales(const uint8_t* swizzled, int64_t rows, int64_t kb, uint8_t* linear);

}  // namespace tetra
