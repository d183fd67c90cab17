// The fused MoE router on the GPU (moe_router_sm80) against its CPU oracle (matmul + moe_route,
// tests/backend/test_moe_router.cpp). Logits: within |Δ| ≤ ulp_act·|ref| + 2·K·2^-24·Σ|x·w| of the
// CPU dense matmul — both accumulate in f32 but in different orders (the CPU in k order, the GPU
// per lane then a butterfly), each partial sum off by ≤ 2^-24 relative, and the f32 results may then
// round to neighbouring act values. Ids and weights: bit-equal to the CPU moe_route run on the GPU
// kernel's own logits (the routing arithmetic is moe_route's). On inputs whose sums are exact in f32
// the logits are bit-equal too. Determinism: 20 repeats bit-identical; each token alone is
// bit-identical to the same token in a batch of 16. Declines (17 tokens, 300 experts, n_embd not a
// multiple of 8): has_moe_router is false there, so the model falls back to matmul + moe_route.
// Outputs are guarded (sentinels around, NaN inside): a stray or missing write fails.
#include <cmath>
#include <cstring>
#include <map>

#include "backend/cuda/gpu_harness.h"
#include "backend/moe.h"

using namespace tetra;
using namespace tetra_test;

namespace {

linear_weight host_dense(const tensor& w) {
    linear_weight l;
    l.kind = linear_kind::DENSE, l.n_out = w.dim(0), l.n_in = w.dim(1), l.dense = w;
    return l;
}

std::vector<uint8_t> bytes_of(const tensor& t) {
    const uint8_t* p = static_cast<const uint8_t*>(t.data);
    return std::vector<uint8_t>(p, p + t.nbytes());
}

double ulp_rel(dtype t) { return t == dtype::F32 ? 0x1p-23 : t == dtype::F16 ? 0x1p-10 : 0x1p-7; }

struct gpu_result {
    tensor logits, ids, w;  // host copies
    bool intact = true;
};

gpu_result run_gpu(const tensor& x_host, const linear_weight& router_dev, bool norm, int64_t k) {
    const int64_t nt = x_host.dim(0), ne = router_dev.n_out;
    tensor x = to_gpu(x_host);
    gpu_guarded lg = make_gpu_guarded(x_host.type, {nt, ne}), ids = make_gpu_guarded(dtype::I32, {nt, k}),
                w = make_gpu_guarded(dtype::F32, {nt, k});
    moe_router(gpu_be(), x, router_dev, norm, lg.view, ids.view, w.view);
    gpu_result r;
    bool a = false, b = false, c = false;
    r.logits = lg.result(&a), r.ids = ids.result(&b), r.w = w.result(&c);
    r.intact = a && b && c;
    return r;
}

struct shape {
    int64_t n_embd, ne, k;
};

// logits: the bound above; ids/weights: == CPU moe_route on the GPU logits; kernel forced.
TEST(moe_router_gpu, matches_cpu_oracle) {
    rng r(4242);
    int ran = 0;
    force_kernel fk("moe_router", "moe_router_sm80");
    for (dtype at : {dtype::BF16, dtype::F32, dtype::F16})
        for (shape s : {shape{2048, 128, 8}, shape{8, 4, 1}, shape{72, 13, 2}, shape{264, 256, 8}, shape{96, 100, 32}})
            for (int64_t nt : {1, 3, 8, 16})
                for (bool norm : {true, false}) {
                    const std::string vars = std::string("act=") + dn(at) + " n_embd=" + std::to_string(s.n_embd) +
                                             " n_expert=" + std::to_string(s.ne) + " k=" + std::to_string(s.k) +
                                             " n_tokens=" + std::to_string(nt) + " norm=" + std::to_string(norm);
                    tensor x = random_tensor(r, at, {nt, s.n_embd});
                    linear_weight wh = host_dense(random_tensor(r, dtype::BF16, {s.ne, s.n_embd}, 0.05));
                    linear_weight wd = gpu_be().prepare_linear(wh);
                    gpu_result g = run_gpu(x, wd, norm, s.k);
                    EXPECT_TRUE(g.intact) << vars;
                    // the oracle's logits
                    tensor lc = tensor::alloc(at, {nt, s.ne});
                    cpu_be().matmul(x, wh, lc);
                    double worst = 0;
                    for (int64_t t = 0; t < nt; ++t)
                        for (int64_t e = 0; e < s.ne; ++e) {
                            double mag = 0;
                            for (int64_t i = 0; i < s.n_embd; ++i)
                                mag += std::fabs(read_elem(x, t * s.n_embd + i) * read_elem(wh.dense, e * s.n_embd + i));
                            const double ref = read_elem(lc, t * s.ne + e), got = read_elem(g.logits, t * s.ne + e);
                            const double tol = ulp_rel(at) * std::fabs(ref) + 2.0 * double(s.n_embd) * 0x1p-24 * mag;
                            worst = std::max(worst, std::fabs(got - ref) / std::max(tol, 1e-30));
                        }
                    EXPECT_LE(worst, 1.0) << "logits off by " << worst << "× the bound: " << vars;
                    // routing: exactly moe_route on the GPU's logits
                    tensor ic = tensor::alloc(dtype::I32, {nt, s.k}), wc = tensor::alloc(dtype::F32, {nt, s.k});
                    moe_route(cpu_be(), g.logits, norm, ic, wc);
                    EXPECT_EQ(bytes_of(g.ids), bytes_of(ic)) << "topk_ids: " << vars;
                    EXPECT_EQ(bytes_of(g.w), bytes_of(wc)) << "topk_weights: " << vars;
                    ++ran;
                }
    EXPECT_EQ(ran, 3 * 5 * 4 * 2);
}

// x, w ∈ {-2..2}/4 over K = 2048: every partial sum is exact in f32, so the GPU logits, ids and
// weights equal the CPU oracle's bit for bit (no order effect left to excuse).
TEST(moe_router_gpu, exact_sums_bit_equal_to_oracle) {
    rng r(4343);
    force_kernel fk("moe_router", "moe_router_sm80");
    const int64_t n_embd = 2048, ne = 128, k = 8;
    for (dtype at : {dtype::BF16, dtype::F32})
        for (int64_t nt : {1, 7, 16}) {
            std::vector<double> xv, wv;
            for (int64_t i = 0; i < nt * n_embd; ++i) xv.push_back(double(r.randint(-2, 2)) / 4);
            for (int64_t i = 0; i < ne * n_embd; ++i) wv.push_back(double(r.randint(-2, 2)) / 4);
            tensor x = make_tensor(at, {nt, n_embd}, xv);
            linear_weight wh = host_dense(make_tensor(dtype::BF16, {ne, n_embd}, wv));
            gpu_result g = run_gpu(x, gpu_be().prepare_linear(wh), true, k);
            tensor lc = tensor::alloc(at, {nt, ne}), ic = tensor::alloc(dtype::I32, {nt, k}),
                   wc = tensor::alloc(dtype::F32, {nt, k});
            moe_router(cpu_be(), x, wh, true, lc, ic, wc);
            const std::string vars = std::string("act=") + dn(at) + " n_tokens=" + std::to_string(nt);
            EXPECT_TRUE(g.intact) << vars;
            EXPECT_EQ(bytes_of(g.logits), bytes_of(lc)) << "logits: " << vars;
            EXPECT_EQ(bytes_of(g.ids), bytes_of(ic)) << "topk_ids: " << vars;
            EXPECT_EQ(bytes_of(g.w), bytes_of(wc)) << "topk_weights: " << vars;
        }
}

// 20 repeats of a 16-token batch are bit-identical, and each token alone gives its batch row's bits.
TEST(moe_router_gpu, deterministic_repeated_and_alone_vs_batch) {
    rng r(4444);
    force_kernel fk("moe_router", "moe_router_sm80");
    const int64_t nt = 16, n_embd = 2048, ne = 128, k = 8;
    tensor x = random_tensor(r, dtype::BF16, {nt, n_embd});
    linear_weight wd = gpu_be().prepare_linear(host_dense(random_tensor(r, dtype::BF16, {ne, n_embd}, 0.05)));
    gpu_result first = run_gpu(x, wd, true, k);
    ASSERT_TRUE(first.intact);
    for (int i = 0; i < 20; ++i) {
        gpu_result g = run_gpu(x, wd, true, k);
        EXPECT_EQ(bytes_of(g.logits), bytes_of(first.logits)) << "repeat " << i;
        EXPECT_EQ(bytes_of(g.ids), bytes_of(first.ids)) << "repeat " << i;
        EXPECT_EQ(bytes_of(g.w), bytes_of(first.w)) << "repeat " << i;
    }
    const size_t es = dtype_size(dtype::BF16);
    for (int64_t t = 0; t < nt; ++t) {
        tensor xt = tensor::alloc(dtype::BF16, {1, n_embd});
        std::memcpy(xt.data, x.ptr<uint8_t>() + size_t(t * n_embd) * es, size_t(n_embd) * es);
        gpu_result g = run_gpu(xt, wd, true, k);
        EXPECT_EQ(0, std::memcmp(g.logits.data, first.logits.ptr<uint8_t>() + size_t(t * ne) * es, size_t(ne) * es))
            << "token " << t;
        EXPECT_EQ(0, std::memcmp(g.ids.data, first.ids.ptr<int32_t>() + t * k, size_t(k) * 4)) << "token " << t;
        EXPECT_EQ(0, std::memcmp(g.w.data, first.w.ptr<float>() + t * k, size_t(k) * 4)) << "token " << t;
    }
}

// Beyond decode sizes (or more experts than it routes) the kernel declines: has_moe_router is false
// on the CUDA backend, and forcing the kernel is an error saying why.
TEST(moe_router_gpu, declines_large_batches_and_many_experts) {
    rng r(4545);
    struct decline {
        int64_t nt, ne, n_embd;
        const char* why;
    } cases[] = {{17, 128, 256, "n_tokens = 17 > 16"}, {4, 300, 64, "n_expert = 300 > 256"}, {2, 8, 20, "not a multiple of 8"}};
    for (const decline& d : cases) {
        tensor x = to_gpu(random_tensor(r, dtype::BF16, {d.nt, d.n_embd}));
        linear_weight wd = gpu_be().prepare_linear(host_dense(random_tensor(r, dtype::BF16, {d.ne, d.n_embd})));
        tensor lg = gpu_be().alloc(dtype::BF16, {d.nt, d.ne}), ids = gpu_be().alloc(dtype::I32, {d.nt, 2}),
               w = gpu_be().alloc(dtype::F32, {d.nt, 2});
        EXPECT_FALSE(has_moe_router(gpu_be(), x, wd, lg, ids, w)) << d.why;
        force_kernel fk("moe_router", "moe_router_sm80");
        try {
            moe_router(gpu_be(), x, wd, true, lg, ids, w);
            ADD_FAILURE() << "accepted: " << d.why;
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find(d.why), std::string::npos) << e.what();
        }
    }
    tensor x = to_gpu(random_tensor(r, dtype::BF16, {16, 64}));
    linear_weight wd = gpu_be().prepare_linear(host_dense(random_tensor(r, dtype::BF16, {128, 64})));
    tensor lg = gpu_be().alloc(dtype::BF16, {16, 128}), ids = gpu_be().alloc(dtype::I32, {16, 8}),
           w = gpu_be().alloc(dtype::F32, {16, 8});
    EXPECT_TRUE(has_moe_router(gpu_be(), x, wd, lg, ids, w)) << "decode shape must take the fused kernel";
}

}  // namespace
