// test_backend (CPU), the fused MoE router op (backend/moe.h moe_router): its CPU kernel is by
// definition backend::matmul then moe_route, so its outputs must equal that composition run by hand
// bit for bit (every act dtype, bf16/f16/f32 router weights, odd shapes, 1–17 tokens); on inputs
// whose dot products are exact in f32, logits, ids and weights also match a double reference
// written here from the op definition. Bad arguments are errors naming the operand.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/moe.h"
#include "ops_harness.h"

using namespace tetra;
using namespace tetra_test;

namespace {

linear_weight dense_weight(const tensor& w) {
    linear_weight l;
    l.kind = linear_kind::DENSE, l.n_out = w.dim(0), l.n_in = w.dim(1), l.dense = w;
    return l;
}

bool same_bytes(const tensor& a, const tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

struct router_case {
    int64_t n_embd, ne, k;
};

TEST(moe_router, cpu_equals_matmul_then_route) {
    rng r(707);
    int cases = 0;
    for (dtype at : {dtype::F32, dtype::BF16, dtype::F16})
        for (dtype wt : {dtype::BF16, dtype::F16, dtype::F32})
            for (router_case rc : {router_case{16, 4, 2}, router_case{40, 13, 1}, router_case{64, 128, 8}})
                for (int64_t nt : {1, 5, 17})
                    for (bool norm : {false, true}) {
                        const std::string vars = std::string("act=") + dn(at) + " w=" + dn(wt) + " n_embd=" +
                                                 std::to_string(rc.n_embd) + " n_expert=" + std::to_string(rc.ne) +
                                                 " k=" + std::to_string(rc.k) + " n_tokens=" + std::to_string(nt) +
                                                 " norm=" + std::to_string(norm);
                        tensor x = random_tensor(r, at, {nt, rc.n_embd});
                        linear_weight w = dense_weight(random_tensor(r, wt, {rc.ne, rc.n_embd}, 0.5));
                        guarded lg = make_guarded(at, {nt, rc.ne}), ids = make_guarded(dtype::I32, {nt, rc.k}),
                                wts = make_guarded(dtype::F32, {nt, rc.k});
                        ASSERT_TRUE(has_moe_router(cpu_be(), x, w, lg.view, ids.view, wts.view)) << vars;
                        moe_router(cpu_be(), x, w, norm, lg.view, ids.view, wts.view);
                        EXPECT_TRUE(lg.intact() && ids.intact() && wts.intact()) << vars;
                        tensor l2 = tensor::alloc(at, {nt, rc.ne}), i2 = tensor::alloc(dtype::I32, {nt, rc.k}),
                               w2 = tensor::alloc(dtype::F32, {nt, rc.k});
                        cpu_be().matmul(x, w, l2);
                        moe_route(cpu_be(), l2, norm, i2, w2);
                        EXPECT_TRUE(same_bytes(lg.view, l2)) << "logits differ from matmul: " << vars;
                        EXPECT_TRUE(same_bytes(ids.view, i2)) << "topk_ids differ from moe_route: " << vars;
                        EXPECT_TRUE(same_bytes(wts.view, w2)) << "topk_weights differ from moe_route: " << vars;
                        ++cases;
                    }
    EXPECT_EQ(cases, 3 * 3 * 3 * 3 * 2);
}

// x, w ∈ {-2..2}/4: every product is a multiple of 1/16 and every partial sum is exact in f32, so
// the logits are the exact dot products rounded once to the act dtype, whatever the summation order.
TEST(moe_router, exact_dot_products_match_double_reference) {
    rng r(708);
    const int64_t nt = 6, n_embd = 96, ne = 24, k = 4;
    for (dtype at : {dtype::F32, dtype::BF16, dtype::F16})
        for (bool norm : {false, true}) {
            std::vector<double> xv, wv;
            for (int64_t i = 0; i < nt * n_embd; ++i) xv.push_back(double(r.randint(-2, 2)) / 4);
            for (int64_t i = 0; i < ne * n_embd; ++i) wv.push_back(double(r.randint(-2, 2)) / 4);
            tensor x = make_tensor(at, {nt, n_embd}, xv);
            linear_weight w = dense_weight(make_tensor(dtype::BF16, {ne, n_embd}, wv));
            tensor lg = tensor::alloc(at, {nt, ne}), ids = tensor::alloc(dtype::I32, {nt, k}),
                   wts = tensor::alloc(dtype::F32, {nt, k});
            moe_router(cpu_be(), x, w, norm, lg, ids, wts);
            const std::string vars = std::string("act=") + dn(at) + " norm=" + std::to_string(norm);
            int distinct = 0;
            for (int64_t t = 0; t < nt; ++t) {
                std::vector<double> l(static_cast<size_t>(ne));
                for (int64_t e = 0; e < ne; ++e) {
                    double s = 0;
                    for (int64_t i = 0; i < n_embd; ++i) s += xv[size_t(t * n_embd + i)] * wv[size_t(e * n_embd + i)];
                    l[size_t(e)] = read_elem(make_tensor(at, {1}, {s}), 0);  // rounded to the act dtype once
                    EXPECT_EQ(read_elem(lg, t * ne + e), l[size_t(e)]) << vars << " token " << t << " expert " << e;
                }
                distinct += l[0] != l[1];
                // softmax in double; the k largest, ties to the lower index; optional renormalization
                const double mx = *std::max_element(l.begin(), l.end());
                double sum = 0;
                for (double v : l) sum += std::exp(v - mx);
                std::vector<int64_t> order(static_cast<size_t>(ne));
                std::iota(order.begin(), order.end(), int64_t(0));
                std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return l[size_t(a)] > l[size_t(b)]; });
                double sel = 0;
                for (int64_t s = 0; s < k; ++s) sel += std::exp(l[size_t(order[size_t(s)])] - mx) / sum;
                for (int64_t s = 0; s < k; ++s) {
                    const double p = std::exp(l[size_t(order[size_t(s)])] - mx) / sum, want = norm ? p / sel : p;
                    EXPECT_EQ(ids.ptr<int32_t>()[t * k + s], int32_t(order[size_t(s)])) << vars << " token " << t;
                    EXPECT_NEAR(wts.ptr<float>()[t * k + s], want, 2e-6 * want) << vars << " token " << t << " slot " << s;
                }
            }
            EXPECT_GT(distinct, 0) << "degenerate logits: " << vars;
        }
}

void expect_error(const std::function<void()>& f, const std::string& msg) {
    try {
        f();
        ADD_FAILURE() << "accepted; expected an error containing: " << msg;
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find(msg), std::string::npos) << e.what();
    }
}

TEST(moe_router, rejects_bad_arguments_naming_the_operand) {
    tensor x = tensor::alloc(dtype::F32, {2, 16});
    linear_weight w = dense_weight(tensor::alloc(dtype::BF16, {8, 16}));
    tensor lg = tensor::alloc(dtype::F32, {2, 8}), ids = tensor::alloc(dtype::I32, {2, 3}),
           wts = tensor::alloc(dtype::F32, {2, 3});
    backend& be = cpu_be();
    expect_error([&] { moe_router(be, tensor::alloc(dtype::F32, {2, 12}), w, false, lg, ids, wts); },
                 "moe_router: x [2, 12] has n_embd = 12; the router expects n_in = 16");
    expect_error([&] { moe_router(be, x, w, false, tensor::alloc(dtype::BF16, {2, 8}), ids, wts); },
                 "'logits' has dtype bf16; expected f32");
    expect_error([&] { moe_router(be, x, w, false, tensor::alloc(dtype::F32, {2, 9}), ids, wts); }, "'logits' has shape [2, 9]");
    expect_error([&] { moe_router(be, x, w, false, lg, tensor::alloc(dtype::I32, {3, 3}), wts); }, "'topk_ids' has shape [3, 3]");
    expect_error([&] { moe_router(be, x, w, false, lg, tensor::alloc(dtype::I32, {2, 9}), tensor::alloc(dtype::F32, {2, 9})); },
                 "k = 9 experts per token; expected 1..n_expert = 8");
    expect_error([&] { moe_router(be, x, w, false, lg, ids, tensor::alloc(dtype::BF16, {2, 3})); },
                 "'topk_weights' has dtype bf16; expected f32");
    linear_weight q;
    q.kind = linear_kind::NVFP4, q.n_out = 8, q.n_in = 16;
    q.codes = tensor::alloc(dtype::U8, {8, 8}), q.scales = tensor::alloc(dtype::E4M3, {8, 1});
    expect_error([&] { moe_router(be, x, q, false, lg, ids, wts); }, "'router' is an NVFP4 weight; expected a dense one");
    EXPECT_FALSE(has_moe_router(be, x, q, lg, ids, wts));
    EXPECT_TRUE(has_moe_router(be, x, w, lg, ids, wts));
}

}  // namespace
