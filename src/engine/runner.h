// model_runner: turns per-sequence work (new tokens, their start position, the block table) into
// one forward_batch on the backend, runs the model and returns f32 logits on the host.
// block_pool: the free list of KV blocks (the server's block manager builds on it).
#pragma once
#include <cstdint>
#include <vector>

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

class model_runner {
  public:
    model_runner(causal_lm& m, backend& be, kv_cache& kv) : model_(m), be_(be), kv_(kv) {}
    // logits: f32 [n_rows, n_vocab] row-major, rows in chunk order (1 per chunk, or n when all_logits).
    // Total tokens must not exceed the model's max_tokens.
    const std::vector<float>& run(const std::vector<seq_chunk>& chunks);
    causal_lm& model() { return model_; }

  private:
    causal_lm& model_;
    backend& be_;
    kv_cache& kv_;
    std::vector<float> logits_;
    tensor logits_f32_;
};

}  // namespace tetra
