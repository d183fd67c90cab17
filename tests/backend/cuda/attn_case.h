// The GPU attention test's cases (test_backend_attention_gpu): a
// batch of sequences (cached tokens + query rows each) over a paged cache with shuffled block
// tables, the cache slots no sequence owns holding NaN (reading one fails the case), its metadata
// on the host and on the GPU, and the tolerance vs the CPU oracle.
#pragma once
#include <numeric>

#include "backend/cuda/gpu_harness.h"
#include "backend/ops.h"

namespace tetra_test {

struct attn_case {
    dtype act;
    int64_t n_head, n_head_kv, head_dim, block_size;
    std::vector<std::pair<int, int>> seqs;  // (num_cached_tokens, n_query) per sequence
    int window;
    std::string vars() const {
        std::string s = std::string("act=") + dn(act) + " n_head=" + std::to_string(n_head) + " n_head_kv=" +
                        std::to_string(n_head_kv) + " head_dim=" + std::to_string(head_dim) + " block_size=" +
                        std::to_string(block_size) + " window=" + std::to_string(window) + " seqs=";
        for (auto p : seqs) s += "(" + std::to_string(p.first) + "+" + std::to_string(p.second) + ")";
        return s;
    }
};

struct attn_inputs {
    tensor q, k_cache, v_cache, cu, lens, pos, bt;
    attn_metadata meta;
};

inline attn_inputs build_attn_inputs(const attn_case& c, rng& r) {
    attn_inputs in;
    int n_seqs = int(c.seqs.size());
    int64_t bs = c.block_size, n_tokens = 0, max_blocks = 0, total_blocks = 3;
    std::vector<int64_t> nb;
    for (auto p : c.seqs) {
        nb.push_back((p.first + p.second + bs - 1) / bs);
        max_blocks = std::max(max_blocks, nb.back() + 1);
        total_blocks += nb.back();
        n_tokens += p.second;
    }
    std::vector<int32_t> perm(static_cast<size_t>(total_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), r.g);
    std::vector<int32_t> bt(static_cast<size_t>(n_seqs * max_blocks), -1), cu{0}, lens, pos;
    size_t next = 0;
    for (int s = 0; s < n_seqs; ++s) {
        for (int64_t b = 0; b < nb[size_t(s)]; ++b) bt[size_t(s * max_blocks + b)] = perm[next++];
        cu.push_back(cu.back() + c.seqs[size_t(s)].second);
        lens.push_back(c.seqs[size_t(s)].first + c.seqs[size_t(s)].second);
        for (int i = 0; i < c.seqs[size_t(s)].second; ++i) pos.push_back(c.seqs[size_t(s)].first + i);
    }
    int64_t row = c.n_head_kv * c.head_dim, n_slots = total_blocks * bs;
    std::vector<double> kc(static_cast<size_t>(n_slots * row), NAN), vc(static_cast<size_t>(n_slots * row), NAN);
    for (int s = 0; s < n_seqs; ++s)
        for (int64_t j = 0; j < lens[size_t(s)]; ++j) {
            int64_t slot = int64_t(bt[size_t(s * max_blocks + j / bs)]) * bs + j % bs;
            for (int64_t e = 0; e < row; ++e)
                kc[size_t(slot * row + e)] = r.normal(), vc[size_t(slot * row + e)] = r.normal();
        }
    in.k_cache = make_tensor(c.act, {total_blocks, bs, c.n_head_kv, c.head_dim}, kc);
    in.v_cache = make_tensor(c.act, {total_blocks, bs, c.n_head_kv, c.head_dim}, vc);
    in.q = random_tensor(r, c.act, {n_tokens, c.n_head, c.head_dim}, 2.0);
    in.cu = i32_tensor(cu), in.lens = i32_tensor(lens), in.pos = i32_tensor(pos);
    in.bt = tensor::alloc(dtype::I32, {n_seqs, max_blocks});
    std::memcpy(in.bt.data, bt.data(), bt.size() * 4);
    in.meta.n_seqs = n_seqs, in.meta.block_size = int(bs);
    in.meta.cu_seqlens_q = in.cu, in.meta.seq_lens_kv = in.lens, in.meta.positions = in.pos;
    in.meta.block_tables = in.bt;
    for (auto p : c.seqs) in.meta.max_seqlen_q = std::max(in.meta.max_seqlen_q, p.second);
    for (int32_t l : lens) in.meta.max_seqlen_kv = std::max(in.meta.max_seqlen_kv, int(l));
    return in;
}

inline attn_metadata to_gpu_meta(const attn_inputs& in) {
    attn_metadata m = in.meta;
    m.cu_seqlens_q = to_gpu(in.cu), m.seq_lens_kv = to_gpu(in.lens), m.positions = to_gpu(in.pos);
    m.block_tables = to_gpu(in.bt);
    return m;
}

// Tolerance: scores, exp and sums in f32 in another order than the oracle (rel. ~1e-6 over up to
// a few thousand keys → NMSE ≲ 1e-10 in f32); bf16/f16 outputs add one output rounding.
inline double attn_tol(dtype t) { return t == dtype::F32 ? 1e-9 : t == dtype::BF16 ? 2e-5 : 1e-6; }

}  // namespace tetra_test
