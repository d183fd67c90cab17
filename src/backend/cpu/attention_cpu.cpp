// attention_cpu: paged causal attention for a mixed batch (prefill chunks + decode), GQA. For each
// query token t of sequence s at position p and each head h: scores over kv positions
// j ∈ [lo, p] (lo = p − window + 1 with a sliding window, else 0), gathered through the block
// table; softmax with max subtraction in f32; out = Σ softmax · V. Metadata is validated first.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cpu {

// Checks the batch metadata against the caches; returns the sequence of every query token.
static std::vector<int32_t> check_metadata(const attention_args& a) {
    const attn_metadata& m = a.meta;
    const int32_t* cu = m.cu_seqlens_q.ptr<int32_t>();
    const int32_t* lens = m.seq_lens_kv.ptr<int32_t>();
    const int32_t* pos = m.positions.ptr<int32_t>();
    const int32_t* bt = m.block_tables.ptr<int32_t>();
    int64_t n_tokens = a.q.dim(0), max_blocks = m.block_tables.dim(1), n_blocks = a.k_cache.dim(0);
    int64_t bs = m.block_size;
    TETRA_CHECK(cu[0] == 0 && cu[m.n_seqs] == n_tokens, "attention: cu_seqlens_q must run from 0 to n_tokens %lld; got %d..%d",
                (long long)n_tokens, cu[0], cu[m.n_seqs]);
    std::vector<int32_t> seq_of(size_t(n_tokens), 0);
    for (int s = 0; s < m.n_seqs; ++s) {
        TETRA_CHECK(cu[s] <= cu[s + 1], "attention: cu_seqlens_q decreases at sequence %d (%d > %d)", s, cu[s], cu[s + 1]);
        TETRA_CHECK(lens[s] >= 0 && lens[s] <= max_blocks * bs,
                    "attention: seq_lens_kv[%d] = %d exceeds the block table capacity %lld (%lld blocks of %lld)", s,
                    lens[s], (long long)(max_blocks * bs), (long long)max_blocks, (long long)bs);
        for (int64_t b = 0; b < (lens[s] + bs - 1) / bs; ++b)
            TETRA_CHECK(bt[s * max_blocks + b] >= 0 && bt[s * max_blocks + b] < n_blocks,
                        "attention: block_tables[%d][%lld] = %d is not a block of the cache (n_blocks %lld)", s,
                        (long long)b, bt[s * max_blocks + b], (long long)n_blocks);
        for (int32_t t = cu[s]; t < cu[s + 1]; ++t) {
            TETRA_CHECK(pos[t] >= 0 && pos[t] < lens[s],
                        "attention: token %d of sequence %d has position %d; expected 0 <= position < seq_lens_kv %d", t,
                        s, pos[t], lens[s]);
            seq_of[size_t(t)] = s;
        }
    }
    return seq_of;
}

// q: [n_tokens, n_head, head_dim] act; k_cache, v_cache: [n_blocks, block_size, n_head_kv, head_dim];
// out: [n_tokens, n_head·head_dim] act
static void attention_cpu(backend&, const attention_args& a) {
    std::vector<int32_t> seq_of = check_metadata(a);
    const attn_metadata& m = a.meta;
    int64_t n_tokens = a.q.dim(0), n_head = a.q.dim(1), head_dim = a.q.dim(2), n_head_kv = a.k_cache.dim(2);
    int64_t group = n_head / n_head_kv, bs = m.block_size, max_blocks = m.block_tables.dim(1);
    const int32_t* pos = m.positions.ptr<int32_t>();
    const int32_t* bt = m.block_tables.ptr<int32_t>();
    parallel_for(n_tokens * n_head, [&](int64_t wb, int64_t we) {
        std::vector<float> q(static_cast<size_t>(head_dim)), acc(static_cast<size_t>(head_dim)), scores;
        std::vector<float> row(static_cast<size_t>(head_dim));
        for (int64_t w = wb; w < we; ++w) {
            int64_t t = w / n_head, h = w % n_head, kvh = h / group, s = seq_of[size_t(t)];
            int64_t p = pos[t], lo = a.sliding_window > 0 ? std::max<int64_t>(0, p - a.sliding_window + 1) : 0;
            act_load_row(a.q.data, a.q.type, w * head_dim, head_dim, q.data());
            auto kv_off = [&](int64_t j) {
                int64_t slot = int64_t(bt[s * max_blocks + j / bs]) * bs + j % bs;
                return (slot * n_head_kv + kvh) * head_dim;
            };
            scores.assign(size_t(p - lo + 1), 0.0f);
            float mx = -INFINITY;
            for (int64_t j = lo; j <= p; ++j) {
                act_load_row(a.k_cache.data, a.k_cache.type, kv_off(j), head_dim, row.data());
                float dot = 0.0f;
                for (int64_t d = 0; d < head_dim; ++d) dot += q[size_t(d)] * row[size_t(d)];
                float sc = dot * a.scale;
                scores[size_t(j - lo)] = sc;
                if (sc > mx) mx = sc;
            }
            float sum = 0.0f;
            for (float& sc : scores) sum += (sc = std::exp(sc - mx));
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int64_t j = lo; j <= p; ++j) {
                act_load_row(a.v_cache.data, a.v_cache.type, kv_off(j), head_dim, row.data());
                float pj = scores[size_t(j - lo)];
                for (int64_t d = 0; d < head_dim; ++d) acc[size_t(d)] += pj * row[size_t(d)];
            }
            for (int64_t d = 0; d < head_dim; ++d) act_store(a.out.data, a.out.type, w * head_dim + d, acc[size_t(d)] / sum);
        }
    });
}

void register_attention(kernel_registry& r) {
    r.add(make_kernel<attention_args>("attention", "attention_cpu", plain_req(), 0, nullptr, attention_cpu));
}

}  // namespace cpu
}  // namespace tetra
