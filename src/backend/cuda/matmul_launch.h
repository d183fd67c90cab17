// Host launchers of the CUDA matmul kernels (bf16 activations, f32 accumulation), usable without
// the backend object: raw device pointers and a stream. The registry entries (matmul_*_sm80.cu;
// the W4A16 packed-layout kernels' in matmul_nvfp4_w4a16_glue.cpp) wrap these; tests and
// bench/bench_matmul.cu call them directly.
//   matmul_nvfp4_w4a16_sm80: W4A16 NVFP4 on a re-laid weight (w4a16_sm80_pack) — mma.sync bf16
//     small-M kernel (M ≤ 64) and, for larger M, dequant-to-bf16 tiles + cuBLASLt.
//   matmul_nvfp4_w4a16_gemv_sm80: decode (m ≤ 8) stream-K kernel on the same re-laid weight.
//   matmul_nvfp4_w4a16_wgmma_sm90: large M on sm_90a, the weight decoded in registers as wgmma's A
//     operand (no bf16 copy), x by TMA in the packed k order; also matmul_silu (gate/up + silu).
//   matmul_dense_bf16: cuBLASLt bf16 GEMM (lm_head, dense layers).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/w4a16_layout.h"
#include "backend/registry.h"
#include "io/weights.h"

namespace tetra {
namespace cuda {

// ---- backend glue ----------------------------------------------------------------------------
// Registry entries (called from register_matmul in matmul_register.cpp).
void register_matmul_nvfp4_w4a16_sm80(kernel_registry& r);
void register_matmul_silu_sm80(kernel_registry& r);  // "matmul_silu": fused W4A16 + two-step
void register_matmul_nvfp4_w4a16_gemv_sm80(kernel_registry& r);  // m ≤ 8, same prepared weight
void register_matmul_nvfp4_w4a16_sweep_sm80(kernel_registry& r);  // small m, k ≤ 4096, same prepared weight
void register_matmul_nvfp4_w4a16_wgmma_sm90(kernel_registry& r);  // large m, sm_90a, same prepared weight
void register_matmul_dense_bf16_cublaslt(kernel_registry& r);
void register_matmul_dense_bf16_gemv_sm80(kernel_registry& r);  // small (router) weights, PDL
// The prepare step of matmul_nvfp4_w4a16_sm80 (for cuda_backend::prepare_linear): packs a host
// NVFP4 weight (w4a16_sm80_pack) and uploads it. codes/scales keep the canonical shapes [n, k/2] /
// [n, k/16] (so backend::matmul's checks pass) but point at the packed buffers (≥ those sizes);
// the kernel's accepts() knows them by pointer. Do not download them as canonical bytes: the
// canonical host bytes stay the truth.
linear_weight matmul_nvfp4_w4a16_sm80_prepare(backend& be, const linear_weight& host);
// "" when w is an NVFP4 weight that matmul_nvfp4_w4a16_sm80_prepare re-laid (known by pointer and
// shape), else the reason: the check every kernel reading the packed layout makes in accepts().
std::string w4a16_sm80_weight_why_not(const linear_weight& w);
// The f32-activation matmuls on CUDA cores (matmul_f32_sm80.cu): W4A16 on the packed layout and
// bf16 dense weights, for --dtype float32.
void register_matmul_f32_sm80(kernel_registry& r);

// ---- W4A16 re-laid weight: w4a16_layout.h (w4a16_sm80_dims, w4a16_sm80_pack) ----------------

// A re-laid weight on the device.
struct w4a16_sm80_weight {
    const void* codes = nullptr;   // packed codes (16-B aligned)
    const void* scales = nullptr;  // packed scales (16-B aligned)
    int64_t n = 0, k = 0;
    float scale_global = 1.0f;     // w = e2m1 · e4m3 · scale_global
};

// Device scratch the W4A16 launcher needs. `counters` must be zero before the first launch
// (cudaMemset once); every launch leaves it zero again, so it can be reused and captured.
struct w4a16_sm80_workspace {
    void* partial = nullptr;   // f32 split-K partial sums
    size_t partial_bytes = 0;
    int* counters = nullptr;   // one per 128-row block
    size_t counter_count = 0;
    void* dequant = nullptr;   // bf16 weight tiles of the large-M path
    size_t dequant_bytes = 0;
    void* cublas = nullptr;    // cuBLASLt workspace of the large-M path
    size_t cublas_bytes = 0;
};
constexpr int64_t W4A16_SM80_SMALL_M_MAX = 64;
// The fused matmul_silu form runs up to this many rows (more: matmul + silu_mul_gate_up; on an
// H100 the fused form measured 1.5 % slower at batch 64 of Llama-3.1-8B, docs/perf.md).
constexpr int64_t W4A16_SILU_M_MAX = 16;
constexpr int64_t W4A16_RUN_M_MAX = 16;  // the balanced-run small-M kernel (version 2) takes m ≤ this

// Small-M kernel variants (the bench and tests compare them; the defaults are what the launcher
// runs). Version 2 (m ≤ W4A16_RUN_M_MAX): equal runs of (128-row block, 512-k group) units, one
// per CTA of one wave of ≤ SMs × ctas_per_sm, fixed-order reduction of split row blocks. Version
// 1: 128-row blocks × split-K groups (the kernel before 2026-11-22; always used for m > 16).
// Version 0 picks 1 or 2 per shape and SM count (never per m).
struct w4a16_small_config {
    int version = 0;
    int ctas_per_sm = 0;   // version 2: 1 or 2, 0 = the plan's choice
    int min_len = 0;       // version 2: shortest run in (row block, group) units (0 = 1)
    int early_signal = 0;  // version 2: bump a run's first split counter mid-run (variant)
    int gps = 0;           // version 1: 512-k groups per split (bench/tests; 0 = the plan's choice;
                           // ignored where version 0 picks version 2)
    int pdl = 0;           // launch with programmatic dependent launch (sm_90+: weights stream
                           // before the previous kernel ends; the kernels wait before reading x)
    int64_t silu_n_ff = 0; // > 0: matmul_silu (version 1, m ≤ W4A16_SILU_M_MAX; n = 2·silu_n_ff, silu_n_ff % 16 == 0):
                           // out is [m, silu_n_ff] = silu(x·gateᵀ) · (x·upᵀ), each half rounded to
                           // bf16 first (the two-step bits when the plain matmul runs version 1)
};

// The version the default config runs for 1 ≤ m ≤ W4A16_RUN_M_MAX on an [n, k] weight (1 or 2).
int w4a16_sm80_small_version(int64_t n, int64_t k, int sm_count);

// Sizes for shapes up to (m_max, n, k) on the current device, with `sm_count` SMs (and small-M
// config cfg).
w4a16_sm80_workspace w4a16_sm80_workspace_need(int64_t m_max, int64_t n, int64_t k, int sm_count,
                                               const w4a16_small_config& cfg = {});

// out[m, n] = x[m, k] · Wᵀ. x: bf16 [m, k]; out: bf16 [m, n]. Picks the small-M kernel for
// m ≤ W4A16_SM80_SMALL_M_MAX rows whose shared memory fits the device (w4a16_small_m_fit: 32 rows
// on 99-KB devices such as sm_86/89/120/121), else the dequant + cuBLASLt path. Deterministic (fixed-order
// split-K reduction, no float atomics).
void matmul_nvfp4_w4a16_sm80_launch(const void* x, int64_t m, const w4a16_sm80_weight& w, void* out,
                                    const w4a16_sm80_workspace& ws, int sm_count, cudaStream_t s,
                                    const w4a16_small_config& cfg = {});
// The two paths, for tests and the bench.
void matmul_nvfp4_w4a16_sm80_small_launch(const void* x, int64_t m, const w4a16_sm80_weight& w,
                                          void* out, const w4a16_sm80_workspace& ws, int sm_count,
                                          cudaStream_t s, const w4a16_small_config& cfg = {});
void matmul_nvfp4_w4a16_sm80_large_launch(const void* x, int64_t m, const w4a16_sm80_weight& w,
                                          void* out, const w4a16_sm80_workspace& ws, cudaStream_t s);
// Rows [n0, n0 + rows) of the weight dequantized to bf16 [rows, k] as e2m1 · e4m3 · 2^-8 (exact;
// scale_global · 2^8 goes into the GEMM's alpha).
void w4a16_sm80_dequant_launch(const w4a16_sm80_weight& w, int64_t n0, int64_t rows, void* dst,
                               cudaStream_t s);

// ---- W4A16 fused large-M kernel (matmul_nvfp4_w4a16_wgmma_sm90.cu, sm_90a images only) -----------
// out[i, j] (row stride ld_out ≥ n) = x[m, k] · Wᵀ with the weight dequantized in registers as
// wgmma's A operand (no bf16 copy); same re-laid weight as the sm80 kernels. Any m ≥ 1 (tiles of
// 256 or 128 rows), k a multiple of 16. `ws` (ws_bytes) takes x in the packed layout's k order (rows of
// k rounded up to 64, bf16): w4a16_wgmma_workspace_rows(k, ws_bytes) rows per pass, at least 256
// or m. Only for a device and image with FEAT_WGMMA (the kernel traps elsewhere); deterministic,
// each output row independent of the others.
// tokens_override: 128 or 256 forces the token tile (bench, tests); 0 = w4a16_wgmma_tokens.
void matmul_nvfp4_w4a16_wgmma_launch(const void* x, int64_t m, const w4a16_sm80_weight& w, void* out,
                                     int64_t ld_out, void* ws, size_t ws_bytes, cudaStream_t s, int tokens_override = 0);
// matmul_silu on the same kernel: w is the stacked [gate; up] weight (n = 2·n_ff, n_ff % 16 == 0);
// out [m, n_ff] = silu(x·gateᵀ) · (x·upᵀ), each half rounded to bf16 first: the bits of this
// kernel's plain form followed by silu_mul_gate_up.
void matmul_silu_nvfp4_w4a16_wgmma_launch(const void* x, int64_t m, const w4a16_sm80_weight& w, int64_t n_ff, void* out,
                                          void* ws, size_t ws_bytes, cudaStream_t s, int tokens_override = 0);
// The grouped form (moe_matmul / moe_matmul_silu, moe_matmul_nvfp4_w4a16_wgmma_sm90): x [n_rows, k]
// grouped by expert (offsets [n_expert + 1], on the device), each expert's packed weight and alpha
// from `table`; CTAs take passes of W4A16_MOE_WGMMA_TOKENS rows of one expert (found on the device).
// n_ff > 0: the stacked [gate; up] experts, out [n_rows, n_ff] = silu(gate) · up. One pass: ws holds
// every row (w4a16_wgmma_workspace_bytes(n_rows, k)). Same bits per row as the plain form.
struct moe_expert_ptrs;
constexpr int W4A16_MOE_WGMMA_TOKENS = 128;
void moe_matmul_nvfp4_w4a16_wgmma_launch(const void* x, int64_t n_rows, const int32_t* offsets,
                                         const moe_expert_ptrs* table, int64_t n_expert, int64_t n, int64_t k, void* out,
                                         int64_t n_ff, void* ws, size_t ws_bytes, cudaStream_t s);
// The workspace of one pass over m rows of x [m, k] (k rounded up to 64, bf16), and the rows a
// workspace of ws_bytes holds.
size_t w4a16_wgmma_workspace_bytes(int64_t m, int64_t k);
size_t w4a16_wgmma_workspace_rows(int64_t k, size_t ws_bytes);
// The token tile the launcher takes for m rows of an [n, k] weight on sm_count SMs: 256 (one CTA
// per SM) unless 128 (two per SM) spreads the CTAs more evenly.
int w4a16_wgmma_tokens(int64_t m, int64_t n, int sm_count);
// Whether this binary holds the kernel as sm_90 SASS for the current device (the bench and tests
// ask before launching it outside the registry).
bool w4a16_wgmma_compiled_here();

// ---- W4A16 decode kernel (matmul_nvfp4_w4a16_gemv_sm80.cu) ---------------------------------------
// m ≤ 8 on the same re-laid weight (w4a16_sm80_pack), x staged whole in shared memory (so
// m·(k + 8)·2 ≤ W4A16_GEMV_X_SMEM_MAX: k = 4096 → m ≤ 8, k = 14336 → m ≤ 2). Stream-K over
// (16-row tile, 64-k chunk) items in one wave; split tiles reduced in a fixed order
// (deterministic, m-independent: rows of a batch equal the m = 1 result bitwise). Workspace:
// w4a16_sm80_workspace's partial (≥ the plan's partial_bytes) and counters (≥ counter_count, zero
// before the first launch; every launch leaves them zero).
constexpr int64_t W4A16_GEMV_M_MAX = 8;
constexpr int64_t W4A16_GEMV_X_SMEM_MAX = 72 << 10;
bool w4a16_gemv_fits(int64_t m, int64_t k);  // the decode kernel takes x [m, k]
struct w4a16_gemv_config {  // variants for the bench; the default is what the registry runs
    int ctas_per_sm = 2;     // 8-warp CTAs per SM; ring slots per warp: 1 → 16, 2 → 8, 3 → 4
    int64_t min_chunks = 4;  // shortest run of chunks per warp
};
struct w4a16_gemv_plan {
    int64_t total = 0, per = 0, grid = 0;  // items, items per warp, CTAs (8 warps each)
    size_t partial_bytes = 0, counter_count = 0;
};
w4a16_gemv_plan w4a16_gemv_plan_of(int64_t n, int64_t k, int sm_count, const w4a16_gemv_config& cfg = {});
// Dynamic shared memory per CTA at x [m, k]: the warps' rings + x. Above the device's limit (99-KB
// sm_86 / 89 / 120 / 121 at the default 8 slots: k = 4096 from m = 8) the launcher refuses and the
// registry declines.
int64_t w4a16_gemv_smem(int64_t m, int64_t k, const w4a16_gemv_config& cfg = {});
// out[m, n] = x[m, k] · Wᵀ when w4a16_gemv_fits(m, k). x: bf16 [m, k]; out: bf16 [m, n].
void matmul_nvfp4_w4a16_gemv_launch(const void* x, int64_t m, const w4a16_sm80_weight& w, void* out,
                                    const w4a16_sm80_workspace& ws, int sm_count, cudaStream_t s,
                                    const w4a16_gemv_config& cfg = {});

// The current device's opt-in shared memory per block, asked once per device (the W4A16 launchers'
// cudaFuncAttributeMaxDynamicSharedMemorySize and their shared-memory fits).
int64_t smem_optin_here();
// The current device's shared memory per SM, asked once per device (the small-M launcher's
// one-CTA-per-SM rule, the fa2 prefill attention's three-CTAs rule).
int64_t smem_per_sm_here();
// What a sweep plan may use on this device: the opt-in limit less the kernel's static allowance
// (W4A16_SWEEP_STATIC_SMEM_MAX); the registry and the launcher pass it as w4a16_sweep_config::smem_limit.
inline int64_t w4a16_sweep_smem_limit_here() { return smem_optin_here() - W4A16_SWEEP_STATIC_SMEM_MAX; }

// ---- W4A16 sweep decode kernel (matmul_nvfp4_w4a16_sweep_sm80.cu) --------------------------------
// m ≤ 16 on the same re-laid weight (m > 8: two 8-row column tiles per MMA step, x through L1):
// many short CTAs, each copying T tiles × G groups of the weight to
// shared memory before its PDL wait (T·S warps, S per tile, G / S groups each); x staged per CTA or
// read by each lane through L1. Workspace (plans that split k over CTAs, n_gr > 1): partial ≥ the
// plan's partial_bytes, counters ≥ counter_count (zero before the first launch; every launch leaves
// them zero). Deterministic; a row's arithmetic depends on the weight shape alone (not on m).
// The plan (w4a16_sweep_plan_of, w4a16_sweep_why_not) and its limits: w4a16_layout.h.
void matmul_nvfp4_w4a16_sweep_launch(const void* x, int64_t m, const w4a16_sm80_weight& w, void* out,
                                     const w4a16_sm80_workspace& ws, cudaStream_t s,
                                     const w4a16_sweep_config& cfg = {});

// ---- dense bf16 (cuBLASLt) -------------------------------------------------------------------
// out[i, j] (row stride ld_out) = alpha · Σ_k x[i, k] · w[j, k]. x: bf16 [m, k]; w: bf16 [n, k];
// out: bf16. The cuBLASLt handle and the per-shape algorithm cache are process-wide (per device);
// `ws` is the cuBLASLt workspace (no allocation inside, so the call can be graph-captured once
// the shape has been seen).
void gemm_bf16_tn_launch(const void* x, const void* w, void* out, int64_t m, int64_t n, int64_t k,
                         int64_t ld_out, float alpha, void* ws, size_t ws_bytes, cudaStream_t s);
constexpr size_t CUBLASLT_WORKSPACE_BYTES = size_t(32) << 20;

}  // namespace cuda
}  // namespace tetra
