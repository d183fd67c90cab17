// test_backend_ops (CPU), attention: mixed batches (prefill chunks with cached prefixes and decode
// tokens at positions > 0), GQA ratios, block sizes 1/4/16, block tables in shuffled order,
// sliding window. The caches are filled by the test directly through the block tables; every
// slot that no sequence owns holds NaN, so a kernel reading outside its sequence fails. The
// reference gathers K/V per token and does an explicit double softmax.
#include "backend/ops.h"
#include "ops_harness.h"

using namespace tetra;
using namespace tetra_test;

namespace {

struct attn_case {
    dtype act, cache;
    int64_t n_head, n_head_kv, head_dim, block_size;
    std::vector<std::pair<int, int>> seqs;  // (num_cached_tokens, n_query) per sequence
    int window;
    std::string vars() const {
        std::string s = std::string("act=") + dn(act) + " cache=" + dn(cache) + " n_head=" + std::to_string(n_head) +
                        " n_head_kv=" + std::to_string(n_head_kv) + " head_dim=" + std::to_string(head_dim) +
                        " block_size=" + std::to_string(block_size) + " window=" + std::to_string(window) + " seqs=";
        for (auto p : seqs) s += "(" + std::to_string(p.first) + "+" + std::to_string(p.second) + ")";
        return s;
    }
};

struct attn_setup {
    tensor q, k_cache, v_cache, cu, lens, pos, bt;
    attn_metadata meta;
    std::vector<double> ref;  // [n_tokens, n_head, head_dim]
};

attn_setup build(const attn_case& c, rng& r) {
    attn_setup st;
    int n_seqs = int(c.seqs.size());
    int64_t bs = c.block_size, n_tokens = 0, max_blocks = 0, total_blocks = 3;  // 3 spare blocks
    std::vector<int64_t> nb;
    for (auto p : c.seqs) {
        int64_t len = p.first + p.second;
        nb.push_back((len + bs - 1) / bs);
        max_blocks = std::max(max_blocks, nb.back() + 1);
        total_blocks += nb.back();
        n_tokens += p.second;
    }
    std::vector<int32_t> perm(static_cast<size_t>(total_blocks));
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = int32_t(i);
    std::shuffle(perm.begin(), perm.end(), r.g);
    std::vector<int32_t> bt(static_cast<size_t>(n_seqs * max_blocks), -1), cu{0}, lens, pos;
    size_t next = 0;
    for (int s = 0; s < n_seqs; ++s) {
        for (int64_t b = 0; b < nb[size_t(s)]; ++b) bt[size_t(s * max_blocks + b)] = perm[next++];
        if (nb[size_t(s)] < max_blocks) bt[size_t(s * max_blocks + nb[size_t(s)])] = perm[next % perm.size()];  // stale entry
        cu.push_back(cu.back() + c.seqs[size_t(s)].second);
        lens.push_back(c.seqs[size_t(s)].first + c.seqs[size_t(s)].second);
        for (int i = 0; i < c.seqs[size_t(s)].second; ++i) pos.push_back(c.seqs[size_t(s)].first + i);
    }
    int64_t row = c.n_head_kv * c.head_dim, n_slots = total_blocks * bs;
    std::vector<double> kc(static_cast<size_t>(n_slots * row), NAN), vc(static_cast<size_t>(n_slots * row), NAN);
    for (int s = 0; s < n_seqs; ++s)
        for (int64_t j = 0; j < lens[size_t(s)]; ++j) {
            int64_t slot = int64_t(bt[size_t(s * max_blocks + j / bs)]) * bs + j % bs;
            for (int64_t e = 0; e < row; ++e) kc[size_t(slot * row + e)] = r.normal(), vc[size_t(slot * row + e)] = r.normal();
        }
    st.k_cache = make_tensor(c.cache, {total_blocks, bs, c.n_head_kv, c.head_dim}, kc);
    st.v_cache = make_tensor(c.cache, {total_blocks, bs, c.n_head_kv, c.head_dim}, vc);
    st.q = random_tensor(r, c.act, {n_tokens, c.n_head, c.head_dim});
    st.cu = i32_tensor(cu), st.lens = i32_tensor(lens), st.pos = i32_tensor(pos);
    st.bt = tensor::alloc(dtype::I32, {n_seqs, max_blocks});
    std::memcpy(st.bt.data, bt.data(), bt.size() * 4);
    st.meta.n_seqs = n_seqs, st.meta.block_size = int(bs);
    st.meta.cu_seqlens_q = st.cu, st.meta.seq_lens_kv = st.lens, st.meta.positions = st.pos, st.meta.block_tables = st.bt;
    for (auto p : c.seqs) st.meta.max_seqlen_q = std::max(st.meta.max_seqlen_q, p.second);
    for (int32_t l : lens) st.meta.max_seqlen_kv = std::max(st.meta.max_seqlen_kv, int(l));
    // Reference: explicit gather + softmax in double, from the values as stored (rounded).
    auto qv = to_double(st.q), kv = to_double(st.k_cache), vv = to_double(st.v_cache);
    double scale = 1.0 / std::sqrt(double(c.head_dim));
    int64_t group = c.n_head / c.n_head_kv;
    st.ref.assign(size_t(n_tokens * c.n_head * c.head_dim), 0.0);
    for (int s = 0; s < n_seqs; ++s)
        for (int32_t t = cu[size_t(s)]; t < cu[size_t(s) + 1]; ++t)
            for (int64_t h = 0; h < c.n_head; ++h) {
                int64_t p = pos[size_t(t)], lo = c.window ? std::max<int64_t>(0, p - c.window + 1) : 0;
                std::vector<double> sc;
                std::vector<int64_t> offs;
                for (int64_t j = lo; j <= p; ++j) {
                    int64_t slot = int64_t(bt[size_t(s * max_blocks + j / bs)]) * bs + j % bs;
                    int64_t off = (slot * c.n_head_kv + h / group) * c.head_dim;
                    double d = 0;
                    for (int64_t e = 0; e < c.head_dim; ++e) d += qv[size_t((t * c.n_head + h) * c.head_dim + e)] * kv[size_t(off + e)];
                    sc.push_back(d * double(float(scale))), offs.push_back(off);
                }
                double mx = *std::max_element(sc.begin(), sc.end()), sum = 0;
                for (double& x : sc) sum += (x = std::exp(x - mx));
                for (size_t i = 0; i < sc.size(); ++i)
                    for (int64_t e = 0; e < c.head_dim; ++e)
                        st.ref[size_t((t * c.n_head + h) * c.head_dim + e)] += sc[i] / sum * vv[size_t(offs[i] + e)];
            }
    return st;
}

}  // namespace

TEST(backend_ops, attention) {
    std::map<std::string, int> ran;
    rng r(11);
    struct heads { int64_t n_head, n_head_kv, head_dim; } hs[] = {{1, 1, 8}, {4, 4, 16}, {4, 2, 64}, {8, 1, 32}, {6, 3, 5}};
    std::vector<std::vector<std::pair<int, int>>> batches = {
        {{0, 1}}, {{0, 7}}, {{5, 1}}, {{0, 5}, {7, 1}, {16, 3}, {33, 1}}, {{3, 2}, {0, 1}}, {{20, 1}, {31, 1}, {1, 1}}};
    struct dts { dtype act, cache; } dt[] = {{dtype::F32, dtype::F32}, {dtype::BF16, dtype::BF16}, {dtype::F32, dtype::BF16}};
    int n_cases = 0;
    for (auto d : dt)
        for (auto h : hs)
            for (int64_t bs : {1, 4, 16})
                for (const auto& b : batches)
                    for (int window : {0, 3}) {
                        attn_case c{d.act, d.cache, h.n_head, h.n_head_kv, h.head_dim, bs, b, window};
                        attn_setup st = build(c, r);
                        // f32: ≤ 40 keys, f32 dot/softmax (rel. ~1e-6). bf16 out: rounding 2^-9.
                        double tol = c.act == dtype::F32 ? 1e-10 : 2e-5;
                        int64_t n_tokens = st.q.dim(0);
                        ++n_cases;
                        for_each_kernel("attention", c.act, ran, [&](const kernel_entry& k) {
                            guarded out = make_guarded(c.act, {n_tokens, c.n_head * c.head_dim});
                            cpu_be().attention(st.q, st.k_cache, st.v_cache, st.meta,
                                               float(1.0 / std::sqrt(double(c.head_dim))), out.view, window);
                            EXPECT_TRUE(out.intact()) << k.name << " " << c.vars();
                            EXPECT_EQ(compare(to_double(out.view), st.ref, tol), "") << k.name << " " << c.vars();
                        });
                    }
    EXPECT_GT(n_cases, 500);
    expect_all_ran("attention", ran, 500);
}

TEST(backend_ops, attention_nan_propagates_per_token) {
    rng r(12);
    attn_case c{dtype::F32, dtype::F32, 2, 1, 8, 4, {{0, 3}, {4, 1}}, 0};
    attn_setup st = build(c, r);
    st.q.ptr<float>()[1 * 2 * 8 + 3] = NAN;  // token 1, head 0
    guarded out = make_guarded(dtype::F32, {4, 16});
    cpu_be().attention(st.q, st.k_cache, st.v_cache, st.meta, 0.35f, out.view);
    for (int64_t t = 0; t < 4; ++t)
        for (int64_t e = 0; e < 16; ++e)
            EXPECT_EQ(std::isnan(out.view.ptr<float>()[t * 16 + e]), t == 1 && e < 8) << t << "," << e;
}

TEST(backend_ops, attention_metadata_errors) {
    rng r(13);
    attn_case c{dtype::F32, dtype::F32, 2, 1, 8, 4, {{0, 3}, {4, 1}}, 0};
    auto expect_error = [&](const std::function<void(attn_setup&)>& mutate, const char* needle) {
        attn_setup st = build(c, r);
        mutate(st);
        guarded out = make_guarded(dtype::F32, {4, 16});
        try {
            cpu_be().attention(st.q, st.k_cache, st.v_cache, st.meta, 0.35f, out.view);
            ADD_FAILURE() << "accepted: " << needle;
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_error([](attn_setup& s) { s.pos.ptr<int32_t>()[3] = 5; }, "has position 5; expected 0 <= position < seq_lens_kv 5");
    expect_error([](attn_setup& s) { s.bt.ptr<int32_t>()[0] = 99; }, "block_tables[0][0] = 99 is not a block");
    expect_error([](attn_setup& s) { s.cu.ptr<int32_t>()[2] = 3; }, "cu_seqlens_q must run from 0 to n_tokens 4");
    expect_error([](attn_setup& s) { s.lens.ptr<int32_t>()[1] = 1000; }, "exceeds the block table capacity");
    expect_error([](attn_setup& s) { s.meta.block_size = 8; }, "meta.block_size 8 but k_cache");
    expect_error([](attn_setup& s) { s.meta.n_seqs = 1; }, "'cu_seqlens_q' has shape [3]; expected [2]");
}
