// test_backend_ops on the GPU: every op × every CUDA kernel entry the device can run (forced
// through TETRA_KERNEL), against the CPU backend (the oracle) on the same rounded inputs. Cases
// come from loops over dtype × shape × flags (odd sizes, one row/token, non-multiples of the
// tiles, GQA ratios, mixed batches with shuffled block tables). Outputs are guarded (sentinels
// on both sides, NaN payload); NaN/Inf positions must match; NMSE ≤ the case's tolerance.
// quantize_nvfp4_act is bit-exact. A failure prints the case's vars() string.
#include <numeric>

#include "backend/cuda/gpu_harness.h"
#include "backend/ops.h"
#include "backend/qkv_case.h"

using namespace tetra;
using namespace tetra_test;

namespace {

// Tolerance of a GPU-vs-CPU comparison whose only difference is f32 summation order / FMA
// contraction, after rounding into `t`: a 1-ulp flip in a fraction of the elements gives NMSE
// ≤ ulp² (bf16 2^-16 ≈ 1.5e-5, f16 2^-22 ≈ 2.4e-7); f32 keeps ~1e-7 relative.
double order_tol(dtype t) { return t == dtype::F32 ? 1e-11 : t == dtype::BF16 ? 2e-5 : 1e-6; }

std::string check_out(gpu_guarded& g, const tensor& ref, double tol) {
    bool intact = false;
    tensor got = g.result(&intact);
    if (!intact) return "guard bytes overwritten";
    return compare(to_double(got), to_double(ref), tol);
}

struct op_stats {
    std::map<std::string, int> ran, declined;
};

// Puts a few NaN / ±Inf into x (host) so the kernels' propagation is compared with the oracle's.
void poison(tensor& x, rng& r, int n) {
    for (int i = 0; i < n && x.numel() > 0; ++i) {
        int64_t at = r.randint(0, x.numel() - 1);
        write_elem(x, at, i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY);
    }
}

}  // namespace

TEST(backend_ops_gpu, device) {
    const device_info& d = gpu_be().device();
    EXPECT_EQ(d.kind, device_kind::CUDA);
    EXPECT_GE(d.cc, 80) << d.name;
    EXPECT_GT(d.sm_count, 0);
    EXPECT_GT(d.memory_bytes, int64_t(1) << 30);
    EXPECT_FALSE(d.compiled.empty());
    compiled_target img;
    EXPECT_TRUE(select_image(d.compiled, d.cc, &img)) << compiled_targets_str(d.compiled);
    std::printf("device: %s sm_%d, %d SMs, %.1f GiB, smem/block %lld, images [%s], loads %s, features %s\n",
                d.name.c_str(), d.cc, d.sm_count, double(d.memory_bytes) / (1 << 30), (long long)d.smem_per_block,
                compiled_targets_str(d.compiled).c_str(), img.str().c_str(), arch_features_str(d.features).c_str());
    // Memory round trip and device-to-device copy.
    rng r(100);
    tensor h = random_tensor(r, dtype::F32, {1001});
    tensor a = to_gpu(h), b = gpu_be().alloc(dtype::F32, {1001});
    gpu_be().copy(a, b);
    EXPECT_EQ(compare(to_double(to_host(b)), to_double(h), 0), "");
    try {
        gpu_be().rms_norm(h, h, 1e-6f, h);
        ADD_FAILURE() << "host tensor accepted by the cuda backend";
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("lives on cpu"), std::string::npos) << e.what();
    }
}

TEST(backend_ops_gpu, get_rows) {
    op_stats st;
    rng r(1);
    for (dtype sd : {dtype::F32, dtype::BF16, dtype::F16})
        for (dtype od : {dtype::F32, dtype::BF16, dtype::F16})
            for (int64_t n : {1, 7, 64, 4097})
                for (int64_t m : {1, 5, 33}) {
                    std::string vars = std::string("src=") + dn(sd) + " out=" + dn(od) + " n=" + std::to_string(n) +
                                       " m=" + std::to_string(m);
                    int64_t n_rows = 40;
                    tensor src = random_tensor(r, sd, {n_rows, n});
                    poison(src, r, 3);
                    std::vector<int32_t> ids;
                    for (int64_t i = 0; i < m; ++i) ids.push_back(int32_t(r.randint(0, n_rows - 1)));
                    tensor idt = i32_tensor(ids);
                    tensor ref = tensor::alloc(od, {m, n});
                    cpu_be().get_rows(src, idt, ref);
                    tensor dsrc = to_gpu(src), dids = to_gpu(idt);
                    for_each_gpu_kernel("get_rows", od, st.ran, st.declined, [&](const kernel_entry& k) {
                        gpu_guarded out = make_gpu_guarded(od, {m, n});
                        gpu_be().get_rows(dsrc, dids, out.view);
                        EXPECT_EQ(check_out(out, ref, 0), "") << k.name << " " << vars;  // a copy: exact
                    });
                }
    expect_gpu_ran("get_rows", st.ran, 100);
}

TEST(backend_ops_gpu, rms_norm_and_add_rms_norm) {
    op_stats st, st2;
    rng r(2);
    struct shape { int64_t rows, n; } shapes[] = {{1, 1}, {3, 5}, {17, 64}, {2, 576}, {4, 129}, {12, 128},
                                                   {3, 4096}, {2, 8195}, {65, 2048}};
    for (dtype xt : {dtype::F32, dtype::BF16, dtype::F16})
        for (dtype wt : {dtype::F32, dtype::BF16})
            for (auto s : shapes)
                for (bool inplace : {false, true}) {
                    float eps = inplace ? 1e-5f : 1e-6f;
                    std::string vars = std::string("x=") + dn(xt) + " w=" + dn(wt) + " rows=" + std::to_string(s.rows) +
                                       " n=" + std::to_string(s.n) + " inplace=" + std::to_string(inplace);
                    tensor x = random_tensor(r, xt, {s.rows, s.n}, 3.0), w = random_tensor(r, wt, {s.n});
                    if (s.rows > 3) poison(x, r, 2);
                    tensor ref = tensor::alloc(xt, {s.rows, s.n});
                    cpu_be().rms_norm(x, w, eps, ref);
                    tensor dw = to_gpu(w);
                    for_each_gpu_kernel("rms_norm", xt, st.ran, st.declined, [&](const kernel_entry& k) {
                        tensor dx = to_gpu(x);
                        if (inplace) {
                            gpu_be().rms_norm(dx, dw, eps, dx);
                            EXPECT_EQ(compare(to_double(to_host(dx)), to_double(ref), order_tol(xt)), "") << k.name << " " << vars;
                        } else {
                            gpu_guarded out = make_gpu_guarded(xt, {s.rows, s.n});
                            gpu_be().rms_norm(dx, dw, eps, out.view);
                            EXPECT_EQ(check_out(out, ref, order_tol(xt)), "") << k.name << " " << vars;
                        }
                    });
                    // add_rms_norm: residual += x, out = rms_norm(residual).
                    tensor res = random_tensor(r, xt, {s.rows, s.n}, 2.0), res_ref = tensor::alloc(xt, {s.rows, s.n});
                    std::memcpy(res_ref.data, res.data, res.nbytes());
                    tensor ref2 = tensor::alloc(xt, {s.rows, s.n});
                    cpu_be().add_rms_norm(res_ref, x, w, eps, ref2);
                    for_each_gpu_kernel("add_rms_norm", xt, st2.ran, st2.declined, [&](const kernel_entry& k) {
                        tensor dres = to_gpu(res), dx = to_gpu(x);
                        gpu_guarded out = make_gpu_guarded(xt, {s.rows, s.n});
                        gpu_be().add_rms_norm(dres, dx, dw, eps, out.view);
                        EXPECT_EQ(check_out(out, ref2, order_tol(xt)), "") << k.name << " out " << vars;
                        // The sum is one rounding of the same f32 add: exact.
                        EXPECT_EQ(compare(to_double(to_host(dres)), to_double(res_ref), 0), "") << k.name << " residual " << vars;
                    });
                }
    expect_gpu_ran("rms_norm", st.ran, 100);
    expect_gpu_ran("add_rms_norm", st2.ran, 100);
}

TEST(backend_ops_gpu, rope) {
    op_stats st;
    rng r(3);
    struct heads { int64_t n_head, n_head_kv, head_dim, n_rot; } hs[] = {
        {4, 4, 64, 64}, {8, 2, 128, 128}, {6, 3, 80, 40}, {2, 1, 6, 6}, {32, 8, 128, 64}};
    for (dtype t : {dtype::F32, dtype::BF16, dtype::F16})
        for (auto h : hs)
            for (int64_t n_tokens : {1, 7, 33})
                for (bool llama3 : {false, true}) {
                    std::string vars = std::string("act=") + dn(t) + " n_head=" + std::to_string(h.n_head) + " n_head_kv=" +
                                       std::to_string(h.n_head_kv) + " head_dim=" + std::to_string(h.head_dim) + " n_rot=" +
                                       std::to_string(h.n_rot) + " n_tokens=" + std::to_string(n_tokens) +
                                       " llama3=" + std::to_string(llama3);
                    rope_params rp;
                    rp.theta = llama3 ? 500000.0f : 10000.0f, rp.n_rot = int(h.n_rot);
                    if (llama3) rp.scaling = rope_scaling_type::LLAMA3;
                    tensor inv = rope_inv_freq(rp, h.head_dim);
                    tensor q = random_tensor(r, t, {n_tokens, h.n_head, h.head_dim});
                    tensor k = random_tensor(r, t, {n_tokens, h.n_head_kv, h.head_dim});
                    std::vector<int32_t> pos;
                    for (int64_t i = 0; i < n_tokens; ++i) pos.push_back(int32_t(i == 0 ? 0 : r.randint(0, 131071)));
                    tensor pt = i32_tensor(pos);
                    tensor qr = tensor::alloc(t, q.shape), kr = tensor::alloc(t, k.shape);
                    std::memcpy(qr.data, q.data, q.nbytes()), std::memcpy(kr.data, k.data, k.nbytes());
                    cpu_be().rope(qr, kr, pt, inv);
                    tensor dpos = to_gpu(pt), dinv = to_gpu(inv);
                    for_each_gpu_kernel("rope", t, st.ran, st.declined, [&](const kernel_entry& kk) {
                        tensor dq = to_gpu(q), dk = to_gpu(k);
                        gpu_be().rope(dq, dk, dpos, dinv);
                        // Same cos/sin and products; only FMA contraction of x1·c − x2·s differs.
                        EXPECT_EQ(compare(to_double(to_host(dq)), to_double(qr), order_tol(t)), "") << kk.name << " q " << vars;
                        EXPECT_EQ(compare(to_double(to_host(dk)), to_double(kr), order_tol(t)), "") << kk.name << " k " << vars;
                    });
                }
    expect_gpu_ran("rope", st.ran, 50);
}

TEST(backend_ops_gpu, kv_store) {
    op_stats st;
    rng r(4);
    for (dtype at : {dtype::F32, dtype::BF16, dtype::F16})
        for (dtype ct : {dtype::F32, dtype::BF16})
            for (int64_t n_tokens : {1, 9, 70})
                for (int64_t bs : {1, 16}) {
                    int64_t n_head_kv = 3, head_dim = 24, n_blocks = (n_tokens + 8) / bs + 4;
                    std::string vars = std::string("act=") + dn(at) + " cache=" + dn(ct) + " n_tokens=" +
                                       std::to_string(n_tokens) + " block_size=" + std::to_string(bs);
                    tensor k = random_tensor(r, at, {n_tokens, n_head_kv, head_dim}), v = random_tensor(r, at, k.shape);
                    std::vector<int32_t> slots(static_cast<size_t>(n_blocks * bs));
                    std::iota(slots.begin(), slots.end(), 0);
                    std::shuffle(slots.begin(), slots.end(), r.g);
                    slots.resize(size_t(n_tokens));
                    if (n_tokens > 2) slots[1] = -1;  // padding token
                    tensor sm = i32_tensor(slots);
                    std::vector<int64_t> cshape{n_blocks, bs, n_head_kv, head_dim};
                    tensor kc0 = random_tensor(r, ct, cshape), vc0 = random_tensor(r, ct, cshape);
                    tensor kcr = tensor::alloc(ct, cshape), vcr = tensor::alloc(ct, cshape);
                    std::memcpy(kcr.data, kc0.data, kc0.nbytes()), std::memcpy(vcr.data, vc0.data, vc0.nbytes());
                    cpu_be().kv_store(k, v, kcr, vcr, sm);
                    tensor dk = to_gpu(k), dv = to_gpu(v), dsm = to_gpu(sm);
                    for_each_gpu_kernel("kv_store", at, st.ran, st.declined, [&](const kernel_entry& kk) {
                        tensor dkc = to_gpu(kc0), dvc = to_gpu(vc0);
                        gpu_be().kv_store(dk, dv, dkc, dvc, dsm);
                        EXPECT_EQ(compare(to_double(to_host(dkc)), to_double(kcr), 0), "") << kk.name << " k " << vars;
                        EXPECT_EQ(compare(to_double(to_host(dvc)), to_double(vcr), 0), "") << kk.name << " v " << vars;
                    });
                }
    expect_gpu_ran("kv_store", st.ran, 20);
}

// The fused attention input stage against the CPU op (the composition: get_rows, rms_norm, rope,
// kv_store) with the order tolerance, and bit for bit against the same unfused ops on the GPU.
TEST(backend_ops_gpu, qkv_rope_store) {
    op_stats st;
    rng r(41);
    struct heads { int64_t nh, nkv, hd; } hs[] = {{4, 2, 64}, {32, 8, 128}, {16, 4, 128}, {2, 1, 16}, {8, 8, 256}, {3, 1, 40}};
    for (dtype t : {dtype::F32, dtype::BF16, dtype::F16})
        for (auto h : hs)
            for (int64_t n : {1, 7, 33})
                for (bool norm : {false, true}) {
                    std::string vars = std::string("act=") + dn(t) + " nh=" + std::to_string(h.nh) + " nkv=" +
                                       std::to_string(h.nkv) + " hd=" + std::to_string(h.hd) + " n=" + std::to_string(n) +
                                       " norm=" + std::to_string(norm);
                    qkv_case c = make_qkv_case(r, t, h.nh, h.nkv, h.hd, h.hd, n, norm, 1000000.0f, 131071, 16,
                                               (n + 8) / 16 + 3);
                    const tensor &kc0 = c.k_cache0, &vc0 = c.v_cache0;
                    tensor q_ref = tensor::alloc(t, {n, h.nh, h.hd}), kcr = clone(kc0), vcr = clone(vc0);
                    cpu_be().qkv_rope_store(c.qkv, c.q_norm, c.k_norm, 1e-6f, c.positions, c.inv_freq, q_ref, kcr, vcr,
                                            c.slots);
                    // The unfused inputs: q, k, v split out of qkv on the host.
                    tensor q, k, v;
                    split_qkv(c, q, k, v);
                    tensor dqkv = to_gpu(c.qkv), dpos = to_gpu(c.positions), dinv = to_gpu(c.inv_freq), dsm = to_gpu(c.slots);
                    tensor dqn = norm ? to_gpu(c.q_norm) : tensor{}, dkn = norm ? to_gpu(c.k_norm) : tensor{};
                    for_each_gpu_kernel("qkv_rope_store", t, st.ran, st.declined, [&](const kernel_entry& kk) {
                        gpu_guarded out = make_gpu_guarded(t, {n, h.nh, h.hd});
                        tensor dkc = to_gpu(kc0), dvc = to_gpu(vc0);
                        gpu_be().qkv_rope_store(dqkv, dqn, dkn, 1e-6f, dpos, dinv, out.view, dkc, dvc, dsm);
                        EXPECT_EQ(check_out(out, q_ref, order_tol(t)), "") << kk.name << " q " << vars;
                        EXPECT_EQ(compare(to_double(to_host(dkc)), to_double(kcr), order_tol(t)), "") << kk.name << " k " << vars;
                        EXPECT_EQ(compare(to_double(to_host(dvc)), to_double(vcr), 0), "") << kk.name << " v " << vars;
                        // The unfused CUDA ops on the same inputs: identical bits.
                        tensor uq = to_gpu(q), uk = to_gpu(k), uv = to_gpu(v), ukc = to_gpu(kc0), uvc = to_gpu(vc0);
                        if (norm) {
                            tensor qr = tensor_reshape(uq, {n * h.nh, h.hd}), kr = tensor_reshape(uk, {n * h.nkv, h.hd});
                            gpu_be().rms_norm(qr, dqn, 1e-6f, qr);
                            gpu_be().rms_norm(kr, dkn, 1e-6f, kr);
                        }
                        gpu_be().rope(uq, uk, dpos, dinv);
                        gpu_be().kv_store(uk, uv, ukc, uvc, dsm);
                        EXPECT_EQ(compare(to_double(to_host(out.view)), to_double(to_host(uq)), 0), "") << kk.name << " q vs unfused " << vars;
                        EXPECT_EQ(compare(to_double(to_host(dkc)), to_double(to_host(ukc)), 0), "") << kk.name << " k vs unfused " << vars;
                    });
                }
    expect_gpu_ran("qkv_rope_store", st.ran, 40);
}

TEST(backend_ops_gpu, elementwise) {
    op_stats sa, ss, sc;
    rng r(5);
    for (dtype t : {dtype::F32, dtype::BF16, dtype::F16})
        for (int64_t rows : {1, 3, 64})
            for (int64_t n : {1, 7, 1000, 8193}) {
                std::string vars = std::string("act=") + dn(t) + " rows=" + std::to_string(rows) + " n=" + std::to_string(n);
                tensor a = random_tensor(r, t, {rows, n}, 4.0), b = random_tensor(r, t, {rows, n}, 4.0);
                poison(a, r, 3);
                tensor ra = tensor::alloc(t, a.shape), rs = tensor::alloc(t, a.shape);
                cpu_be().add(a, b, ra);
                cpu_be().silu_mul(a, b, rs);
                tensor da = to_gpu(a), db = to_gpu(b);
                for_each_gpu_kernel("add", t, sa.ran, sa.declined, [&](const kernel_entry& k) {
                    gpu_guarded out = make_gpu_guarded(t, a.shape);
                    gpu_be().add(da, db, out.view);
                    EXPECT_EQ(check_out(out, ra, 0), "") << k.name << " " << vars;  // one f32 add, one rounding
                });
                for_each_gpu_kernel("silu_mul", t, ss.ran, ss.declined, [&](const kernel_entry& k) {
                    gpu_guarded out = make_gpu_guarded(t, a.shape);
                    gpu_be().silu_mul(da, db, out.view);
                    // expf vs std::exp differ by ≤ 2 ulp in f32 (CUDA math guide), then rounded.
                    EXPECT_EQ(check_out(out, rs, order_tol(t)), "") << k.name << " " << vars;
                });
                for (dtype ot : {dtype::F32, dtype::BF16, dtype::F16}) {
                    tensor rc = tensor::alloc(ot, a.shape);
                    cpu_be().cast(a, rc);
                    for_each_gpu_kernel("cast", t, sc.ran, sc.declined, [&](const kernel_entry& k) {
                        gpu_guarded out = make_gpu_guarded(ot, a.shape);
                        gpu_be().cast(da, out.view);
                        EXPECT_EQ(check_out(out, rc, 0), "") << k.name << " to " << dn(ot) << " " << vars;  // RNE both
                    });
                }
            }
    expect_gpu_ran("add", sa.ran, 30);
    expect_gpu_ran("silu_mul", ss.ran, 30);
    expect_gpu_ran("cast", sc.ran, 100);
}

TEST(backend_ops_gpu, argmax) {
    op_stats st;
    rng r(6);
    for (dtype t : {dtype::F32, dtype::BF16, dtype::F16})
        for (int64_t rows : {1, 5, 40})
            for (int64_t n : {1, 7, 1000, 16383, 32005, 151936})
                for (int special : {0, 1, 2}) {  // 0 random, 1 ties (coarse values), 2 NaNs
                    std::string vars = std::string("act=") + dn(t) + " rows=" + std::to_string(rows) + " n=" +
                                       std::to_string(n) + " special=" + std::to_string(special);
                    tensor x = random_tensor(r, t, {rows, n}, 3.0);
                    if (special == 1)
                        for (int64_t i = 0; i < x.numel(); ++i) write_elem(x, i, double(r.randint(0, 3)));
                    if (special == 2) poison(x, r, int(rows));
                    tensor ref = tensor::alloc(dtype::I32, {rows});
                    cpu_be().argmax(x, ref);
                    tensor dx = to_gpu(x);
                    for_each_gpu_kernel("argmax", t, st.ran, st.declined, [&](const kernel_entry& k) {
                        gpu_guarded out = make_gpu_guarded(dtype::I32, {rows});
                        gpu_be().argmax(dx, out.view);
                        EXPECT_EQ(check_out(out, ref, 0), "") << k.name << " " << vars;
                    });
                }
    expect_gpu_ran("argmax", st.ran, 100);
}

// Bit-exact with the CPU codec on rows with special blocks: zeros, −0, NaN, ±Inf, tiny values
// (SF rounds to 0), huge values (SF saturates at 448), exact E2M1 ties.
TEST(backend_ops_gpu, quantize_nvfp4_act) {
    op_stats st;
    rng r(7);
    int n_cases = 0;
    for (dtype t : {dtype::F32, dtype::BF16, dtype::F16})
        for (auto shape : std::vector<std::pair<int64_t, int64_t>>{{1, 16}, {3, 48}, {7, 4096}, {64, 2048}, {1, 5120}})
            for (float g : {1.0f, 0.37f, 2688.0f / 7.5f, 1e-30f, 3.0e6f}) {
                int64_t rows = shape.first, n = shape.second;
                std::string vars = std::string("act=") + dn(t) + " rows=" + std::to_string(rows) + " n=" + std::to_string(n) +
                                   " G=" + std::to_string(g);
                tensor x = random_tensor(r, t, {rows, n}, 2.5);
                int64_t n_blocks = x.numel() / 16;
                for (int64_t b = 0; b < n_blocks; b += 5) {  // one special kind every 5 blocks
                    int kind = int((b / 5) % 7);
                    for (int64_t i = 0; i < 16; ++i) {
                        int64_t at = b * 16 + i;
                        double v = read_elem(x, at);
                        switch (kind) {
                            case 0: v = 0.0; break;
                            case 1: v = i % 2 ? -0.0 : 0.0; break;
                            case 2: if (i == 3) v = NAN; break;
                            case 3: if (i == 5 || i == 6) v = i == 5 ? INFINITY : -INFINITY; break;
                            case 4: v *= 1e-30; break;
                            case 5: v *= 1e4; break;
                            default: v = 0.25 * double(r.randint(-24, 24)); break;  // E2M1 ties after scaling
                        }
                        write_elem(x, at, v);
                    }
                }
                tensor rc = tensor::alloc(dtype::U8, {rows, n / 2}), rs = tensor::alloc(dtype::E4M3, {rows, n / 16});
                cpu_be().quantize_nvfp4_act(x, g, rc, rs);
                tensor dx = to_gpu(x);
                ++n_cases;
                for_each_gpu_kernel("quantize_nvfp4_act", t, st.ran, st.declined, [&](const kernel_entry& k) {
                    gpu_guarded oc = make_gpu_guarded(dtype::U8, {rows, n / 2}), os = make_gpu_guarded(dtype::E4M3, {rows, n / 16});
                    gpu_be().quantize_nvfp4_act(dx, g, oc.view, os.view);
                    bool ic = false, is = false;
                    tensor gc = oc.result(&ic), gs = os.result(&is);
                    EXPECT_TRUE(ic && is) << k.name << " guards " << vars;
                    int64_t bad_c = 0, bad_s = 0, first = -1;
                    for (int64_t i = 0; i < rc.numel(); ++i)
                        if (gc.ptr<uint8_t>()[i] != rc.ptr<uint8_t>()[i]) bad_c++, first = first < 0 ? i : first;
                    for (int64_t i = 0; i < rs.numel(); ++i) bad_s += gs.ptr<uint8_t>()[i] != rs.ptr<uint8_t>()[i];
                    EXPECT_EQ(bad_c + bad_s, 0) << k.name << " " << vars << ": " << bad_c << " code bytes and " << bad_s
                                                << " scale bytes differ (first code byte " << first << ")";
                });
            }
    EXPECT_EQ(n_cases, 75);
    expect_gpu_ran("quantize_nvfp4_act", st.ran, 75);
}
