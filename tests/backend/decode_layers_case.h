// A random decoder stack for the decode_layers op (ops.h): NVFP4 weights, norms, paged KV caches
// with earlier positions filled and a shuffled block table, one decode token at position `pos`.
// side_of() puts one copy of it on a backend (weights prepared for it, bf16 activations).
#pragma once
#include <algorithm>
#include <cstring>
#include <numeric>

#include "backend/cuda/gpu_harness.h"
#include "backend/ops.h"
#include "backend/ops_harness.h"

namespace tetra_test {

struct stack_shape {
    int64_t n_embd, n_head, n_kv, hd, n_ff, n_layer;
    bool qk_norm;
    int pos;  // the decode token's position: pos earlier positions are in the cache
    bool first_plain;
    int64_t block_size = 16;
    dtype norm_type = dtype::BF16;
};

struct stack_host {
    stack_shape s;
    std::vector<linear_weight> lin;  // 4 per layer: qkv, o, gate_up, down
    std::vector<tensor> norms;       // 4 per layer: attn, ffn, q, k (q/k empty without qk_norm)
    std::vector<tensor> kc, vc;      // per layer
    tensor residual, proj, inv_freq, table, positions, seq_lens, cu, slots;
    int64_t n_blocks = 0;
};

inline stack_host make_stack(const stack_shape& s, uint64_t seed) {
    rng r(seed);
    stack_host h;
    h.s = s;
    const int64_t heads = s.n_head + 2 * s.n_kv;
    h.n_blocks = (s.pos + 1 + s.block_size - 1) / s.block_size + 3;  // spare blocks: the table skips some
    for (int64_t il = 0; il < s.n_layer; ++il) {
        h.lin.push_back(random_linear(r, heads * s.hd, s.n_embd, true, 1.0f / 64));
        h.lin.push_back(random_linear(r, s.n_embd, s.n_head * s.hd, true, 1.0f / 32));
        h.lin.push_back(random_linear(r, 2 * s.n_ff, s.n_embd, true, 1.0f / 64));
        h.lin.push_back(random_linear(r, s.n_embd, s.n_ff, true, 1.0f / 64));
        auto norm = [&](int64_t n) {
            tensor t = tensor::alloc(s.norm_type, {n});
            for (int64_t i = 0; i < n; ++i) write_elem(t, i, r.uniform(0.5, 1.5));
            return t;
        };
        h.norms.push_back(norm(s.n_embd));
        h.norms.push_back(norm(s.n_embd));
        h.norms.push_back(s.qk_norm ? norm(s.hd) : tensor{});
        h.norms.push_back(s.qk_norm ? norm(s.hd) : tensor{});
        h.kc.push_back(random_tensor(r, dtype::BF16, {h.n_blocks, s.block_size, s.n_kv, s.hd}));
        h.vc.push_back(random_tensor(r, dtype::BF16, {h.n_blocks, s.block_size, s.n_kv, s.hd}));
    }
    h.residual = random_tensor(r, dtype::BF16, {1, s.n_embd});
    h.proj = random_tensor(r, dtype::BF16, {1, s.n_embd}, 0.5);
    rope_params rp;
    rp.theta = 500000.0f;
    h.inv_freq = rope_inv_freq(rp, s.hd);
    std::vector<int32_t> blocks(size_t(h.n_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), r.g);
    h.table = tensor::alloc(dtype::I32, {1, h.n_blocks});
    std::copy(blocks.begin(), blocks.end(), h.table.ptr<int32_t>());
    h.positions = i32_tensor({s.pos});
    h.seq_lens = i32_tensor({s.pos + 1});
    h.cu = i32_tensor({0, 1});
    h.slots = i32_tensor({int32_t(blocks[size_t(s.pos / s.block_size)] * s.block_size + s.pos % s.block_size)});
    return h;
}

// One backend's copy: its tensors and the op's arguments over them.
struct stack_side {
    std::vector<linear_weight> lin;
    decode_layers_args a;
};

inline stack_side side_of(backend& be, const stack_host& h) {
    const stack_shape& s = h.s;
    stack_side d;
    for (const linear_weight& w : h.lin) d.lin.push_back(be.prepare_linear(w));
    auto up = [&](const tensor& t) {  // a copy first: the CPU backend's upload shares the host memory
        if (t.empty()) return tensor{};
        tensor c = tensor::alloc(t.type, t.shape);
        std::memcpy(c.data, t.data, t.nbytes());
        return be.upload(c);
    };
    decode_layers_args& a = d.a;
    for (int64_t il = 0; il < s.n_layer; ++il) {
        decode_layer_ref L;
        L.qkv = &d.lin[size_t(4 * il)], L.o = &d.lin[size_t(4 * il + 1)];
        L.gate_up = &d.lin[size_t(4 * il + 2)], L.down = &d.lin[size_t(4 * il + 3)];
        L.attn_norm = up(h.norms[size_t(4 * il)]), L.ffn_norm = up(h.norms[size_t(4 * il + 1)]);
        L.q_norm = up(h.norms[size_t(4 * il + 2)]), L.k_norm = up(h.norms[size_t(4 * il + 3)]);
        L.k_cache = up(h.kc[size_t(il)]), L.v_cache = up(h.vc[size_t(il)]);
        a.layers.push_back(L);
    }
    const int64_t heads = s.n_head + 2 * s.n_kv;
    a.residual = up(h.residual), a.proj = up(h.proj), a.first_plain = s.first_plain;
    a.h = be.alloc(dtype::BF16, {1, s.n_embd}), a.qkv = be.alloc(dtype::BF16, {1, heads, s.hd});
    a.q = be.alloc(dtype::BF16, {1, s.n_head, s.hd}), a.attn = be.alloc(dtype::BF16, {1, s.n_head * s.hd});
    a.gu = be.alloc(dtype::BF16, {1, 2 * s.n_ff}), a.gate = be.alloc(dtype::BF16, {1, s.n_ff});
    a.inv_freq = up(h.inv_freq);
    a.meta.n_seqs = 1, a.meta.max_seqlen_q = 1, a.meta.max_seqlen_kv = s.pos + 1, a.meta.block_size = int(s.block_size);
    a.meta.cu_seqlens_q = up(h.cu), a.meta.seq_lens_kv = up(h.seq_lens), a.meta.positions = up(h.positions);
    a.meta.block_tables = up(h.table), a.meta.slot_mapping = up(h.slots);
    a.eps = 1e-5f, a.scale = 1.0f / std::sqrt(float(s.hd)), a.mode = matmul_mode::W4A16;
    a.n_head = s.n_head, a.n_head_kv = s.n_kv, a.head_dim = s.hd, a.n_embd = s.n_embd, a.n_ff = s.n_ff;
    return d;
}

}  // namespace tetra_test
