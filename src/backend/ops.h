// Argument structs of every op, as kernels receive them (registry name in the comment). The op
// wrappers in backend.cpp validate shapes, dtypes and devices before any kernel sees these, so
// kernels may assume the documented shapes; accepts() only rejects what a kernel cannot handle.
#pragma once
#include "backend/backend.h"
#include "backend/registry.h"

namespace tetra {

// "get_rows" (embedding too). src: [n_rows, n] f32|bf16|f16; ids: i32 [m]; out: [m, n] act
struct get_rows_args : op_args { tensor src, ids, out; };

// "rms_norm". x: [n_rows, n] act; w: [n] f32|bf16|f16; out: [n_rows, n] act (may alias x)
struct rms_norm_args : op_args { tensor x, w, out; float eps = 1e-6f; };

// "add_rms_norm". residual: [n_rows, n] act (in/out); x, out: [n_rows, n] act; w: [n]
struct add_rms_norm_args : op_args { tensor residual, x, w, out; float eps = 1e-6f; };

// "rope". q: [n_tokens, n_head, head_dim] act; k: [n_tokens, n_head_kv, head_dim] act (in place);
// positions: i32 [n_tokens]; inv_freq: f32 [n_rot/2]
struct rope_args : op_args { tensor q, k, positions, inv_freq; };

// "kv_store". k, v: [n_tokens, n_head_kv, head_dim] act; caches: [n_blocks, block_size,
// n_head_kv, head_dim] f32|bf16; slot_mapping: i32 [n_tokens]
struct kv_store_args : op_args { tensor k, v, k_cache, v_cache, slot_mapping; };

// "qkv_rope_store". qkv: [n_tokens, n_head + 2·n_head_kv, head_dim] act; q_norm, k_norm: [head_dim]
// or empty (no norm); positions: i32 [n_tokens]; inv_freq: f32 [n_rot/2]; q_out: [n_tokens, n_head,
// head_dim] act; caches and slot_mapping as kv_store
struct qkv_rope_store_args : op_args {
    tensor qkv, q_norm, k_norm, positions, inv_freq, q_out, k_cache, v_cache, slot_mapping;
    float eps = 1e-6f;
};

// "attention". q: [n_tokens, n_head, head_dim] act; out: [n_tokens, n_head·head_dim] act
struct attention_args : op_args {
    tensor q, k_cache, v_cache, out;
    attn_metadata meta;
    float scale = 1.0f;
    int sliding_window = 0;
};

// "matmul_dense" | "matmul_nvfp4_w4a16" | "matmul_nvfp4_w4a4".
// x: [M, K] act; w: [N, K] (prepared for this backend); out: [M, N] act
struct matmul_args : op_args {
    tensor x, out;
    const linear_weight* w = nullptr;
    int64_t m = 0, n = 0, k = 0;
};

// "silu_mul". n_ff == 0: gate, up, out: [n_rows, n_ff] act (flattened: numel). n_ff > 0 (the fused
// form, backend::silu_mul_gate_up): gate is gate_up [n_rows, 2·n_ff] act, up is empty, out is
// [n_rows, n_ff] act; out[r, j] = silu(gate_up[r, j]) · gate_up[r, n_ff + j].
struct silu_mul_args : op_args {
    tensor gate, up, out;
    int64_t n_ff = 0;
};

// "matmul_silu": the gate/up stage of an MLP as one op. mm is the matmul of x by the stacked
// [gate; up] weight ([2·n_ff, K]) into mm.out = gu [M, 2·n_ff] act (scratch: only the two-step
// kernels write it); out: [M, n_ff] act = silu_mul_gate_up(gu), i.e. out[r, j] = silu(gu[r, j]) ·
// gu[r, n_ff + j] with gu rounded to act as matmul stores it. mode: the resolved matmul mode.
struct matmul_silu_args : op_args {
    matmul_args mm;
    tensor out;
    matmul_mode mode = matmul_mode::W4A16;
    int64_t n_ff = 0;
};
// matmul_silu as its two ops through the registry (mm into gu, then silu_mul_gate_up): the CPU
// kernel (the oracle) and every backend's fallback kernel (backend.cpp).
void matmul_silu_two_step(backend& be, const matmul_silu_args& a);

// "decode_layers": the decoder layers of a batch-1 decode step (one token, one sequence) of a dense
// model with fused qkv and gate/up projections, as one op (backend::decode_layers). Per layer, in
// order: h = rms_norm(residual) (layer 0 when first_plain) or add_rms_norm(residual, proj); qkv =
// h · Wqkv; qkv_rope_store (q/k norm when given, rope, k/v into the caches); attention; proj = attn ·
// Wo; add_rms_norm(residual, proj, ffn_norm) → h; matmul_silu(h, gate_up) → gate; proj = gate · Wdown.
// residual and proj are left as the unfused sequence leaves them (the caller's output norm adds proj).
struct decode_layer_ref {
    tensor attn_norm, ffn_norm, q_norm, k_norm;  // [n_embd] ×2, [head_dim] or empty ×2
    const linear_weight* qkv = nullptr;          // [(n_head + 2·n_head_kv)·head_dim, n_embd]
    const linear_weight* o = nullptr;            // [n_embd, n_head·head_dim]
    const linear_weight* gate_up = nullptr;      // [2·n_ff, n_embd], the stacked [gate; up]
    const linear_weight* down = nullptr;         // [n_embd, n_ff]
    tensor k_cache, v_cache;                     // [n_blocks, block_size, n_head_kv, head_dim] act
};
struct decode_layers_args : op_args {
    std::vector<decode_layer_ref> layers;
    tensor residual, proj;  // [1, n_embd] act, in/out
    bool first_plain = true;
    // Scratch of the composition (kernels that fuse the layers need not touch them): h [1, n_embd],
    // qkv [1, n_head + 2·n_head_kv, head_dim], q [1, n_head, head_dim], attn [1, n_head·head_dim],
    // gu [1, 2·n_ff], gate [1, n_ff], all act.
    tensor h, qkv, q, attn, gu, gate;
    tensor inv_freq;  // f32 [head_dim/2 or fewer]
    attn_metadata meta;
    float eps = 1e-6f, scale = 1.0f;
    matmul_mode mode = matmul_mode::AUTO;  // passed to every matmul, as the layer loop does
    bool all_w4a16 = false;                // set by the op: every linear resolves to W4A16 under `mode`
    int64_t n_head = 0, n_head_kv = 0, head_dim = 0, n_embd = 0, n_ff = 0;
};
// decode_layers as the sequence of ops it stands for, through the registry (backend.cpp): the CPU
// kernel (the oracle) and every backend's answer when no fused kernel takes the call.
void decode_layers_composed(backend& be, const decode_layers_args& a);

// "add". a, b, out: same shape act (flattened: numel)
struct add_args : op_args { tensor a, b, out; };

// "argmax". x: [n_rows, n] act; out: i32 [n_rows]
struct argmax_args : op_args { tensor x, out; };

// "cast". src, out: same numel, f32|bf16|f16 each
struct cast_args : op_args { tensor src, out; };

// "quantize_nvfp4_act". x: [n_rows, n] act (n % 16 == 0); codes: u8 [n_rows, n/2];
// scales: e4m3|u8 [n_rows, n/16]; global_quant: G, finite and > 0
struct quantize_nvfp4_act_args : op_args { tensor x, codes, scales; float global_quant = 1.0f; };

}  // namespace tetra
