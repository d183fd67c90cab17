// scheduler: one step's choice of work (see the header for the policy).
#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace tetra {

scheduler::scheduler(const scheduler_config& cfg, block_manager& blocks) : cfg_(cfg), blocks_(blocks) {
    TETRA_CHECK(cfg.max_num_seqs >= 1, "scheduler: max_num_seqs must be >= 1, got %d", cfg.max_num_seqs);
    TETRA_CHECK(cfg.max_num_batched_tokens >= 1, "scheduler: max_num_batched_tokens must be >= 1, got %lld",
                (long long)cfg.max_num_batched_tokens);
}

void scheduler::add(sequence* s) {
    TETRA_ASSERT(s && s->status == sequence_status::WAITING);
    waiting_.push_back(s);
}

void scheduler::preempt(sequence* s) {
    blocks_.deallocate(*s);
    s->status = sequence_status::WAITING;
    ++s->num_preemptions;
    ++num_preemptions;
    waiting_.push_front(s);
}

// Admits waiting sequence s with its first chunk; false (no change) when the pool is short.
bool scheduler::admit(sequence* s, int64_t& budget, std::vector<scheduled_seq>& out) {
    std::vector<int32_t> cached;
    if (s->block_table.empty()) {
        cached = blocks_.match_prefix(*s);
        int64_t n_hit = int64_t(cached.size()) * blocks_.block_size();
        int64_t n = std::min(s->num_tokens() - n_hit, budget);
        if (!blocks_.allocate(*s, cached, n)) return false;
        prefix_cache_queries += s->num_tokens();
        prefix_cache_hits += n_hit;
    } else {  // a forked sibling holding its parent's prompt blocks
        if (!blocks_.append_slots(*s, std::min(s->num_uncomputed(), budget))) return false;
    }
    if (s->num_cached_prompt_tokens < 0) s->num_cached_prompt_tokens = s->num_cached_tokens;
    int64_t n = std::min(s->num_uncomputed(), budget);
    s->status = sequence_status::RUNNING;
    running_.push_back(s);
    out.push_back({s, s->num_cached_tokens, n, s->num_cached_tokens + n == s->num_tokens()});
    budget -= n;
    return true;
}

// Last resort when nothing can run: forked siblings waiting with shared blocks give them back
// (they recompute), so the pool is not held by sequences that cannot be scheduled.
void scheduler::release_waiting_blocks() {
    for (sequence* s : waiting_)
        if (!s->block_table.empty()) blocks_.deallocate(*s);
}

std::vector<scheduled_seq> scheduler::schedule() {
    std::vector<scheduled_seq> out;
    int64_t budget = cfg_.max_num_batched_tokens;
    bool preempted = false;
    for (size_t i = 0; i < running_.size() && budget > 0;) {
        sequence* s = running_[i];
        const int64_t n = std::min(s->num_uncomputed(), budget);
        TETRA_ASSERT(n >= 1);
        bool ok = true;
        while (!blocks_.append_slots(*s, n)) {  // preempt the newest until s fits (or s itself)
            sequence* victim = running_.back();
            running_.pop_back();
            preempt(victim);
            preempted = true;
            if (victim == s) {
                ok = false;
                break;
            }
        }
        if (!ok) break;
        out.push_back({s, s->num_cached_tokens, n, s->num_cached_tokens + n == s->num_tokens()});
        budget -= n;
        ++i;
    }
    if (preempted) return out;
    for (int pass = 0; pass < 2; ++pass) {
        for (auto it = waiting_.begin(); it != waiting_.end() && budget > 0 &&
                                         int64_t(running_.size()) < int64_t(cfg_.max_num_seqs);) {
            sequence* s = *it;
            if (s->fork_parent) {  // waits for its parent's prompt
                ++it;
                continue;
            }
            if (!admit(s, budget, out)) break;  // first come, first served: no overtaking
            it = waiting_.erase(it);
        }
        if (!out.empty() || !running_.empty() || waiting_.empty()) break;
        release_waiting_blocks();
    }
    return out;
}

void scheduler::postprocess(const std::vector<scheduled_seq>& batch) {
    const int bs = blocks_.block_size();
    for (const scheduled_seq& w : batch) {
        sequence* s = w.seq;
        if (s->finished()) continue;
        TETRA_ASSERT(s->num_cached_tokens == w.pos0);
        s->num_cached_tokens += w.n_tokens;
        blocks_.commit(*s);
        if (s->num_cached_tokens < s->num_prompt_tokens || s->fork_children.empty()) continue;
        // Siblings share the parent's full prompt blocks, leaving at least one prompt token to
        // compute (its logits give their first token).
        int64_t n_share = std::min((s->num_prompt_tokens - 1) / bs, s->num_cached_tokens / bs);
        for (sequence* c : s->fork_children) {
            if (c->fork_parent != s) continue;
            c->fork_parent = nullptr;
            if (c->finished()) continue;
            TETRA_ASSERT(c->status == sequence_status::WAITING && c->block_table.empty());
            blocks_.fork(*s, *c, n_share);
        }
        s->fork_children.clear();
    }
}

void scheduler::finish(sequence* s) {
    if (s->finished()) return;
    auto drop = [s](std::deque<sequence*>& q) {
        auto it = std::find(q.begin(), q.end(), s);
        if (it != q.end()) q.erase(it);
    };
    if (s->status == sequence_status::RUNNING) drop(running_);
    else drop(waiting_);
    if (!s->block_table.empty() || s->num_cached_tokens) blocks_.deallocate(*s);
    s->status = sequence_status::FINISHED;
    for (sequence* c : s->fork_children)
        if (c->fork_parent == s) c->fork_parent = nullptr;  // siblings go on alone
    s->fork_children.clear();
}

}  // namespace tetra
