// CPU backend internals: per-op table registration (one function per op file), the entries of
// fast kernels that live in their own files (the op file adds them to its table), and scalar
// load/store helpers for f32|bf16|f16 activations. Not part of the backend interface.
#pragma once
#include <algorithm>
#include <cstdint>

#include "backend/ops.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cpu {

// One per op file (cpu/<op>_cpu.cpp): adds that op's table.
void register_get_rows(kernel_registry& r);
void register_rms_norm(kernel_registry& r);
void register_add_rms_norm(kernel_registry& r);
void register_rope(kernel_registry& r);
void register_kv_store(kernel_registry& r);
void register_qkv_rope_store(kernel_registry& r);  // qkv_rope_store_cpu.cpp
void register_decode_layers(kernel_registry& r);    // decode_layers_cpu.cpp
void register_attention(kernel_registry& r);
void register_matmul_dense(kernel_registry& r);
void register_matmul_nvfp4_w4a16(kernel_registry& r);
void register_matmul_nvfp4_w4a4(kernel_registry& r);
void register_silu_mul(kernel_registry& r);
void register_matmul_silu(kernel_registry& r);  // matmul_silu_cpu.cpp
void register_add(kernel_registry& r);
void register_argmax(kernel_registry& r);
void register_cast(kernel_registry& r);

// Fast kernels (their own files, same stems as the names).
kernel_entry matmul_dense_avx2_entry();
kernel_entry matmul_nvfp4_w4a16_avx2_entry();
kernel_entry matmul_nvfp4_w4a4_avx2_entry();

// W4A16 on already-f32 activations with the AVX2 kernel: out[m, n] = x[m, :] · W[n, :].
// x: [m, k] f32 (row stride k); out: [m, n] f32. Shared by the w4a16 and w4a4 fast kernels.
void nvfp4_matmul_avx2_f32(const float* x, int64_t m, const linear_weight& w, float* out);

// W4A4 activation fake-quantization (§3.5): each row of x is quantized per 16-block with G and
// dequantized to e2m1(code)·SF/G (the product is exact in f32, then one f32 division).
// x: [m, k] act (as stored); out: [m, k] f32
void w4a4_dequant_activations(const tensor& x, int64_t m, int64_t k, float g, float* out);

// Plain NVFP4 matmul: each weight row dequantized exactly (nvfp4_dequantize_row), f32 dot.
// x: [m, k] of dtype xt (row stride k); out: [m, n] act. Shared by the w4a16 and w4a4 plain kernels.
void nvfp4_matmul_plain(const void* x, dtype xt, int64_t m, const linear_weight& w, const tensor& out);

// One rms_norm row (shared by rms_norm_cpu and add_rms_norm_cpu): x, out: [.., n] act, row `row`.
void rms_norm_row(const void* x, const void* w, void* out, dtype xt, dtype wt, int64_t row, int64_t n, float eps);

inline float act_load(const void* p, dtype t, int64_t i) {
    switch (t) {
        case dtype::F32: return static_cast<const float*>(p)[i];
        case dtype::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
        default: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    }
}

inline void act_store(void* p, dtype t, int64_t i, float v) {
    switch (t) {
        case dtype::F32: static_cast<float*>(p)[i] = v; break;
        case dtype::BF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(v); break;
        default: static_cast<uint16_t*>(p)[i] = f32_to_f16(v); break;
    }
}

// parallel_for over [0, n) in chunks of at least `grain` items: element-wise ops on a decode step
// (a few thousand elements) are cheaper than waking the pool.
template <class F>
void parallel_for_grain(int64_t n, int64_t grain, const F& fn) {
    int64_t chunks = (n + grain - 1) / grain;
    parallel_for(chunks, [&](int64_t cb, int64_t ce) { fn(cb * grain, std::min(n, ce * grain)); });
}

// dst[i] = value of element off + i of p (dtype t), i < n: one dtype switch per row (exact).
inline void act_load_row(const void* p, dtype t, int64_t off, int64_t n, float* dst) {
    switch (t) {
        case dtype::F32: {
            const float* f = static_cast<const float*>(p) + off;
            for (int64_t i = 0; i < n; ++i) dst[i] = f[i];
            break;
        }
        case dtype::BF16: {
            const uint16_t* h = static_cast<const uint16_t*>(p) + off;
            for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
            break;
        }
        default: {
            const uint16_t* h = static_cast<const uint16_t*>(p) + off;
            for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
            break;
        }
    }
}

// Plain-kernel requirements: CPU, any of the three float activation dtypes.
inline kernel_req plain_req() {
    kernel_req r;
    r.device = device_kind::CPU;
    r.act_dtypes = {dtype::F32, dtype::BF16, dtype::F16};
    return r;
}

}  // namespace cpu
}  // namespace tetra
