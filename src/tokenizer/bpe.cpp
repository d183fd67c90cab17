// BPE model (HF models::bpe): one pre-token -> ids. Symbols start as the pre-token's characters
// (absent ones become unk, or are dropped when there is no unk_token); then the adjacent pair of
// lowest merge rank is merged repeatedly (ties: leftmost), via a min-heap as HF Word::merge_all.
// Results are cached per pre-token in a bounded map guarded by a shared mutex.
#include <mutex>
#include <queue>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace tetra {

namespace {

struct symbol { int32_t id; int32_t prev, next; size_t len; };

struct merge_cand {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const merge_cand& o) const {
        return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
};

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

}  // namespace

void bpe_model::merge_word(const std::string& piece, std::vector<int32_t>& out) const {
    std::vector<symbol> syms;
    syms.reserve(piece.size());
    int32_t unk_pending = 0;  // bytes of a pending (possibly fused) unk symbol
    auto add = [&](int32_t id, size_t len) {
        int32_t k = int32_t(syms.size());
        syms.push_back({id, k - 1, -1, len});
        if (k > 0) syms[k - 1].next = k;
    };
    for (size_t i = 0; i < piece.size();) {
        size_t n = utf8_len(static_cast<unsigned char>(piece[i]));
        auto it = vocab.find(piece.substr(i, n));
        if (it != vocab.end()) {
            if (unk_pending) { add(unk_id, unk_pending); unk_pending = 0; }
            add(it->second, n);
        } else if (unk_id >= 0) {
            if (unk_pending && !fuse_unk) { add(unk_id, unk_pending); unk_pending = 0; }
            unk_pending += int32_t(n);
        }  // else: dropped, as HF does when unk_token is null
        i += n;
    }
    if (unk_pending) add(unk_id, unk_pending);

    std::priority_queue<merge_cand, std::vector<merge_cand>, std::greater<merge_cand>> heap;
    auto push_pair = [&](int32_t pos) {
        int32_t nx = syms[pos].next;
        if (nx < 0) return;
        auto m = merges.find(pair_key(syms[pos].id, syms[nx].id));
        if (m != merges.end()) heap.push({m->second.first, pos, m->second.second});
    };
    for (int32_t k = 0; k + 1 < int32_t(syms.size()); k++) push_pair(k);
    while (!heap.empty()) {
        merge_cand top = heap.top();
        heap.pop();
        symbol& left = syms[top.pos];
        if (left.len == 0 || left.next < 0) continue;
        symbol& right = syms[left.next];
        auto m = merges.find(pair_key(left.id, right.id));
        if (m == merges.end() || m->second.second != top.new_id) continue;  // stale entry
        left.id = top.new_id;
        left.len += right.len;
        right.len = 0;
        left.next = right.next;
        if (left.next >= 0) syms[left.next].prev = top.pos;
        if (left.prev >= 0) push_pair(left.prev);
        push_pair(top.pos);
    }
    for (const symbol& s : syms)
        if (s.len > 0) out.push_back(s.id);
}

void bpe_model::tokenize(const std::string& piece, std::vector<int32_t>& out) const {
    if (ignore_merges) {
        auto it = vocab.find(piece);
        if (it != vocab.end()) { out.push_back(it->second); return; }
    }
    bool cacheable = piece.size() <= cache_max_piece;
    if (cacheable) {
        std::shared_lock<std::shared_mutex> lock(cache_mu);
        auto it = cache.find(piece);
        if (it != cache.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    size_t first = out.size();
    merge_word(piece, out);
    if (cacheable) {
        std::vector<int32_t> ids(out.begin() + first, out.end());
        std::unique_lock<std::shared_mutex> lock(cache_mu);
        if (cache.size() >= cache_capacity) cache.clear();
        cache.emplace(piece, std::move(ids));
    }
}

}  // namespace tetra
