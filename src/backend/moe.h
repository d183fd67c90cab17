// Mixture-of-experts ops (docs/moe.md): router top-k, token → expert permutation, grouped matmul
// over experts, weighted combine. Free functions on `backend&` that validate shapes/dtypes once and
// dispatch through the kernel registry exactly as backend.h's ops do. Designed for a device
// implementation with no host sync: counts/offsets/permutation are computed by kernels into device
// tensors; the only host-side sizes are bounds known before the step (n_tokens·k rows).
// Determinism: every output row depends only on its own token's inputs, summed in a fixed order.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"

namespace tetra {

// ---- ops -------------------------------------------------------------------------------------------
// Router: per token p = softmax(logits) in f32 (max-subtracted, Σ in expert order), then the k
// largest p (ties → lower expert index), in descending order of p; with norm_topk_prob each
// selected p is divided by their sum (f32, summed in slot order), as HF Qwen3MoeTopKRouter.
// logits: [n_tokens, n_expert] act; topk_ids: i32 [n_tokens, k]; topk_weights: f32 [n_tokens, k]
void moe_route(backend& be, const tensor& logits, bool norm_topk_prob, const tensor& topk_ids,
               const tensor& topk_weights);

// Permutation: the n_tokens·k (token, slot) assignments grouped by expert, each group in ascending
// (token, slot) order (a stable counting sort: the result does not depend on threading).
//   expert_counts[e]  = assignments to expert e
//   expert_offsets[e] = Σ_{e' < e} counts[e'] (expert_offsets[n_expert] = n_tokens·k)
//   sorted_tokens[r]  = token of permuted row r (the ids for get_rows: the gather of x)
//   dest_rows[t, s]   = permuted row of assignment (t, s) (what moe_combine reads)
// An id outside [0, n_expert) is an error (CPU) / undefined (device).
// topk_ids: i32 [n_tokens, k]; expert_counts: i32 [n_expert]; expert_offsets: i32 [n_expert + 1];
// sorted_tokens: i32 [n_tokens·k]; dest_rows: i32 [n_tokens, k]
void moe_permute(backend& be, const tensor& topk_ids, int64_t n_expert, const tensor& expert_counts,
                 const tensor& expert_offsets, const tensor& sorted_tokens, const tensor& dest_rows);

// The router's inputs folded into moe_route_permute (optional): before the route,
// add_rms_norm(residual, x, w, eps, h) and then logits = h · routerᵀ (backend::matmul in `mode`),
// with those two ops' results bit for bit wherever they run the kernels the fused one repeats (the
// CUDA cluster kernel: norm_vec's one-row-per-block form and the bf16 GEMV; moe_route_front_sm90.cu).
// What it is for: at decode the post-attention norm, the router GEMV and the route + permutation are
// three dependent launches for a few microseconds of work (docs/moe.md). residual, x, h: [n_tokens,
// n_embd] act; w: [n_embd]; router: [n_expert, n_embd]; h must not overlap residual, x or the outputs.
struct moe_route_front {
    tensor residual, x, w, h;
    float eps = 1e-6f;
    const linear_weight* router = nullptr;  // null: no front (logits are an input)
    matmul_mode mode = matmul_mode::AUTO;
};

// Router and permutation in one op: exactly moe_route(logits → topk_ids, topk_weights) followed by
// moe_permute(topk_ids → expert_counts, expert_offsets, sorted_tokens, dest_rows), same outputs bit
// for bit. What it is for: one launch instead of two on the GPU for decode batches (the step's
// chain of small MoE kernels; docs/moe.md). Shapes as the two ops'. front: see moe_route_front
// (logits is then an output too).
void moe_route_permute(backend& be, const tensor& logits, bool norm_topk_prob, const tensor& topk_ids,
                       const tensor& topk_weights, const tensor& expert_counts, const tensor& expert_offsets,
                       const tensor& sorted_tokens, const tensor& dest_rows, const moe_route_front* front = nullptr);

// Grouped matmul: for every expert e, out[r] = x[r] · W_eᵀ for the rows r in
// [expert_offsets[e], expert_offsets[e + 1]), with the dense matmul's semantics per mode (W4A16:
// weights dequantized exactly; W4A4: activations fake-quantized with expert e's input_global_quant).
// Every expert must have the same kind and shape [N, K]. A row's result does not depend on the
// other rows (bit-identical alone or in any batch).
// x: [n_rows, K] act; experts: n_expert linears [N, K] (prepared for this backend);
// expert_offsets: i32 [n_expert + 1] (moe_permute's); out: [n_rows, N] act
// offsets_early, rows_per_expert_max: see moe_matmul_args.
void moe_matmul(backend& be, const tensor& x, const std::vector<linear_weight>& experts,
                const tensor& expert_offsets, const tensor& out, matmul_mode mode = matmul_mode::AUTO,
                bool offsets_early = false, int64_t rows_per_expert_max = 0);

// The experts' fused gate/up stage as one op ("moe_matmul_silu"): moe_matmul(x, gate_up, offsets,
// gu, mode), then silu_mul_gate_up(gu, out). A kernel may fuse the two (the CUDA grouped mma kernel
// does, without writing gu); the result is the two-step result bit for bit (both use the same
// grouped kernel plan). gate_up: every expert's stacked
// [gate; up] weight [2·n_ff, K]; gu: [n_rows, 2·n_ff] act scratch; out: [n_rows, n_ff] act (x, gu
// and out must not overlap).
void moe_matmul_silu(backend& be, const tensor& x, const std::vector<linear_weight>& gate_up,
                     const tensor& expert_offsets, const tensor& gu, const tensor& out,
                     matmul_mode mode = matmul_mode::AUTO, bool offsets_early = false,
                     int64_t rows_per_expert_max = 0);

// Combine: out[t] = Σ_{s = 0..k-1} topk_weights[t, s] · y[dest_rows[t, s]] (f32, ascending s; no
// atomics), then + sigmoid(shared_gate[t]) · shared[t] when `shared` is given (the Qwen2-MoE /
// Qwen3-Next shared expert; without shared_gate the shared row is added with weight 1).
// y: [n_rows, n] act; dest_rows: i32 [n_tokens, k]; topk_weights: f32 [n_tokens, k];
// out: [n_tokens, n] act; shared: [n_tokens, n] act or empty; shared_gate: [n_tokens, 1] act or empty
// norm (optional): the next add_rms_norm folded into the combine — after out, add_rms_norm(residual,
// out, w, eps, h) with backend::add_rms_norm's result bit for bit (the CUDA decode kernel does both in
// one launch: one kernel fewer per MoE layer). residual, h: [n_tokens, n] act; w: [n]; h must not
// overlap out, residual or y.
struct moe_combine_norm {
    tensor residual, w, h;
    float eps = 1e-6f;
};
void moe_combine(backend& be, const tensor& y, const tensor& dest_rows, const tensor& topk_weights,
                 const tensor& out, const tensor& shared = tensor(), const tensor& shared_gate = tensor(),
                 const moe_combine_norm* norm = nullptr);

// ---- kernel arguments (registry op name in the comment; shapes as validated above) ----------------

// "moe_route"
struct moe_route_args : op_args {
    tensor logits, topk_ids, topk_weights;
    int64_t n_tokens = 0, n_expert = 0, k = 0;
    bool norm_topk_prob = false;
};

// "moe_permute"
struct moe_permute_args : op_args {
    tensor topk_ids, expert_counts, expert_offsets, sorted_tokens, dest_rows;
    int64_t n_tokens = 0, n_expert = 0, k = 0;
};

// "moe_route_permute": the two ops' arguments, validated as theirs (act = the logits' dtype);
// front.router null = no front
struct moe_route_permute_args : op_args {
    moe_route_args route;
    moe_permute_args permute;
    moe_route_front front;
};
// A kernel's front where it has no fused form: add_rms_norm, then the router matmul, through the
// registry (the CPU kernel and the CUDA fallback; moe.cpp). No-op without a front.
void moe_route_front_before(backend& be, const moe_route_permute_args& a);

// "moe_matmul_dense" | "moe_matmul_nvfp4_w4a16" | "moe_matmul_nvfp4_w4a4"
struct moe_matmul_args : op_args {
    tensor x, expert_offsets, out;
    const std::vector<linear_weight>* experts = nullptr;
    int64_t n_rows = 0, n = 0, k = 0;
    // The caller's promise that expert_offsets was written two or more kernel launches before this
    // one on the backend's stream (the model: route_permute, get_rows, then the grouped matmuls), with
    // only kernels between that call pdl_wait() before pdl_trigger() (cuda_device.cuh: every tetra
    // kernel does), so a PDL kernel may read it before waiting for the previous kernel. A false
    // promise is a silent race (stale offsets: wrong rows); false is always safe, only slower.
    bool offsets_early = false;
    // The caller's promise that no expert has more than this many rows (0: no bound). The model
    // passes its token count: moe_route gives a token k distinct experts, so an expert gets at most
    // one row per token. A kernel may size per-expert buffers by it (the CUDA grouped mma kernel:
    // its x window, so that more CTAs fit an SM); one that finds the promise broken stops with a
    // device error instead of computing.
    int64_t rows_per_expert_max = 0;
};

// "moe_matmul_silu": mm is the grouped matmul into mm.out = gu (scratch: only two-step kernels
// write it); out = silu_mul_gate_up(gu); mode: the resolved matmul mode.
struct moe_matmul_silu_args : op_args {
    moe_matmul_args mm;
    tensor out;
    matmul_mode mode = matmul_mode::W4A16;
    int64_t n_ff = 0;
};
// moe_matmul_silu as its two ops through the registry (moe_matmul into gu, then silu_mul_gate_up):
// the CPU kernel (the oracle) and every backend's fallback kernel (moe.cpp).
void moe_matmul_silu_two_step(backend& be, const moe_matmul_silu_args& a);

// "moe_combine"
struct moe_combine_args : op_args {
    tensor y, dest_rows, topk_weights, out, shared, shared_gate;  // shared/shared_gate: data null = none
    int64_t n_tokens = 0, k = 0, n = 0;
    moe_combine_norm norm;  // norm.residual data null = none; else add_rms_norm(residual, out, w, eps, h)
};
// A kernel's norm step where it has no fused form: add_rms_norm through the registry (the CPU kernel
// and the CUDA fallback; moe.cpp).
void moe_combine_norm_after(backend& be, const moe_combine_args& a);

namespace cpu {
// Adds the CPU tables of the MoE ops (cpu/moe_*_cpu.cpp); called by cpu::register_kernels.
void register_moe_kernels(kernel_registry& r);
// The oracles, for the fused op's CPU kernel (moe_route_cpu.cpp, moe_permute_cpu.cpp).
void moe_route_cpu(backend& be, const moe_route_args& a);
void moe_permute_cpu(backend& be, const moe_permute_args& a);
}  // namespace cpu

}  // namespace tetra
