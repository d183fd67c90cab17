// scheduler: token budget and chunked prefill, decode before admission, max_num_seqs, preemption
// by recompute (newest first, back to the front of waiting, no leaked blocks), n > 1 forks, finish.
// No model: a step "computes" by postprocess() and "samples" by appending a fixed token.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>

#include "engine/scheduler.h"

namespace tetra {
namespace {

constexpr int bs = 4;

std::unique_ptr<sequence> make_seq(int64_t id, int n_prompt) {
    std::vector<int32_t> t(size_t(n_prompt), 0);
    std::iota(t.begin(), t.end(), int32_t(1000 * (id + 1)));  // distinct prompts: no prefix hits
    return std::make_unique<sequence>(id, t);
}

// One engine-like step: schedule, compute, append token 7 to every sampled sequence.
std::vector<scheduled_seq> run_step(scheduler& sch) {
    auto batch = sch.schedule();
    sch.postprocess(batch);
    for (auto& w : batch)
        if (w.sample) w.seq->append_token(7);
    return batch;
}

TEST(scheduler, chunked_prefill_respects_the_budget) {
    block_manager bm(64, bs, true);
    scheduler sch({8, 5}, bm);
    auto a = make_seq(0, 12);
    sch.add(a.get());
    // 12 prompt tokens with a budget of 5: chunks 5, 5, 2; only the last samples.
    auto b1 = run_step(sch);
    ASSERT_EQ(b1.size(), 1u);
    EXPECT_EQ(b1[0].pos0, 0);
    EXPECT_EQ(b1[0].n_tokens, 5);
    EXPECT_FALSE(b1[0].sample);
    auto b2 = run_step(sch);
    EXPECT_EQ(b2[0].pos0, 5);
    EXPECT_EQ(b2[0].n_tokens, 5);
    EXPECT_FALSE(b2[0].sample);
    auto b3 = run_step(sch);
    EXPECT_EQ(b3[0].pos0, 10);
    EXPECT_EQ(b3[0].n_tokens, 2);
    EXPECT_TRUE(b3[0].sample);
    EXPECT_EQ(a->num_tokens(), 13);
    auto b4 = run_step(sch);  // decode
    EXPECT_EQ(b4[0].pos0, 12);
    EXPECT_EQ(b4[0].n_tokens, 1);
    EXPECT_TRUE(b4[0].sample);
    EXPECT_EQ(a->block_table.size(), 4u);  // the KV of 13 tokens needs ceil(13 / 4) = 4 blocks
    sch.finish(a.get());
    EXPECT_TRUE(sch.empty());
    EXPECT_EQ(bm.n_free(), 64);
}

TEST(scheduler, decode_first_then_prefill_in_the_leftover_budget) {
    block_manager bm(64, bs, true);
    scheduler sch({8, 6}, bm);
    auto a = make_seq(0, 3), b = make_seq(1, 3), c = make_seq(2, 9);
    sch.add(a.get());
    sch.add(b.get());
    run_step(sch);  // a and b prefilled (3 + 3 = 6 tokens)
    sch.add(c.get());
    auto s2 = run_step(sch);  // a, b decode (2 tokens), then c gets 4 prefill tokens
    ASSERT_EQ(s2.size(), 3u);
    EXPECT_EQ(s2[0].seq, a.get());
    EXPECT_EQ(s2[0].n_tokens, 1);
    EXPECT_EQ(s2[1].seq, b.get());
    EXPECT_EQ(s2[2].seq, c.get());
    EXPECT_EQ(s2[2].n_tokens, 4);
    EXPECT_FALSE(s2[2].sample);
    int64_t total = 0;
    for (auto& w : s2) total += w.n_tokens;
    EXPECT_LE(total, 6);
    for (auto* s : {a.get(), b.get(), c.get()}) sch.finish(s);
    EXPECT_EQ(bm.n_free(), 64);
}

TEST(scheduler, max_num_seqs_limits_admission) {
    block_manager bm(64, bs, true);
    scheduler sch({2, 100}, bm);
    auto a = make_seq(0, 3), b = make_seq(1, 3), c = make_seq(2, 3);
    for (auto* s : {a.get(), b.get(), c.get()}) sch.add(s);
    auto s1 = run_step(sch);
    EXPECT_EQ(s1.size(), 2u);
    EXPECT_EQ(sch.num_running(), 2);
    EXPECT_EQ(sch.num_waiting(), 1);
    sch.finish(a.get());  // a slot opens
    auto s2 = run_step(sch);
    ASSERT_EQ(s2.size(), 2u);
    EXPECT_EQ(s2[1].seq, c.get());
    for (auto* s : {b.get(), c.get()}) sch.finish(s);
    EXPECT_EQ(bm.n_free(), 64);
}

TEST(scheduler, preempts_the_newest_by_recompute) {
    block_manager bm(4, bs, false);  // 16 token slots
    scheduler sch({8, 100}, bm);
    auto a = make_seq(0, 7), b = make_seq(1, 7);
    sch.add(a.get());
    sch.add(b.get());
    run_step(sch);  // a: 2 blocks, b: 2 blocks; both have 8 tokens now (7 + 1 sampled)
    EXPECT_EQ(bm.n_free(), 0);
    // a's decode needs a third block (token 8 sits at position 7, block 1 — still fits),
    // so run until a needs block 2: positions 8+.
    auto s2 = run_step(sch);  // position 7 for both: fits
    EXPECT_EQ(s2.size(), 2u);
    auto s3 = run_step(sch);  // a needs a block for position 8: b (the newest) is preempted
    ASSERT_EQ(s3.size(), 1u);
    EXPECT_EQ(s3[0].seq, a.get());
    EXPECT_EQ(sch.num_preemptions, 1);
    EXPECT_EQ(b->num_preemptions, 1);
    EXPECT_EQ(b->status, sequence_status::WAITING);
    EXPECT_TRUE(b->block_table.empty());
    EXPECT_EQ(b->num_cached_tokens, 0);
    EXPECT_EQ(b->num_tokens(), 9);  // its output tokens stay: recompute covers prompt + output
    sch.finish(a.get());
    auto s4 = run_step(sch);  // b is recomputed in one chunk: all 9 tokens, then samples
    ASSERT_EQ(s4.size(), 1u);
    EXPECT_EQ(s4[0].seq, b.get());
    EXPECT_EQ(s4[0].pos0, 0);
    EXPECT_EQ(s4[0].n_tokens, 9);
    EXPECT_TRUE(s4[0].sample);
    sch.finish(b.get());
    EXPECT_EQ(bm.n_free(), 4);
}

TEST(scheduler, a_lone_sequence_that_cannot_grow_preempts_itself) {
    block_manager bm(2, bs, false);
    scheduler sch({8, 100}, bm);
    auto a = make_seq(0, 8);
    sch.add(a.get());
    run_step(sch);  // 8 tokens in 2 blocks, 9th sampled
    auto s2 = run_step(sch);  // needs a third block: nothing else to evict
    EXPECT_TRUE(s2.empty());
    EXPECT_EQ(a->status, sequence_status::WAITING);
    EXPECT_EQ(bm.n_free(), 2);
    sch.finish(a.get());
    EXPECT_TRUE(sch.empty());
}

TEST(scheduler, waiting_sequences_wait_for_free_blocks) {
    block_manager bm(3, bs, false);
    scheduler sch({8, 100}, bm);
    auto a = make_seq(0, 8), b = make_seq(1, 8);
    sch.add(a.get());
    sch.add(b.get());
    auto s1 = run_step(sch);  // a takes 2 blocks, b needs 2 of the 1 left: stays waiting
    ASSERT_EQ(s1.size(), 1u);
    EXPECT_EQ(sch.num_waiting(), 1);
    sch.finish(a.get());
    auto s2 = run_step(sch);
    ASSERT_EQ(s2.size(), 1u);
    EXPECT_EQ(s2[0].seq, b.get());
    sch.finish(b.get());
    EXPECT_EQ(bm.n_free(), 3);
}

TEST(scheduler, forked_siblings_share_the_parents_prompt_blocks) {
    block_manager bm(16, bs, false);
    scheduler sch({8, 100}, bm);
    auto p = make_seq(0, 10);
    std::vector<std::unique_ptr<sequence>> kids;
    for (int i = 1; i <= 2; ++i) {
        kids.push_back(std::make_unique<sequence>(i, p->token_ids));
        kids.back()->fork_parent = p.get();
        p->fork_children.push_back(kids.back().get());
    }
    sch.add(p.get());
    for (auto& k : kids) sch.add(k.get());
    auto s1 = run_step(sch);  // only the parent runs; the siblings wait for its prompt
    ASSERT_EQ(s1.size(), 1u);
    EXPECT_EQ(s1[0].seq, p.get());
    for (auto& k : kids) {
        EXPECT_EQ(k->fork_parent, nullptr);
        ASSERT_EQ(k->block_table.size(), 2u);  // (10 - 1) / 4 = 2 full prompt blocks shared
        EXPECT_EQ(k->block_table[0], p->block_table[0]);
        EXPECT_EQ(k->block_table[1], p->block_table[1]);
        EXPECT_EQ(k->num_cached_tokens, 8);
    }
    EXPECT_EQ(bm.ref_count(p->block_table[0]), 3);
    auto s2 = run_step(sch);  // parent decodes; siblings compute tokens 8, 9 and sample
    ASSERT_EQ(s2.size(), 3u);
    for (int i = 1; i <= 2; ++i) {
        EXPECT_EQ(s2[size_t(i)].pos0, 8);
        EXPECT_EQ(s2[size_t(i)].n_tokens, 2);
        EXPECT_TRUE(s2[size_t(i)].sample);
    }
    sch.finish(p.get());
    for (auto& k : kids) sch.finish(k.get());
    EXPECT_EQ(bm.n_free(), 16);
}

TEST(scheduler, siblings_of_a_finished_parent_go_alone) {
    block_manager bm(16, bs, false);
    scheduler sch({8, 100}, bm);
    auto p = make_seq(0, 6);
    auto k = std::make_unique<sequence>(1, p->token_ids);
    k->fork_parent = p.get();
    p->fork_children.push_back(k.get());
    sch.add(p.get());
    sch.add(k.get());
    sch.finish(p.get());  // e.g. aborted before its prompt ran
    EXPECT_EQ(k->fork_parent, nullptr);
    auto s1 = run_step(sch);
    ASSERT_EQ(s1.size(), 1u);
    EXPECT_EQ(s1[0].seq, k.get());
    EXPECT_EQ(s1[0].n_tokens, 6);
    sch.finish(k.get());
    EXPECT_EQ(bm.n_free(), 16);
}

TEST(scheduler, prefix_cache_hits_are_counted_in_tokens) {
    block_manager bm(16, bs, true);
    scheduler sch({8, 100}, bm);
    auto a = make_seq(0, 9);
    sch.add(a.get());
    run_step(sch);
    auto b = std::make_unique<sequence>(1, std::vector<int32_t>(a->token_ids.begin(), a->token_ids.begin() + 9));
    sch.add(b.get());
    auto s2 = run_step(sch);
    ASSERT_EQ(s2.size(), 2u);
    EXPECT_EQ(s2[1].pos0, 8);  // 2 full blocks hit
    EXPECT_EQ(s2[1].n_tokens, 1);
    EXPECT_EQ(b->num_cached_prompt_tokens, 8);
    EXPECT_EQ(sch.prefix_cache_queries, 18);
    EXPECT_EQ(sch.prefix_cache_hits, 8);
    sch.finish(a.get());
    sch.finish(b.get());
    EXPECT_EQ(bm.n_free(), 16);
}

}  // namespace
}  // namespace tetra
