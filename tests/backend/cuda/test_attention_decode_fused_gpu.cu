// attention_decode_v2_sm80's fused split merge (the last CTA of each group combines the splits; off
// by default, attention_decode_v2_set_fused_merge) against the two-kernel path (a merge kernel):
// equal bit for bit on decode batches — GQA groups 1/4/8/24, head_dim 64/128, contexts 1, 17, 160,
// 1000 alone and 8 mixed in one batch, with and without a sliding window, kv capacity exact and a
// graph bucket's (most splits past the row's position: they exit early and must still count), a NaN
// query row — and close to the CPU oracle. Then captured in a CUDA graph and replayed twice: the
// split counters are re-armed by every launch.
#include <cstring>

#include "backend/cuda/attention_device.cuh"
#include "backend/cuda/attn_case.h"

using namespace tetra;
using namespace tetra_test;

namespace {

// Scoped: the fused merge while alive (the two-kernel path is the default).
struct fused_merge {
    fused_merge() { cuda::attention_decode_v2_set_fused_merge(true); }
    ~fused_merge() { cuda::attention_decode_v2_set_fused_merge(false); }
};

// One decode case on the GPU: inputs, metadata (kv capacity scaled) and the CPU oracle's output.
struct decode_case {
    attn_case c;
    attn_inputs in;
    tensor dq, dk, dv, ref;
    attn_metadata dm;
    float scale = 0.0f;
    int64_t n_tokens = 0, width = 0;

    decode_case(const attn_case& cc, rng& r, int capacity, int nan_token) : c(cc) {
        in = build_attn_inputs(c, r);
        n_tokens = in.q.dim(0), width = c.n_head * c.head_dim;
        if (nan_token >= 0) write_elem(in.q, int64_t(nan_token) * width + 1, NAN);  // head 0 of that token
        scale = float(1.0 / std::sqrt(double(c.head_dim)));
        ref = tensor::alloc(c.act, {n_tokens, width});
        cpu_be().attention(in.q, in.k_cache, in.v_cache, in.meta, scale, ref, c.window);
        dq = to_gpu(in.q), dk = to_gpu(in.k_cache), dv = to_gpu(in.v_cache);
        dm = to_gpu_meta(in);
        dm.max_seqlen_kv *= capacity;
    }
    // attention_decode_v2_sm80 (forced) into a fresh guarded output; the downloaded bytes.
    tensor run(bool* intact) const {
        force_kernel fk("attention", "attention_decode_v2_sm80");
        gpu_guarded out = make_gpu_guarded(c.act, {n_tokens, width});
        gpu_be().attention(dq, dk, dv, dm, scale, out.view, c.window);
        return out.result(intact);
    }
};

bool same_bytes(const tensor& a, const tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

}  // namespace

TEST(attention_decode_fused_gpu, equals_two_kernel_path_bit_for_bit) {
    rng r(21);
    struct heads { int64_t n_head, n_head_kv, head_dim; } hs[] = {
        {8, 8, 64}, {8, 8, 128}, {16, 4, 64}, {32, 8, 128}, {16, 2, 64}, {32, 4, 128}, {24, 1, 64}};
    std::vector<std::vector<std::pair<int, int>>> batches = {
        {{0, 1}}, {{16, 1}}, {{159, 1}}, {{999, 1}},
        {{159, 1}, {0, 1}, {999, 1}, {16, 1}, {63, 1}, {130, 1}, {1, 1}, {500, 1}}};
    int cases = 0, nan_cases = 0;
    for (dtype t : {dtype::BF16, dtype::F32, dtype::F16})
        for (auto h : hs)
            for (size_t bi = 0; bi < batches.size(); ++bi)
                for (int window : {0, 50})
                    for (int capacity : {1, 8}) {
                        if (t != dtype::BF16 && (window != 0 || h.n_head_kv == 2)) continue;  // fewer f32/f16 cases
                        attn_case c{t, h.n_head, h.n_head_kv, h.head_dim, 16, batches[bi], window};
                        // A NaN query (token 0, head 0) in the mixed batch with the window, kv capacity 8×.
                        const int nan_token = bi == 4 && window == 50 && capacity == 8 ? 0 : -1;
                        decode_case d(c, r, capacity, nan_token);
                        bool intact_fused = false, intact_two = false;
                        tensor fused, two = d.run(&intact_two);
                        {
                            fused_merge on;
                            fused = d.run(&intact_fused);
                        }
                        std::string what = c.vars() + " capacity×" + std::to_string(capacity);
                        EXPECT_TRUE(intact_fused && intact_two) << what;
                        EXPECT_TRUE(same_bytes(fused, two)) << what;
                        EXPECT_EQ(compare(to_double(fused), to_double(d.ref), attn_tol(t)), "") << what;
                        if (nan_token >= 0) {
                            ++nan_cases;
                            std::vector<double> f = to_double(fused);
                            for (int64_t e = 0; e < d.width; ++e)
                                EXPECT_EQ(std::isnan(f[size_t(e)]), e < c.head_dim) << what << " element " << e;
                        }
                        ++cases;
                    }
    EXPECT_EQ(cases, 7 * 5 * 4 + 2 * 6 * 5 * 2);
    EXPECT_EQ(nan_cases, 7);  // the NaN case has the window: bf16 only
}

// The fused path in a CUDA graph: the eager launch sizes the scratch and the counters, the captured
// launch is replayed twice into an output reset to NaN before each replay; both replays must equal
// the two-kernel path's bytes (a counter left non-zero would skip or repeat a merge).
TEST(attention_decode_fused_gpu, graph_replays_rearm_the_counters) {
    rng r(22);
    for (auto h : std::vector<std::pair<int64_t, int64_t>>{{32, 8}, {32, 4}}) {
        attn_case c{dtype::BF16, h.first, h.second, 128, 16,
                    {{159, 1}, {0, 1}, {999, 1}, {16, 1}, {63, 1}, {130, 1}, {1, 1}, {500, 1}}, 0};
        decode_case d(c, r, 2, -1);
        bool intact = false;
        tensor two = d.run(&intact);
        EXPECT_TRUE(intact);
        fused_merge on;
        force_kernel fk("attention", "attention_decode_v2_sm80");
        gpu_guarded out = make_gpu_guarded(c.act, {d.n_tokens, d.width});
        gpu_be().attention(d.dq, d.dk, d.dv, d.dm, d.scale, out.view, c.window);  // eager: buffers grown
        EXPECT_TRUE(same_bytes(out.result(&intact), two)) << c.vars() << " eager";
        std::shared_ptr<void> g = gpu_be().capture_graph(
            [&] { gpu_be().attention(d.dq, d.dk, d.dv, d.dm, d.scale, out.view, c.window); });
        ASSERT_TRUE(g != nullptr);
        for (int replay = 0; replay < 2; ++replay) {
            guarded fresh = make_guarded(c.act, {d.n_tokens, d.width});
            gpu_be().copy_from_host(fresh.view.data, out.view);
            ASSERT_TRUE(gpu_be().replay_graph(g)) << "scratch grew after the capture";
            tensor got = out.result(&intact);
            EXPECT_TRUE(intact) << c.vars() << " replay " << replay;
            EXPECT_TRUE(same_bytes(got, two)) << c.vars() << " replay " << replay;
        }
    }
}
