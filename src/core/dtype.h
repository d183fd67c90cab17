// Element types and scalar conversions (bf16/f16 <-> f32). Conversions to narrow floats round to
// nearest even; NaN stays NaN (quiet). e2m1/e4m3 codecs live in nvfp4/, not here.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace tetra {

enum class dtype : uint8_t { F32, F16, BF16, E4M3, U8, I8, I16, I32, I64, BOOL, F64, U16, U32, U64 };

size_t dtype_size(dtype t);
const char* dtype_name(dtype t);          // "f32", "bf16", "e4m3", ...
const char* dtype_safetensors_name(dtype t);  // "F32", "BF16", "F8_E4M3", ...
bool dtype_from_safetensors(const std::string& s, dtype* out);

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float f32_from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                          // RNE
    return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Read element i of a buffer of type t as f32 (F32, F16, BF16 only; others assert).
float load_f32(const void* data, dtype t, int64_t i);

}  // namespace tetra
