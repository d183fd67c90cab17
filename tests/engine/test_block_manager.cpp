// block_manager: allocation and reference counts, prefix caching over full blocks (hash chain +
// stored tokens), LRU reuse of freed cached blocks, eviction, fork. Expected values are worked out
// by hand from the block size (4 here, so the cases stay small).
#include <gtest/gtest.h>

#include <numeric>

#include "engine/block_manager.h"

namespace tetra {
namespace {

constexpr int bs = 4;

std::vector<int32_t> iota_tokens(int n, int32_t start = 100) {
    std::vector<int32_t> v(size_t(n), 0);
    std::iota(v.begin(), v.end(), start);
    return v;
}

// Allocates s fully (cache hits first), marks every token computed and keys its full blocks.
void compute_all(block_manager& bm, sequence& s) {
    auto hit = bm.match_prefix(s);
    int64_t n = s.num_tokens() - int64_t(hit.size()) * bs;
    ASSERT_TRUE(bm.allocate(s, hit, n));
    s.num_cached_tokens = s.num_tokens();
    bm.commit(s);
}

TEST(block_manager, allocate_append_deallocate) {
    block_manager bm(5, bs, false);
    sequence s(0, iota_tokens(6));
    EXPECT_EQ(bm.n_blocks_needed(s, 0, 6), 2);
    ASSERT_TRUE(bm.allocate(s, {}, 6));
    EXPECT_EQ(s.block_table, (std::vector<int32_t>{0, 1}));  // fresh blocks come in id order
    EXPECT_EQ(bm.n_free(), 3);
    s.num_cached_tokens = 6;
    ASSERT_TRUE(bm.append_slots(s, 2));  // tokens 6, 7 still fit block 1
    EXPECT_EQ(s.block_table.size(), 2u);
    ASSERT_TRUE(bm.append_slots(s, 3));  // tokens 6..8: block 2
    EXPECT_EQ(s.block_table, (std::vector<int32_t>{0, 1, 2}));
    EXPECT_FALSE(bm.append_slots(s, 3 + 3 * bs));  // needs 3 more, 2 free: no change
    EXPECT_EQ(s.block_table.size(), 3u);
    EXPECT_EQ(bm.n_free(), 2);
    for (int32_t id : s.block_table) EXPECT_EQ(bm.ref_count(id), 1);
    bm.deallocate(s);
    EXPECT_TRUE(s.block_table.empty());
    EXPECT_EQ(s.num_cached_tokens, 0);
    EXPECT_EQ(bm.n_free(), 5);
}

TEST(block_manager, allocate_fails_without_change) {
    block_manager bm(2, bs, true);
    sequence s(0, iota_tokens(9));  // 3 blocks
    EXPECT_FALSE(bm.allocate(s, {}, 9));
    EXPECT_TRUE(s.block_table.empty());
    EXPECT_EQ(bm.n_free(), 2);
}

TEST(block_manager, prefix_hit_on_full_blocks_only) {
    block_manager bm(16, bs, true);
    sequence a(0, iota_tokens(10));  // blocks [100..103] [104..107] and a partial [108, 109]
    compute_all(bm, a);
    EXPECT_EQ(a.block_hashes.size(), 2u);  // the partial block is not keyed

    sequence b(1, iota_tokens(11));  // same first 10 tokens: 2 full blocks hit
    auto hit = bm.match_prefix(b);
    ASSERT_EQ(hit.size(), 2u);
    EXPECT_EQ(hit[0], a.block_table[0]);
    EXPECT_EQ(hit[1], a.block_table[1]);
    ASSERT_TRUE(bm.allocate(b, hit, 11 - 8));
    EXPECT_EQ(b.num_cached_tokens, 8);
    EXPECT_EQ(bm.ref_count(a.block_table[0]), 2);
    EXPECT_EQ(bm.ref_count(a.block_table[1]), 2);
    EXPECT_NE(b.block_table[2], a.block_table[2]);  // the partial block is never shared
    bm.deallocate(a);
    bm.deallocate(b);
    EXPECT_EQ(bm.n_free(), 16);
}

TEST(block_manager, last_token_is_always_computed) {
    block_manager bm(16, bs, true);
    sequence a(0, iota_tokens(8));  // exactly 2 full blocks
    compute_all(bm, a);
    sequence b(1, iota_tokens(8));
    // (8 - 1) / 4 = 1 block: token 7 must be computed again for its logits.
    EXPECT_EQ(bm.match_prefix(b).size(), 1u);
    sequence c(2, iota_tokens(9));
    EXPECT_EQ(bm.match_prefix(c).size(), 2u);
}

TEST(block_manager, hash_chain_needs_the_same_parent) {
    block_manager bm(16, bs, true);
    sequence a(0, iota_tokens(12));
    compute_all(bm, a);
    // Block 1 identical to a's block 1, block 0 different: no hit at all (the chain breaks at 0).
    std::vector<int32_t> t = iota_tokens(12);
    t[0] = 7;
    sequence b(1, t);
    EXPECT_TRUE(bm.match_prefix(b).empty());
    // Block 1 differs in its last token: only block 0 hits.
    t = iota_tokens(12);
    t[7] = 7;
    sequence c(2, t);
    EXPECT_EQ(bm.match_prefix(c).size(), 1u);
    EXPECT_NE(block_manager::hash_block(0, t.data(), bs), block_manager::hash_block(1, t.data(), bs));
}

TEST(block_manager, caching_off_never_hits) {
    block_manager bm(16, bs, false);
    sequence a(0, iota_tokens(12));
    compute_all(bm, a);
    sequence b(1, iota_tokens(12));
    EXPECT_TRUE(bm.match_prefix(b).empty());
    EXPECT_TRUE(a.block_hashes.empty());
}

TEST(block_manager, freed_cached_blocks_are_reused_then_evicted_lru) {
    block_manager bm(4, bs, true);
    sequence a(0, iota_tokens(9));  // blocks 0, 1 (keyed), 2 (partial)
    compute_all(bm, a);
    bm.deallocate(a);  // free list: 3, then a's in reverse: 2, 1, 0
    EXPECT_EQ(bm.n_free(), 4);
    EXPECT_EQ(bm.n_cached_free(), 2);

    sequence b(1, iota_tokens(9));  // hits blocks 0, 1 straight from the free list
    auto hit = bm.match_prefix(b);
    ASSERT_EQ(hit, (std::vector<int32_t>{0, 1}));
    ASSERT_TRUE(bm.allocate(b, hit, 1));
    EXPECT_EQ(b.block_table, (std::vector<int32_t>{0, 1, 3}));  // the fresh block: front of the LRU list
    EXPECT_EQ(bm.n_free(), 1);
    bm.deallocate(b);  // free list: 2, 3, 1, 0

    // Unrelated sequences take blocks from the front: 2 and 3 first, then 1 (evicting its key).
    sequence c(2, iota_tokens(12, 500));
    ASSERT_TRUE(bm.allocate(c, {}, 12));
    EXPECT_EQ(c.block_table, (std::vector<int32_t>{2, 3, 1}));
    sequence d(3, iota_tokens(9));
    auto hit2 = bm.match_prefix(d);
    EXPECT_EQ(hit2, (std::vector<int32_t>{0}));  // block 1 was evicted, so the chain stops after 0
    bm.deallocate(c);
    EXPECT_EQ(bm.n_free(), 4);
}

TEST(block_manager, allocate_counts_cached_free_blocks_against_the_pool) {
    block_manager bm(3, bs, true);
    sequence a(0, iota_tokens(9));
    compute_all(bm, a);  // uses all 3 blocks
    bm.deallocate(a);
    sequence b(1, iota_tokens(9 + 2 * bs));  // hits 2 free cached blocks, needs 3 more: 5 > 3
    auto hit = bm.match_prefix(b);
    ASSERT_EQ(hit.size(), 2u);
    EXPECT_FALSE(bm.allocate(b, hit, b.num_tokens() - 8));
    EXPECT_EQ(bm.n_free(), 3);
    EXPECT_EQ(bm.ref_count(hit[0]), 0);
}

TEST(block_manager, fork_shares_by_reference) {
    block_manager bm(8, bs, true);
    sequence p(0, iota_tokens(10));
    compute_all(bm, p);
    sequence c(1, iota_tokens(10));
    bm.fork(p, c, 2);
    EXPECT_EQ(c.num_cached_tokens, 8);
    EXPECT_EQ(c.block_table, (std::vector<int32_t>{p.block_table[0], p.block_table[1]}));
    EXPECT_EQ(c.block_hashes, (std::vector<uint64_t>{p.block_hashes[0], p.block_hashes[1]}));
    EXPECT_EQ(bm.ref_count(p.block_table[0]), 2);
    ASSERT_TRUE(bm.append_slots(c, 2));
    EXPECT_EQ(c.block_table.size(), 3u);
    EXPECT_NE(c.block_table[2], p.block_table[2]);
    bm.deallocate(p);
    EXPECT_EQ(bm.ref_count(c.block_table[0]), 1);
    EXPECT_EQ(bm.n_free(), 8 - 3);
    bm.deallocate(c);
    EXPECT_EQ(bm.n_free(), 8);
}

TEST(block_manager, bad_sizes_are_errors) {
    EXPECT_THROW(block_manager(0, bs, true), error);
    EXPECT_THROW(block_manager(4, 0, true), error);
}

}  // namespace
}  // namespace tetra
