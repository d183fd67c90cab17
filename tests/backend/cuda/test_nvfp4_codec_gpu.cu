// The device NVFP4 codecs (src/backend/cuda/nvfp4_device.cuh) on all 2^32 f32 inputs: the software
// E2M1 encoder and the E4M3 encoder each against an independent nearest-value formulation of the
// spec written here (RNE ties to the even code, satfinite, NaN and −0 rules of
// reference/nvfp4-format.md §1–§2); then 2^22 strided inputs against the CPU codec bytes directly.
// The hardware e2m1 path is used only on a/f images of 10.x–12.x, so on sm_90 this covers the
// encoder every non-FP4 GPU runs.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cuda/nvfp4_device.cuh"
#include "nvfp4/nvfp4.h"

namespace {

using namespace tetra::cuda;

// Spec: |x| to the nearest of {0, .5, 1, 1.5, 2, 3, 4, 6}; exact ties to the even code; beyond
// 6 (incl. Inf) → 6; NaN → 0x7; sign bit copied (−0 → 0x8).
__device__ uint32_t e2m1_spec(float x) {
    const float v[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7u;
    float a = fabsf(x);
    uint32_t best = 7;
    if (a < 6.0f) {
        best = 0;
        for (uint32_t c = 1; c < 8; ++c) {
            float dc = fabsf(a - v[c]), db = fabsf(a - v[best]);  // exact: all values are short
            if (dc < db || (dc == db && (c & 1u) == 0)) best = c;
        }
    }
    return ((u >> 28) & 0x8u) | best;
}

// Spec: |x| to the nearest finite e4m3fn magnitude (codes 0..0x7E), ties to the even code;
// beyond 448 (incl. Inf) → 0x7E; NaN → 0x7F (sign dropped); sign bit copied otherwise.
__device__ uint32_t e4m3_spec(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7Fu;
    float a = fabsf(x);
    uint32_t lo = 0, hi = 0x7E;
    if (a >= 448.0f) {
        lo = 0x7E;
    } else {
        while (hi - lo > 1) {  // largest code with value ≤ a
            uint32_t mid = (lo + hi) / 2;
            if (e4m3_decode_dev(mid) <= a) lo = mid;
            else hi = mid;
        }
        double dl = double(a) - double(e4m3_decode_dev(lo)), dh = double(e4m3_decode_dev(lo + 1)) - double(a);
        if (dh < dl || (dh == dl && (lo & 1u))) lo = lo + 1;
    }
    return ((u >> 24) & 0x80u) | lo;
}

// Counts mismatches over inputs [base, base + n) (as bit patterns).
// done[0] counts the inputs visited (must be 2^32 after the sweep).
__global__ void codec_sweep_kernel(uint64_t base, uint64_t n, unsigned long long* bad_e2m1,
                                   unsigned long long* bad_e4m3, uint32_t* first, unsigned long long* done) {
    unsigned long long b2 = 0, b4 = 0, seen = 0;
    for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
        ++seen;
        uint32_t bits = uint32_t(base + i);
        float x = __uint_as_float(bits);
        if (e2m1_encode_sw(x) != e2m1_spec(x)) ++b2, atomicMin(first, bits);
        if (e4m3_encode_dev(x) != e4m3_spec(x)) ++b4, atomicMin(first + 1, bits);
    }
    atomicAdd(done, seen);
    if (b2) atomicAdd(bad_e2m1, b2);
    if (b4) atomicAdd(bad_e4m3, b4);
}

__global__ void codec_sample_kernel(uint32_t stride, uint32_t n, uint8_t* e2m1, uint8_t* e4m3) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float x = __uint_as_float(i * stride + (i & 0xFFu));
        e2m1[i] = uint8_t(e2m1_encode_sw(x));
        e4m3[i] = uint8_t(e4m3_encode_dev(x));
    }
}

#define CK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

}  // namespace

TEST(nvfp4_codec_gpu, all_2p32_inputs_match_the_spec) {
    unsigned long long* bad = nullptr;
    uint32_t* first = nullptr;
    CK(cudaMalloc(&bad, 3 * sizeof(unsigned long long)));
    CK(cudaMalloc(&first, 2 * sizeof(uint32_t)));
    CK(cudaMemset(bad, 0, 3 * sizeof(unsigned long long)));
    CK(cudaMemset(first, 0xFF, 2 * sizeof(uint32_t)));
    const uint64_t chunk = 1ull << 30;
    for (uint64_t base = 0; base < (1ull << 32); base += chunk) {
        codec_sweep_kernel<<<4096, 256>>>(base, chunk, bad, bad + 1, first, bad + 2);
        CK(cudaGetLastError());
    }
    unsigned long long h[3];
    uint32_t f[2];
    CK(cudaMemcpy(h, bad, sizeof h, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(f, first, sizeof f, cudaMemcpyDeviceToHost));
    EXPECT_EQ(h[2], 1ull << 32) << "inputs visited";
    EXPECT_EQ(h[0], 0ull) << "e2m1_encode_sw differs from the spec; first input bits 0x" << std::hex << f[0];
    EXPECT_EQ(h[1], 0ull) << "e4m3_encode_dev differs from the spec; first input bits 0x" << std::hex << f[1];
    cudaFree(bad), cudaFree(first);
}

TEST(nvfp4_codec_gpu, strided_inputs_match_the_cpu_codec) {
    const uint32_t n = 1u << 22, stride = 1021;  // covers the whole bit range, all exponents
    uint8_t *d2 = nullptr, *d4 = nullptr;
    CK(cudaMalloc(&d2, n));
    CK(cudaMalloc(&d4, n));
    codec_sample_kernel<<<1024, 256>>>(stride, n, d2, d4);
    CK(cudaGetLastError());
    std::vector<uint8_t> h2(n), h4(n);
    CK(cudaMemcpy(h2.data(), d2, n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h4.data(), d4, n, cudaMemcpyDeviceToHost));
    int64_t bad2 = 0, bad4 = 0;
    for (uint32_t i = 0; i < n; ++i) {
        uint32_t bits = i * stride + (i & 0xFFu);
        float x;
        std::memcpy(&x, &bits, 4);
        bad2 += h2[i] != tetra::e2m1_encode(x);
        bad4 += h4[i] != tetra::e4m3_encode(x);
    }
    EXPECT_EQ(bad2, 0);
    EXPECT_EQ(bad4, 0);
    cudaFree(d2), cudaFree(d4);
}
