// test_backend_ops (CPU), element-wise and row ops: get_rows/embedding, rms_norm (incl. qk-norm
// shapes and in-place), add_rms_norm, rope (plain and llama3 inv_freq, partial rotary), kv_store,
// silu_mul, add, argmax, cast. Every CPU kernel entry of each op runs every case (forced through
// TETRA_KERNEL); references are naive double computations written here from the op definition.
#include "backend/ops.h"
#include "ops_harness.h"

using namespace tetra;
using namespace tetra_test;

// Tolerances (NMSE vs the double reference):
// f32 outputs: 1e-11 — f32 arithmetic with ≤ a few hundred accumulated terms (rel. error ~1e-6).
// bf16 outputs: 2e-5 — the output itself is rounded to bf16 (rel. ≤ 2^-9); f16: 1e-6 (2^-12).
static double tol_for(dtype t) { return t == dtype::F32 ? 1e-11 : t == dtype::BF16 ? 2e-5 : 1e-6; }

TEST(backend_ops, get_rows) {
    std::map<std::string, int> ran;
    rng r(1);
    for (dtype st : {dtype::F32, dtype::BF16, dtype::F16})
        for (dtype ot : {dtype::F32, dtype::BF16})
            for (int64_t n : {1, 7, 64})
                for (int64_t m : {1, 5}) {
                    std::string vars = std::string("src=") + dn(st) + " out=" + dn(ot) + " n=" + std::to_string(n) +
                                       " m=" + std::to_string(m);
                    int64_t n_rows = 9;
                    tensor src = random_tensor(r, st, {n_rows, n});
                    std::vector<int32_t> ids;
                    for (int64_t i = 0; i < m; ++i) ids.push_back(int32_t(r.randint(0, n_rows - 1)));
                    if (m > 1) ids[1] = ids[0];  // repeated id
                    tensor idt = i32_tensor(ids);
                    std::vector<double> sv = to_double(src), ref;
                    for (int32_t id : ids)
                        for (int64_t j = 0; j < n; ++j) ref.push_back(sv[size_t(id * n + j)]);
                    tensor refr = make_tensor(ot, {m, n}, ref);  // the only rounding: into the out dtype
                    for_each_kernel("get_rows", ot, ran, [&](const kernel_entry& k) {
                        guarded out = make_guarded(ot, {m, n});
                        cpu_be().embedding(src, idt, out.view);
                        EXPECT_TRUE(out.intact()) << k.name << " " << vars;
                        EXPECT_EQ(compare(to_double(out.view), to_double(refr), 0), "") << k.name << " " << vars;
                    });
                }
    expect_all_ran("get_rows", ran, 10);
    tensor src = random_tensor(r, dtype::F32, {4, 3});
    guarded out = make_guarded(dtype::F32, {1, 3});
    for (int32_t bad : {-1, 4}) {
        try {
            cpu_be().get_rows(src, i32_tensor({bad}), out.view);
            ADD_FAILURE() << "id " << bad << " accepted";
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find("out of range [0, 4)"), std::string::npos) << e.what();
        }
    }
}

static std::vector<double> rms_ref(const std::vector<double>& x, const std::vector<double>& w, int64_t n, double eps) {
    std::vector<double> out(x.size());
    for (size_t r0 = 0; r0 < x.size(); r0 += size_t(n)) {
        double ss = 0;
        for (int64_t j = 0; j < n; ++j) ss += x[r0 + size_t(j)] * x[r0 + size_t(j)];
        double inv = 1.0 / std::sqrt(ss / double(n) + eps);
        for (int64_t j = 0; j < n; ++j) out[r0 + size_t(j)] = w[size_t(j)] * x[r0 + size_t(j)] * inv;
    }
    return out;
}

TEST(backend_ops, rms_norm) {
    std::map<std::string, int> ran;
    rng r(2);
    struct shape { int64_t rows, n; } shapes[] = {{1, 1}, {3, 5}, {17, 64}, {2, 576}, {4, 129}, {12, 128}};
    for (dtype xt : {dtype::F32, dtype::BF16})
        for (dtype wt : {dtype::F32, dtype::BF16})
            for (auto s : shapes)
                for (float eps : {1e-6f, 1e-5f})
                    for (bool inplace : {false, true}) {
                        std::string vars = std::string("x=") + dn(xt) + " w=" + dn(wt) + " rows=" +
                                           std::to_string(s.rows) + " n=" + std::to_string(s.n) + " eps=" +
                                           std::to_string(eps) + " inplace=" + std::to_string(inplace);
                        tensor x0 = random_tensor(r, xt, {s.rows, s.n}, 3.0);
                        tensor w = random_tensor(r, wt, {s.n});
                        auto ref = rms_ref(to_double(x0), to_double(w), s.n, double(eps));
                        for_each_kernel("rms_norm", xt, ran, [&](const kernel_entry& k) {
                            if (inplace) {
                                tensor x = make_tensor(xt, {s.rows, s.n}, to_double(x0));
                                cpu_be().rms_norm(x, w, eps, x);
                                EXPECT_EQ(compare(to_double(x), ref, tol_for(xt)), "") << k.name << " " << vars;
                            } else {
                                guarded out = make_guarded(xt, {s.rows, s.n});
                                cpu_be().rms_norm(x0, w, eps, out.view);
                                EXPECT_TRUE(out.intact()) << k.name << " " << vars;
                                EXPECT_EQ(compare(to_double(out.view), ref, tol_for(xt)), "") << k.name << " " << vars;
                            }
                        });
                    }
    expect_all_ran("rms_norm", ran, 20);
    // qk-norm: q [n_tokens, n_head, head_dim] normalised per head through a reshape.
    tensor q = random_tensor(r, dtype::F32, {3, 4, 16});
    tensor w = random_tensor(r, dtype::F32, {16});
    auto ref = rms_ref(to_double(q), to_double(w), 16, 1e-6);
    tensor q2 = tensor_reshape(q, {12, 16});
    cpu_be().rms_norm(q2, w, 1e-6f, q2);
    EXPECT_EQ(compare(to_double(q), ref, 1e-11), "");
    // NaN in one row stays in that row.
    tensor x = random_tensor(r, dtype::F32, {3, 8});
    x.ptr<float>()[9] = NAN;
    guarded out = make_guarded(dtype::F32, {3, 8});
    cpu_be().rms_norm(x, random_tensor(r, dtype::F32, {8}), 1e-6f, out.view);
    for (int i = 0; i < 24; ++i) EXPECT_EQ(std::isnan(out.view.ptr<float>()[i]), i >= 8 && i < 16) << i;
}

TEST(backend_ops, add_rms_norm) {
    std::map<std::string, int> ran;
    rng r(3);
    for (dtype t : {dtype::F32, dtype::BF16})
        for (int64_t rows : {1, 3, 8})
            for (int64_t n : {1, 9, 64, 576}) {
                std::string vars = std::string("act=") + dn(t) + " rows=" + std::to_string(rows) + " n=" + std::to_string(n);
                tensor res0 = random_tensor(r, t, {rows, n}), x = random_tensor(r, t, {rows, n});
                tensor w = random_tensor(r, dtype::BF16, {n});
                std::vector<double> rv = to_double(res0), xv = to_double(x), sum(rv.size());
                for (size_t i = 0; i < rv.size(); ++i) sum[i] = rv[i] + xv[i];
                tensor sum_r = make_tensor(t, {rows, n}, sum);  // residual is stored in the act dtype
                auto ref = rms_ref(to_double(sum_r), to_double(w), n, 1e-5);
                for_each_kernel("add_rms_norm", t, ran, [&](const kernel_entry& k) {
                    tensor res = make_tensor(t, {rows, n}, rv);
                    guarded out = make_guarded(t, {rows, n});
                    cpu_be().add_rms_norm(res, x, w, 1e-5f, out.view);
                    EXPECT_TRUE(out.intact()) << k.name << " " << vars;
                    EXPECT_EQ(compare(to_double(res), to_double(sum_r), 0), "") << k.name << " residual " << vars;
                    EXPECT_EQ(compare(to_double(out.view), ref, tol_for(t)), "") << k.name << " " << vars;
                });
            }
    expect_all_ran("add_rms_norm", ran, 10);
}

// Independent double-precision inv_freq (HF formulas without the f32 steps).
static std::vector<double> inv_freq_ref(const rope_params& p, int64_t dim) {
    std::vector<double> f(static_cast<size_t>(dim / 2));
    for (int64_t i = 0; i < dim / 2; ++i) {
        double inv = 1.0 / std::pow(double(p.theta), double(2 * i) / double(dim));
        if (p.scaling == rope_scaling_type::LLAMA3) {
            double old = double(p.original_max_position_embeddings);
            double low_wl = old / p.low_freq_factor, high_wl = old / p.high_freq_factor;
            double wl = 2 * M_PI / inv;
            if (wl > low_wl) inv = inv / p.factor;
            else if (wl >= high_wl) {
                double s = (old / wl - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
                inv = (1 - s) * inv / p.factor + s * inv;
            }
        }
        f[size_t(i)] = inv;
    }
    return f;
}

TEST(backend_ops, rope_inv_freq) {
    for (float theta : {10000.0f, 100000.0f, 500000.0f, 1000000.0f})
        for (int64_t dim : {2, 64, 128})
            for (bool llama3 : {false, true}) {
                rope_params p;
                p.theta = theta;
                if (llama3) p.scaling = rope_scaling_type::LLAMA3, p.factor = 32.0f;
                tensor f = rope_inv_freq(p, dim);
                ASSERT_EQ(f.numel(), dim / 2);
                auto ref = inv_freq_ref(p, dim);
                for (int64_t i = 0; i < dim / 2; ++i)
                    // f32 steps (pow, reciprocal, and the smooth blend with cancellation) vs double: 2e-6.
                    EXPECT_NEAR(f.ptr<float>()[i], ref[size_t(i)], 2e-6 * ref[size_t(i)])
                        << "theta=" << theta << " dim=" << dim << " llama3=" << llama3 << " i=" << i;
            }
    // The three llama3 bands for Llama-3.2 parameters (theta 5e5, dim 64, factor 32): the first
    // (high-frequency) entries are unchanged, the last are divided by the factor.
    rope_params p;
    p.theta = 500000.0f, p.scaling = rope_scaling_type::LLAMA3, p.factor = 32.0f;
    tensor f = rope_inv_freq(p, 64);
    EXPECT_FLOAT_EQ(f.ptr<float>()[0], 1.0f);
    EXPECT_NEAR(f.ptr<float>()[31], std::pow(500000.0, -62.0 / 64) / 32, 1e-12);
    rope_params partial;
    partial.n_rot = 16;
    EXPECT_EQ(rope_inv_freq(partial, 64).numel(), 8);
    partial.n_rot = 15;
    EXPECT_THROW(rope_inv_freq(partial, 64), error);
}

// HF: angle = f32(pos · inv_freq) (the f32 matmul), cos/sin of it; q·cos + rotate_half(q)·sin.
static void rope_ref(std::vector<double>& x, const std::vector<int32_t>& pos, const float* inv, int64_t h,
                     int64_t n_head, int64_t head_dim) {
    for (size_t t = 0; t < pos.size(); ++t)
        for (int64_t hd = 0; hd < n_head; ++hd) {
            size_t base = (t * size_t(n_head) + size_t(hd)) * size_t(head_dim);
            for (int64_t i = 0; i < h; ++i) {
                double ang = double(float(pos[t]) * inv[i]), c = std::cos(ang), s = std::sin(ang);
                double x1 = x[base + size_t(i)], x2 = x[base + size_t(i + h)];
                x[base + size_t(i)] = x1 * c - x2 * s;
                x[base + size_t(i + h)] = x2 * c + x1 * s;
            }
        }
}

TEST(backend_ops, rope) {
    std::map<std::string, int> ran;
    rng r(4);
    struct cfg { int64_t n_head, n_head_kv, head_dim, n_rot; } cfgs[] = {
        {1, 1, 2, 2}, {4, 2, 8, 8}, {4, 1, 64, 64}, {3, 3, 64, 32}, {8, 2, 128, 128}, {2, 1, 6, 6}};
    for (dtype t : {dtype::F32, dtype::BF16})
        for (auto c : cfgs)
            for (int64_t n_tokens : {1, 5})
                for (bool llama3 : {false, true}) {
                    std::string vars = std::string("act=") + dn(t) + " n_head=" + std::to_string(c.n_head) +
                                       " n_head_kv=" + std::to_string(c.n_head_kv) + " head_dim=" +
                                       std::to_string(c.head_dim) + " n_rot=" + std::to_string(c.n_rot) +
                                       " n_tokens=" + std::to_string(n_tokens) + " llama3=" + std::to_string(llama3);
                    rope_params p;
                    p.theta = llama3 ? 500000.0f : 10000.0f;
                    p.n_rot = int(c.n_rot);
                    if (llama3) p.scaling = rope_scaling_type::LLAMA3;
                    tensor inv = rope_inv_freq(p, c.head_dim);
                    std::vector<int32_t> pos;
                    for (int64_t i = 0; i < n_tokens; ++i) pos.push_back(int32_t(i == 0 ? 0 : r.randint(1, 9000)));
                    tensor q0 = random_tensor(r, t, {n_tokens, c.n_head, c.head_dim});
                    tensor k0 = random_tensor(r, t, {n_tokens, c.n_head_kv, c.head_dim});
                    auto qr = to_double(q0), kr = to_double(k0);
                    rope_ref(qr, pos, inv.ptr<float>(), c.n_rot / 2, c.n_head, c.head_dim);
                    rope_ref(kr, pos, inv.ptr<float>(), c.n_rot / 2, c.n_head_kv, c.head_dim);
                    for_each_kernel("rope", t, ran, [&](const kernel_entry& k) {
                        tensor q = make_tensor(t, q0.shape, to_double(q0)), kk = make_tensor(t, k0.shape, to_double(k0));
                        cpu_be().rope(q, kk, i32_tensor(pos), inv);
                        EXPECT_EQ(compare(to_double(q), qr, tol_for(t)), "") << k.name << " q " << vars;
                        EXPECT_EQ(compare(to_double(kk), kr, tol_for(t)), "") << k.name << " k " << vars;
                    });
                }
    expect_all_ran("rope", ran, 20);
}

TEST(backend_ops, kv_store) {
    std::map<std::string, int> ran;
    rng r(5);
    for (dtype t : {dtype::F32, dtype::BF16})
        for (dtype ct : {dtype::F32, dtype::BF16})
            for (int64_t bs : {1, 4, 16})
                for (int64_t n_tokens : {1, 7}) {
                    int64_t n_blocks = 5, n_head_kv = 2, head_dim = 8, row = n_head_kv * head_dim;
                    std::string vars = std::string("act=") + dn(t) + " cache=" + dn(ct) + " block_size=" +
                                       std::to_string(bs) + " n_tokens=" + std::to_string(n_tokens);
                    if (n_tokens > n_blocks * bs) continue;  // bs=1 with 7 tokens: 5 slots only
                    tensor k = random_tensor(r, t, {n_tokens, n_head_kv, head_dim});
                    tensor v = random_tensor(r, t, {n_tokens, n_head_kv, head_dim});
                    std::vector<int32_t> slots(static_cast<size_t>(n_blocks * bs));
                    for (size_t i = 0; i < slots.size(); ++i) slots[i] = int32_t(i);
                    std::shuffle(slots.begin(), slots.end(), r.g);
                    slots.resize(size_t(n_tokens));
                    if (n_tokens > 2) slots[2] = -1;  // padding token
                    for_each_kernel("kv_store", t, ran, [&](const kernel_entry& kn) {
                        tensor kc = random_tensor(r, ct, {n_blocks, bs, n_head_kv, head_dim});
                        tensor vc = random_tensor(r, ct, {n_blocks, bs, n_head_kv, head_dim});
                        auto kref = to_double(kc), vref = to_double(vc), kv = to_double(k), vv = to_double(v);
                        for (int64_t i = 0; i < n_tokens; ++i)
                            for (int64_t j = 0; slots[size_t(i)] >= 0 && j < row; ++j) {
                                kref[size_t(slots[size_t(i)] * row + j)] = kv[size_t(i * row + j)];
                                vref[size_t(slots[size_t(i)] * row + j)] = vv[size_t(i * row + j)];
                            }
                        tensor kr = make_tensor(ct, kc.shape, kref), vr = make_tensor(ct, vc.shape, vref);
                        cpu_be().kv_store(k, v, kc, vc, i32_tensor(slots));
                        EXPECT_EQ(compare(to_double(kc), to_double(kr), 0), "") << kn.name << " " << vars;
                        EXPECT_EQ(compare(to_double(vc), to_double(vr), 0), "") << kn.name << " " << vars;
                    });
                }
    expect_all_ran("kv_store", ran, 10);
    tensor k = random_tensor(r, dtype::F32, {1, 1, 4}), kc = random_tensor(r, dtype::F32, {2, 2, 1, 4});
    EXPECT_THROW(cpu_be().kv_store(k, k, kc, kc, i32_tensor({4})), error);
    tensor kc3 = random_tensor(r, dtype::F32, {2, 2, 2, 4});
    EXPECT_THROW(cpu_be().kv_store(k, k, kc3, kc3, i32_tensor({0})), error);  // n_head_kv mismatch
}

TEST(backend_ops, silu_mul_and_add) {
    std::map<std::string, int> ran_s, ran_a;
    rng r(6);
    for (dtype t : {dtype::F32, dtype::BF16, dtype::F16})
        for (int64_t rows : {1, 3})
            for (int64_t n : {1, 7, 1536, 20001}) {  // 3 × 20001 spans several 16384-element chunks
                std::string vars = std::string("act=") + dn(t) + " rows=" + std::to_string(rows) + " n=" + std::to_string(n);
                tensor g = random_tensor(r, t, {rows, n}, 4.0), u = random_tensor(r, t, {rows, n});
                auto gv = to_double(g), uv = to_double(u);
                std::vector<double> sref(gv.size()), aref(gv.size());
                for (size_t i = 0; i < gv.size(); ++i) {
                    sref[i] = gv[i] / (1 + std::exp(-gv[i])) * uv[i];
                    aref[i] = gv[i] + uv[i];
                }
                for_each_kernel("silu_mul", t, ran_s, [&](const kernel_entry& k) {
                    guarded out = make_guarded(t, {rows, n});
                    cpu_be().silu_mul(g, u, out.view);
                    EXPECT_TRUE(out.intact()) << k.name << " " << vars;
                    EXPECT_EQ(compare(to_double(out.view), sref, tol_for(t)), "") << k.name << " " << vars;
                });
                for_each_kernel("add", t, ran_a, [&](const kernel_entry& k) {
                    guarded out = make_guarded(t, {rows, n});
                    cpu_be().add(g, u, out.view);
                    EXPECT_TRUE(out.intact()) << k.name << " " << vars;
                    EXPECT_EQ(compare(to_double(out.view), aref, tol_for(t)), "") << k.name << " " << vars;
                });
            }
    expect_all_ran("silu_mul", ran_s, 12);
    expect_all_ran("add", ran_a, 10);
    // NaN/Inf propagate element-wise: silu(NaN) = NaN, silu(+Inf)·1 = +Inf, silu(1)·Inf = +Inf.
    tensor g = make_tensor(dtype::F32, {4}, {NAN, INFINITY, -2.0, 1.0});
    tensor u = make_tensor(dtype::F32, {4}, {1.0, 1.0, 2.0, INFINITY});
    guarded out = make_guarded(dtype::F32, {4});
    cpu_be().silu_mul(g, u, out.view);
    EXPECT_EQ(compare(to_double(out.view), {NAN, INFINITY, -2.0 / (1 + std::exp(2.0)) * 2.0, INFINITY}, 1e-12), "");
    cpu_be().add(g, u, g);  // in place
    EXPECT_EQ(compare(to_double(g), {NAN, INFINITY, 0.0, INFINITY}, 0), "");
}

TEST(backend_ops, argmax) {
    std::map<std::string, int> ran;
    rng r(7);
    for (dtype t : {dtype::F32, dtype::BF16})
        for (int64_t rows : {1, 4})
            for (int64_t n : {1, 2, 49152}) {
                tensor x = random_tensor(r, t, {rows, n});
                auto xv = to_double(x);
                if (n > 2) {
                    write_elem(x, 0 * n + 5, 100.0), write_elem(x, 0 * n + 9, 100.0);  // tie → first
                    if (rows > 1) write_elem(x, 1 * n + 7, NAN), write_elem(x, 1 * n + 3, 1000.0);  // NaN wins
                    if (rows > 2) for (int64_t j = 0; j < n; ++j) write_elem(x, 2 * n + j, -INFINITY);
                    xv = to_double(x);
                }
                std::vector<double> ref;
                for (int64_t i = 0; i < rows; ++i) {
                    int64_t best = 0;
                    for (int64_t j = 0; j < n; ++j) {
                        double v = xv[size_t(i * n + j)], b = xv[size_t(i * n + best)];
                        if (std::isnan(b)) break;
                        if (std::isnan(v) || v > b) best = j;
                    }
                    ref.push_back(double(best));
                }
                for_each_kernel("argmax", t, ran, [&](const kernel_entry& k) {
                    guarded out = make_guarded(dtype::I32, {rows});
                    cpu_be().argmax(x, out.view);
                    EXPECT_TRUE(out.intact()) << k.name;
                    EXPECT_EQ(to_double(out.view), ref) << k.name << " act=" << dn(t) << " rows=" << rows << " n=" << n;
                });
            }
    expect_all_ran("argmax", ran, 4);
}

// Nearest representable value by search over the target format's finite values (ties: even code).
static double round_to(dtype t, double v) {
    if (std::isnan(v)) return v;
    static std::map<dtype, std::vector<std::pair<double, int>>> grids;
    auto& g = grids[t];
    if (g.empty()) {
        for (uint32_t c = 0; c < 65536; ++c) {
            double d;
            if (t == dtype::BF16) {
                uint32_t u = c << 16;
                float f;
                std::memcpy(&f, &u, 4);
                d = f;
            } else {
                int s = c >> 15, e = (c >> 10) & 31, m = c & 1023;
                if (e == 31) continue;
                d = (s ? -1 : 1) * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
            }
            if (std::isfinite(d) && !(d == 0 && (c & 0x8000))) g.push_back({d, int(c)});
        }
        std::sort(g.begin(), g.end());
    }
    double max = g.back().first;
    double ulp_top = max - g[g.size() - 2].first;
    if (std::fabs(v) >= max + ulp_top / 2) return v > 0 ? INFINITY : -INFINITY;  // overflow (RNE)
    auto it = std::lower_bound(g.begin(), g.end(), std::make_pair(v, -1));
    if (it == g.end()) return max;
    if (it->first == v || it == g.begin()) return it->first;
    auto lo = it - 1;
    double dl = v - lo->first, dh = it->first - v;
    if (dl < dh) return lo->first;
    if (dh < dl) return it->first;
    return (lo->second & 1) ? it->first : lo->first;
}

TEST(backend_ops, cast) {
    std::map<std::string, int> ran;
    rng r(8);
    std::vector<double> vals = {0.0, -0.0, 1.0, -2.5, 65504.0, 65520.0, 1e6, -1e-7, 3.14159265358979, 1e-30, INFINITY, NAN};
    for (int i = 0; i < 200; ++i) vals.push_back(std::ldexp(r.normal(), int(r.randint(-30, 20))));
    for (dtype st : {dtype::F32, dtype::BF16, dtype::F16})
        for (dtype ot : {dtype::F32, dtype::BF16, dtype::F16}) {
            tensor src = make_tensor(st, {int64_t(vals.size())}, vals);
            auto sv = to_double(src);
            std::vector<double> ref;
            for (double v : sv) ref.push_back(ot == dtype::F32 ? double(float(v)) : round_to(ot, v));
            for_each_kernel("cast", st, ran, [&](const kernel_entry& k) {
                guarded out = make_guarded(ot, {int64_t(vals.size())});
                cpu_be().cast(src, out.view);
                EXPECT_TRUE(out.intact()) << k.name;
                EXPECT_EQ(compare(to_double(out.view), ref, 0), "") << k.name << " " << dn(st) << "→" << dn(ot);
            });
        }
    expect_all_ran("cast", ran, 9);
}

TEST(backend_ops, wrapper_errors_name_the_culprit) {
    rng r(9);
    tensor x = random_tensor(r, dtype::F32, {2, 8}), w = random_tensor(r, dtype::F32, {7});
    guarded out = make_guarded(dtype::F32, {2, 8});
    try {
        cpu_be().rms_norm(x, w, 1e-6f, out.view);
        ADD_FAILURE();
    } catch (const error& e) {
        EXPECT_STREQ(e.what(), "rms_norm: 'w' has shape [7]; expected [8]");
    }
    tensor xi = tensor::alloc(dtype::I32, {2, 8});
    try {
        cpu_be().add(xi, xi, xi);
        ADD_FAILURE();
    } catch (const error& e) {
        EXPECT_STREQ(e.what(), "add: 'a' has dtype i32; expected f32|bf16|f16");
    }
    tensor dev = x;
    dev.device = device_kind::CUDA;
    try {
        cpu_be().add(x, dev, x);
        ADD_FAILURE();
    } catch (const error& e) {
        EXPECT_STREQ(e.what(), "add: tensor 'b' [2, 8] lives on cuda; the backend runs on cpu");
    }
}
