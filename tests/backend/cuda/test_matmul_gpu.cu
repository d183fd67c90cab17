// GPU matmul kernels vs the CPU oracle (label gpu): W4A16 NVFP4 (decode stream-K and sweep kernels, small-M
// mma.sync kernels v1/v2 under several plans, and the dequant + cuBLASLt large-M path) and dense
// bf16 (cuBLASLt). The reference dequantizes with
// src/nvfp4 (reference/nvfp4-format.md §3.3) and multiplies in double. Odd shapes (k a multiple of
// 16 but not of 64, odd n), output sentinels, NaN parity, M=1 vs M=16 bit-identity, determinism,
// an exhaustive exactness check of the in-register dequant (every code × every e4m3 scale), and
// both kernels reached through the backend (registry selection, prepare step).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/arch.h"
#include "backend/backend.h"
#include "backend/ops.h"
#include "backend/registry.h"
#include "backend/cuda/matmul_launch.h"
#include "core/dtype.h"
#include "core/error.h"
#include "nvfp4/nvfp4.h"

using namespace tetra;

namespace {

#define CK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

struct dbuf {
    void* p = nullptr;
    size_t bytes = 0;
    explicit dbuf(size_t b) : bytes(b) {
        if (b && cudaMalloc(&p, b) != cudaSuccess) p = nullptr;
        if (p) cudaMemset(p, 0, b);
    }
    ~dbuf() { if (p) cudaFree(p); }
    dbuf(const dbuf&) = delete;
    dbuf& operator=(const dbuf&) = delete;
};

int sm_count() {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n;
}

// A random NVFP4 weight: all 16 codes, realistic e4m3 scales (2^-6 .. 2^3), scale_global 0.0123.
struct host_weight {
    int64_t n, k;
    std::vector<uint8_t> codes, scales;
    float scale_global = 0.0123f;
};

host_weight random_weight(int64_t n, int64_t k, uint32_t seed) {
    std::mt19937 rng(seed);
    host_weight w{n, k, std::vector<uint8_t>(size_t(n * k / 2)), std::vector<uint8_t>(size_t(n * k / 16))};
    for (auto& c : w.codes) c = uint8_t(rng());
    for (auto& s : w.scales) s = uint8_t(0x08 + rng() % 0x50) | uint8_t((rng() & 7) == 0 ? 0x80 : 0);
    return w;
}

std::vector<uint16_t> random_bf16(int64_t count, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<uint16_t> v(static_cast<size_t>(count));
    for (auto& e : v) e = f32_to_bf16(nd(rng));
    return v;
}

// ref[m, n] = Σ_k x[m, k] · W[n, k] in double with W from nvfp4_dequantize; also Σ|x·W| per element.
void oracle(const std::vector<uint16_t>& x, int64_t m, const std::vector<float>& wf, int64_t n, int64_t k,
            std::vector<double>& ref, std::vector<double>& mag) {
    ref.assign(size_t(m * n), 0.0), mag.assign(size_t(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double s = 0, a = 0;
            for (int64_t kk = 0; kk < k; ++kk) {
                double p = double(bf16_to_f32(x[size_t(i * k + kk)])) * double(wf[size_t(j * k + kk)]);
                s += p, a += std::fabs(p);
            }
            ref[size_t(i * n + j)] = s, mag[size_t(i * n + j)] = a;
        }
}

std::vector<float> dequant_host(const host_weight& w) {
    std::vector<float> wf(static_cast<size_t>(w.n * w.k));
    nvfp4_dequantize(w.codes.data(), w.scales.data(), w.scale_global, w.n, w.k, wf.data());
    return wf;
}

// Tolerance, per element: bf16 output rounding (≤ 2^-8 relative: half an ulp at the bottom of a
// binade) plus f32 accumulation (≤ k·2^-24 · Σ|x·w|, the recursive-summation bound). NMSE ≤
// Σ(half-ulp(|ref| + acc) + acc)² / Σ ref², the same worst case summed (uniform rounding gives
// ≈ 1.3e-6; a flat 2^-18 is not a bound: a few elements just above a power of two exceed it). NaN (±Inf) must appear exactly where the oracle has it.
void expect_close(const std::vector<uint16_t>& out, const std::vector<double>& ref, const std::vector<double>& mag,
                  int64_t k, const char* what) {
    double err2 = 0, ref2 = 0, acc2 = 0;
    int bad = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        double o = bf16_to_f32(out[i]);
        if (std::isnan(ref[i]) || std::isnan(o)) {
            if (std::isnan(ref[i]) != std::isnan(o) && bad++ < 5)
                ADD_FAILURE() << what << ": NaN mismatch at " << i << ": got " << o << ", want " << ref[i];
            continue;
        }
        if (std::isinf(ref[i]) || std::isinf(o)) {  // ±Inf exactly where the oracle has it, same sign
            if (o != ref[i] && bad++ < 5) ADD_FAILURE() << what << ": Inf mismatch at " << i << ": got " << o << ", want " << ref[i];
            continue;
        }
        double tol = std::ldexp(std::fabs(ref[i]), -8) + double(k) * std::ldexp(mag[i], -24);
        if (std::fabs(o - ref[i]) > tol && bad++ < 5)
            ADD_FAILURE() << what << ": element " << i << ": got " << o << ", want " << ref[i] << " (tol " << tol << ")";
        // worst case of this element: half a bf16 ulp of the computed value (8 significant bits;
        // the computed value is within `acc` of ref) plus the accumulation bound
        double acc = double(k) * std::ldexp(mag[i], -24), big = std::fabs(ref[i]) + acc;
        double half_ulp = big > 0 ? std::ldexp(1.0, std::ilogb(big) - 8) : 0.0;
        err2 += (o - ref[i]) * (o - ref[i]), ref2 += ref[i] * ref[i], acc2 += (half_ulp + acc) * (half_ulp + acc);
    }
    EXPECT_EQ(bad, 0) << what;
    if (ref2 > 0) EXPECT_LE(err2 / ref2, acc2 / ref2) << what << ": NMSE";
}

enum class path { AUTO, SMALL, LARGE };

// The re-laid weight and workspace on the device.
struct dev_weight {
    cuda::w4a16_sm80_weight w;
    cuda::w4a16_sm80_workspace ws;
    std::unique_ptr<dbuf> codes, scales, dequant, cublas;  // partial and counters: fresh per run (run_guarded)
    dev_weight(const host_weight& h, int64_t m_max) {
        cuda::w4a16_sm80_dims d = cuda::w4a16_sm80_dims_of(h.n, h.k);
        std::vector<uint8_t> pc(d.codes_bytes), ps(d.scales_bytes);
        cuda::w4a16_sm80_pack(h.codes.data(), h.scales.data(), h.n, h.k, pc.data(), ps.data());
        codes = std::make_unique<dbuf>(pc.size()), scales = std::make_unique<dbuf>(ps.size());
        cudaMemcpy(codes->p, pc.data(), pc.size(), cudaMemcpyHostToDevice);
        cudaMemcpy(scales->p, ps.data(), ps.size(), cudaMemcpyHostToDevice);
        w.codes = codes->p, w.scales = scales->p, w.n = h.n, w.k = h.k, w.scale_global = h.scale_global;
        ws = cuda::w4a16_sm80_workspace_need(std::max<int64_t>(m_max, 65), h.n, h.k, sm_count());
        dequant = std::make_unique<dbuf>(ws.dequant_bytes);
        cublas = std::make_unique<dbuf>(ws.cublas_bytes);
        ws.dequant = dequant->p, ws.cublas = cublas->p;
    }
};

constexpr int GUARD = 64;  // bf16 sentinels before and after every output
constexpr uint16_t SENTINEL = 0x7F7F;

// Uploads x, runs launch(x, out, ws) with out = an [m, n] output between sentinel guards and ws =
// `ws` with fresh zeroed partial and counter buffers of its sizes, then checks the guards and that
// every split-K counter is back at 0; returns the output.
template <class Launch>
std::vector<uint16_t> run_guarded(const std::vector<uint16_t>& x, int64_t m, int64_t n, cuda::w4a16_sm80_workspace ws,
                                  Launch launch) {
    dbuf dx(x.size() * 2), dout(size_t(m * n + 2 * GUARD) * 2), part(std::max<size_t>(ws.partial_bytes, 4)),
        cnt(ws.counter_count * 4);
    ws.partial = part.p, ws.counters = static_cast<int*>(cnt.p);
    std::vector<uint16_t> host(static_cast<size_t>(m * n + 2 * GUARD), SENTINEL);
    cudaMemcpy(dx.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dout.p, host.data(), host.size() * 2, cudaMemcpyHostToDevice);
    launch(dx.p, static_cast<uint16_t*>(dout.p) + GUARD, ws);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(host.data(), dout.p, host.size() * 2, cudaMemcpyDeviceToHost);
    for (int i = 0; i < GUARD; ++i) {
        EXPECT_EQ(host[size_t(i)], SENTINEL) << "guard before the output overwritten at " << i;
        EXPECT_EQ(host[host.size() - 1 - size_t(i)], SENTINEL) << "guard after the output overwritten";
    }
    std::vector<int> counters(ws.counter_count);
    cudaMemcpy(counters.data(), cnt.p, counters.size() * 4, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < counters.size(); ++i)
        if (counters[i] != 0) {
            ADD_FAILURE() << "split-K counter " << i << " left at " << counters[i];
            break;
        }
    return std::vector<uint16_t>(host.begin() + GUARD, host.end() - GUARD);
}

// Runs the W4A16 launcher (or one of its two paths); returns the [m, n] output, checking the guards.
std::vector<uint16_t> run_w4a16(const dev_weight& dw, const std::vector<uint16_t>& x, int64_t m, path pth) {
    return run_guarded(x, m, dw.w.n, dw.ws, [&](const void* dx, void* out, const cuda::w4a16_sm80_workspace& w) {
        if (pth == path::SMALL) cuda::matmul_nvfp4_w4a16_sm80_small_launch(dx, m, dw.w, out, w, sm_count(), 0);
        else if (pth == path::LARGE) cuda::matmul_nvfp4_w4a16_sm80_large_launch(dx, m, dw.w, out, w, 0);
        else cuda::matmul_nvfp4_w4a16_sm80_launch(dx, m, dw.w, out, w, sm_count(), 0);
    });
}

// Runs the decode kernel with config `cfg` on a device of `sms` SMs (fewer than the real count
// gives longer runs per warp: runs spanning several tiles); checks the guards like run_w4a16.
std::vector<uint16_t> run_gemv(const dev_weight& dw, const std::vector<uint16_t>& x, int64_t m,
                               const cuda::w4a16_gemv_config& cfg = {}, int sms = 0) {
    if (sms == 0) sms = sm_count();
    cuda::w4a16_gemv_plan pl = cuda::w4a16_gemv_plan_of(dw.w.n, dw.w.k, sms, cfg);
    cuda::w4a16_sm80_workspace ws;
    ws.partial_bytes = pl.partial_bytes, ws.counter_count = pl.counter_count;
    return run_guarded(x, m, dw.w.n, ws, [&](const void* dx, void* out, const cuda::w4a16_sm80_workspace& w) {
        cuda::matmul_nvfp4_w4a16_gemv_launch(dx, m, dw.w, out, w, sms, 0, cfg);
    });
}

// Runs the sweep decode kernel under plan cfg (T = 0: the default plan); checks the guards and that
// the counters are back at 0.
std::vector<uint16_t> run_sweep(const dev_weight& dw, const std::vector<uint16_t>& x, int64_t m,
                                const cuda::w4a16_sweep_config& cfg = {}) {
    cuda::w4a16_sweep_plan pl = cuda::w4a16_sweep_plan_of(dw.w.n, dw.w.k, m, cfg);
    cuda::w4a16_sm80_workspace ws;
    ws.partial_bytes = pl.partial_bytes, ws.counter_count = pl.counter_count;
    const int64_t out_n = cfg.silu_n_ff > 0 ? cfg.silu_n_ff : dw.w.n;  // matmul_silu: [m, n_ff]
    return run_guarded(x, m, out_n, ws, [&](const void* dx, void* out, const cuda::w4a16_sm80_workspace& w) {
        cuda::matmul_nvfp4_w4a16_sweep_launch(dx, m, dw.w, out, w, 0, cfg);
    });
}

std::vector<uint16_t> run_small(const dev_weight& dw, const std::vector<uint16_t>& x, int64_t m,
                                const cuda::w4a16_small_config& cfg, int sms = 0) {
    if (sms == 0) sms = sm_count();
    cuda::w4a16_sm80_workspace ws = cuda::w4a16_sm80_workspace_need(m, dw.w.n, dw.w.k, sms, cfg);
    return run_guarded(x, m, dw.w.n, ws, [&](const void* dx, void* out, const cuda::w4a16_sm80_workspace& w) {
        cuda::matmul_nvfp4_w4a16_sm80_small_launch(dx, m, dw.w, out, w, sms, 0, cfg);
    });
}

// matmul_silu on the small-M kernel (version 1, gate/up pairs): out [m, n_ff] for the stacked
// weight of dw (n = 2·n_ff), on a device of `sms` SMs.
std::vector<uint16_t> run_silu(const dev_weight& dw, const std::vector<uint16_t>& x, int64_t m, int sms) {
    cuda::w4a16_small_config cfg;
    cfg.version = 1, cfg.silu_n_ff = dw.w.n / 2;
    cuda::w4a16_sm80_workspace ws = cuda::w4a16_sm80_workspace_need(m, dw.w.n, dw.w.k, sms, cfg);
    return run_guarded(x, m, dw.w.n / 2, ws, [&](const void* dx, void* out, const cuda::w4a16_sm80_workspace& w) {
        cuda::matmul_nvfp4_w4a16_sm80_small_launch(dx, m, dw.w, out, w, sms, 0, cfg);
    });
}

// silu_mul_gate_up of a [m, 2·n_ff] bf16 gu on the host: f32, std::exp, one rounding (the CPU
// oracle's arithmetic).
std::vector<uint16_t> host_silu(const std::vector<uint16_t>& gu, int64_t m, int64_t n_ff) {
    std::vector<uint16_t> out(size_t(m * n_ff));
    for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n_ff; ++j) {
            float g = bf16_to_f32(gu[size_t(r * 2 * n_ff + j)]), u = bf16_to_f32(gu[size_t(r * 2 * n_ff + n_ff + j)]);
            out[size_t(r * n_ff + j)] = f32_to_bf16(g / (1.0f + std::exp(-g)) * u);
        }
    return out;
}

struct shape { int64_t n, k; };
const shape k_shapes[] = {{33, 80}, {100, 208}, {257, 1040}, {61, 4112}, {1000, 2064}};
const int64_t k_ms[] = {1, 3, 16, 17, 100};

}  // namespace

TEST(matmul_w4a16_sm80, matches_oracle_odd_shapes) {
    uint32_t seed = 1;
    for (const shape& s : k_shapes) {
        host_weight hw = random_weight(s.n, s.k, seed++);
        std::vector<float> wf = dequant_host(hw);
        dev_weight dw(hw, 100);
        for (int64_t m : k_ms) {
            std::vector<uint16_t> x = random_bf16(m * s.k, seed++);
            std::vector<double> ref, mag;
            oracle(x, m, wf, s.n, s.k, ref, mag);
            std::string what = "n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " m=" + std::to_string(m);
            expect_close(run_w4a16(dw, x, m, path::AUTO), ref, mag, s.k, (what + " auto").c_str());
            // Both paths at every m they take: small up to 64 rows, large for any m.
            if (m <= cuda::W4A16_SM80_SMALL_M_MAX)
                expect_close(run_w4a16(dw, x, m, path::LARGE), ref, mag, s.k, (what + " large").c_str());
        }
    }
}

TEST(matmul_w4a16_sm80, small_kernel_all_row_counts) {
    host_weight hw = random_weight(129, 1552, 77);  // 1552 = 24·64 + 16: partial last chunk and group
    std::vector<float> wf = dequant_host(hw);
    dev_weight dw(hw, 64);
    for (int64_t m : {2, 8, 9, 24, 32, 33, 48, 64}) {
        std::vector<uint16_t> x = random_bf16(m * hw.k, 1000 + uint32_t(m));
        std::vector<double> ref, mag;
        oracle(x, m, wf, hw.n, hw.k, ref, mag);
        expect_close(run_w4a16(dw, x, m, path::SMALL), ref, mag, hw.k, ("small m=" + std::to_string(m)).c_str());
    }
}

TEST(matmul_w4a16_sm80, nan_parity) {
    host_weight hw = random_weight(100, 208, 5);
    hw.scales[size_t(3 * (208 / 16) + 2)] = 0x7F;  // NaN block scale: row 3 is NaN for every m
    std::vector<float> wf = dequant_host(hw);
    dev_weight dw(hw, 100);
    for (int64_t m : {1, 16, 17, 100}) {
        std::vector<uint16_t> x = random_bf16(m * hw.k, 9);
        x[size_t(std::min<int64_t>(m - 1, 1) * hw.k + 5)] = 0x7FC0;  // NaN activation: one output row NaN
        std::vector<double> ref, mag;
        oracle(x, m, wf, hw.n, hw.k, ref, mag);
        ASSERT_TRUE(std::isnan(ref[3]));
        for (path p : {path::AUTO, path::LARGE})
            expect_close(run_w4a16(dw, x, m, p), ref, mag, hw.k, ("nan m=" + std::to_string(m)).c_str());
    }
}

TEST(matmul_w4a16_sm80, rows_of_m16_equal_m1_bitwise_and_deterministic) {
    host_weight hw = random_weight(4096, 4096, 11);
    dev_weight dw(hw, 16);
    std::vector<uint16_t> x = random_bf16(16 * hw.k, 12);
    std::vector<uint16_t> out16 = run_w4a16(dw, x, 16, path::SMALL);
    std::vector<uint16_t> again = run_w4a16(dw, x, 16, path::SMALL);
    EXPECT_EQ(out16, again) << "two launches differ (nondeterministic reduction or stale split-K counters)";
    for (int64_t r : {0, 7, 8, 15}) {
        std::vector<uint16_t> xr(x.begin() + r * hw.k, x.begin() + (r + 1) * hw.k);
        std::vector<uint16_t> out1 = run_w4a16(dw, xr, 1, path::SMALL);
        EXPECT_EQ(0, std::memcmp(out1.data(), out16.data() + r * hw.n, size_t(hw.n) * 2)) << "row " << r;
    }
    // and the values are right
    std::vector<float> wf = dequant_host(hw);
    std::vector<uint16_t> x2(x.begin(), x.begin() + 2 * hw.k);
    std::vector<double> ref, mag;
    oracle(x2, 2, wf, hw.n, hw.k, ref, mag);
    expect_close(std::vector<uint16_t>(out16.begin(), out16.begin() + 2 * hw.n), ref, mag, hw.k, "4096x4096 m=16");
}

// The small-M kernels at m ≤ 16: version 2 (balanced runs) under plans that stress it (runs of
// one unit, runs spanning several row blocks on 1–3 SMs, 1–2 CTAs per SM, long runs) and version
// 1 (its plan, and forced splits), on odd shapes; rows of m = 16 equal the same row alone, bitwise, under every plan.
TEST(matmul_w4a16_sm80, small_kernel_versions_and_plans) {
    uint32_t seed = 500;
    const shape shapes[] = {{33, 80}, {100, 208}, {257, 1040}, {61, 4112}, {1000, 2064}, {1, 16}, {300, 576}};
    struct variant { cuda::w4a16_small_config cfg; int sms; const char* what; };
    cuda::w4a16_small_config v1, v2, len1, one_cta, two_ctas, len5, early;
    v1.version = 1, v2.version = 2;
    len1 = one_cta = two_ctas = len5 = early = v2;
    len1.min_len = 1, one_cta.ctas_per_sm = 1, two_ctas.ctas_per_sm = 2, len5.min_len = 5, early.early_signal = 1;
    cuda::w4a16_small_config early_len1 = early, v1_gps1 = v1, v1_gps3 = v1;
    early_len1.min_len = 1;
    v1_gps1.gps = 1, v1_gps3.gps = 3;  // forced splits (bench_matmul --splits): one group per CTA, three
    const variant variants[] = {{{}, 0, "auto"},
                                {v2, 0, "v2"},
                                {len1, 0, "v2 min_len 1"},
                                {v2, 1, "v2 1 SM"},
                                {len1, 3, "v2 3 SMs min_len 1"},
                                {one_cta, 2, "v2 2 SMs 1 CTA/SM"},
                                {two_ctas, 0, "v2 2 CTAs/SM"},
                                {len5, 0, "v2 min_len 5"},
                                {early, 1, "v2 early 1 SM"},
                                {early_len1, 3, "v2 early 3 SMs"},
                                {early, 0, "v2 early"},
                                {v1, 0, "v1"},
                                {v1_gps1, 0, "v1 1 group per split"},
                                {v1_gps3, 2, "v1 3 groups per split 2 SMs"}};
    for (const shape& s : shapes) {
        host_weight hw = random_weight(s.n, s.k, seed++);
        std::vector<float> wf = dequant_host(hw);
        dev_weight dw(hw, 1);
        std::vector<uint16_t> x16 = random_bf16(16 * s.k, seed++);
        for (const variant& v : variants) {
            std::vector<uint16_t> out16 = run_small(dw, x16, 16, v.cfg, v.sms);
            for (int64_t m : {1, 2, 5, 8, 9, 16}) {
                std::vector<uint16_t> x(x16.begin(), x16.begin() + m * s.k);
                std::vector<double> ref, mag;
                oracle(x, m, wf, s.n, s.k, ref, mag);
                std::string what = "n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " m=" + std::to_string(m) +
                                   " " + v.what;
                std::vector<uint16_t> got = m == 16 ? out16 : run_small(dw, x, m, v.cfg, v.sms);
                expect_close(got, ref, mag, s.k, what.c_str());
                EXPECT_EQ(0, std::memcmp(got.data(), out16.data(), got.size() * 2)) << what << ": rows differ from m=16's";
            }
            std::vector<uint16_t> xr(x16.begin() + 11 * s.k, x16.begin() + 12 * s.k);  // row 11 alone
            std::vector<uint16_t> out1 = run_small(dw, xr, 1, v.cfg, v.sms);
            EXPECT_EQ(0, std::memcmp(out1.data(), out16.data() + 11 * s.n, size_t(s.n) * 2)) << v.what << " row 11";
        }
    }
}

// Every shape × m = 1..m_max, each with a fresh random weight (seed, seed + 1, … per shape, then
// per m) and x, and its oracle: fn(dw, s, m, x, ref, mag) checks one case.
template <class F>
void for_shapes_and_rows(std::initializer_list<shape> shapes, int64_t m_max, uint32_t seed, F&& fn) {
    for (const shape& s : shapes) {
        host_weight hw = random_weight(s.n, s.k, seed++);
        std::vector<float> wf = dequant_host(hw);
        dev_weight dw(hw, 1);
        for (int64_t m = 1; m <= m_max; ++m) {
            std::vector<uint16_t> x = random_bf16(m * s.k, seed++);
            std::vector<double> ref, mag;
            oracle(x, m, wf, s.n, s.k, ref, mag);
            fn(dw, s, m, x, ref, mag);
        }
    }
}

// The decode kernel: every m it takes, odd shapes, and plans that split tiles over many warps
// (min_chunks 1), runs spanning several tiles (1 SM), and the three occupancy variants.
TEST(matmul_w4a16_gemv, matches_oracle_odd_shapes_every_m) {
    struct variant { cuda::w4a16_gemv_config cfg; int sms; const char* what; };
    cuda::w4a16_gemv_config one_chunk, one_cta, three_ctas;
    one_chunk.min_chunks = 1, one_cta.ctas_per_sm = 1, three_ctas.ctas_per_sm = 3;
    const variant variants[] = {{{}, 0, "default"},          {one_chunk, 0, "min_chunks 1"},
                                {{}, 1, "1 SM"},             {one_cta, 0, "1 CTA/SM"},
                                {three_ctas, 0, "3 CTAs/SM"}, {one_chunk, 3, "3 SMs, min_chunks 1"}};
    for_shapes_and_rows({{33, 80}, {100, 208}, {257, 1040}, {61, 4112}, {1000, 2064}, {1, 16}, {17, 48}},
                        cuda::W4A16_GEMV_M_MAX, 300,
                        [&](const dev_weight& dw, const shape& s, int64_t m, const std::vector<uint16_t>& x,
                            const std::vector<double>& ref, const std::vector<double>& mag) {
                            for (const variant& v : variants) {
                                if (m % 5 != 1 && v.sms != 0) continue;  // the small-SM plans at m = 1, 6, 11, 16
                                std::string what = "gemv n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                                                   " m=" + std::to_string(m) + " " + v.what;
                                expect_close(run_gemv(dw, x, m, v.cfg, v.sms), ref, mag, s.k, what.c_str());
                            }
                        });
}

// The NaN / Inf case of the decode kernels: a [100, 1040] weight (on the device: dw) whose row 3
// has a NaN block scale (NaN for every m), and for m = 1, 2, 5, 8 an x with a NaN activation (one
// output row NaN) and a +Inf (±Inf or NaN in the last row), seeded x_seed + m: fn(x, m, ref, mag)
// checks the kernels on it.
struct nan_inf_case {
    host_weight hw;
    std::vector<float> wf;
    dev_weight dw;
    static host_weight weight(uint32_t seed) {
        host_weight w = random_weight(100, 1040, seed);
        w.scales[size_t(3 * (1040 / 16) + 40)] = 0x7F;
        return w;
    }
    explicit nan_inf_case(uint32_t seed) : hw(weight(seed)), wf(dequant_host(hw)), dw(hw, 1) {}
    template <class F> void for_each_m(uint32_t x_seed, F&& fn) const {
        for (int64_t m : {1, 2, 5, 8}) {
            std::vector<uint16_t> x = random_bf16(m * hw.k, x_seed + uint32_t(m));
            x[size_t(std::min<int64_t>(m - 1, 1) * hw.k + 5)] = 0x7FC0;
            x[size_t((m - 1) * hw.k + 700)] = 0x7F80;
            std::vector<double> ref, mag;
            oracle(x, m, wf, hw.n, hw.k, ref, mag);
            ASSERT_TRUE(std::isnan(ref[3]));
            fn(x, m, ref, mag);
        }
    }
};

TEST(matmul_w4a16_gemv, nan_inf_parity) {
    const nan_inf_case nc(6);
    cuda::w4a16_gemv_config one_chunk;
    one_chunk.min_chunks = 1;
    nc.for_each_m(10, [&](const std::vector<uint16_t>& x, int64_t m, const std::vector<double>& ref,
                          const std::vector<double>& mag) {
        const std::string ms = std::to_string(m);
        expect_close(run_gemv(nc.dw, x, m), ref, mag, nc.hw.k, ("gemv nan m=" + ms).c_str());
        expect_close(run_gemv(nc.dw, x, m, one_chunk), ref, mag, nc.hw.k, ("gemv nan split m=" + ms).c_str());
    });
}

TEST(matmul_w4a16_gemv, rows_equal_m1_bitwise_and_deterministic) {
    host_weight hw = random_weight(4096, 4096, 13);  // 16384 items: tiles split over several warps
    dev_weight dw(hw, 1);
    std::vector<uint16_t> x = random_bf16(8 * hw.k, 14);
    std::vector<uint16_t> out8 = run_gemv(dw, x, 8), again = run_gemv(dw, x, 8);
    EXPECT_EQ(out8, again) << "two launches differ (nondeterministic reduction or stale counters)";
    for (int64_t m : {3, 6}) {
        std::vector<uint16_t> xm(x.begin(), x.begin() + m * hw.k), outm = run_gemv(dw, xm, m);
        EXPECT_EQ(0, std::memcmp(outm.data(), out8.data(), outm.size() * 2)) << "m=" << m << " vs rows of m=8";
    }
    for (int64_t r : {0, 1, 6, 7}) {
        std::vector<uint16_t> xr(x.begin() + r * hw.k, x.begin() + (r + 1) * hw.k);
        std::vector<uint16_t> out1 = run_gemv(dw, xr, 1);
        EXPECT_EQ(0, std::memcmp(out1.data(), out8.data() + r * hw.n, size_t(hw.n) * 2)) << "row " << r;
    }
    std::vector<float> wf = dequant_host(hw);
    std::vector<uint16_t> x2(x.begin(), x.begin() + 2 * hw.k);
    std::vector<double> ref, mag;
    oracle(x2, 2, wf, hw.n, hw.k, ref, mag);
    expect_close(std::vector<uint16_t>(out8.begin(), out8.begin() + 2 * hw.n), ref, mag, hw.k, "gemv 4096x4096 m=8");
}

// x is staged whole in shared memory: more rows than fit are refused with the shape, not run.
TEST(matmul_w4a16_gemv, refuses_x_that_does_not_fit) {
    EXPECT_TRUE(cuda::w4a16_gemv_fits(8, 4096));
    EXPECT_TRUE(cuda::w4a16_gemv_fits(2, 14336));
    EXPECT_FALSE(cuda::w4a16_gemv_fits(9, 64));
    EXPECT_FALSE(cuda::w4a16_gemv_fits(3, 14336));
    host_weight hw = random_weight(32, 14336, 15);
    dev_weight dw(hw, 1);
    cuda::w4a16_gemv_plan pl = cuda::w4a16_gemv_plan_of(hw.n, hw.k, sm_count());
    dbuf x(size_t(3 * hw.k) * 2), out(size_t(3 * hw.n) * 2), part(pl.partial_bytes), cnt(pl.counter_count * 4);
    cuda::w4a16_sm80_workspace ws;
    ws.partial = part.p, ws.partial_bytes = pl.partial_bytes;
    ws.counters = static_cast<int*>(cnt.p), ws.counter_count = pl.counter_count;
    try {
        cuda::matmul_nvfp4_w4a16_gemv_launch(x.p, 3, dw.w, out.p, ws, sm_count(), 0);
        ADD_FAILURE() << "x [3, 14336] was accepted";
    } catch (const tetra::error& e) {
        EXPECT_NE(std::string(e.what()).find("[3, 14336]"), std::string::npos) << e.what();
    }
}

// The sweep kernel: every m it takes, odd shapes (k not a multiple of 64, partial last group and
// tile), its default plan and forced plans that split k over CTAs (global partials in order), give
// a warp 2 or 4 groups, or put several tiles in one CTA.
TEST(matmul_w4a16_sweep, matches_oracle_odd_shapes_every_m_and_plan) {
    const int plans[][4] = {{0, 0, 0, -1}, {0, 0, 0, 0}, {0, 0, 0, 1}, {1, 1, 1, 0},  // T G S x_direct
                            {1, 1, 1, 1},  {2, 2, 1, 0}, {1, 4, 1, 1}, {4, 2, 2, 0},
                            {8, 1, 1, 1},  {2, 8, 4, 0}, {1, 8, 8, 1}};
    for_shapes_and_rows(
        {{33, 80}, {100, 208}, {257, 1040}, {61, 4112}, {1000, 2064}, {1, 16}, {17, 3072}},
        cuda::W4A16_SWEEP_M_MAX, 900, [&](const dev_weight& dw, const shape& s, int64_t m, const std::vector<uint16_t>& x,
            const std::vector<double>& ref, const std::vector<double>& mag) {
            int ran = 0;
            for (const auto& pn : plans) {
                cuda::w4a16_sweep_config cfg;
                cfg.T = pn[0], cfg.G = pn[1], cfg.S = pn[2], cfg.x_direct = pn[3];
                cuda::w4a16_sweep_plan pl = cuda::w4a16_sweep_plan_of(s.n, s.k, m, cfg);
                if (!cuda::w4a16_sweep_why_not(pl, m).empty()) continue;  // e.g. G clamped to k's groups
                ++ran;
                std::string what = "sweep n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " m=" +
                                   std::to_string(m) + " plan " + std::to_string(pl.T) + "/" + std::to_string(pl.G) +
                                   "/" + std::to_string(pl.S) + " x" + std::to_string(pl.n_gr) +
                                   (pl.x_direct ? " x direct" : "");
                expect_close(run_sweep(dw, x, m, cfg), ref, mag, s.k, what.c_str());
            }
            EXPECT_GE(ran, 3) << "n=" << s.n << " k=" << s.k;
        });
}

TEST(matmul_w4a16_sweep, nan_inf_parity_and_rows_equal_m1_bitwise) {
    const nan_inf_case nc(906);
    cuda::w4a16_sweep_config split, direct;
    split.T = 2, split.G = 1, split.S = 1;  // every group its own CTA: the cross-CTA sum
    direct.x_direct = 1;
    nc.for_each_m(910, [&](const std::vector<uint16_t>& x, int64_t m, const std::vector<double>& ref,
                           const std::vector<double>& mag) {
        const std::string ms = std::to_string(m);
        expect_close(run_sweep(nc.dw, x, m), ref, mag, nc.hw.k, ("sweep nan m=" + ms).c_str());
        expect_close(run_sweep(nc.dw, x, m, split), ref, mag, nc.hw.k, ("sweep nan split m=" + ms).c_str());
        expect_close(run_sweep(nc.dw, x, m, direct), ref, mag, nc.hw.k, ("sweep nan x direct m=" + ms).c_str());
    });
    // a batch's rows equal each row alone, bit for bit, and two launches agree (default and split plans)
    host_weight hw2 = random_weight(4096, 4096, 907);
    dev_weight dw2(hw2, 1);
    // m = 16: two column tiles (rows 8 .. 15 the second), m = 12: the second one partial
    std::vector<uint16_t> x = random_bf16(16 * hw2.k, 908);
    for (const cuda::w4a16_sweep_config& cfg : {cuda::w4a16_sweep_config{}, split, direct})
        for (int64_t m : {8, 12, 16}) {
            std::vector<uint16_t> xm(x.begin(), x.begin() + m * hw2.k);
            std::vector<uint16_t> outm = run_sweep(dw2, xm, m, cfg), again = run_sweep(dw2, xm, m, cfg);
            EXPECT_EQ(outm, again) << "m=" << m << ": two launches differ (nondeterministic sums or stale counters)";
            for (int64_t r : {int64_t(0), int64_t(1), int64_t(7), m - 4, m - 1}) {
                std::vector<uint16_t> xr(x.begin() + r * hw2.k, x.begin() + (r + 1) * hw2.k);
                std::vector<uint16_t> out1 = run_sweep(dw2, xr, 1, cfg);
                EXPECT_EQ(0, std::memcmp(out1.data(), outm.data() + r * hw2.n, size_t(hw2.n) * 2))
                    << "m=" << m << " row " << r;
            }
        }
}

// The plan a device with 99 KB of shared memory per block runs (sm_86 / 89 / 120 / 121; emulated
// here through the plan's limit): matmul_silu on k = 4096 at m = 3 and 4 reads x through L1 instead
// of staging it, and must give the H100 plan's bits.
TEST(matmul_w4a16_sweep, plan_for_99kb_devices_equals_default_bitwise) {
    host_weight hw = random_weight(4096, 4096, 912);  // stacked [gate; up], n_ff = 2048
    dev_weight dw(hw, 1);
    std::vector<uint16_t> x = random_bf16(4 * hw.k, 913);
    for (int64_t m : {3, 4}) {
        std::vector<uint16_t> xm(x.begin(), x.begin() + m * hw.k);
        cuda::w4a16_sweep_config h100, small;
        h100.silu_n_ff = small.silu_n_ff = hw.n / 2;
        small.smem_limit = 101376 - cuda::W4A16_SWEEP_STATIC_SMEM_MAX;
        const cuda::w4a16_sweep_plan pl = cuda::w4a16_sweep_plan_of(hw.n, hw.k, m, small);
        ASSERT_TRUE(pl.x_direct && !cuda::w4a16_sweep_plan_of(hw.n, hw.k, m, h100).x_direct) << "m=" << m;
        ASSERT_LE(pl.smem, size_t(small.smem_limit));
        EXPECT_EQ(run_sweep(dw, xm, m, small), run_sweep(dw, xm, m, h100)) << "m=" << m;
    }
}

// The bits depend on G (the groups a CTA holds) alone: every plan with all of k in the CTA — any T
// tiles, any S warps × GS groups per warp, x staged or through L1 — gives the default plan's output,
// so the plan may follow m and a batch's rows still equal each row alone.
TEST(matmul_w4a16_sweep, every_plan_of_whole_k_equals_default_bitwise) {
    for (int64_t k : {4096, 2048}) {
        host_weight hw = random_weight(1040, k, 914);  // 65 tiles: a partial last CTA for T = 2, 4
        dev_weight dw(hw, 1);
        std::vector<uint16_t> x = random_bf16(16 * hw.k, 915);
        const int G = int(k / 512);
        int n_plans = 0, n_tw2 = 0;
        const int64_t limit = cuda::smem_optin_here() - cuda::W4A16_SWEEP_STATIC_SMEM_MAX;
        for (int64_t m : {1, 3, 8, 12, 16}) {
            std::vector<uint16_t> xm(x.begin(), x.begin() + m * hw.k);
            const std::vector<uint16_t> ref = run_sweep(dw, xm, m);
            for (int T : {1, 2, 4})
                for (int GS : {1, 2, 4})
                    for (int xd : {0, 1})
                        for (int tw : {1, 2}) {  // tw = 2: two tiles per warp (m > 8)
                            cuda::w4a16_sweep_config c;
                            c.T = T, c.G = G, c.S = G / GS, c.x_direct = xd, c.tw = tw;
                            const cuda::w4a16_sweep_plan pl = cuda::w4a16_sweep_plan_of(hw.n, hw.k, m, c);
                            if (G % GS != 0 || !cuda::w4a16_sweep_why_not(pl, m, limit).empty()) continue;
                            EXPECT_EQ(run_sweep(dw, xm, m, c), ref) << "k=" << k << " m=" << m << " T=" << T
                                                                    << " S=" << G / GS << " xd=" << xd << " tw=" << tw;
                            ++n_plans;
                            n_tw2 += tw == 2;
                        }
        }
        EXPECT_GE(n_plans, 20) << "k=" << k;  // the loop ran the plans it was meant to
        EXPECT_GE(n_tw2, 8) << "k=" << k;     // T = 2, 4 with tw = 2 at m = 12 and 16
    }
}

// Plans and row counts the kernel cannot run are refused with the reason, not run wrongly.
TEST(matmul_w4a16_sweep, refuses_what_it_cannot_run) {
    host_weight hw = random_weight(32, 1024, 909);
    dev_weight dw(hw, 1);
    const int64_t over = cuda::W4A16_SWEEP_M_MAX + 1;
    dbuf x(size_t(over * hw.k) * 2), out(size_t(over * hw.n) * 2);
    cuda::w4a16_sweep_config wide, staged;
    wide.T = 8, wide.G = 2, wide.S = 2;  // 16 warps
    staged.x_direct = 0;                 // m > 8 reads x rows 8 .. 15 through L1 only
    const std::pair<int64_t, cuda::w4a16_sweep_config> bad[] = {{over, {}}, {1, wide}, {9, staged}};
    const std::string want[] = {"m = " + std::to_string(over), "at most 8 warps", "x rows 8 .. 15"};
    for (int i = 0; i < 3; ++i) {
        try {
            cuda::matmul_nvfp4_w4a16_sweep_launch(x.p, bad[i].first, dw.w, out.p, {}, 0, bad[i].second);
            ADD_FAILURE() << "case " << i << " was accepted";
        } catch (const tetra::error& e) {
            EXPECT_NE(std::string(e.what()).find(want[i]), std::string::npos) << e.what();
        }
    }
}

// Every e2m1 code × every e4m3 scale byte through the device dequant: exactly e2m1 · e4m3 · 2^-8
// in bf16 (the product has ≤ 6 significant bits), NaN for the two NaN scales.
TEST(matmul_w4a16_sm80, dequant_exact_all_codes_all_scales) {
    const int64_t n = 256, k = 64;
    host_weight hw{n, k, std::vector<uint8_t>(size_t(n * k / 2)), std::vector<uint8_t>(size_t(n * k / 16))};
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < k / 2; ++c) hw.codes[size_t(r * k / 2 + c)] = e2m1_pack(uint8_t(2 * c), uint8_t(2 * c + 1));
        for (int64_t b = 0; b < k / 16; ++b) hw.scales[size_t(r * k / 16 + b)] = uint8_t(r);
    }
    dev_weight dw(hw, 1);
    dbuf dst(size_t(n * k) * 2);
    cuda::w4a16_sm80_dequant_launch(dw.w, 0, n, dst.p, 0);
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> got(static_cast<size_t>(n * k));
    CK(cudaMemcpy(got.data(), dst.p, got.size() * 2, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c) {
            double want = double(e2m1_decode(uint8_t(c & 15))) * double(e4m3_decode(uint8_t(r))) / 256.0;
            float g = bf16_to_f32(got[size_t(r * k + c)]);
            bool ok = std::isnan(want) ? std::isnan(g) : (double(g) == want && f32_to_bf16(float(want)) == got[size_t(r * k + c)]);
            if (!ok && bad++ < 8) ADD_FAILURE() << "scale 0x" << std::hex << r << std::dec << " code " << (c & 15) << ": got " << g << ", want " << want;
        }
    EXPECT_EQ(bad, 0);
}

// The dequant kernel on odd shapes (k not a multiple of 64 or 512, partial row tiles) and row
// ranges that start inside the weight:
// each stored row bit-equal to the CPU codec's dequant (scale_global 1, then · 2^-8, exact in f32
// and bf16: ≤ 6 significant bits), nothing written outside the range's rows (sentinels).
TEST(matmul_w4a16_sm80, dequant_rows_bitwise_odd_shapes) {
    struct range { int64_t n0, rows; };
    uint32_t seed = 300;
    for (const shape& s : k_shapes) {
        host_weight hw = random_weight(s.n, s.k, seed++);
        hw.scale_global = 1.0f;
        std::vector<float> wf = dequant_host(hw);
        dev_weight dw(hw, 1);
        for (range r : {range{0, s.n}, range{16, s.n - 16}, range{0, std::min<int64_t>(s.n, 17)}, range{32, 1}}) {
            if (r.rows <= 0 || r.n0 + r.rows > s.n) continue;  // the shape is too small for this range
            const std::string what = "n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " rows [" +
                                     std::to_string(r.n0) + ", " + std::to_string(r.n0 + r.rows) + ")";
            const size_t count = size_t(r.rows * s.k);
            std::vector<uint16_t> host(count + 2 * GUARD, SENTINEL);
            dbuf dst(host.size() * 2);
            CK(cudaMemcpy(dst.p, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
            cuda::w4a16_sm80_dequant_launch(dw.w, r.n0, r.rows, static_cast<uint16_t*>(dst.p) + GUARD, 0);
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(host.data(), dst.p, host.size() * 2, cudaMemcpyDeviceToHost));
            int bad = 0;
            for (size_t i = 0; i < count; ++i) {
                uint16_t want = f32_to_bf16(wf[size_t(r.n0 * s.k) + i] / 256.0f);
                if (host[GUARD + i] != want && bad++ < 5)
                    ADD_FAILURE() << what << ": element " << i << ": got 0x" << std::hex << host[GUARD + i]
                                  << ", want 0x" << want;
            }
            for (int i = 0; i < GUARD; ++i) {
                EXPECT_EQ(host[size_t(i)], SENTINEL) << what << ": guard before overwritten";
                EXPECT_EQ(host[GUARD + count + size_t(i)], SENTINEL) << what << ": guard after overwritten";
            }
            EXPECT_EQ(bad, 0) << what;
        }
    }
}

// The large-M path in several dequant passes (a workspace of 2 × 256 rows: 4 passes over 1000
// rows, both ping-pong buffers reused, a partial last pass; 2 × 512 rows: 2 equal passes of 512
// and 488) and in one (the default workspace holds the whole weight), against the oracle.
TEST(matmul_w4a16_sm80, large_path_in_several_passes) {
    const shape s{1000, 2064};
    host_weight hw = random_weight(s.n, s.k, 77);
    std::vector<float> wf = dequant_host(hw);
    dev_weight one(hw, 100), four(hw, 100), two(hw, 100);
    ASSERT_GE(one.ws.dequant_bytes, size_t(s.n * s.k * 2)) << "the default workspace should hold the whole weight";
    four.ws.dequant_bytes = 2 * size_t(256) * s.k * 2;
    two.ws.dequant_bytes = 2 * size_t(512) * s.k * 2;
    for (int64_t m : {65, 100}) {
        std::vector<uint16_t> x = random_bf16(m * s.k, 78 + uint32_t(m));
        std::vector<double> ref, mag;
        oracle(x, m, wf, s.n, s.k, ref, mag);
        expect_close(run_w4a16(four, x, m, path::LARGE), ref, mag, s.k, ("4 passes m=" + std::to_string(m)).c_str());
        expect_close(run_w4a16(two, x, m, path::LARGE), ref, mag, s.k, ("2 passes m=" + std::to_string(m)).c_str());
        expect_close(run_w4a16(one, x, m, path::LARGE), ref, mag, s.k, ("1 pass m=" + std::to_string(m)).c_str());
    }
}

// The fused wgmma kernel (sm_90a image on an sm_90 device; the registry refuses it elsewhere, see
// registry_selects_and_matches_oracle). Returns false when this binary and device cannot run it:
// on an H100 that is a failure (the gpu tests are built with 90a for it).
bool wgmma_runs_here() {
    if (cuda::w4a16_wgmma_compiled_here()) return true;
    int dev = 0, major = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    EXPECT_NE(major, 9) << "an sm_90 device without the sm_90a wgmma kernel: build the gpu tests with 90a";
    return false;
}

// ws_rows: the permuted-x workspace in rows (0: all m rows in one pass).
// tokens: the token tile (128 or 256; 0 = the launcher's choice).
std::vector<uint16_t> run_wgmma(const dev_weight& dw, const std::vector<uint16_t>& x, int64_t m, int64_t ws_rows = 0,
                                int tokens = 0) {
    dbuf ws(cuda::w4a16_wgmma_workspace_bytes(ws_rows ? ws_rows : m, dw.w.k));
    return run_guarded(x, m, dw.w.n, cuda::w4a16_sm80_workspace{}, [&](const void* dx, void* out, const cuda::w4a16_sm80_workspace&) {
        cuda::matmul_nvfp4_w4a16_wgmma_launch(dx, m, dw.w, out, dw.w.n, ws.p, ws.bytes, 0, tokens);
    });
}

// Odd shapes (n not a multiple of the CTA's 128 rows or of 16, k not a multiple of 64), m across
// the 128- and 256-token tiles, both tiles, NaN weights and activations: the oracle's tolerance (f32 sums in another
// order, one bf16 rounding).
TEST(matmul_w4a16_wgmma, matches_oracle_odd_shapes_and_nan) {
    if (!wgmma_runs_here()) return;
    uint32_t seed = 300;
    for (const shape& s : k_shapes) {
        host_weight hw = random_weight(s.n, s.k, seed++);
        if (s.n == 100) hw.scales[size_t(3 * (s.k / 16) + 2)] = 0x7F;  // NaN block scale: row 3 NaN
        std::vector<float> wf = dequant_host(hw);
        dev_weight dw(hw, 300);
        for (int64_t m : {1, 3, 17, 100, 129, 300}) {
            if (s.n == 1000 && m == 300) continue;  // the host oracle's time; m = 300 crosses the 256-row tile
            std::vector<uint16_t> x = random_bf16(m * s.k, seed++);
            if (m > 3) x[size_t(2 * s.k + 5)] = 0x7FC0;  // NaN activation: row 2 NaN
            std::vector<double> ref, mag;
            oracle(x, m, wf, s.n, s.k, ref, mag);
            std::string what = "wgmma n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " m=" + std::to_string(m);
            for (int tok : {256, 128})
                expect_close(run_wgmma(dw, x, m, 0, tok), ref, mag, s.k, (what + " tile " + std::to_string(tok)).c_str());
        }
    }
}

// Each output row depends on its own activation row only, and a launch repeats its bits.
TEST(matmul_w4a16_wgmma, rows_independent_of_batch_and_deterministic) {
    if (!wgmma_runs_here()) return;
    host_weight hw = random_weight(4096, 4096, 311);
    dev_weight dw(hw, 300);
    std::vector<uint16_t> x = random_bf16(300 * hw.k, 312);
    std::vector<uint16_t> out = run_wgmma(dw, x, 300), again = run_wgmma(dw, x, 300);
    EXPECT_EQ(out, again) << "two launches differ";
    for (int64_t r : {0, 255, 256, 299}) {
        std::vector<uint16_t> xr(x.begin() + r * hw.k, x.begin() + (r + 1) * hw.k);
        std::vector<uint16_t> out1 = run_wgmma(dw, xr, 1);
        EXPECT_EQ(0, std::memcmp(out1.data(), out.data() + r * hw.n, size_t(hw.n) * 2)) << "row " << r;
    }
    // a workspace of 256 rows: two passes (rows 0..255, 256..299), and 128-token tiles: the same bits
    EXPECT_EQ(run_wgmma(dw, x, 300, 256), out) << "passes through a 256-row workspace differ";
    EXPECT_EQ(run_wgmma(dw, x, 300, 0, 128), out) << "128-token tiles differ from 256-token tiles";
    EXPECT_EQ(run_wgmma(dw, x, 300, 0, 256), out) << "256-token tiles differ from the launcher's choice";
    std::vector<float> wf = dequant_host(hw);
    std::vector<uint16_t> x2(x.begin() + 255 * hw.k, x.begin() + 257 * hw.k);
    std::vector<double> ref, mag;
    oracle(x2, 2, wf, hw.n, hw.k, ref, mag);
    expect_close(std::vector<uint16_t>(out.begin() + 255 * hw.n, out.begin() + 257 * hw.n), ref, mag, hw.k, "4096x4096 rows 255, 256");
}

// matmul_silu on the wgmma kernel (gate and up tiles of one 64-feature group in one CTA, silu in the
// epilogue): the plain kernel's gu through silu_times on the host (≤ 1 bf16 ulp where the host's
// expf differs, ≤ 0.1 % of elements, as for the small-M form), both token tiles the same bits,
// n_ff not a multiple of 64 (a partial last group) and k not a multiple of 64.
TEST(matmul_w4a16_wgmma, silu_equals_two_step) {
    if (!wgmma_runs_here()) return;
    uint32_t seed = 950;
    const shape shapes[] = {{16, 80}, {48, 4112}, {80, 1040}, {1040, 576}};  // n_ff, k
    for (const shape& s : shapes) {
        host_weight hw = random_weight(2 * s.n, s.k, seed++);
        dev_weight dw(hw, 300);
        for (int64_t m : {65, 300}) {
            std::string what = "n_ff=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " m=" + std::to_string(m);
            std::vector<uint16_t> x = random_bf16(m * s.k, seed++);
            std::vector<uint16_t> want = host_silu(run_wgmma(dw, x, m), m, s.n);
            std::vector<uint16_t> got[2];
            for (int i = 0; i < 2; ++i) {
                dbuf ws(cuda::w4a16_wgmma_workspace_bytes(m, s.k));
                got[i] = run_guarded(x, m, s.n, cuda::w4a16_sm80_workspace{},
                                     [&](const void* dx, void* out, const cuda::w4a16_sm80_workspace&) {
                                         cuda::matmul_silu_nvfp4_w4a16_wgmma_launch(dx, m, dw.w, s.n, out, ws.p, ws.bytes, 0,
                                                                                    i == 0 ? 256 : 128);
                                     });
            }
            EXPECT_EQ(got[0], got[1]) << what << ": 128- and 256-token tiles differ";
            ASSERT_EQ(got[0].size(), want.size());
            size_t differ = 0;
            for (size_t i = 0; i < want.size(); ++i) {
                if (got[0][i] == want[i]) continue;
                ++differ;
                const float a = bf16_to_f32(got[0][i]), b = bf16_to_f32(want[i]);
                const float ulp = std::ldexp(1.0f, std::ilogb(std::max(std::fabs(a), std::fabs(b))) - 7);
                EXPECT_LE(std::fabs(a - b), ulp) << what << ": element " << i << " " << a << " vs " << b;
            }
            EXPECT_LE(differ * 1000, want.size() + 999) << what << ": " << differ << " elements differ";
        }
    }
}

TEST(matmul_dense_bf16, cublaslt_matches_oracle) {
    struct cse { int64_t m, n, k; };
    uint32_t seed = 100;
    for (cse c : {cse{1, 33, 80}, cse{3, 257, 208}, cse{17, 1000, 1040}, cse{100, 61, 4112}, cse{16, 4096, 4096}}) {
        std::vector<uint16_t> x = random_bf16(c.m * c.k, seed++), w = random_bf16(c.n * c.k, seed++);
        std::vector<float> wf(w.size());
        for (size_t i = 0; i < w.size(); ++i) wf[i] = bf16_to_f32(w[i]);
        std::vector<double> ref, mag;
        oracle(x, c.m, wf, c.n, c.k, ref, mag);
        dbuf dx(x.size() * 2), dw(w.size() * 2), dout(size_t(c.m * c.n + 2 * GUARD) * 2), ws(cuda::CUBLASLT_WORKSPACE_BYTES);
        std::vector<uint16_t> host(static_cast<size_t>(c.m * c.n + 2 * GUARD), SENTINEL);
        CK(cudaMemcpy(dx.p, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dw.p, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dout.p, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
        cuda::gemm_bf16_tn_launch(dx.p, dw.p, static_cast<uint16_t*>(dout.p) + GUARD, c.m, c.n, c.k, c.n, 1.0f, ws.p,
                                  ws.bytes, 0);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(host.data(), dout.p, host.size() * 2, cudaMemcpyDeviceToHost));
        for (int i = 0; i < GUARD; ++i) {
            EXPECT_EQ(host[size_t(i)], SENTINEL);
            EXPECT_EQ(host[host.size() - 1 - size_t(i)], SENTINEL);
        }
        std::string what = "dense m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k);
        expect_close(std::vector<uint16_t>(host.begin() + GUARD, host.end() - GUARD), ref, mag, c.k, what.c_str());
    }
}

#ifndef TETRA_MATMUL_STANDALONE  // bench/device_matmul.sh's nvcc-only build has no backend library
// matmul_silu's fused kernel (version 1 with gate/up warp pairs, silu in the epilogue or in the
// split-K reduction) against the two-step result: the plain version-1 matmul into gu (checked
// against the double oracle here too), then silu_mul_gate_up on the host. The fused kernel rounds
// gate and up to bf16 exactly as the matmul stores them and applies the same f32 formula, with
// CUDA's expf (≤ 2 ulp) where the host uses std::exp: an f32 difference of a few ulp moves the
// bf16 rounding only for values within a few f32 ulp of a rounding boundary (≈ 2^-14 of them), so
// every element must be within one bf16 ulp and at most 1 in 1000 may differ at all. Shapes: n_ff
// not a multiple of 64 (a CTA with idle pairs), k not a multiple of 512; 1 SM (one split: the
// epilogue exchange) and the real SM count (split-K: the reduction); m ≤ W4A16_SILU_M_MAX (16).
// Rows of m = 16 equal the row alone bitwise, and two launches are identical.
TEST(matmul_silu_sm80, fused_equals_two_step_and_oracle) {
    uint32_t seed = 900;
    const shape shapes[] = {{16, 80}, {48, 4112}, {80, 1040}, {272, 2064}, {1024, 576}};  // n_ff, k
    for (const shape& s : shapes) {
        host_weight hw = random_weight(2 * s.n, s.k, seed++);
        std::vector<float> wf = dequant_host(hw);
        dev_weight dw(hw, 16);
        std::vector<uint16_t> x64 = random_bf16(16 * s.k, seed++);
        for (int sms : {1, sm_count()}) {
            std::vector<uint16_t> out16;
            for (int64_t m : {1, 3, 9, 16}) {
                std::string what = "n_ff=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " m=" +
                                   std::to_string(m) + " sms=" + std::to_string(sms);
                std::vector<uint16_t> x(x64.begin(), x64.begin() + m * s.k);
                cuda::w4a16_small_config v1;
                v1.version = 1;
                std::vector<uint16_t> gu = run_small(dw, x, m, v1, sms);
                std::vector<double> ref, mag;
                oracle(x, m, wf, 2 * s.n, s.k, ref, mag);
                expect_close(gu, ref, mag, s.k, (what + " gu").c_str());
                std::vector<uint16_t> want = host_silu(gu, m, s.n), got = run_silu(dw, x, m, sms);
                ASSERT_EQ(got.size(), want.size());
                size_t differ = 0;
                for (size_t i = 0; i < got.size(); ++i) {
                    if (got[i] == want[i]) continue;
                    ++differ;
                    const float a = bf16_to_f32(got[i]), b = bf16_to_f32(want[i]);
                    const float ulp = std::ldexp(1.0f, std::ilogb(std::max(std::fabs(a), std::fabs(b))) - 7);
                    EXPECT_LE(std::fabs(a - b), ulp) << what << ": element " << i << " " << a << " vs " << b;
                }
                EXPECT_LE(differ * 1000, got.size() + 999) << what << ": " << differ << " elements differ";
                if (m == 16) out16 = got;
                EXPECT_EQ(got, run_silu(dw, x, m, sms)) << what << ": two launches differ";
            }
            std::vector<uint16_t> xr(x64.begin() + 9 * s.k, x64.begin() + 10 * s.k);  // row 9 alone
            EXPECT_EQ(0, std::memcmp(run_silu(dw, xr, 1, sms).data(), out16.data() + 9 * s.n, size_t(s.n) * 2))
                << "n_ff=" << s.n << " sms=" << sms << ": row 9 alone differs from the batch of 16";
        }
    }
}

// Through the backend: the prepare step re-lays the weight, backend::matmul validates it (the
// re-laid tensors keep the canonical shapes) and the registry picks the sm80 kernel; dense too.
TEST(matmul_cuda_backend, registry_selects_and_matches_oracle) {
    ASSERT_GT(cuda_device_count(), 0);
    std::unique_ptr<backend> be = make_cuda_backend(0);
    host_weight hw = random_weight(257, 1040, 21);
    std::vector<float> wf = dequant_host(hw);
    linear_weight lw;
    lw.kind = linear_kind::NVFP4, lw.n_out = hw.n, lw.n_in = hw.k, lw.scale_global = hw.scale_global;
    lw.codes = tensor::view(dtype::U8, {hw.n, hw.k / 2}, hw.codes.data());
    lw.scales = tensor::view(dtype::E4M3, {hw.n, hw.k / 16}, hw.scales.data());
    linear_weight dw = cuda::matmul_nvfp4_w4a16_sm80_prepare(*be, lw);
    std::vector<uint16_t> wd(size_t(hw.n * hw.k));  // the dense twin: the dequantized weight in bf16
    std::vector<float> wdf(wd.size());
    for (size_t i = 0; i < wd.size(); ++i) wd[i] = f32_to_bf16(wf[i]), wdf[i] = bf16_to_f32(wd[i]);
    linear_weight dense;
    dense.kind = linear_kind::DENSE, dense.n_out = hw.n, dense.n_in = hw.k;
    dense.dense = tensor::view(dtype::BF16, {hw.n, hw.k}, wd.data());
    linear_weight ddw = be->prepare_linear(dense);
    auto args_for = [&](const tensor& x, const tensor& out, const linear_weight& w, int64_t m) {
        matmul_args a;
        a.act = dtype::BF16, a.align = 256;  // cudaMalloc'd buffers
        a.x = x, a.out = out, a.w = &w, a.m = m, a.n = hw.n, a.k = hw.k;
        return a;
    };
    for (int64_t m : {1, 2, 3, 4, 5, 8, 16, 17, 100}) {
        std::vector<uint16_t> x = random_bf16(m * hw.k, 22 + uint32_t(m));
        tensor xd = be->upload(tensor::view(dtype::BF16, {m, hw.k}, x.data()));
        tensor out = be->alloc(dtype::BF16, {m, hw.n});
        std::vector<uint16_t> got(size_t(m * hw.n));
        std::vector<double> ref, mag;
        matmul_args a = args_for(xd, out, dw, m);
        // small m (k ≤ 4096): the sweep kernel; m ≤ 8: the sm80 one (the priorities follow docs/perf.md)
        std::string sel = kernel_registry::instance().select("matmul_nvfp4_w4a16", be->device(), a).name;
        if (m <= cuda::W4A16_SWEEP_M_MAX && (m <= 8 || hw.n <= cuda::W4A16_SWEEP_WIDE_N_MAX))
            EXPECT_EQ(sel, "matmul_nvfp4_w4a16_sweep_sm80");
        else if (m <= cuda::W4A16_GEMV_M_MAX)
            EXPECT_TRUE(sel == "matmul_nvfp4_w4a16_gemv_sm80" || sel == "matmul_nvfp4_w4a16_sm80") << sel;
        else if (m > cuda::W4A16_SM80_SMALL_M_MAX && (be->device().features & FEAT_WGMMA))
            EXPECT_EQ(sel, "matmul_nvfp4_w4a16_wgmma_sm90");  // the fused large-M kernel (sm_90a)
        else
            EXPECT_EQ(sel, "matmul_nvfp4_w4a16_sm80");
        for (const kernel_candidate& c : kernel_registry::instance().candidates("matmul_nvfp4_w4a16", be->device(), &a))
            if (c.kernel->name == "matmul_nvfp4_w4a16_gemv_sm80")
                EXPECT_EQ(c.eligible, m <= cuda::W4A16_GEMV_M_MAX) << "m=" << m << ": " << c.why_not;
        be->matmul(xd, dw, out, matmul_mode::W4A16);
        be->download(out, got.data());
        oracle(x, m, wf, hw.n, hw.k, ref, mag);
        expect_close(got, ref, mag, hw.k, ("backend w4a16 m=" + std::to_string(m)).c_str());
        be->matmul(xd, ddw, out, matmul_mode::AUTO);
        be->download(out, got.data());
        oracle(x, m, wdf, hw.n, hw.k, ref, mag);
        expect_close(got, ref, mag, hw.k, ("backend dense m=" + std::to_string(m)).c_str());
    }
    // the fused wgmma kernel: chosen for 64 < m ≤ 2048 where the image has wgmma (sm_90a on an
    // H100), refused with the reason elsewhere and past m = 2048; its result through the backend
    {
        const int64_t n2 = 128 * int64_t(be->device().sm_count), k2 = 208, m2 = 200;
        host_weight hw2 = random_weight(n2, k2, 23);
        std::vector<float> wf2 = dequant_host(hw2);
        linear_weight lw2;
        lw2.kind = linear_kind::NVFP4, lw2.n_out = n2, lw2.n_in = k2, lw2.scale_global = hw2.scale_global;
        lw2.codes = tensor::view(dtype::U8, {n2, k2 / 2}, hw2.codes.data());
        lw2.scales = tensor::view(dtype::E4M3, {n2, k2 / 16}, hw2.scales.data());
        linear_weight dw2 = cuda::matmul_nvfp4_w4a16_sm80_prepare(*be, lw2);
        std::vector<uint16_t> x = random_bf16(m2 * k2, 24);
        tensor xd = be->upload(tensor::view(dtype::BF16, {m2, k2}, x.data()));
        tensor out = be->alloc(dtype::BF16, {m2, n2});
        matmul_args a;
        a.act = dtype::BF16, a.align = 256;
        a.x = xd, a.out = out, a.w = &dw2, a.m = m2, a.n = n2, a.k = k2;
        const bool wgmma = (be->device().features & FEAT_WGMMA) != 0;
        std::string sel = kernel_registry::instance().select("matmul_nvfp4_w4a16", be->device(), a).name;
        EXPECT_EQ(sel, wgmma ? "matmul_nvfp4_w4a16_wgmma_sm90" : "matmul_nvfp4_w4a16_sm80");
        for (const kernel_candidate& c : kernel_registry::instance().candidates("matmul_nvfp4_w4a16", be->device(), &a))
            if (c.kernel->name == "matmul_nvfp4_w4a16_wgmma_sm90" && !wgmma)
                EXPECT_NE(c.why_not.find("wgmma"), std::string::npos) << c.why_not;
        a.m = 2 * cuda::W4A16_SM80_SMALL_M_MAX + 4096;  // past the measured range: the reason says so
        for (const kernel_candidate& c : kernel_registry::instance().candidates("matmul_nvfp4_w4a16", be->device(), &a))
            if (c.kernel->name == "matmul_nvfp4_w4a16_wgmma_sm90") EXPECT_FALSE(c.eligible);
        be->matmul(xd, dw2, out, matmul_mode::W4A16);
        std::vector<uint16_t> got(size_t(m2 * n2));
        be->download(out, got.data());
        std::vector<double> ref, mag;
        oracle(x, m2, wf2, n2, k2, ref, mag);
        expect_close(got, ref, mag, k2, "backend w4a16 large m");
    }
    // the canonical (not re-laid) weight is rejected with the reason, not run wrongly
    linear_weight canon = lw;
    canon.codes = be->upload(lw.codes), canon.scales = be->upload(lw.scales);
    tensor xd = be->alloc(dtype::BF16, {1, hw.k}), out = be->alloc(dtype::BF16, {1, hw.n});
    try {
        be->matmul(xd, canon, out, matmul_mode::W4A16);
        ADD_FAILURE() << "a canonical-layout weight was accepted by the sm80 kernel";
    } catch (const tetra::error& e) {
        EXPECT_NE(std::string(e.what()).find("packed layout"), std::string::npos) << e.what();
    }
}
#endif
