// Internals of the dummy-weight generator (dummy_weights.h), exposed for its tests: a counter-based
// normal generator (every value is a pure function of (seed, tensor name, row, column), so any
// thread count gives the same bytes) and a fast ModelOpt NVFP4 row quantizer that is bit-identical
// to nvfp4_quantize_modelopt. Both have an AVX2 path and a portable scalar path with the same bytes.
#pragma once
#include <cstdint>
#include <string>

namespace tetra {

// The key of one tensor: a hash of the seed and the tensor's full name.
uint64_t dummy_tensor_key(uint64_t seed, const std::string& name);

// Row `row` of a tensor: out[j] = bf16(sigma · z + mean) as f32 (bf16-exact), z ~ N(0, 1) by
// Box-Muller from two 32-bit hashes of (key, row, column). sigma, mean: finite.
// out: f32 [cols]. simd = false forces the scalar path (same bytes).
void dummy_normal_row(uint64_t tensor_key, int64_t row, int64_t cols, float sigma, float mean, float* out,
                      bool simd = true);

// One row of nvfp4_quantize_modelopt (same bytes): w f32 [cols], cols % 16 == 0; scale_global = S
// (weight_scale_2); codes u8 [cols/2], scales e4m3 [cols/16]. simd = false calls the codec.
void dummy_quantize_row_modelopt(const float* w, int64_t cols, float scale_global, uint8_t* codes,
                                 uint8_t* scales, bool simd = true);

// Whether this CPU runs the AVX2+FMA paths (else simd = true silently uses the scalar ones).
bool dummy_simd_available();

}  // namespace tetra
