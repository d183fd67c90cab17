// block_manager: the paged KV pool (blocks of block_size tokens, reference counted) with prefix
// caching over FULL blocks. A full, computed block is keyed by a hash chain: hash(parent block's
// hash, the block's token ids); a block is reused only if both the hash and its stored tokens
// match. Freed blocks keep their key and go to the back of an LRU free list; allocation takes the
// front (evicting its key), so a cached prefix survives as long as possible.
// Not here: which sequences run (scheduler), the KV tensors themselves (kv_cache).
#pragma once
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"

namespace tetra {

class block_manager {
  public:
    block_manager(int64_t n_blocks, int block_size, bool enable_prefix_caching);

    int block_size() const { return block_size_; }
    int64_t n_total() const { return int64_t(blocks_.size()); }
    int64_t n_free() const { return int64_t(free_.size()); }  // includes evictable cached blocks
    int64_t n_cached_free() const;                             // free blocks still holding a key
    bool prefix_caching() const { return caching_; }

    // Cached blocks holding the longest prefix of s.token_ids in whole blocks, at most
    // (num_tokens - 1) / block_size blocks (the last token is always computed: its logits are
    // needed). Empty when caching is off. Does not change anything.
    std::vector<int32_t> match_prefix(const sequence& s) const;
    // New blocks needed so that s's table covers num_cached_tokens (after taking `cached`) + n.
    int64_t n_blocks_needed(const sequence& s, int64_t n_cached_blocks, int64_t n_tokens) const;
    // First allocation of a sequence without blocks: takes the `cached` blocks (from
    // match_prefix; num_cached_tokens = their tokens) and fresh blocks for n_tokens more.
    // false, and no change, if the pool is short.
    bool allocate(sequence& s, const std::vector<int32_t>& cached, int64_t n_tokens);
    // Grows s's table to cover num_cached_tokens + n_tokens. false, and no change, if short.
    bool append_slots(sequence& s, int64_t n_tokens);
    // After a step computed s's tokens up to num_cached_tokens: keys its newly full blocks.
    void commit(sequence& s);
    // Returns s's blocks (reverse order, so a sequence's tail is evicted before its prefix);
    // clears block_table and block_hashes, num_cached_tokens = 0.
    void deallocate(sequence& s);
    // child (no blocks) shares parent's first n_blocks blocks by reference.
    void fork(const sequence& parent, sequence& child, int64_t n_blocks);

    int32_t ref_count(int32_t block) const { return blocks_[size_t(block)].ref; }

    // The hash chain step (exposed for tests): parent = 0 for the first block.
    static uint64_t hash_block(uint64_t parent, const int32_t* tokens, int n);

  private:
    struct block {
        int32_t ref = 0;
        bool keyed = false;  // in cached_ with `hash` and `tokens`
        uint64_t hash = 0;
        std::vector<int32_t> tokens;
        std::list<int32_t>::iterator free_it;
        bool in_free = false;
    };
    int32_t take_free();           // front of the free list, its key evicted
    void take_cached(int32_t id);  // a cache hit: out of the free list if there, ref + 1
    int block_size_;
    bool caching_;
    std::vector<block> blocks_;
    std::list<int32_t> free_;                      // LRU: front is reused first
    std::unordered_map<uint64_t, int32_t> cached_;  // hash -> block id
};

}  // namespace tetra
