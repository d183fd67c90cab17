// test_backend_ops on the GPU, attention: every CUDA attention kernel the device can run
// (prefill for every batch; the split-KV decode kernels where every sequence has one query row)
// against the CPU backend on mixed batches — cached prefixes, decode rows with long contexts, GQA
// ratios up to 24 (more heads than one CTA covers), head_dim from 5 to 256, block sizes 1/16, block
// tables shuffled, sliding windows, decode batches with the graph bucket's kv capacity, the cluster
// decode kernel's plans (1 to 4 CTAs per cluster). Cache slots no sequence owns hold NaN: reading
// them fails the case.
#include <cuda_runtime.h>

#include "backend/cuda/attn_case.h"

using namespace tetra;
using namespace tetra_test;

namespace {

// Whether this device runs CUDA kernel `name` of `op` (attention_decode_cluster_sm90 needs sm_90).
bool device_runs(const std::string& op, const std::string& name) {
    for (const kernel_entry* k : cuda_kernels(op))
        if (k->name == name) return kernel_rejection(*k, gpu_be().device(), nullptr).empty();
    return false;
}

// Whether the 64-key form of the fa2 prefill kernel takes head_dim 128 on this device (three CTAs
// of 64 KB + 1 KB per SM; attention_prefill_fa2_sm80.cu): the H100, not the A100 or 100-KB devices.
bool fa2_k64_takes_d128() {
    int dev = 0, smem = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
    return smem >= 3 * (65536 + 1024);
}

// Runs every CUDA attention kernel on case c (inputs `in`, max_seqlen_kv × capacity) against the
// CPU backend; returns the CPU output.
tensor check_attention_kernels(const attn_case& c, const attn_inputs& in, int capacity, std::map<std::string, int>& ran,
                               std::map<std::string, int>& declined) {
    int64_t n_tokens = in.q.dim(0);
    float scale = float(1.0 / std::sqrt(double(c.head_dim)));
    tensor ref = tensor::alloc(c.act, {n_tokens, c.n_head * c.head_dim});
    cpu_be().attention(in.q, in.k_cache, in.v_cache, in.meta, scale, ref, c.window);
    tensor dq = to_gpu(in.q), dk = to_gpu(in.k_cache), dv = to_gpu(in.v_cache);
    attn_metadata dm = to_gpu_meta(in);
    dm.max_seqlen_kv *= capacity;
    for_each_gpu_kernel("attention", c.act, ran, declined, [&](const kernel_entry& k) {
        gpu_guarded out = make_gpu_guarded(c.act, {n_tokens, c.n_head * c.head_dim});
        gpu_be().attention(dq, dk, dv, dm, scale, out.view, c.window);
        bool intact = false;
        tensor got = out.result(&intact);
        EXPECT_TRUE(intact) << k.name << " " << c.vars() << " capacity×" << capacity;
        EXPECT_EQ(compare(to_double(got), to_double(ref), attn_tol(c.act)), "")
            << k.name << " " << c.vars() << " capacity×" << capacity;
    });
    return ref;
}

}  // namespace

TEST(backend_ops_gpu, attention) {
    std::map<std::string, int> ran, declined;
    rng r(11);
    struct heads { int64_t n_head, n_head_kv, head_dim; } hs[] = {
        {1, 1, 8}, {4, 2, 64}, {8, 1, 32}, {6, 3, 5}, {32, 8, 128}, {24, 1, 64}, {4, 4, 256}, {9, 3, 80}};
    std::vector<std::vector<std::pair<int, int>>> batches = {
        {{0, 1}},                            // first token
        {{0, 37}},                           // prefill, not a tile multiple
        {{5, 1}, {300, 1}, {1999, 1}},       // decode batch, long and short contexts
        {{0, 5}, {7, 1}, {16, 3}, {33, 1}},  // mixed
        {{40, 20}, {0, 70}},                 // chunked prefill over a cached prefix
        {{1000, 1}},                         // one long decode row (several splits)
    };
    for (int n : {16, 64}) {  // many short decode rows: ≥ 64 groups for most heads (the cluster kernel)
        batches.emplace_back();
        for (int i = 0; i < n; ++i) batches.back().push_back({i * (n == 16 ? 7 : 5) % (n == 16 ? 50 : 47), 1});
    }
    for (dtype t : {dtype::BF16, dtype::F32, dtype::F16})
        for (auto h : hs)
            for (int64_t bs : {1, 16})
                for (size_t bi = 0; bi < batches.size(); ++bi)
                    for (int window : {0, 3, 100}) {
                        if (t != dtype::BF16 && (bs == 1 || window == 100)) continue;  // fewer f32/f16 cases
                        attn_case c{t, h.n_head, h.n_head_kv, h.head_dim, bs, batches[bi], window};
                        attn_inputs in = build_attn_inputs(c, r);
                        int64_t n_tokens = in.q.dim(0);
                        float scale = float(1.0 / std::sqrt(double(c.head_dim)));
                        tensor ref = tensor::alloc(t, {n_tokens, c.n_head * c.head_dim});
                        cpu_be().attention(in.q, in.k_cache, in.v_cache, in.meta, scale, ref, window);
                        tensor dq = to_gpu(in.q), dk = to_gpu(in.k_cache), dv = to_gpu(in.v_cache);
                        attn_metadata dm = to_gpu_meta(in);
                        for_each_gpu_kernel("attention", t, ran, declined, [&](const kernel_entry& k) {
                            gpu_guarded out = make_gpu_guarded(t, {n_tokens, c.n_head * c.head_dim});
                            gpu_be().attention(dq, dk, dv, dm, scale, out.view, window);
                            bool intact = false;
                            tensor got = out.result(&intact);
                            EXPECT_TRUE(intact) << k.name << " " << c.vars();
                            EXPECT_EQ(compare(to_double(got), to_double(ref), attn_tol(t)), "") << k.name << " " << c.vars();
                        });
                    }
    expect_gpu_ran("attention", ran, 80);
    EXPECT_GE(ran["attention_prefill_sm80"], 300);
    // bf16 / f16 with head_dim 64 or 128 (3 head shapes × 8 batches × 2 block sizes × 3 windows for
    // bf16, × 1 × 2 for f16): every batch, decode or not
    if (fa2_k64_takes_d128()) {  // 64-key stages where 3 CTAs fit an SM (H100)
        EXPECT_EQ(ran["attention_prefill_fa2_sm80"], 192);
        EXPECT_EQ(declined["attention_prefill_fa2_sm80"], 320);
    }
    EXPECT_EQ(ran["attention_prefill_fa2_k32_sm80"], 192);  // 32-key stages, every device
    EXPECT_EQ(declined["attention_prefill_fa2_k32_sm80"], 320);
    EXPECT_GE(ran["attention_decode_sm80"], 80);
    EXPECT_GE(declined["attention_decode_sm80"], 200);  // batches with several query rows
    EXPECT_GE(ran["attention_decode_v2_sm80"], 200);
    EXPECT_GE(declined["attention_decode_v2_sm80"], 200);  // several query rows, or head_dim 5 (not 16-byte rows)
    // bf16 / f16 (512 cases): the 5 decode batches × the 3 head shapes with head_dim 64 or 128 run
    EXPECT_EQ(ran["attention_decode_mma_sm80"], 120);
    EXPECT_EQ(declined["attention_decode_mma_sm80"], 392);
    if (device_runs("attention", "attention_decode_cluster_sm90"))  // the 16- and 64-row batches
        EXPECT_GE(declined["attention_decode_cluster_sm90"], 400);      // fewer than 64 groups, prefill
}

// Decode batches (one query row per sequence) as the runner sends them: GQA groups 1/4/8, head_dim
// 64/128, contexts 1, 17, 64, 130, 131, 1000 alone and mixed in one batch, block size 16, with and
// without a sliding window, and max_seqlen_kv = the graph bucket's capacity (4× the longest
// context, so most splits lie past every row's position): each row must stop at its own position.
TEST(backend_ops_gpu, attention_decode_batches) {
    std::map<std::string, int> ran, declined;
    rng r(13);
    struct heads { int64_t n_head, n_head_kv, head_dim; } hs[] = {{8, 8, 64}, {32, 8, 128}, {32, 4, 128}, {16, 2, 64}};
    std::vector<std::vector<std::pair<int, int>>> batches = {
        {{0, 1}}, {{16, 1}}, {{129, 1}}, {{999, 1}}, {{129, 1}, {0, 1}, {999, 1}, {16, 1}, {63, 1}, {130, 1}}};
    int cases = 0;
    for (dtype t : {dtype::BF16, dtype::F32, dtype::F16})
        for (auto h : hs)
            for (const auto& seqs : batches)
                for (int window : {0, 50})
                    for (int capacity : {1, 4}) {
                        if (t != dtype::BF16 && capacity == 1) continue;  // fewer f32/f16 cases
                        attn_case c{t, h.n_head, h.n_head_kv, h.head_dim, 16, seqs, window};
                        attn_inputs in = build_attn_inputs(c, r);
                        int64_t n_tokens = in.q.dim(0);
                        float scale = float(1.0 / std::sqrt(double(c.head_dim)));
                        tensor ref = tensor::alloc(t, {n_tokens, c.n_head * c.head_dim});
                        cpu_be().attention(in.q, in.k_cache, in.v_cache, in.meta, scale, ref, window);
                        tensor dq = to_gpu(in.q), dk = to_gpu(in.k_cache), dv = to_gpu(in.v_cache);
                        attn_metadata dm = to_gpu_meta(in);
                        dm.max_seqlen_kv *= capacity;
                        ++cases;
                        for_each_gpu_kernel("attention", t, ran, declined, [&](const kernel_entry& k) {
                            gpu_guarded out = make_gpu_guarded(t, {n_tokens, c.n_head * c.head_dim});
                            gpu_be().attention(dq, dk, dv, dm, scale, out.view, window);
                            bool intact = false;
                            tensor got = out.result(&intact);
                            EXPECT_TRUE(intact) << k.name << " " << c.vars() << " capacity×" << capacity;
                            EXPECT_EQ(compare(to_double(got), to_double(ref), attn_tol(t)), "")
                                << k.name << " " << c.vars() << " capacity×" << capacity;
                        });
                    }
    EXPECT_EQ(cases, 160);
    EXPECT_EQ(ran["attention_decode_v2_sm80"], cases);
    EXPECT_EQ(ran["attention_decode_mma_sm80"], 120);  // the bf16 and f16 cases
    EXPECT_EQ(ran["attention_decode_sm80"], cases);
    EXPECT_EQ(ran["attention_prefill_sm80"], cases);
}

// A NaN in one query row makes exactly that (token, head) output NaN, in every kernel.
TEST(backend_ops_gpu, attention_nan_propagates_per_row) {
    std::map<std::string, int> ran, declined;
    rng r(12);
    for (auto seqs : std::vector<std::vector<std::pair<int, int>>>{{{0, 3}, {4, 1}}, {{9, 1}, {700, 1}}}) {
        attn_case c{dtype::F32, 2, 1, 8, 4, seqs, 0};
        attn_inputs in = build_attn_inputs(c, r);
        in.q.ptr<float>()[1 * 2 * 8 + 3] = NAN;  // token 1, head 0
        int64_t n_tokens = in.q.dim(0);
        tensor dq = to_gpu(in.q), dk = to_gpu(in.k_cache), dv = to_gpu(in.v_cache);
        attn_metadata dm = to_gpu_meta(in);
        for_each_gpu_kernel("attention", dtype::F32, ran, declined, [&](const kernel_entry& k) {
            gpu_guarded out = make_gpu_guarded(dtype::F32, {n_tokens, 16});
            gpu_be().attention(dq, dk, dv, dm, 0.35f, out.view);
            bool intact = false;
            tensor got = out.result(&intact);
            EXPECT_TRUE(intact) << k.name;
            for (int64_t t = 0; t < n_tokens; ++t)
                for (int64_t e = 0; e < 16; ++e)
                    EXPECT_EQ(std::isnan(got.ptr<float>()[t * 16 + e]), t == 1 && e < 8) << k.name << " " << t << "," << e;
        });
    }
    EXPECT_EQ(ran["attention_prefill_sm80"], 2);
    EXPECT_EQ(ran["attention_decode_sm80"], 1);
    EXPECT_EQ(ran["attention_decode_v2_sm80"], 1);
}

// A NaN in one query row of a bf16 batch makes exactly that (token, head) output NaN in every
// kernel, the tensor-core ones included: all of that row's scores are NaN, so its running max stays
// −inf, and a kernel that gave every score 0 weight there would write zeros.
TEST(backend_ops_gpu, attention_nan_query_row_bf16) {
    std::map<std::string, int> ran, declined;
    rng r(16);
    for (auto seqs : std::vector<std::vector<std::pair<int, int>>>{{{0, 3}, {4, 1}}, {{9, 1}, {700, 1}}}) {
        attn_case c{dtype::BF16, 4, 2, 64, 16, seqs, 0};
        attn_inputs in = build_attn_inputs(c, r);
        reinterpret_cast<uint16_t*>(in.q.data)[(1 * 4 + 0) * 64 + 3] = 0x7fc0;  // token 1, head 0
        tensor ref = check_attention_kernels(c, in, 1, ran, declined);
        std::vector<double> rv = to_double(ref);
        for (int64_t t = 0; t < in.q.dim(0); ++t)
            for (int64_t e = 0; e < 4 * 64; ++e)
                EXPECT_EQ(std::isnan(rv[size_t(t * 256 + e)]), t == 1 && e < 64) << "oracle " << t << "," << e;
    }
    EXPECT_EQ(ran["attention_prefill_sm80"], 2);
    EXPECT_EQ(ran["attention_prefill_fa2_sm80"], 2);  // head_dim 64: 3 × 33 KB fit every sm_80+ SM
    EXPECT_EQ(ran["attention_prefill_fa2_k32_sm80"], 2);
    EXPECT_EQ(ran["attention_decode_mma_sm80"], 1);
    EXPECT_EQ(ran["attention_decode_v2_sm80"], 1);
}

// Long prefill chunks for the tensor-core prefill kernel (attention_prefill_fa2_sm80: 16 query rows
// = tokens × heads of one kv head per warp, 4 warps of consecutive tokens per CTA, 64-key stages in
// shared memory from the CTA's first key): GQA groups 1, 3 (15 of 16 rows used), 4, 8 and 24 (two
// head splits of 16 and 8), a 1000-token prompt, chunks over cached prefixes of 0 to 517 tokens beside
// decode rows, block sizes 16 and 5 (stages across pages), windows of 50 and 130 (stages that start
// inside a page; unmasked stages inside a window). Every kernel against the CPU backend.
TEST(backend_ops_gpu, attention_prefill_long) {
    std::map<std::string, int> ran, declined;
    rng r(17);
    struct heads { int64_t n_head, n_head_kv, head_dim; } hs[] = {
        {8, 8, 64}, {9, 3, 64}, {32, 8, 128}, {32, 4, 128}, {24, 1, 64}};
    std::vector<std::vector<std::pair<int, int>>> batches = {
        {{0, 300}}, {{517, 130}, {3, 1}, {0, 64}, {250, 1}}, {{33, 95}, {100, 17}}};
    int cases = 0;
    for (dtype t : {dtype::BF16, dtype::F16})
        for (auto h : hs)
            for (int64_t bs : {16, 5})
                for (const auto& seqs : batches)
                    for (int window : {0, 50, 130}) {  // 130: unmasked key blocks inside a window
                        if (t == dtype::F16 && (bs == 5 || window != 0)) continue;
                        attn_case c{t, h.n_head, h.n_head_kv, h.head_dim, bs, seqs, window};
                        attn_inputs in = build_attn_inputs(c, r);
                        ++cases;
                        check_attention_kernels(c, in, 1, ran, declined);
                    }
    {
        attn_case c{dtype::BF16, 32, 8, 128, 16, {{0, 1000}}, 0};
        attn_inputs in = build_attn_inputs(c, r);
        ++cases;
        check_attention_kernels(c, in, 1, ran, declined);
    }
    EXPECT_EQ(cases, 106);
    if (fa2_k64_takes_d128()) EXPECT_EQ(ran["attention_prefill_fa2_sm80"], cases);
    EXPECT_EQ(ran["attention_prefill_fa2_k32_sm80"], cases);
    EXPECT_EQ(ran["attention_prefill_sm80"], cases);
}

// The cluster decode kernel's plans (attention_decode_cluster_sm90: ≥ 64 (kv head · head split,
// sequence) groups, ≤ 4 key splits per group in one cluster, ≤ 64 keys per CTA): 8, 11, 16, 24,
// 40 and 64 decode rows of different lengths (1 to 223 keys; clusters of 1 to 4 CTAs), GQA groups
// 3/4/8/24 (head splits), head_dim 64/80/128, windows, and the capacity ×2 (splits past every row's
// position). Every kernel against the CPU backend.
TEST(backend_ops_gpu, attention_decode_cluster_plans) {
    std::map<std::string, int> ran, declined;
    rng r(14);
    struct heads { int64_t n_head, n_head_kv, head_dim; } hs[] = {
        {32, 4, 128}, {32, 8, 128}, {24, 1, 64}, {9, 3, 80}, {8, 8, 64}};
    auto rows = [](int n, int mod, int mul) {
        std::vector<std::pair<int, int>> b;
        for (int i = 0; i < n; ++i) b.push_back({i * mul % mod, 1});
        return b;
    };
    std::vector<std::vector<std::pair<int, int>>> batches = {
        {{10, 1}, {200, 1}, {3, 1}, {77, 1}, {128, 1}, {31, 1}, {0, 1}, {150, 1}}, rows(8, 255, 37), rows(11, 97, 13),
        rows(16, 127, 29), rows(24, 64, 11), rows(40, 61, 3), rows(64, 40, 7)};
    int cases = 0;
    for (dtype t : {dtype::BF16, dtype::F32, dtype::F16})
        for (auto h : hs)
            for (const auto& seqs : batches)
                for (int window : {0, 7, 50})
                    for (int capacity : {1, 2}) {
                        if (t != dtype::BF16 && (window == 7 || capacity == 2)) continue;  // fewer f32/f16 cases
                        attn_case c{t, h.n_head, h.n_head_kv, h.head_dim, 16, seqs, window};
                        attn_inputs in = build_attn_inputs(c, r);
                        ++cases;
                        check_attention_kernels(c, in, capacity, ran, declined);
                    }
    EXPECT_EQ(cases, 350);
    EXPECT_EQ(ran["attention_decode_v2_sm80"], cases);
    EXPECT_EQ(ran["attention_decode_mma_sm80"], 224);  // bf16 / f16 with head_dim 64 or 128 (not 80)
    if (device_runs("attention", "attention_decode_cluster_sm90")) {
        EXPECT_GE(ran["attention_decode_cluster_sm90"], 230);  // declined: < 64 groups, > 64 keys per CTA
        EXPECT_EQ(ran["attention_decode_cluster_sm90"] + declined["attention_decode_cluster_sm90"], cases);
    }
}

// A NaN in one live K row (key 100 of sequence 0, kv head 1; a middle split) makes exactly that
// row's query heads 4..7 NaN, in every kernel; a window that ends before key 100 leaves every
// output finite. 8 rows × 8 kv heads: the cluster kernel takes it.
TEST(backend_ops_gpu, attention_decode_nan_key) {
    std::map<std::string, int> ran, declined;
    rng r(15);
    for (int window : {0, 50}) {
        attn_case c{dtype::BF16, 32, 8, 128, 16, {{169, 1}, {40, 1}, {3, 1}, {0, 1}, {120, 1}, {64, 1}, {17, 1}, {99, 1}},
                    window};
        attn_inputs in = build_attn_inputs(c, r);
        const int64_t slot = int64_t(in.bt.ptr<int32_t>()[100 / 16]) * 16 + 100 % 16;
        reinterpret_cast<uint16_t*>(in.k_cache.data)[(slot * 8 + 1) * 128 + 77] = 0x7fc0;  // bf16 NaN
        tensor ref = check_attention_kernels(c, in, 1, ran, declined);
        std::vector<double> rv = to_double(ref);
        for (int64_t tok = 0; tok < 8; ++tok)
            for (int64_t h = 0; h < 32; ++h)
                EXPECT_EQ(std::isnan(rv[size_t((tok * 32 + h) * 128)]), window == 0 && tok == 0 && h / 4 == 1)
                    << "oracle: token " << tok << " head " << h << " window " << window;
    }
    EXPECT_EQ(ran["attention_decode_v2_sm80"], 2);
    EXPECT_EQ(ran["attention_decode_mma_sm80"], 2);
    if (device_runs("attention", "attention_decode_cluster_sm90")) EXPECT_EQ(ran["attention_decode_cluster_sm90"], 2);
}
