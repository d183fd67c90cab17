// qkv_rope_store on the CPU: the fused attention input stage equals the unfused ops it stands for
// (q/k/v split out of the fused rows by hand here, then rms_norm, rope, kv_store) bit for bit, for
// every dtype, with and without qk-norm, GQA ratios and a padding slot; bad shapes name the culprit.
#include <numeric>

#include "backend/ops.h"
#include "ops_harness.h"

using namespace tetra;
using namespace tetra_test;

namespace {

// Columns [c0, c0 + nc) of every row of a [rows, cols] tensor, as a new [rows, nc] tensor.
tensor cols(const tensor& t, int64_t rows, int64_t cols_total, int64_t c0, int64_t nc) {
    tensor out = tensor::alloc(t.type, {rows, nc});
    const size_t es = dtype_size(t.type);
    for (int64_t i = 0; i < rows; ++i)
        std::memcpy(static_cast<char*>(out.data) + size_t(i * nc) * es,
                    static_cast<const char*>(t.data) + size_t(i * cols_total + c0) * es, size_t(nc) * es);
    return out;
}

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
                    const int64_t H = h.nh + 2 * h.nkv, bs = 4, n_blocks = 4;
                    rope_params rp;
                    rp.theta = 10000.0f, rp.n_rot = int(h.n_rot);
                    tensor inv = rope_inv_freq(rp, h.hd);
                    tensor qkv = random_tensor(r, t, {n, H, h.hd}, 2.0);
                    tensor qn = norm ? random_tensor(r, t, {h.hd}) : tensor{}, kn = norm ? random_tensor(r, t, {h.hd}) : tensor{};
                    std::vector<int32_t> pos, slots(size_t(n_blocks * bs));
                    for (int64_t i = 0; i < n; ++i) pos.push_back(int32_t(r.randint(0, 5000)));
                    std::iota(slots.begin(), slots.end(), 0);
                    std::shuffle(slots.begin(), slots.end(), r.g);
                    slots.resize(size_t(n));
                    if (n > 2) slots[1] = -1;
                    tensor pt = i32_tensor(pos), sm = i32_tensor(slots);
                    std::vector<int64_t> cshape{n_blocks, bs, h.nkv, h.hd};
                    tensor kc0 = random_tensor(r, t, cshape), vc0 = random_tensor(r, t, cshape);
                    tensor q = tensor::alloc(t, {n, h.nh, h.hd}), kc = tensor::alloc(t, cshape), vc = tensor::alloc(t, cshape);
                    std::memcpy(kc.data, kc0.data, kc0.nbytes()), std::memcpy(vc.data, vc0.data, vc0.nbytes());
                    cpu_be().qkv_rope_store(qkv, qn, kn, 1e-5f, pt, inv, q, kc, vc, sm);
                    // Unfused.
                    tensor flat = tensor_reshape(qkv, {n, H * h.hd});
                    tensor uq = tensor_reshape(cols(flat, n, H * h.hd, 0, h.nh * h.hd), {n, h.nh, h.hd});
                    tensor uk = tensor_reshape(cols(flat, n, H * h.hd, h.nh * h.hd, h.nkv * h.hd), {n, h.nkv, h.hd});
                    tensor uv = tensor_reshape(cols(flat, n, H * h.hd, (h.nh + h.nkv) * h.hd, h.nkv * h.hd), {n, h.nkv, h.hd});
                    tensor ukc = tensor::alloc(t, cshape), uvc = tensor::alloc(t, cshape);
                    std::memcpy(ukc.data, kc0.data, kc0.nbytes()), std::memcpy(uvc.data, vc0.data, vc0.nbytes());
                    if (norm) {
                        tensor qr = tensor_reshape(uq, {n * h.nh, h.hd}), kr = tensor_reshape(uk, {n * h.nkv, h.hd});
                        cpu_be().rms_norm(qr, qn, 1e-5f, qr);
                        cpu_be().rms_norm(kr, kn, 1e-5f, kr);
                    }
                    cpu_be().rope(uq, uk, pt, inv);
                    cpu_be().kv_store(uk, uv, ukc, uvc, sm);
                    std::string vars = std::string("act=") + dn(t) + " hd=" + std::to_string(h.hd) + " n=" + std::to_string(n) +
                                       " norm=" + std::to_string(norm);
                    EXPECT_EQ(compare(to_double(q), to_double(uq), 0), "") << vars;
                    EXPECT_EQ(compare(to_double(kc), to_double(ukc), 0), "") << vars;
                    EXPECT_EQ(compare(to_double(vc), to_double(uvc), 0), "") << vars;
                    // The padding slot's cache rows are untouched; the others changed.
                    EXPECT_NE(compare(to_double(kc), to_double(kc0), 0), "") << vars;
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
