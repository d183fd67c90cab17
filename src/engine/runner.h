// model_runner: turns per-sequence work (new tokens, their start position, the block table) into
// one forward_batch on the backend, runs the model and returns f32 logits on the host (or, on the
// device paths, only argmax ids or sampled ids with the guard's statistics).
// block_pool: the free list of KV blocks (the server's block manager builds on it).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/sampling.h"
#include "model/model.h"

namespace tetra {

class block_pool {
  public:
    explicit block_pool(int64_t n_blocks);
    int64_t n_total() const { return n_total_; }
    int64_t n_free() const { return int64_t(free_.size()); }
    // Appends blocks to `table` until it holds n_tokens; false (and no change) if not enough free.
    bool grow(std::vector<int32_t>& table, int64_t n_tokens, int block_size);
    void release(std::vector<int32_t>& table);  // returns every block and clears the table

  private:
    int64_t n_total_;
    std::vector<int32_t> free_;
};

// The new tokens of one sequence in this step: tokens[0..n) sit at positions pos0..pos0+n-1 and
// the sequence's KV (after this step) fills its first pos0 + n slots of block_table.
struct seq_chunk {
    const std::vector<int32_t>* block_table = nullptr;
    int64_t pos0 = 0;
    const int32_t* tokens = nullptr;
    int64_t n = 0;
    bool all_logits = false;  // logits for every token (perplexity) instead of the last only
};

// Each step's metadata goes into one persistent device buffer (one host→device copy, no
// allocation). On a backend with graphs (CUDA), a decode step (one new token per sequence, last
// logits only) replays a graph captured per (sequence bucket, block-table-width bucket): the batch
// is padded to the bucket with inert rows (kv slot −1, position 0) whose outputs are ignored.
class model_runner {
  public:
    model_runner(causal_lm& m, backend& be, kv_cache& kv) : model_(m), be_(be), kv_(kv) {}
    // logits: f32 [n_rows, n_vocab] row-major, rows in chunk order (1 per chunk, or n when all_logits).
    // Total tokens must not exceed the model's max_tokens.
    const std::vector<float>& run(const std::vector<seq_chunk>& chunks);
    // Greedy fast path: the argmax of each logits row, computed on the device (only the ids come
    // back to the host). Same rows as run().
    const std::vector<int32_t>& run_argmax(const std::vector<seq_chunk>& chunks);
    // Device sampling: the forward, then the output guard's statistics and THE ALGORITHM
    // (backend/sampling.h sample_guard_stats, sample_rows) on the backend, after the graph replay on
    // the same stream; only ids and 40 bytes of statistics per row come back. rows: one per logits
    // row (chunk order), entries: their sparse penalties (engine/sampler.h pack_sample_row).
    // ids[r]: the token or a negative sample_error code; stats[r]: guard_row_stats of row r.
    void run_sample(const std::vector<seq_chunk>& chunks, const std::vector<sample_row>& rows,
                    const std::vector<sample_entry>& entries, std::vector<int32_t>& ids,
                    std::vector<guard_row_stats>& stats);
    causal_lm& model() { return model_; }
    // Graph replay for decode steps (default on; it only applies where the backend has graphs).
    void set_graphs(bool on) { graphs_on_ = on; }
    bool graphs() const { return graphs_on_; }
    int64_t graph_replays() const { return replays_; }
    size_t graphs_captured() const { return graphs_.size(); }

  private:
    struct layout {  // offsets (in i32 elements) of one step's metadata in the buffer
        int64_t n_tokens = 0, n_seqs = 0, width = 0, n_logits = 0;
        int64_t ids = 0, pos = 0, slots = 0, rows = 0, cu = 0, lens = 0, tables = 0, total = 0;
    };
    static layout make_layout(int64_t n_tokens, int64_t n_seqs, int64_t width, int64_t n_logits);
    forward_batch batch_views(const layout& L, int max_q, int max_kv);
    void fill(const layout& L, const std::vector<seq_chunk>& chunks);
    const tensor& logits_f32(const tensor& logits);  // cast into a persistent f32 buffer (no-op for f32)
    const tensor& argmax_ids(const tensor& logits);   // argmax into a persistent i32 buffer
    // What a step leaves on the device: f32 logits rows, i32 argmax ids, or the model's own logits.
    enum class result_kind : uint8_t { LOGITS_F32, ARGMAX, RAW };
    // Runs the step; returns the device result and the number of real rows.
    const tensor& step(const std::vector<seq_chunk>& chunks, result_kind kind, int64_t* n_rows);

    causal_lm& model_;
    backend& be_;
    kv_cache& kv_;
    std::vector<float> logits_;
    tensor logits_f32_;
    tensor logits_f32_view_;
    tensor ids_, ids_view_;
    std::vector<int32_t> ids_host_;
    std::vector<int32_t> meta_host_;
    tensor meta_dev_;
    std::vector<int32_t> sample_host_, sample_out_host_;  // run_sample's staging (rows + entries; stats + ids)
    tensor sample_dev_, sample_out_dev_;                  // i32, grow-only, never used inside graphs
    bool graphs_on_ = true;
    bool graphs_supported_ = true;  // false once the backend returned no graph
    struct graph_entry {
        std::shared_ptr<void> graph;
        tensor result;  // what the graph writes: f32 logits rows or i32 argmax ids
    };
    std::map<std::tuple<int64_t, int64_t, result_kind, uint32_t>, graph_entry> graphs_;  // + the model's skip mask
    int64_t replays_ = 0;
};

}  // namespace tetra
