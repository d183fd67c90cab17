// test_backend_ops (CPU), MoE ops (backend/moe.h): moe_route, moe_permute, moe_matmul (dense, NVFP4
// W4A16, W4A4) and moe_combine, for every CPU kernel entry (forced through TETRA_KERNEL), against
// plain-loop references written here in double from the op definitions; then the determinism the
// ops promise: a token's MoE block output is bit-identical alone and inside a batch of 64, under 1
// or several threads, and over 200 repeated runs. Error cases name the culprit.
#include <cstdlib>
#include <cstring>
#include <set>

#include "backend/moe.h"
#include "core/thread_pool.h"
#include "ops_harness.h"

using namespace tetra;
using namespace tetra_test;

namespace {

// ---- references (double) ------------------------------------------------------------------------

struct route_ref_t {
    std::vector<int32_t> ids;
    std::vector<double> w;
};

// softmax over each row, then the k largest by (p descending, expert index ascending), optional
// renormalization. logits: [n_tokens, n_expert]
route_ref_t route_ref(const std::vector<double>& logits, int64_t n_tokens, int64_t ne, int64_t k, bool norm) {
    route_ref_t r;
    for (int64_t t = 0; t < n_tokens; ++t) {
        const double* l = logits.data() + t * ne;
        double mx = *std::max_element(l, l + ne), sum = 0;
        std::vector<double> p(static_cast<size_t>(ne));
        for (int64_t e = 0; e < ne; ++e) sum += p[size_t(e)] = std::exp(l[e] - mx);
        std::vector<int64_t> order(static_cast<size_t>(ne));
        for (int64_t e = 0; e < ne; ++e) order[size_t(e)] = e;
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
        double sel = 0;
        for (int64_t s = 0; s < k; ++s) sel += p[size_t(order[size_t(s)])] / sum;
        for (int64_t s = 0; s < k; ++s) {
            r.ids.push_back(int32_t(order[size_t(s)]));
            double v = p[size_t(order[size_t(s)])] / sum;
            r.w.push_back(norm ? v / sel : v);
        }
    }
    return r;
}

// A tensor's bytes (bit-for-bit comparisons).
std::vector<uint8_t> bytes_of(const tensor& t) {
    const uint8_t* p = static_cast<const uint8_t*>(t.data);
    return std::vector<uint8_t>(p, p + t.nbytes());
}

std::vector<int32_t> to_i32(const tensor& t) {
    std::vector<int32_t> v(size_t(t.numel()));
    std::memcpy(v.data(), t.data, v.size() * 4);
    return v;
}

// n_tokens rows of k distinct experts each, drawn from [0, ne), some experts left unused when ne > k.
std::vector<int32_t> random_assignment(rng& r, int64_t n_tokens, int64_t ne, int64_t k) {
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < n_tokens; ++t) {
        std::vector<int32_t> pool;
        for (int32_t e = 0; e < ne; ++e) pool.push_back(e);
        for (int64_t s = 0; s < k; ++s) {
            int64_t j = r.randint(s, ne - 1);
            std::swap(pool[size_t(s)], pool[size_t(j)]);
            ids.push_back(pool[size_t(s)]);
        }
    }
    return ids;
}

tensor i32_2d(const std::vector<int32_t>& v, int64_t rows, int64_t cols) {
    tensor t = i32_tensor(v);
    t.shape = {rows, cols};
    return t;
}

}  // namespace

// Router logits are multiples of 1/8 in [-2, 2]: many exact ties (the lower expert index must win)
// and, between distinct values, probability ratios ≥ e^(1/8), so f32 and double agree on the order.
TEST(moe_ops, route) {
    std::map<std::string, int> ran;
    rng r(101);
    for (dtype at : {dtype::F32, dtype::BF16, dtype::F16})
        for (int64_t ne : {1, 4, 13, 128})
            for (int64_t k : {1, 2, 8})
                for (bool norm : {false, true})
                    for (int64_t nt : {1, 7}) {
                        if (k > ne) continue;
                        std::string vars = std::string("act=") + dn(at) + " n_expert=" + std::to_string(ne) +
                                           " k=" + std::to_string(k) + " norm=" + std::to_string(norm) +
                                           " n_tokens=" + std::to_string(nt);
                        std::vector<double> lv;
                        for (int64_t i = 0; i < nt * ne; ++i) lv.push_back(double(r.randint(-16, 16)) / 8);
                        if (ne >= 4) lv[0] = lv[1] = lv[2] = lv[3] = 2.5;  // a 4-way tie at the top of token 0
                        tensor logits = make_tensor(at, {nt, ne}, lv);
                        route_ref_t ref = route_ref(lv, nt, ne, k, norm);
                        for_each_kernel("moe_route", at, ran, [&](const kernel_entry& kn) {
                            guarded ids = make_guarded(dtype::I32, {nt, k}), w = make_guarded(dtype::F32, {nt, k});
                            moe_route(cpu_be(), logits, norm, ids.view, w.view);
                            EXPECT_TRUE(ids.intact() && w.intact()) << kn.name << " " << vars;
                            EXPECT_EQ(to_i32(ids.view), ref.ids) << kn.name << " " << vars;
                            EXPECT_EQ(compare(to_double(w.view), ref.w, 1e-12), "") << kn.name << " " << vars;
                        });
                    }
    expect_all_ran("moe_route", ran, 50);
}

TEST(moe_ops, route_rejects_bad_shapes) {
    tensor logits = make_tensor(dtype::F32, {2, 4}, std::vector<double>(8, 0.0));
    try {
        moe_route(cpu_be(), logits, false, tensor::alloc(dtype::I32, {2, 5}), tensor::alloc(dtype::F32, {2, 5}));
        ADD_FAILURE() << "k > n_expert accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("k = 5 experts per token; expected 1..n_expert = 4"), std::string::npos)
            << e.what();
    }
    try {
        moe_route(cpu_be(), logits, false, tensor::alloc(dtype::I32, {2, 2}), tensor::alloc(dtype::BF16, {2, 2}));
        ADD_FAILURE() << "bf16 topk_weights accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("'topk_weights' has dtype bf16; expected f32"), std::string::npos) << e.what();
    }
}

namespace {

// Reference: for each expert in order, every (token, slot) routed to it in ascending order.
void permute_ref(const std::vector<int32_t>& ids, int64_t nt, int64_t ne, int64_t k, std::vector<int32_t>& counts,
                 std::vector<int32_t>& offsets, std::vector<int32_t>& sorted, std::vector<int32_t>& dest) {
    counts.clear(), sorted.clear(), offsets = {0}, dest.assign(size_t(nt * k), -1);
    for (int32_t e = 0; e < ne; ++e) {
        int32_t c = 0;
        for (int64_t t = 0; t < nt; ++t)
            for (int64_t s = 0; s < k; ++s)
                if (ids[size_t(t * k + s)] == e) {
                    dest[size_t(t * k + s)] = int32_t(sorted.size());
                    sorted.push_back(int32_t(t));
                    ++c;
                }
        counts.push_back(c);
        offsets.push_back(offsets.back() + c);
    }
}

}  // namespace

TEST(moe_ops, permute) {
    std::map<std::string, int> ran;
    rng r(102);
    for (int64_t ne : {1, 3, 8, 64})
        for (int64_t k : {1, 2, 3})
            for (int64_t nt : {1, 2, 17, 64}) {
                if (k > ne) continue;
                std::string vars = "n_expert=" + std::to_string(ne) + " k=" + std::to_string(k) + " n_tokens=" +
                                   std::to_string(nt);
                std::vector<int32_t> ids = random_assignment(r, nt, ne, k);
                std::vector<int32_t> counts, offsets, sorted, dest;
                permute_ref(ids, nt, ne, k, counts, offsets, sorted, dest);
                for_each_kernel("moe_permute", dtype::I32, ran, [&](const kernel_entry& kn) {
                    guarded gc = make_guarded(dtype::I32, {ne}), go = make_guarded(dtype::I32, {ne + 1});
                    guarded gs = make_guarded(dtype::I32, {nt * k}), gd = make_guarded(dtype::I32, {nt, k});
                    moe_permute(cpu_be(), i32_2d(ids, nt, k), ne, gc.view, go.view, gs.view, gd.view);
                    EXPECT_TRUE(gc.intact() && go.intact() && gs.intact() && gd.intact()) << kn.name << " " << vars;
                    EXPECT_EQ(to_i32(gc.view), counts) << kn.name << " " << vars;
                    EXPECT_EQ(to_i32(go.view), offsets) << kn.name << " " << vars;
                    EXPECT_EQ(to_i32(gs.view), sorted) << kn.name << " " << vars;
                    EXPECT_EQ(to_i32(gd.view), dest) << kn.name << " " << vars;
                });
            }
    expect_all_ran("moe_permute", ran, 40);
    try {
        moe_permute(cpu_be(), i32_2d({0, 1, 2, 9}, 2, 2), 4, tensor::alloc(dtype::I32, {4}),
                    tensor::alloc(dtype::I32, {5}), tensor::alloc(dtype::I32, {4}), tensor::alloc(dtype::I32, {2, 2}));
        ADD_FAILURE() << "expert id 9 of 4 accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("topk_ids[1, 1] = 9 is out of range [0, 4)"), std::string::npos) << e.what();
    }
}

namespace {

double e2m1_val(int code) {
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return (code & 8 ? -1 : 1) * mag[code & 7];
}

double e4m3_val(int b) {
    int e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
    return b & 0x80 ? -v : v;
}

struct experts_t {
    std::vector<linear_weight> w;
    std::vector<std::vector<double>> ref;  // each expert's W [n, k] as exact doubles
    std::vector<tensor> keep;              // owners of NVFP4 bytes
};

// n_expert linears [n, k]: dense of dtype wt, or NVFP4 (random codes and finite scales, scale_global
// 1/64; W4A4 gets an input_global_quant per expert).
experts_t random_experts(rng& r, int64_t ne, int64_t n, int64_t k, bool nvfp4, dtype wt, bool w4a4) {
    experts_t x;
    for (int64_t e = 0; e < ne; ++e) {
        linear_weight w;
        w.n_out = n, w.n_in = k;
        std::vector<double> ref(size_t(n * k));
        if (!nvfp4) {
            w.dense = random_tensor(r, wt, {n, k});
            ref = to_double(w.dense);
        } else {
            w.kind = linear_kind::NVFP4, w.scale_global = 1.0f / 64;
            w.codes = tensor::alloc(dtype::U8, {n, k / 2}), w.scales = tensor::alloc(dtype::E4M3, {n, k / 16});
            uint8_t *c = w.codes.ptr<uint8_t>(), *s = static_cast<uint8_t*>(w.scales.data);
            for (int64_t i = 0; i < n * k / 2; ++i) c[i] = uint8_t(r.randint(0, 255));
            for (int64_t i = 0; i < n * k / 16; ++i) s[i] = uint8_t(r.randint(0x20, 0x50));
            for (int64_t i = 0; i < n; ++i)
                for (int64_t j = 0; j < k; ++j)
                    ref[size_t(i * k + j)] = e2m1_val((c[(i * k + j) / 2] >> (4 * (j % 2))) & 15) *
                                             e4m3_val(s[(i * k + j) / 16]) / 64.0;
            if (w4a4) w.has_input_scale = true, w.input_global_quant = float(100 + 37 * e), w.input_scale = 1.0f / w.input_global_quant;
        }
        x.w.push_back(w);
        x.ref.push_back(ref);
    }
    return x;
}

// Rows grouped by a random routing of n_tokens·k assignments: offsets i32 [ne + 1], and each row's expert.
void random_groups(rng& r, int64_t n_rows, int64_t ne, std::vector<int32_t>* offsets, std::vector<int32_t>* row_expert) {
    std::vector<int32_t> counts(size_t(ne), 0);
    for (int64_t i = 0; i < n_rows; ++i) ++counts[size_t(r.randint(0, ne - 1))];
    if (ne > 2) counts[1] += counts[2], counts[2] = 0;  // an empty expert in the middle
    offsets->assign(1, 0);
    row_expert->clear();
    for (int64_t e = 0; e < ne; ++e) {
        offsets->push_back(offsets->back() + counts[size_t(e)]);
        for (int32_t c = 0; c < counts[size_t(e)]; ++c) row_expert->push_back(int32_t(e));
    }
}

}  // namespace

// Dense and W4A16 against a double reference of each row's own expert (NMSE: f32 accumulation
// over K ≤ 80 terms ~1e-14; a bf16 output rounds to 2^-9 relative → 2e-5). Every mode, W4A4
// included, also bit-identical to the dense matmul kernel of the same family run on that row alone
// (test_backend_matmul checks those kernels against the spec, W4A4's activation quantizer too).

// moe_route_permute: the router's reference (double) and the permutation of its ids, all six
// outputs, every kernel entry.
TEST(moe_ops, route_permute) {
    std::map<std::string, int> ran;
    rng r(103);
    for (dtype at : {dtype::F32, dtype::BF16})
        for (int64_t ne : {1, 13, 128})
            for (int64_t k : {1, 2, 8})
                for (int64_t nt : {1, 7, 40}) {
                    if (k > ne) continue;
                    const bool norm = (nt + k) % 2 == 0;
                    std::string vars = std::string("act=") + dn(at) + " n_expert=" + std::to_string(ne) + " k=" +
                                       std::to_string(k) + " norm=" + std::to_string(norm) + " n_tokens=" + std::to_string(nt);
                    std::vector<double> lv;
                    for (int64_t i = 0; i < nt * ne; ++i) lv.push_back(double(r.randint(-16, 16)) / 8);
                    tensor logits = make_tensor(at, {nt, ne}, lv);
                    route_ref_t ref = route_ref(lv, nt, ne, k, norm);
                    std::vector<int32_t> counts, offsets, sorted, dest;
                    permute_ref(ref.ids, nt, ne, k, counts, offsets, sorted, dest);
                    for_each_kernel("moe_route_permute", at, ran, [&](const kernel_entry& kn) {
                        guarded ids = make_guarded(dtype::I32, {nt, k}), w = make_guarded(dtype::F32, {nt, k});
                        guarded gc = make_guarded(dtype::I32, {ne}), go = make_guarded(dtype::I32, {ne + 1});
                        guarded gs = make_guarded(dtype::I32, {nt * k}), gd = make_guarded(dtype::I32, {nt, k});
                        moe_route_permute(cpu_be(), logits, norm, ids.view, w.view, gc.view, go.view, gs.view, gd.view);
                        EXPECT_TRUE(ids.intact() && w.intact() && gc.intact() && go.intact() && gs.intact() && gd.intact())
                            << kn.name << " " << vars;
                        EXPECT_EQ(to_i32(ids.view), ref.ids) << kn.name << " " << vars;
                        EXPECT_EQ(compare(to_double(w.view), ref.w, 1e-12), "") << kn.name << " " << vars;
                        EXPECT_EQ(to_i32(gc.view), counts) << kn.name << " " << vars;
                        EXPECT_EQ(to_i32(go.view), offsets) << kn.name << " " << vars;
                        EXPECT_EQ(to_i32(gs.view), sorted) << kn.name << " " << vars;
                        EXPECT_EQ(to_i32(gd.view), dest) << kn.name << " " << vars;
                    });
                }
    expect_all_ran("moe_route_permute", ran, 30);
}

// moe_route_permute with a front (moe_route_front): add_rms_norm, the router matmul and the route +
// permutation in one op equal the three ops run one after the other, every output bit for bit (the
// new residual, h, the logits, the six route outputs); overlapping tensors and a router of the wrong
// shape are errors that name them.
TEST(moe_ops, route_permute_with_front) {
    rng r(107);
    for (dtype at : {dtype::F32, dtype::BF16}) {
        const int64_t nt = 3, n = 48, ne = 16, k = 4;
        linear_weight router;
        router.n_out = ne, router.n_in = n, router.dense = random_tensor(r, at, {ne, n}, 0.5);
        tensor x = random_tensor(r, at, {nt, n}), res0 = random_tensor(r, at, {nt, n}, 4.0);
        tensor nw = random_tensor(r, dtype::BF16, {n});
        std::vector<std::vector<uint8_t>> got[2];
        for (int fused = 0; fused < 2; ++fused) {
            tensor res = tensor::alloc(at, {nt, n}), h = tensor::alloc(at, {nt, n});
            tensor logits = tensor::alloc(at, {nt, ne});
            std::memcpy(res.data, res0.data, res0.nbytes());
            tensor ids = tensor::alloc(dtype::I32, {nt, k}), w = tensor::alloc(dtype::F32, {nt, k});
            tensor cc = tensor::alloc(dtype::I32, {ne}), co = tensor::alloc(dtype::I32, {ne + 1});
            tensor cs = tensor::alloc(dtype::I32, {nt * k}), cd = tensor::alloc(dtype::I32, {nt, k});
            if (fused) {
                moe_route_front f{res, x, nw, h, 1e-5f, &router};
                moe_route_permute(cpu_be(), logits, true, ids, w, cc, co, cs, cd, &f);
                moe_route_front bad = f;
                bad.h = res;
                EXPECT_NE(error_of([&] { moe_route_permute(cpu_be(), logits, true, ids, w, cc, co, cs, cd, &bad); })
                              .find("must not overlap"),
                          std::string::npos);
                linear_weight wrong = router;
                wrong.n_in = n / 2, wrong.dense = random_tensor(r, at, {ne, n / 2});
                bad = f, bad.router = &wrong;
                EXPECT_NE(error_of([&] { moe_route_permute(cpu_be(), logits, true, ids, w, cc, co, cs, cd, &bad); })
                              .find("the router weight is [16, 24]; expected [n_expert, n_embd] = [16, 48]"),
                          std::string::npos);
            } else {
                cpu_be().add_rms_norm(res, x, nw, 1e-5f, h);
                cpu_be().matmul(h, router, logits);
                moe_route_permute(cpu_be(), logits, true, ids, w, cc, co, cs, cd);
            }
            for (const tensor* t : {&res, &h, &logits, &ids, &w, &cc, &co, &cs, &cd})
                got[fused].push_back(bytes_of(*t));
        }
        ASSERT_EQ(got[0].size(), got[1].size());
        for (size_t i = 0; i < got[0].size(); ++i) EXPECT_EQ(got[1][i], got[0][i]) << dn(at) << ": output " << i;
        EXPECT_NE(got[1][0], bytes_of(res0)) << dn(at) << ": the residual was not updated";
    }
}

TEST(moe_ops, matmul_grouped) {
    std::map<std::string, int> ran;
    rng r(103);
    const char* inner_op[] = {"matmul_dense", "matmul_nvfp4_w4a16", "matmul_nvfp4_w4a4"};
    const char* moe_op[] = {"moe_matmul_dense", "moe_matmul_nvfp4_w4a16", "moe_matmul_nvfp4_w4a4"};
    for (int mode = 0; mode < 3; ++mode)
        for (dtype xt : {dtype::F32, dtype::BF16})
            for (dtype wt : {dtype::BF16, dtype::F32})
                for (int64_t ne : {1, 5})
                    for (int64_t n_rows : {1, 9, 40}) {
                        if (mode > 0 && wt == dtype::F32) continue;
                        int64_t k = 48 + 32 * (mode == 0), n = 24;
                        std::string vars = std::string(moe_op[mode]) + " x=" + dn(xt) + " w=" + dn(wt) + " n_expert=" +
                                           std::to_string(ne) + " rows=" + std::to_string(n_rows);
                        experts_t ex = random_experts(r, ne, n, k, mode > 0, wt, mode == 2);
                        std::vector<int32_t> offs, row_e;
                        random_groups(r, n_rows, ne, &offs, &row_e);
                        tensor x = random_tensor(r, xt, {n_rows, k}), offsets = i32_tensor(offs);
                        std::vector<double> xv = to_double(x), ref(size_t(n_rows * n));
                        for (int64_t i = 0; i < n_rows; ++i)
                            for (int64_t j = 0; j < n; ++j) {
                                double acc = 0;
                                for (int64_t q = 0; q < k; ++q)
                                    acc += xv[size_t(i * k + q)] * ex.ref[size_t(row_e[size_t(i)])][size_t(j * k + q)];
                                ref[size_t(i * n + j)] = acc;
                            }
                        matmul_mode mm = mode == 0 ? matmul_mode::AUTO : mode == 1 ? matmul_mode::W4A16 : matmul_mode::W4A4;
                        for_each_kernel(moe_op[mode], xt, ran, [&](const kernel_entry& kn) {
                            guarded out = make_guarded(xt, {n_rows, n});
                            moe_matmul(cpu_be(), x, ex.w, offsets, out.view, mm);
                            EXPECT_TRUE(out.intact()) << kn.name << " " << vars;
                            std::vector<double> got = to_double(out.view);
                            if (mode < 2)
                                EXPECT_EQ(compare(got, ref, xt == dtype::F32 ? 1e-12 : 2e-5), "") << kn.name << " " << vars;
                            std::string inner = std::string(inner_op[mode]) + kn.name.substr(kn.name.rfind('_'));
                            force_kernel fk(inner_op[mode], inner);  // replaces the moe forcing until the end
                            for (int64_t i = 0; i < n_rows; ++i) {
                                tensor one = tensor::alloc(xt, {1, n});
                                cpu_be().matmul(tensor_rows(x, i, 1), ex.w[size_t(row_e[size_t(i)])], one, mm);
                                EXPECT_EQ(std::memcmp(one.data, tensor_rows(out.view, i, 1).data, one.nbytes()), 0)
                                    << kn.name << " row " << i << " differs from " << inner << " on the row alone: " << vars;
                            }
                        });
                    }
    for (const char* op : moe_op) expect_all_ran(op, ran, 6);
}

// moe_matmul_silu on the CPU: gu is the grouped matmul (against the double reference of each row's
// expert), out = silu(gate) · up of gu's stored halves (in double: the op's definition; NMSE as
// matmul_grouped); errors for an odd stacked weight and overlapping operands.
TEST(moe_ops, matmul_silu) {
    rng r(107);
    for (dtype xt : {dtype::F32, dtype::BF16})
        for (int64_t n_rows : {1, 9, 40}) {
            const int64_t ne = 5, k = 48, n_ff = 12;
            std::string vars = std::string("x=") + dn(xt) + " rows=" + std::to_string(n_rows);
            experts_t ex = random_experts(r, ne, 2 * n_ff, k, true, dtype::BF16, false);
            std::vector<int32_t> offs, row_e;
            random_groups(r, n_rows, ne, &offs, &row_e);
            tensor x = random_tensor(r, xt, {n_rows, k}), offsets = i32_tensor(offs);
            tensor gu = tensor::alloc(xt, {n_rows, 2 * n_ff}), out = tensor::alloc(xt, {n_rows, n_ff});
            moe_matmul_silu(cpu_be(), x, ex.w, offsets, gu, out, matmul_mode::W4A16);
            std::vector<double> xv = to_double(x), g = to_double(gu), o = to_double(out), ref(size_t(n_rows * 2 * n_ff)),
                                want(size_t(n_rows * n_ff));
            for (int64_t i = 0; i < n_rows; ++i) {
                for (int64_t j = 0; j < 2 * n_ff; ++j) {
                    double acc = 0;
                    for (int64_t q = 0; q < k; ++q)
                        acc += xv[size_t(i * k + q)] * ex.ref[size_t(row_e[size_t(i)])][size_t(j * k + q)];
                    ref[size_t(i * 2 * n_ff + j)] = acc;
                }
                for (int64_t j = 0; j < n_ff; ++j) {
                    double a = g[size_t(i * 2 * n_ff + j)], b = g[size_t(i * 2 * n_ff + n_ff + j)];
                    want[size_t(i * n_ff + j)] = a / (1.0 + std::exp(-a)) * b;
                }
            }
            EXPECT_EQ(compare(g, ref, xt == dtype::F32 ? 1e-12 : 2e-5), "") << vars;
            EXPECT_EQ(compare(o, want, xt == dtype::F32 ? 1e-12 : 2e-5), "") << vars;
        }
    experts_t odd = random_experts(r, 2, 5, 32, true, dtype::BF16, false), ex = random_experts(r, 2, 8, 32, true, dtype::BF16, false);
    tensor x = random_tensor(r, dtype::F32, {2, 32}), offsets = i32_tensor({0, 1, 2});
    tensor gu5 = tensor::alloc(dtype::F32, {2, 5}), gu = tensor::alloc(dtype::F32, {2, 8}), out = tensor::alloc(dtype::F32, {2, 4});
    EXPECT_NE(error_of([&] { moe_matmul_silu(cpu_be(), x, odd.w, offsets, gu5, out); }).find("expected an even number"),
              std::string::npos);
    tensor inside = tensor_reshape(tensor_rows(tensor_reshape(gu, {16}), 0, 8), {2, 4});
    EXPECT_NE(error_of([&] { moe_matmul_silu(cpu_be(), x, ex.w, offsets, gu, inside); }).find("must not overlap"),
              std::string::npos);
}

TEST(moe_ops, matmul_rejects_bad_experts) {
    rng r(104);
    experts_t ex = random_experts(r, 3, 16, 32, false, dtype::BF16, false);
    tensor x = random_tensor(r, dtype::F32, {4, 32}), out = tensor::alloc(dtype::F32, {4, 16});
    std::vector<linear_weight> mixed = ex.w;
    mixed[2].n_out = 8, mixed[2].dense = random_tensor(r, dtype::BF16, {8, 32});
    try {
        moe_matmul(cpu_be(), x, mixed, i32_tensor({0, 1, 2, 4}), out);
        ADD_FAILURE() << "expert of another shape accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("expert 2 is dense [8, 32]; expected dense [16, 32]"), std::string::npos)
            << e.what();
    }
    try {
        moe_matmul(cpu_be(), x, ex.w, i32_tensor({0, 1, 2, 3}), out);
        ADD_FAILURE() << "offsets ending before the last row accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("expert_offsets span [0, 3); expected [0, 4)"), std::string::npos)
            << e.what();
    }
    try {
        moe_matmul(cpu_be(), x, ex.w, i32_tensor({0, 1, 2, 4}), out, matmul_mode::AUTO, false, -1);
        ADD_FAILURE() << "a negative rows_per_expert_max accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("moe_matmul: rows_per_expert_max = -1; expected >= 0"), std::string::npos)
            << e.what();
    }
    tensor bound = tensor::alloc(dtype::F32, {4, 16}), free_ = tensor::alloc(dtype::F32, {4, 16});
    moe_matmul(cpu_be(), x, ex.w, i32_tensor({0, 1, 2, 4}), bound, matmul_mode::AUTO, false, 2);  // a kept promise
    moe_matmul(cpu_be(), x, ex.w, i32_tensor({0, 1, 2, 4}), free_);
    EXPECT_EQ(std::memcmp(bound.data, free_.data, bound.nbytes()), 0);
}

TEST(moe_ops, combine) {
    std::map<std::string, int> ran;
    rng r(105);
    for (dtype at : {dtype::F32, dtype::BF16})
        for (int64_t k : {1, 2, 8})
            for (int64_t nt : {1, 6})
                for (int shared = 0; shared < 3; ++shared) {  // none, ungated, gated
                    int64_t n = 40, n_rows = nt * k + 3;
                    std::string vars = std::string("act=") + dn(at) + " k=" + std::to_string(k) + " n_tokens=" +
                                       std::to_string(nt) + " shared=" + std::to_string(shared);
                    tensor y = random_tensor(r, at, {n_rows, n}), sh = random_tensor(r, at, {nt, n});
                    tensor gate = random_tensor(r, at, {nt, 1}, 3.0);
                    std::vector<int32_t> dest;
                    std::vector<double> wv;
                    for (int64_t i = 0; i < nt * k; ++i) dest.push_back(int32_t(r.randint(0, n_rows - 1)));
                    for (int64_t i = 0; i < nt * k; ++i) wv.push_back(r.uniform(0, 1));
                    tensor w = make_tensor(dtype::F32, {nt, k}, wv);
                    std::vector<double> yv = to_double(y), sv = to_double(sh), gv = to_double(gate), ref;
                    for (int64_t t = 0; t < nt; ++t)
                        for (int64_t j = 0; j < n; ++j) {
                            double acc = 0;
                            for (int64_t s = 0; s < k; ++s) acc += double(float(wv[size_t(t * k + s)])) * yv[size_t(dest[size_t(t * k + s)] * n + j)];
                            if (shared) acc += (shared == 2 ? 1 / (1 + std::exp(-gv[size_t(t)])) : 1.0) * sv[size_t(t * n + j)];
                            ref.push_back(acc);
                        }
                    for_each_kernel("moe_combine", at, ran, [&](const kernel_entry& kn) {
                        guarded out = make_guarded(at, {nt, n});
                        moe_combine(cpu_be(), y, i32_2d(dest, nt, k), w, out.view, shared ? sh : tensor(),
                                    shared == 2 ? gate : tensor());
                        EXPECT_TRUE(out.intact()) << kn.name << " " << vars;
                        EXPECT_EQ(compare(to_double(out.view), ref, at == dtype::F32 ? 1e-12 : 2e-5), "") << kn.name << " " << vars;
                    });
                }
    expect_all_ran("moe_combine", ran, 30);
    try {
        moe_combine(cpu_be(), tensor::alloc(dtype::F32, {3, 4}), i32_2d({0, 3}, 1, 2), tensor::alloc(dtype::F32, {1, 2}),
                    tensor::alloc(dtype::F32, {1, 4}));
        ADD_FAILURE() << "dest row 3 of 3 accepted";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("dest_rows[0, 1] = 3 is out of range [0, 3)"), std::string::npos) << e.what();
    }
}

// The next add_rms_norm folded into the combine (moe_combine_norm): on the CPU out, the residual
// and h equal moe_combine then add_rms_norm bit for bit; h overlapping out is refused.
TEST(moe_ops, combine_with_folded_norm) {
    rng r(106);
    for (dtype at : {dtype::F32, dtype::BF16}) {
        const int64_t k = 4, nt = 3, n = 40, n_rows = nt * k;
        std::vector<int32_t> dest;
        for (int64_t i = 0; i < nt * k; ++i) dest.push_back(int32_t(i));
        tensor y = random_tensor(r, at, {n_rows, n}), w = random_tensor(r, dtype::F32, {nt, k}, 0.5);
        tensor res0 = random_tensor(r, at, {nt, n}, 4.0), nw = random_tensor(r, dtype::BF16, {n});
        tensor out_a = tensor::alloc(at, {nt, n}), out_b = tensor::alloc(at, {nt, n});
        tensor h_a = tensor::alloc(at, {nt, n}), h_b = tensor::alloc(at, {nt, n});
        tensor res_a = tensor::alloc(at, {nt, n}), res_b = tensor::alloc(at, {nt, n});
        std::memcpy(res_a.data, res0.data, res0.nbytes()), std::memcpy(res_b.data, res0.data, res0.nbytes());
        moe_combine_norm nm{res_a, nw, h_a, 1e-5f};
        moe_combine(cpu_be(), y, i32_2d(dest, nt, k), w, out_a, tensor(), tensor(), &nm);
        moe_combine(cpu_be(), y, i32_2d(dest, nt, k), w, out_b);
        cpu_be().add_rms_norm(res_b, out_b, nw, 1e-5f, h_b);
        EXPECT_EQ(bytes_of(out_a), bytes_of(out_b)) << dn(at);
        EXPECT_EQ(bytes_of(res_a), bytes_of(res_b)) << dn(at);
        EXPECT_EQ(bytes_of(h_a), bytes_of(h_b)) << dn(at);
        EXPECT_NE(bytes_of(res_a), bytes_of(res0)) << dn(at) << ": the residual was not updated";
        moe_combine_norm bad{res_a, nw, out_a, 1e-5f};
        EXPECT_NE(error_of([&] { moe_combine(cpu_be(), y, i32_2d(dest, nt, k), w, out_a, tensor(), tensor(), &bad); })
                      .find("must not overlap"),
                  std::string::npos);
    }
}

namespace {

// The whole MoE block as the model runs it (model/moe.cpp), on the CPU backend with default kernel
// selection. x: [n, n_embd] f32 → out [n, n_embd] f32.
struct moe_block {
    int64_t ne = 16, k = 4, n_embd = 64, n_ff = 32;
    linear_weight router, sh_gate, sh_up, sh_down, sh_expert_gate;
    experts_t gate, up, down;
    moe_block(rng& r, bool nvfp4) {
        router.n_out = ne, router.n_in = n_embd, router.dense = random_tensor(r, dtype::BF16, {ne, n_embd}, 0.3);
        gate = random_experts(r, ne, n_ff, n_embd, nvfp4, dtype::BF16, false);
        up = random_experts(r, ne, n_ff, n_embd, nvfp4, dtype::BF16, false);
        down = random_experts(r, ne, n_embd, n_ff, nvfp4, dtype::BF16, false);
        auto dense = [&](linear_weight& w, int64_t o, int64_t i) {
            w.n_out = o, w.n_in = i, w.dense = random_tensor(r, dtype::BF16, {o, i}, 0.2);
        };
        dense(sh_gate, 48, n_embd), dense(sh_up, 48, n_embd), dense(sh_down, n_embd, 48), dense(sh_expert_gate, 1, n_embd);
    }
    std::vector<uint8_t> run(const tensor& x) {
        backend& be = cpu_be();
        int64_t n = x.dim(0), rows = n * k;
        auto f = [&](std::vector<int64_t> s) { return be.alloc(dtype::F32, std::move(s)); };
        auto i = [&](std::vector<int64_t> s) { return be.alloc(dtype::I32, std::move(s)); };
        tensor logits = f({n, ne}), ids = i({n, k}), w = f({n, k}), counts = i({ne}), offs = i({ne + 1});
        tensor sorted = i({rows}), dest = i({n, k}), xs = f({rows, n_embd}), g = f({rows, n_ff}), u = f({rows, n_ff});
        tensor ys = f({rows, n_embd}), sg = f({n, 48}), su = f({n, 48}), sy = f({n, n_embd}), sgl = f({n, 1});
        tensor out = f({n, n_embd});
        be.matmul(x, router, logits);
        moe_route(be, logits, true, ids, w);
        moe_permute(be, ids, ne, counts, offs, sorted, dest);
        be.get_rows(x, sorted, xs);
        moe_matmul(be, xs, gate.w, offs, g), moe_matmul(be, xs, up.w, offs, u);
        be.silu_mul(g, u, g);
        moe_matmul(be, g, down.w, offs, ys);
        be.matmul(x, sh_gate, sg), be.matmul(x, sh_up, su), be.silu_mul(sg, su, sg), be.matmul(sg, sh_down, sy);
        be.matmul(x, sh_expert_gate, sgl);
        moe_combine(be, ys, dest, w, out, sy, sgl);
        return bytes_of(out);
    }
};

}  // namespace

// Token 37 of a batch of 64 gives the same bytes as that token alone, with 1 and with 3 threads, and
// 200 repeated runs of the batch are bit-identical (dense bf16 and NVFP4 experts).
TEST(moe_ops, block_is_deterministic_alone_vs_batch_and_repeated) {
    for (bool nvfp4 : {false, true}) {
        rng r(106 + nvfp4);
        moe_block blk(r, nvfp4);
        tensor batch = random_tensor(r, dtype::F32, {64, blk.n_embd});
        tensor alone = tensor::alloc(dtype::F32, {1, blk.n_embd});
        std::memcpy(alone.data, tensor_rows(batch, 37, 1).data, alone.nbytes());
        int threads = num_threads();
        std::vector<uint8_t> first = blk.run(batch);
        size_t row = size_t(blk.n_embd) * 4;
        for (int nt : {1, 3}) {
            set_num_threads(nt);
            std::vector<uint8_t> one = blk.run(alone), all = blk.run(batch);
            EXPECT_EQ(std::memcmp(one.data(), first.data() + 37 * row, row), 0) << "nvfp4=" << nvfp4 << " threads=" << nt;
            EXPECT_EQ(all, first) << "nvfp4=" << nvfp4 << " threads=" << nt;
        }
        set_num_threads(threads);
        int same = 0;
        for (int rep = 0; rep < 200; ++rep) same += blk.run(batch) == first;
        EXPECT_EQ(same, 200) << "nvfp4=" << nvfp4;
        // The routing really mixes experts (not one expert for everything): the guard of the guard.
        std::set<float> distinct;
        for (size_t i = 0; i < first.size(); i += row) distinct.insert(*reinterpret_cast<const float*>(&first[i]));
        EXPECT_GT(distinct.size(), 60u);
    }
}
