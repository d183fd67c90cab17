// block_manager: reference-counted KV blocks, LRU free list, prefix-cache keys (see the header).
#include "engine/block_manager.h"

#include <algorithm>

#include "core/error.h"

namespace tetra {

namespace {
uint64_t mix64(uint64_t z) {  // SplitMix64 finalizer: a strong 64-bit mixer
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
}  // namespace

uint64_t block_manager::hash_block(uint64_t parent, const int32_t* tokens, int n) {
    uint64_t h = mix64(parent ^ 0x9E3779B97F4A7C15ull);
    for (int i = 0; i < n; ++i) h = mix64(h ^ (uint64_t(uint32_t(tokens[i])) + 0x9E3779B97F4A7C15ull * uint64_t(i + 1)));
    return h;
}

block_manager::block_manager(int64_t n_blocks, int block_size, bool enable_prefix_caching)
    : block_size_(block_size), caching_(enable_prefix_caching) {
    TETRA_CHECK(n_blocks >= 1, "block_manager: need at least one KV block, got %lld", (long long)n_blocks);
    TETRA_CHECK(block_size >= 1, "block_manager: block_size must be >= 1, got %d", block_size);
    blocks_.resize(size_t(n_blocks));
    for (int32_t i = 0; i < int32_t(n_blocks); ++i) {
        blocks_[size_t(i)].free_it = free_.insert(free_.end(), i);
        blocks_[size_t(i)].in_free = true;
    }
}

int64_t block_manager::n_cached_free() const {
    int64_t n = 0;
    for (int32_t id : free_) n += blocks_[size_t(id)].keyed;
    return n;
}

int32_t block_manager::take_free() {
    TETRA_ASSERT(!free_.empty());
    int32_t id = free_.front();
    free_.pop_front();
    block& b = blocks_[size_t(id)];
    TETRA_ASSERT(b.ref == 0 && b.in_free);
    b.in_free = false;
    if (b.keyed) {  // evict its key
        auto it = cached_.find(b.hash);
        if (it != cached_.end() && it->second == id) cached_.erase(it);
        b.keyed = false;
        b.tokens.clear();
    }
    b.ref = 1;
    return id;
}

void block_manager::take_cached(int32_t id) {
    block& b = blocks_[size_t(id)];
    if (b.in_free) {
        TETRA_ASSERT(b.ref == 0);
        free_.erase(b.free_it);
        b.in_free = false;
    }
    ++b.ref;
}

std::vector<int32_t> block_manager::match_prefix(const sequence& s) const {
    std::vector<int32_t> hit;
    if (!caching_) return hit;
    const int64_t max_blocks = (s.num_tokens() - 1) / block_size_;
    uint64_t parent = 0;
    for (int64_t b = 0; b < max_blocks; ++b) {
        const int32_t* toks = s.token_ids.data() + b * block_size_;
        uint64_t h = hash_block(parent, toks, block_size_);
        auto it = cached_.find(h);
        if (it == cached_.end()) break;
        const block& blk = blocks_[size_t(it->second)];
        if (!blk.keyed || blk.hash != h || !std::equal(blk.tokens.begin(), blk.tokens.end(), toks)) break;
        hit.push_back(it->second);
        parent = h;
    }
    return hit;
}

int64_t block_manager::n_blocks_needed(const sequence& s, int64_t n_cached_blocks, int64_t n_tokens) const {
    int64_t have = s.block_table.empty() ? n_cached_blocks : int64_t(s.block_table.size());
    int64_t cached_tokens = s.block_table.empty() ? n_cached_blocks * block_size_ : s.num_cached_tokens;
    int64_t want = (cached_tokens + n_tokens + block_size_ - 1) / block_size_;
    return want > have ? want - have : 0;
}

bool block_manager::allocate(sequence& s, const std::vector<int32_t>& cached, int64_t n_tokens) {
    TETRA_ASSERT(s.block_table.empty() && s.num_cached_tokens == 0);
    int64_t from_free = 0;
    for (int32_t id : cached) from_free += blocks_[size_t(id)].in_free;
    int64_t fresh = n_blocks_needed(s, int64_t(cached.size()), n_tokens);
    if (fresh + from_free > n_free()) return false;
    uint64_t parent = 0;
    for (size_t b = 0; b < cached.size(); ++b) {
        take_cached(cached[b]);
        s.block_table.push_back(cached[b]);
        parent = blocks_[size_t(cached[b])].hash;
        s.block_hashes.push_back(parent);
    }
    s.num_cached_tokens = int64_t(cached.size()) * block_size_;
    for (int64_t i = 0; i < fresh; ++i) s.block_table.push_back(take_free());
    return true;
}

bool block_manager::append_slots(sequence& s, int64_t n_tokens) {
    int64_t fresh = n_blocks_needed(s, 0, n_tokens);
    if (s.block_table.empty()) TETRA_ASSERT(s.num_cached_tokens == 0);
    if (fresh > n_free()) return false;
    for (int64_t i = 0; i < fresh; ++i) s.block_table.push_back(take_free());
    return true;
}

void block_manager::commit(sequence& s) {
    if (!caching_) return;
    const int64_t n_full = std::min<int64_t>(s.num_cached_tokens / block_size_, int64_t(s.block_table.size()));
    while (int64_t(s.block_hashes.size()) < n_full) {
        size_t b = s.block_hashes.size();
        const int32_t* toks = s.token_ids.data() + b * size_t(block_size_);
        uint64_t h = hash_block(b ? s.block_hashes[b - 1] : 0, toks, block_size_);
        s.block_hashes.push_back(h);
        int32_t id = s.block_table[b];
        block& blk = blocks_[size_t(id)];
        if (blk.keyed) continue;  // a shared (cached or forked) block already keyed
        if (cached_.count(h)) continue;  // same content computed twice in one step, or a collision
        blk.keyed = true;
        blk.hash = h;
        blk.tokens.assign(toks, toks + block_size_);
        cached_[h] = id;
    }
}

void block_manager::deallocate(sequence& s) {
    for (auto it = s.block_table.rbegin(); it != s.block_table.rend(); ++it) {
        block& b = blocks_[size_t(*it)];
        TETRA_ASSERT(b.ref >= 1 && !b.in_free);
        if (--b.ref == 0) {
            b.free_it = free_.insert(free_.end(), *it);
            b.in_free = true;
        }
    }
    s.block_table.clear();
    s.block_hashes.clear();
    s.num_cached_tokens = 0;
}

void block_manager::fork(const sequence& parent, sequence& child, int64_t n_blocks) {
    TETRA_ASSERT(child.block_table.empty() && child.num_cached_tokens == 0);
    TETRA_ASSERT(n_blocks <= int64_t(parent.block_table.size()) && n_blocks * block_size_ <= parent.num_cached_tokens);
    for (int64_t b = 0; b < n_blocks; ++b) {
        int32_t id = parent.block_table[size_t(b)];
        ++blocks_[size_t(id)].ref;
        child.block_table.push_back(id);
    }
    child.num_cached_tokens = n_blocks * block_size_;
    // The chain of the shared blocks is the parent's (same tokens); commit() keys the rest.
    size_t n_hash = std::min(parent.block_hashes.size(), size_t(n_blocks));
    child.block_hashes.assign(parent.block_hashes.begin(), parent.block_hashes.begin() + long(n_hash));
}

}  // namespace tetra
