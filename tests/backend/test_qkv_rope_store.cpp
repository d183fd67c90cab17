// qkv_rope_store on the CPU: the fused attention input stage equals the unfused ops it stands for
// (q/k/v split out of the fused rows as get_rows would, then rms_norm, rope, kv_store) bit for bit, for
// every dtype, with and without qk-norm, GQA ratios and a padding slot; bad shapes name the culprit.
#include "backend/ops.h"
#include "ops_harness.h"
#include "qkv_case.h"

using namespace tetra;
using namespace tetra_test;

namespace {

// fn must throw tetra::error whose message contains `want`.
template <class F> void expect_error_contains(F&& fn, const std::string& want) {
    try {
        fn();
        ADD_FAILURE() << "no error; expected one containing: " << want;
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
}

}  // namespace

TEST(qkv_rope_store, equals_the_unfused_ops) {
    rng r(11);
    int cases = 0;
    struct heads { int64_t nh, nkv, hd, n_rot; } hs[] = {{4, 2, 8, 8}, {6, 3, 16, 8}, {2, 2, 4, 4}};
    for (dtype t : {dtype::F32, dtype::BF16, dtype::F16})
        for (auto h : hs)
            for (int64_t n : {1, 5})
                for (bool norm : {false, true}) {
                    qkv_case c = make_qkv_case(r, t, h.nh, h.nkv, h.hd, h.n_rot, n, norm, 10000.0f, 5000, 4, 4);
                    tensor q = tensor::alloc(t, {n, h.nh, h.hd}), kc = clone(c.k_cache0), vc = clone(c.v_cache0);
                    cpu_be().qkv_rope_store(c.qkv, c.q_norm, c.k_norm, 1e-5f, c.positions, c.inv_freq, q, kc, vc, c.slots);
                    // Unfused.
                    tensor uq, uk, uv;
                    split_qkv(c, uq, uk, uv);
                    tensor ukc = clone(c.k_cache0), uvc = clone(c.v_cache0);
                    if (norm) {
                        tensor qr = tensor_reshape(uq, {n * h.nh, h.hd}), kr = tensor_reshape(uk, {n * h.nkv, h.hd});
                        cpu_be().rms_norm(qr, c.q_norm, 1e-5f, qr);
                        cpu_be().rms_norm(kr, c.k_norm, 1e-5f, kr);
                    }
                    cpu_be().rope(uq, uk, c.positions, c.inv_freq);
                    cpu_be().kv_store(uk, uv, ukc, uvc, c.slots);
                    std::string vars = std::string("act=") + dn(t) + " hd=" + std::to_string(h.hd) + " n=" + std::to_string(n) +
                                       " norm=" + std::to_string(norm);
                    EXPECT_EQ(compare(to_double(q), to_double(uq), 0), "") << vars;
                    EXPECT_EQ(compare(to_double(kc), to_double(ukc), 0), "") << vars;
                    EXPECT_EQ(compare(to_double(vc), to_double(uvc), 0), "") << vars;
                    // The padding slot's cache rows are untouched; the others changed.
                    EXPECT_NE(compare(to_double(kc), to_double(c.k_cache0), 0), "") << vars;
                    ++cases;
                }
    EXPECT_EQ(cases, 36);
}

TEST(qkv_rope_store, errors_name_the_culprit) {
    rng r(12);
    rope_params rp;
    rp.theta = 10000.0f, rp.n_rot = 8;
    tensor inv = rope_inv_freq(rp, 8), qkv = random_tensor(r, dtype::F32, {2, 8, 8});
    tensor q = tensor::alloc(dtype::F32, {2, 4, 8}), kc = tensor::alloc(dtype::F32, {2, 4, 2, 8}), vc = kc;
    tensor pt = i32_tensor({0, 1}), sm = i32_tensor({0, 1});
    EXPECT_TRUE(cpu_be().has_qkv_rope_store(qkv, tensor{}, tensor{}, inv, q, kc));
    // n_head + 2·n_head_kv = 4 + 4 ≠ 7 heads
    tensor bad = random_tensor(r, dtype::F32, {2, 7, 8});
    expect_error_contains([&] { cpu_be().qkv_rope_store(bad, tensor{}, tensor{}, 1e-6f, pt, inv, q, kc, vc, sm); },
                          "qkv_rope_store: qkv [2, 7, 8]");
    tensor wn = random_tensor(r, dtype::F32, {7});
    expect_error_contains([&] { cpu_be().qkv_rope_store(qkv, wn, tensor{}, 1e-6f, pt, inv, q, kc, vc, sm); },
                          "'q_norm' has shape [7]; expected [8]");
    expect_error_contains([&] { cpu_be().qkv_rope_store(qkv, tensor{}, tensor{}, 1e-6f, i32_tensor({0}), inv, q, kc, vc, sm); },
                          "'positions' has shape [1]; expected [2]");
}
