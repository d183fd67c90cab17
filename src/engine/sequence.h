// sequence: one stream of tokens the scheduler moves between WAITING, RUNNING and FINISHED (nano-vllm
// shape): token ids (prompt then output), how many of them have KV in the cache, the block table,
// and the sampling state the engine keeps per sequence (seed, history, detokenizer, stop matcher).
// Invariant: the KV of token_ids[0, num_cached_tokens) is in the blocks of block_table.
// Not here: who owns a sequence (the engine's request), how blocks are chosen (block_manager).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/sampler.h"
#include "engine/stop.h"
#include "tokenizer/tokenizer.h"

namespace tetra {

enum class sequence_status { WAITING, RUNNING, FINISHED };

class sequence {
  public:
    sequence(int64_t seq_id, std::vector<int32_t> prompt);

    int64_t seq_id;                    // unique, increasing in arrival order
    int32_t index = 0;                 // sample number within its request (n > 1)
    void* owner = nullptr;             // the engine's request; opaque to scheduler and blocks
    sequence_status status = sequence_status::WAITING;
    std::vector<int32_t> token_ids;    // prompt, then output tokens
    int64_t num_prompt_tokens = 0;
    int64_t num_cached_tokens = 0;     // tokens whose KV is computed and in block_table
    std::vector<int32_t> block_table;  // KV block ids; block b holds tokens [b*bs, (b+1)*bs)
    // Prefix caching: the hash chain of this sequence's first block_hashes.size() full blocks.
    std::vector<uint64_t> block_hashes;
    int64_t num_preemptions = 0;

    // n > 1: a sibling waits (WAITING, no blocks) until its fork parent has computed the prompt,
    // then takes the parent's full prompt blocks by reference (block_manager::fork).
    sequence* fork_parent = nullptr;
    std::vector<sequence*> fork_children;

    // Sampling state (engine): resolved seed, token counts, streaming text.
    uint64_t seed = 0;
    token_history history;
    std::optional<detokenizer> detok;
    std::optional<stop_string_matcher> stops;
    stop_status status_stop;

    // Metrics (engine): first-time values and prefix-cache hits on first admission.
    double arrival_time = 0, first_scheduled_time = 0, first_token_time = 0;
    int64_t num_cached_prompt_tokens = -1;  // -1 until first admitted

    int64_t num_tokens() const { return int64_t(token_ids.size()); }
    int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
    int32_t last_token() const { return token_ids.back(); }
    // Tokens still to compute before the next sample (1 for a decode step).
    int64_t num_uncomputed() const { return num_tokens() - num_cached_tokens; }
    bool finished() const { return status == sequence_status::FINISHED; }
    void append_token(int32_t id) { token_ids.push_back(id); }
};

}  // namespace tetra
