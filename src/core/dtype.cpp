#include "core/dtype.h"

#include "core/error.h"

namespace tetra {

namespace {
struct dtype_info { dtype t; size_t size; const char* name; const char* st_name; };
const dtype_info k_infos[] = {
    {dtype::F32, 4, "f32", "F32"},   {dtype::F16, 2, "f16", "F16"},     {dtype::BF16, 2, "bf16", "BF16"},
    {dtype::E4M3, 1, "e4m3", "F8_E4M3"}, {dtype::U8, 1, "u8", "U8"},     {dtype::I8, 1, "i8", "I8"},
    {dtype::I16, 2, "i16", "I16"},   {dtype::I32, 4, "i32", "I32"},     {dtype::I64, 8, "i64", "I64"},
    {dtype::BOOL, 1, "bool", "BOOL"}, {dtype::F64, 8, "f64", "F64"},    {dtype::U16, 2, "u16", "U16"},
    {dtype::U32, 4, "u32", "U32"},   {dtype::U64, 8, "u64", "U64"},
};
const dtype_info& info(dtype t) {
    for (const auto& i : k_infos) if (i.t == t) return i;
    TETRA_ASSERT(false);
}
}  // namespace

size_t dtype_size(dtype t) { return info(t).size; }
const char* dtype_name(dtype t) { return info(t).name; }
const char* dtype_safetensors_name(dtype t) { return info(t).st_name; }

bool dtype_from_safetensors(const std::string& s, dtype* out) {
    for (const auto& i : k_infos) {
        if (s == i.st_name) { *out = i.t; return true; }
    }
    return false;
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
            u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
        }
    } else if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
    } else {
        u = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    return f32_from_bits(u);
}

uint16_t f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to Inf
    if (a < 0x38800000u) {  // below the smallest normal 2^-14: subnormal or zero
        // value = a_float; f16 subnormal step 2^-24. Use exact float arithmetic: scaling by 2^24
        // keeps the value exact, then round-to-nearest-even to an integer.
        float v = f32_from_bits(a) * 16777216.0f;
        uint32_t q = uint32_t(v);
        float rem = v - float(q);
        if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
        return uint16_t(sign | q);
    }
    uint32_t exp = ((a >> 23) - 127 + 15);
    uint32_t man = a & 0x7fffffu;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may bump the exponent: fine
    return uint16_t(sign | h);
}

float load_f32(const void* data, dtype t, int64_t i) {
    switch (t) {
        case dtype::F32: return static_cast<const float*>(data)[i];
        case dtype::F16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
        case dtype::BF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
        default: TETRA_ASSERT(false);
    }
}

}  // namespace tetra
