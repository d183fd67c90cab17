#include "engine/runner.h"

#include <algorithm>

#include "core/error.h"

namespace tetra {

block_pool::block_pool(int64_t n_blocks) : n_total_(n_blocks) {
    TETRA_CHECK(n_blocks >= 1, "block_pool: need at least one KV block, got %lld", (long long)n_blocks);
    free_.reserve(size_t(n_blocks));
    for (int64_t i = n_blocks - 1; i >= 0; --i) free_.push_back(int32_t(i));  // pop_back gives 0, 1, 2...
}

bool block_pool::grow(std::vector<int32_t>& table, int64_t n_tokens, int block_size) {
    int64_t need = (n_tokens + block_size - 1) / block_size - int64_t(table.size());
    if (need <= 0) return true;
    if (need > n_free()) return false;
    for (int64_t i = 0; i < need; ++i) {
        table.push_back(free_.back());
        free_.pop_back();
    }
    return true;
}

void block_pool::release(std::vector<int32_t>& table) {
    for (auto it = table.rbegin(); it != table.rend(); ++it) free_.push_back(*it);
    table.clear();
}

const std::vector<float>& model_runner::run(const std::vector<seq_chunk>& chunks) {
    const int bs = kv_.block_size;
    int64_t n_tokens = 0, n_logits = 0;
    size_t max_blocks = 1;
    int max_q = 0, max_kv = 0;
    for (const auto& c : chunks) {
        TETRA_CHECK(c.n >= 1 && c.block_table, "model_runner: empty chunk");
        TETRA_CHECK(int64_t(c.block_table->size()) * bs >= c.pos0 + c.n,
                    "model_runner: block table holds %zu blocks, too few for %lld tokens", c.block_table->size(),
                    (long long)(c.pos0 + c.n));
        n_tokens += c.n;
        n_logits += c.all_logits ? c.n : 1;
        max_blocks = std::max(max_blocks, c.block_table->size());
        max_q = std::max(max_q, int(c.n));
        max_kv = std::max(max_kv, int(c.pos0 + c.n));
    }
    const int n_seqs = int(chunks.size());
    tensor ids = tensor::alloc(dtype::I32, {n_tokens}), pos = tensor::alloc(dtype::I32, {n_tokens}),
           slots = tensor::alloc(dtype::I32, {n_tokens}), cu = tensor::alloc(dtype::I32, {n_seqs + 1}),
           lens = tensor::alloc(dtype::I32, {n_seqs}), tables = tensor::alloc(dtype::I32, {n_seqs, int64_t(max_blocks)}),
           rows = tensor::alloc(dtype::I32, {n_logits});
    int64_t t = 0, r = 0;
    for (int s = 0; s < n_seqs; ++s) {
        const seq_chunk& c = chunks[size_t(s)];
        cu.ptr<int32_t>()[s] = int32_t(t);
        lens.ptr<int32_t>()[s] = int32_t(c.pos0 + c.n);
        for (size_t b = 0; b < c.block_table->size(); ++b) tables.ptr<int32_t>()[size_t(s) * max_blocks + b] = (*c.block_table)[b];
        for (int64_t i = 0; i < c.n; ++i, ++t) {
            int64_t p = c.pos0 + i;
            ids.ptr<int32_t>()[t] = c.tokens[i];
            pos.ptr<int32_t>()[t] = int32_t(p);
            slots.ptr<int32_t>()[t] = (*c.block_table)[size_t(p / bs)] * bs + int32_t(p % bs);
            if (c.all_logits || i == c.n - 1) rows.ptr<int32_t>()[r++] = int32_t(t);
        }
    }
    cu.ptr<int32_t>()[n_seqs] = int32_t(t);
    forward_batch b;
    b.n_tokens = n_tokens;
    b.n_logits = n_logits;
    b.ids = be_.upload(ids);
    b.logit_rows = be_.upload(rows);
    b.meta.n_seqs = n_seqs;
    b.meta.max_seqlen_q = max_q;
    b.meta.max_seqlen_kv = max_kv;
    b.meta.block_size = bs;
    b.meta.cu_seqlens_q = be_.upload(cu);
    b.meta.seq_lens_kv = be_.upload(lens);
    b.meta.positions = be_.upload(pos);
    b.meta.block_tables = be_.upload(tables);
    b.meta.slot_mapping = be_.upload(slots);
    const tensor& logits = model_.forward(b, kv_);
    logits_.resize(size_t(logits.numel()));
    if (logits.type == dtype::F32) {
        be_.download(logits, logits_.data());
    } else {
        if (logits_f32_.empty() || logits_f32_.numel() < logits.numel())
            logits_f32_ = be_.alloc(dtype::F32, {logits.numel()});
        tensor dst = tensor_reshape(tensor_rows(logits_f32_, 0, logits.numel()), logits.shape);
        be_.cast(logits, dst);
        be_.download(dst, logits_.data());
    }
    return logits_;
}

}  // namespace tetra
