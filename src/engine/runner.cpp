#include "engine/runner.h"

#include <algorithm>
#include <cstring>

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

model_runner::layout model_runner::make_layout(int64_t n_tokens, int64_t n_seqs, int64_t width, int64_t n_logits) {
    layout L;
    L.n_tokens = n_tokens, L.n_seqs = n_seqs, L.width = width, L.n_logits = n_logits;
    int64_t o = 0;
    auto take = [&](int64_t n) {
        int64_t at = o;
        o += (n + 3) / 4 * 4;  // 16-byte aligned pieces
        return at;
    };
    L.ids = take(n_tokens), L.pos = take(n_tokens), L.slots = take(n_tokens), L.rows = take(n_logits);
    L.cu = take(n_seqs + 1), L.lens = take(n_seqs), L.tables = take(n_seqs * width);
    L.total = o;
    return L;
}

forward_batch model_runner::batch_views(const layout& L, int max_q, int max_kv) {
    auto piece = [&](int64_t at, std::vector<int64_t> shape) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        return tensor_reshape(tensor_rows(meta_dev_, at, n), std::move(shape));
    };
    forward_batch b;
    b.n_tokens = L.n_tokens;
    b.n_logits = L.n_logits;
    b.ids = piece(L.ids, {L.n_tokens});
    b.logit_rows = piece(L.rows, {L.n_logits});
    b.meta.n_seqs = int(L.n_seqs);
    b.meta.max_seqlen_q = max_q;
    b.meta.max_seqlen_kv = max_kv;
    b.meta.block_size = kv_.block_size;
    b.meta.cu_seqlens_q = piece(L.cu, {L.n_seqs + 1});
    b.meta.seq_lens_kv = piece(L.lens, {L.n_seqs});
    b.meta.positions = piece(L.pos, {L.n_tokens});
    b.meta.block_tables = piece(L.tables, {L.n_seqs, L.width});
    b.meta.slot_mapping = piece(L.slots, {L.n_tokens});
    return b;
}

// Rows past the real chunks (graph padding) are inert: token 0 at position 0, kv slot −1 (not
// stored), a block table of zeros; their outputs are computed and ignored.
void model_runner::fill(const layout& L, const std::vector<seq_chunk>& chunks) {
    const int bs = kv_.block_size;
    meta_host_.assign(size_t(L.total), 0);
    int32_t* m = meta_host_.data();
    int64_t t = 0, r = 0;
    for (int64_t s = 0; s < L.n_seqs; ++s) {
        m[L.cu + s] = int32_t(t);
        if (s >= int64_t(chunks.size())) {  // padding sequence: one inert token
            m[L.ids + t] = 0, m[L.pos + t] = 0, m[L.slots + t] = -1;
            m[L.lens + s] = 1;  // sees kv slot 0 of block 0 (whatever it holds; the row is ignored)
            m[L.rows + r++] = int32_t(t++);
            continue;
        }
        const seq_chunk& c = chunks[size_t(s)];
        m[L.lens + s] = int32_t(c.pos0 + c.n);
        for (size_t b = 0; b < c.block_table->size(); ++b) m[L.tables + s * L.width + int64_t(b)] = (*c.block_table)[b];
        for (int64_t i = 0; i < c.n; ++i, ++t) {
            int64_t p = c.pos0 + i;
            m[L.ids + t] = c.tokens[i];
            m[L.pos + t] = int32_t(p);
            m[L.slots + t] = (*c.block_table)[size_t(p / bs)] * bs + int32_t(p % bs);
            if (c.all_logits || i == c.n - 1) m[L.rows + r++] = int32_t(t);
        }
    }
    m[L.cu + L.n_seqs] = int32_t(t);
    TETRA_ASSERT(t == L.n_tokens && r == L.n_logits);
    if (meta_dev_.empty() || meta_dev_.numel() < L.total) {
        be_.synchronize();
        meta_dev_ = be_.alloc(dtype::I32, {std::max<int64_t>(L.total, 4096)});
        graphs_.clear();  // they point into the old buffer
    }
    be_.copy_from_host(meta_host_.data(), tensor_rows(meta_dev_, 0, L.total));
}

const tensor& model_runner::logits_f32(const tensor& logits) {
    if (logits.type == dtype::F32) return logits;
    if (logits_f32_.empty() || logits_f32_.numel() < logits.numel()) {
        be_.synchronize();
        logits_f32_ = be_.alloc(dtype::F32, {std::max<int64_t>(logits.numel(), model_.config().n_vocab)});
        graphs_.clear();
    }
    logits_f32_view_ = tensor_reshape(tensor_rows(logits_f32_, 0, logits.numel()), logits.shape);
    be_.cast(logits, logits_f32_view_);
    return logits_f32_view_;
}

namespace {

int64_t seq_bucket(int64_t n) {
    static const int64_t b[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512};
    for (int64_t x : b)
        if (n <= x) return x;
    return (n + 255) / 256 * 256;
}

int64_t width_bucket(int64_t w) {
    int64_t x = 4;
    while (x < w) x *= 2;
    return x;
}

}  // namespace

const tensor& model_runner::argmax_ids(const tensor& logits) {
    const int64_t rows = logits.dim(0);
    if (ids_.empty() || ids_.numel() < rows) {
        be_.synchronize();
        ids_ = be_.alloc(dtype::I32, {std::max<int64_t>(rows, 256)});
        graphs_.clear();
    }
    ids_view_ = tensor_rows(ids_, 0, rows);
    be_.argmax(logits, ids_view_);
    return ids_view_;
}

const tensor& model_runner::step(const std::vector<seq_chunk>& chunks, result_kind kind, int64_t* n_rows) {
    const int bs = kv_.block_size;
    int64_t n_tokens = 0, n_logits = 0;
    int64_t max_blocks = 1;
    int max_q = 0, max_kv = 0;
    bool decode = true;
    for (const auto& c : chunks) {
        TETRA_CHECK(c.n >= 1 && c.block_table, "model_runner: empty chunk");
        TETRA_CHECK(int64_t(c.block_table->size()) * bs >= c.pos0 + c.n,
                    "model_runner: block table holds %zu blocks, too few for %lld tokens", c.block_table->size(),
                    (long long)(c.pos0 + c.n));
        n_tokens += c.n;
        n_logits += c.all_logits ? c.n : 1;
        max_blocks = std::max<int64_t>(max_blocks, int64_t(c.block_table->size()));
        max_q = std::max(max_q, int(c.n));
        max_kv = std::max(max_kv, int(c.pos0 + c.n));
        decode = decode && c.n == 1 && !c.all_logits;
    }
    const int64_t n_seqs = int64_t(chunks.size());
    *n_rows = n_logits;
    auto finish = [&](const tensor& logits) -> const tensor& {
        return kind == result_kind::ARGMAX ? argmax_ids(logits) : kind == result_kind::RAW ? logits : logits_f32(logits);
    };
    int64_t sb = seq_bucket(n_seqs), wb = width_bucket(max_blocks);
    if (!(decode && graphs_on_ && graphs_supported_ && be_.supports_graphs() && !model_.has_tap() &&
          sb <= model_.max_tokens())) {
        layout L = make_layout(n_tokens, n_seqs, max_blocks, n_logits);
        fill(L, chunks);
        forward_batch b = batch_views(L, max_q, max_kv);
        return finish(model_.forward(b, kv_));
    }
    // Graph path: launch shapes depend only on the buckets (attention splits are sized for the
    // bucket's kv capacity; each row uses its own position).
    layout L = make_layout(sb, sb, wb, sb);
    fill(L, chunks);
    auto key = std::make_tuple(sb, wb, kind, model_.ops().skip);  // a mask's graph is its own (bench --breakdown)
    auto it = graphs_.find(key);
    if (it != graphs_.end() && be_.replay_graph(it->second.graph)) {
        ++replays_;
        return it->second.result;
    }
    forward_batch b = batch_views(L, 1, int(wb * bs));
    const tensor& out = finish(model_.forward(b, kv_));  // eager: this step's result; buffers grown
    graph_entry e;
    e.graph = be_.capture_graph([&] { e.result = finish(model_.forward(b, kv_)); });
    if (!e.graph) graphs_supported_ = false;
    else graphs_[key] = std::move(e);  // the capture did not execute: `out` still holds this step
    return out;
}

const std::vector<float>& model_runner::run(const std::vector<seq_chunk>& chunks) {
    int64_t rows = 0;
    const tensor& out = step(chunks, result_kind::LOGITS_F32, &rows);
    logits_.resize(size_t(rows * out.dim(1)));
    be_.download(tensor_rows(out, 0, rows), logits_.data());
    return logits_;
}

const std::vector<int32_t>& model_runner::run_argmax(const std::vector<seq_chunk>& chunks) {
    int64_t rows = 0;
    const tensor& out = step(chunks, result_kind::ARGMAX, &rows);
    ids_host_.resize(size_t(rows));
    be_.download(tensor_rows(out, 0, rows), ids_host_.data());
    return ids_host_;
}

void model_runner::run_sample(const std::vector<seq_chunk>& chunks, const std::vector<sample_row>& rows,
                              const std::vector<sample_entry>& entries, std::vector<int32_t>& ids,
                              std::vector<guard_row_stats>& stats) {
    int64_t n = 0;
    const tensor& out = step(chunks, result_kind::RAW, &n);
    TETRA_CHECK(int64_t(rows.size()) == n, "model_runner::run_sample: %zu sampling rows for %lld logits rows",
                rows.size(), (long long)n);
    const tensor logits = tensor_rows(out, 0, n);
    const int64_t n_entries = int64_t(entries.size());
    const int64_t w_rows = n * sample_row_words, w_total = w_rows + n_entries * 4;
    sample_host_.resize(size_t(w_total));
    std::memcpy(sample_host_.data(), rows.data(), size_t(w_rows) * 4);
    if (n_entries) std::memcpy(sample_host_.data() + w_rows, entries.data(), size_t(n_entries) * 16);
    const int64_t w_out = n * (guard_stats_words + 1);
    auto grow = [&](tensor& t, int64_t words) {
        if (t.empty() || t.numel() < words) {
            be_.synchronize();  // the old buffer may still be read by the previous step's kernels
            t = be_.alloc(dtype::I32, {std::max<int64_t>(words, 4096)});
        }
    };
    grow(sample_dev_, w_total);
    grow(sample_out_dev_, w_out);
    be_.copy_from_host(sample_host_.data(), tensor_rows(sample_dev_, 0, w_total));
    const tensor rows_t = tensor_reshape(tensor_rows(sample_dev_, 0, w_rows), {n, sample_row_words});
    const tensor entries_t = tensor_reshape(tensor_rows(sample_dev_, w_rows, n_entries * 4), {n_entries, 4});
    const tensor stats_t =
        tensor_reshape(tensor_rows(sample_out_dev_, 0, n * guard_stats_words), {n, guard_stats_words});
    const tensor ids_t = tensor_rows(sample_out_dev_, n * guard_stats_words, n);
    sample_guard_stats(be_, logits, stats_t);
    sample_rows(be_, logits, rows_t, entries_t, ids_t);
    sample_out_host_.resize(size_t(w_out));
    be_.download(tensor_rows(sample_out_dev_, 0, w_out), sample_out_host_.data());
    stats.resize(size_t(n));
    if (n) std::memcpy(static_cast<void*>(stats.data()), sample_out_host_.data(), size_t(n) * sizeof(guard_row_stats));
    ids.assign(sample_out_host_.begin() + n * guard_stats_words, sample_out_host_.begin() + w_out);
}

}  // namespace tetra
