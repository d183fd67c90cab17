// scheduler: continuous batching over waiting and running queues (nano-vllm's shape, vLLM V1's
// mixed steps). Each step: running sequences first (decode, or the next chunk of a chunked
// prefill), in admission order; a sequence that cannot get a block preempts the most recently
// admitted running sequence by recompute (blocks freed, back to the front of waiting). Then, if
// nothing was preempted, waiting sequences are admitted with prefill chunks while the token budget
// (max_num_batched_tokens), max_num_seqs and the KV pool allow.
// Not here: running the model or sampling (llm_engine); the scheduler only moves sequences/blocks.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"

namespace tetra {

struct scheduler_config {
    int32_t max_num_seqs = 256;
    int64_t max_num_batched_tokens = 2048;
};

// One sequence's work in a step: compute tokens [num_cached_tokens, num_cached_tokens + n_tokens)
// (num_cached_tokens as of schedule()); `sample`: the chunk reaches the last token, so its logits
// give the next token.
struct scheduled_seq {
    sequence* seq = nullptr;
    int64_t pos0 = 0;
    int64_t n_tokens = 0;
    bool sample = false;
};

class scheduler {
  public:
    scheduler(const scheduler_config& cfg, block_manager& blocks);

    void add(sequence* s);  // to the back of waiting
    // Picks this step's work and reserves its KV slots. Empty when nothing can run.
    std::vector<scheduled_seq> schedule();
    // After the forward succeeded: advances num_cached_tokens, keys full blocks, forks n > 1
    // siblings off a parent whose prompt is now computed.
    void postprocess(const std::vector<scheduled_seq>& batch);
    // Removes s from its queue, frees its blocks, status FINISHED (any status; idempotent).
    void finish(sequence* s);

    bool empty() const { return waiting_.empty() && running_.empty(); }
    int64_t num_waiting() const { return int64_t(waiting_.size()); }
    int64_t num_running() const { return int64_t(running_.size()); }
    block_manager& blocks() { return blocks_; }
    const scheduler_config& config() const { return cfg_; }

    // Cumulative counters (vLLM metrics): preemptions; prefix-cache queries and hits in tokens.
    int64_t num_preemptions = 0;
    int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;

  private:
    void preempt(sequence* s);
    bool admit(sequence* s, int64_t& budget, std::vector<scheduled_seq>& out);
    void release_waiting_blocks();
    scheduler_config cfg_;
    block_manager& blocks_;
    std::deque<sequence*> waiting_, running_;
};

}  // namespace tetra
