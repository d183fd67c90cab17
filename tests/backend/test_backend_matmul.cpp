// test_backend_ops (CPU), matmul: dense (bf16/f16/f32 weights), NVFP4 W4A16 and NVFP4 W4A4, for
// every CPU kernel entry (plain oracle and AVX2 fast kernels). The reference is written here from
// the spec: e2m1/e4m3 decoded by formula, activation quantization for W4A4 (§3.5) re-derived
// with brute-force RNE, and a double dot product. Fast kernels are also compared with the plain
// ones; NaN/Inf patterns must match exactly.
#include "backend/ops.h"
#include "nvfp4/nvfp4.h"
#include "ops_harness.h"

using namespace tetra;
using namespace tetra_test;

namespace {

double e2m1_val(int code) {
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return (code & 8 ? -1 : 1) * mag[code & 7];
}

double e4m3_val(int b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
    return s ? -v : v;
}

// Nearest e4m3 byte (non-negative x), ties to the even code, saturating at 448.
int e4m3_rne(double x) {
    int best = 0;
    for (int b = 1; b <= 0x7E; ++b) {
        double d = std::fabs(e4m3_val(b) - x), db = std::fabs(e4m3_val(best) - x);
        if (d < db || (d == db && (b & 1) == 0)) best = b;
    }
    return best;
}

// Nearest e2m1 magnitude index for |q| (ties to the even index, satfinite), sign from q < 0.
int e2m1_rne(double q) {
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    double a = std::fabs(q);
    int best = 0;
    for (int i = 1; i < 8; ++i) {
        double d = std::fabs(mag[i] - a), db = std::fabs(mag[best] - a);
        if (d < db || (d == db && (i & 1) == 0)) best = i;
    }
    return best | (q < 0 ? 8 : 0);
}

struct nvfp4_w {
    std::vector<uint8_t> codes, scales;
    linear_weight w;
};

nvfp4_w random_nvfp4(rng& r, int64_t n, int64_t k, float sg) {
    nvfp4_w q;
    q.codes.resize(size_t(n * k / 2)), q.scales.resize(size_t(n * k / 16));
    for (auto& c : q.codes) c = uint8_t(r.randint(0, 255));
    for (auto& s : q.scales) s = uint8_t(r.randint(0x08, 0x7E));  // finite, incl. subnormal-free range
    q.w.kind = linear_kind::NVFP4, q.w.n_out = n, q.w.n_in = k, q.w.scale_global = sg;
    q.w.codes = tensor::view(dtype::U8, {n, k / 2}, q.codes.data());
    q.w.scales = tensor::view(dtype::E4M3, {n, k / 16}, q.scales.data());
    return q;
}

std::vector<double> dequant_ref(const nvfp4_w& q) {
    int64_t n = q.w.n_out, k = q.w.n_in;
    std::vector<double> w(static_cast<size_t>(n * k));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < k; ++j) {
            int code = (q.codes[size_t(i * k / 2 + j / 2)] >> (4 * (j % 2))) & 15;
            w[size_t(i * k + j)] = e2m1_val(code) * e4m3_val(q.scales[size_t(i * k / 16 + j / 16)]) * double(q.w.scale_global);
        }
    return w;
}

// W4A4 activation fake-quant per §3.5 in f32 steps: SF = e4m3(G·(amax/6)); q = x / (SF/G).
std::vector<double> act_quant_ref(const std::vector<double>& x, int64_t m, int64_t k, float g) {
    std::vector<double> out(x.size());
    for (int64_t i = 0; i < m; ++i)
        for (int64_t b = 0; b < k; b += 16) {
            float amax = 0;
            for (int64_t j = b; j < b + 16; ++j) amax = std::max(amax, std::fabs(float(x[size_t(i * k + j)])));
            float sfv = g * (amax / 6.0f);
            double sf = e4m3_val(e4m3_rne(double(sfv)));
            for (int64_t j = b; j < b + 16; ++j) {
                double deq = 0;
                if (sf != 0) {
                    float qv = float(x[size_t(i * k + j)]) / (float(sf) / g);
                    deq = e2m1_val(e2m1_rne(double(qv))) * sf / double(g);
                }
                out[size_t(i * k + j)] = deq;
            }
        }
    return out;
}

std::vector<double> matmul_ref(const std::vector<double>& x, const std::vector<double>& w, int64_t m, int64_t n, int64_t k) {
    std::vector<double> out(static_cast<size_t>(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double acc = 0;
            for (int64_t e = 0; e < k; ++e) acc += x[size_t(i * k + e)] * w[size_t(j * k + e)];
            out[size_t(i * n + j)] = acc;
        }
    return out;
}

// Σ_k |x[m,k]·W[n,k]|: the scale of the rounding error of any f32 summation order.
std::vector<double> abs_ref(const std::vector<double>& x, const std::vector<double>& w, int64_t m, int64_t n, int64_t k) {
    std::vector<double> ax(x.size()), aw(w.size());
    for (size_t i = 0; i < x.size(); ++i) ax[i] = std::fabs(x[i]);
    for (size_t i = 0; i < w.size(); ++i) aw[i] = std::fabs(w[i]);
    return matmul_ref(ax, aw, m, n, k);
}

// "" if |got − ref| ≤ bound elementwise, with identical NaN/±Inf positions.
std::string within(const std::vector<double>& got, const std::vector<double>& ref, const std::vector<double>& bound) {
    std::string nf = compare(got, ref, INFINITY);  // non-finite pattern only
    if (!nf.empty()) return nf;
    for (size_t i = 0; i < got.size(); ++i)
        if (std::isfinite(ref[i]) && !(std::fabs(got[i] - ref[i]) <= bound[i]))
            return "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", expected " +
                   std::to_string(ref[i]) + " ± " + std::to_string(bound[i]);
    return "";
}

// Runs `op` with every CPU kernel on (x, w). Error bound per output element (rigorous for any
// summation order of f32 products): (K + 4)·2^-24·Σ|x·w| (accumulation, plus the f32 roundings
// of the dequantized weight and block-scale products), plus 2^-8·|ref| when the output is rounded
// to bf16/f16. Each kernel vs the double reference within the bound; fast kernels vs the plain
// kernel within twice the bound (both sit within the bound of the exact value).
void run_all(const std::string& op, const tensor& x, const linear_weight& w, matmul_mode mode,
             const std::vector<double>& ref, const std::vector<double>& absref, const std::string& vars,
             std::map<std::string, int>& ran) {
    int64_t m = x.dim(0), n = w.n_out, k = w.n_in;
    std::vector<double> bound(ref.size()), bound2(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
        bound[i] = double(k + 4) * 0x1.0p-24 * absref[i] + (x.type == dtype::F32 ? 0.0 : 0x1.0p-8 * std::fabs(ref[i]));
        bound2[i] = 2 * bound[i];
    }
    std::map<std::string, std::vector<double>> got;
    for_each_kernel(op, x.type, ran, [&](const kernel_entry& kn) {
        guarded out = make_guarded(x.type, {m, n});
        cpu_be().matmul(x, w, out.view, mode);
        EXPECT_TRUE(out.intact()) << kn.name << " " << vars;
        got[kn.name] = to_double(out.view);
        EXPECT_EQ(within(got[kn.name], ref, bound), "") << kn.name << " vs reference: " << vars;
    });
    auto plain = got.find(op + "_cpu");
    ASSERT_TRUE(plain != got.end()) << op << "_cpu did not run: " << vars;
    for (const auto& g : got)
        if (g.first != plain->first)
            EXPECT_EQ(within(g.second, plain->second, bound2), "") << g.first << " vs " << plain->first << ": " << vars;
}

}  // namespace

TEST(backend_ops, matmul_dense) {
    std::map<std::string, int> ran;
    rng r(21);
    for (dtype wt : {dtype::BF16, dtype::F16, dtype::F32})
        for (dtype xt : {dtype::F32, dtype::BF16})
            for (int64_t m : {1, 2, 4, 5, 9})
                for (int64_t k : {1, 7, 16, 33, 64, 576})
                    for (int64_t n : {1, 3, 17, 64}) {
                        std::string vars = std::string("w=") + dn(wt) + " x=" + dn(xt) + " M=" + std::to_string(m) +
                                           " K=" + std::to_string(k) + " N=" + std::to_string(n);
                        tensor x = random_tensor(r, xt, {m, k});
                        linear_weight w;
                        w.n_out = n, w.n_in = k, w.dense = random_tensor(r, wt, {n, k});
                        auto xv = to_double(x), wv = to_double(w.dense);
                        run_all("matmul_dense", x, w, matmul_mode::AUTO, matmul_ref(xv, wv, m, n, k),
                                abs_ref(xv, wv, m, n, k), vars, ran);
                    }
    expect_all_ran("matmul_dense", ran, 300);
}

TEST(backend_ops, matmul_dense_lm_head_and_nonfinite) {
    std::map<std::string, int> ran;
    rng r(22);
    int64_t m = 3, k = 576, n = 4099;  // SmolLM2 lm_head width, odd N
    tensor x = random_tensor(r, dtype::F32, {m, k});
    x.ptr<float>()[0 * k + 100] = NAN;        // row 0 → all NaN
    x.ptr<float>()[1 * k + 7] = INFINITY;     // row 1 → ±Inf by the sign of W[:, 7]
    linear_weight w;
    w.n_out = n, w.n_in = k, w.dense = random_tensor(r, dtype::BF16, {n, k});
    auto xv = to_double(x), wv = to_double(w.dense);
    run_all("matmul_dense", x, w, matmul_mode::DENSE, matmul_ref(xv, wv, m, n, k), abs_ref(xv, wv, m, n, k),
            "lm_head M=3 K=576 N=4099", ran);
    expect_all_ran("matmul_dense", ran, 1);
}

TEST(backend_ops, matmul_nvfp4_w4a16) {
    std::map<std::string, int> ran;
    rng r(23);
    for (dtype xt : {dtype::F32, dtype::BF16})
        for (int64_t m : {1, 2, 3, 4, 5, 9})
            for (int64_t k : {16, 48, 64, 80, 576, 1536})
                for (int64_t n : {1, 5, 33}) {
                    std::string vars = std::string("x=") + dn(xt) + " M=" + std::to_string(m) + " K=" + std::to_string(k) +
                                       " N=" + std::to_string(n);
                    tensor x = random_tensor(r, xt, {m, k});
                    nvfp4_w q = random_nvfp4(r, n, k, 0.0123f);
                    auto xv = to_double(x), wv = dequant_ref(q);
                    run_all("matmul_nvfp4_w4a16", x, q.w, matmul_mode::AUTO, matmul_ref(xv, wv, m, n, k),
                            abs_ref(xv, wv, m, n, k), vars, ran);
                }
    expect_all_ran("matmul_nvfp4_w4a16", ran, 100);
}

TEST(backend_ops, matmul_nvfp4_w4a16_quantized_weights_and_nonfinite) {
    std::map<std::string, int> ran;
    rng r(24);
    int64_t m = 2, k = 1536, n = 37;
    std::vector<float> wf(static_cast<size_t>(n * k));
    for (auto& v : wf) v = float(0.05 * r.normal());
    nvfp4_w q = random_nvfp4(r, n, k, 1.0f);
    float amax = 0;
    for (float v : wf) amax = std::max(amax, std::fabs(v));
    q.w.scale_global = nvfp4_scale_global_modelopt(amax);
    nvfp4_quantize_modelopt(wf.data(), n, k, q.w.scale_global, q.codes.data(), q.scales.data());
    tensor x = random_tensor(r, dtype::F32, {m, k});
    auto wref = dequant_ref(q);
    auto xv = to_double(x);
    run_all("matmul_nvfp4_w4a16", x, q.w, matmul_mode::W4A16, matmul_ref(xv, wref, m, n, k), abs_ref(xv, wref, m, n, k),
            "modelopt-quantized K=1536 N=37", ran);
    // Dequantized weights are close to the originals (sanity of the generator, 4-bit: NMSE < 2e-2).
    std::vector<double> wd(wf.begin(), wf.end());
    EXPECT_EQ(compare(wref, wd, 2e-2), "");
    // Non-finite: a NaN scale byte poisons one output column; NaN/Inf in x poison rows.
    q.scales[size_t(5 * k / 16 + 3)] = 0x7F;
    x.ptr<float>()[1 * k + 9] = INFINITY;
    xv = to_double(x), wref = dequant_ref(q);
    run_all("matmul_nvfp4_w4a16", x, q.w, matmul_mode::W4A16, matmul_ref(xv, wref, m, n, k), abs_ref(xv, wref, m, n, k),
            "NaN scale in row 5, Inf in x row 1", ran);
    expect_all_ran("matmul_nvfp4_w4a16", ran, 2);
}

TEST(backend_ops, matmul_nvfp4_w4a4) {
    std::map<std::string, int> ran;
    rng r(25);
    for (dtype xt : {dtype::F32, dtype::BF16})
        for (int64_t m : {1, 2, 5})
            for (int64_t k : {16, 80, 576})
                for (int64_t n : {1, 7, 33})
                    for (double xscale : {1.0, 40.0}) {
                        std::string vars = std::string("x=") + dn(xt) + " M=" + std::to_string(m) + " K=" +
                                           std::to_string(k) + " N=" + std::to_string(n) + " xscale=" + std::to_string(xscale);
                        tensor x = random_tensor(r, xt, {m, k}, xscale);
                        nvfp4_w q = random_nvfp4(r, n, k, 0.02f);
                        auto xv = to_double(x);
                        double amax = 0;
                        for (double v : xv) amax = std::max(amax, std::fabs(v));
                        q.w.has_input_scale = true;
                        q.w.input_scale = float(amax / 2688.0);
                        q.w.input_global_quant = 1.0f / q.w.input_scale;
                        auto xq = act_quant_ref(xv, m, k, q.w.input_global_quant);
                        auto wv = dequant_ref(q);
                        run_all("matmul_nvfp4_w4a4", x, q.w, matmul_mode::AUTO, matmul_ref(xq, wv, m, n, k),
                                abs_ref(xq, wv, m, n, k), vars, ran);
                    }
    expect_all_ran("matmul_nvfp4_w4a4", ran, 50);
}

TEST(backend_ops, matmul_mode_errors) {
    rng r(26);
    tensor x = random_tensor(r, dtype::F32, {2, 32});
    nvfp4_w q = random_nvfp4(r, 4, 32, 1.0f);
    guarded out = make_guarded(dtype::F32, {2, 4});
    EXPECT_NE(error_of([&] { cpu_be().matmul(x, q.w, out.view, matmul_mode::W4A4); }).find("mode w4a4 needs"), std::string::npos);
    EXPECT_NE(error_of([&] { cpu_be().matmul(x, q.w, out.view, matmul_mode::DENSE); }).find("mode dense needs a dense weight"),
              std::string::npos);
    tensor x2 = random_tensor(r, dtype::F32, {2, 31});
    EXPECT_EQ(error_of([&] { cpu_be().matmul(x2, q.w, out.view); }), "matmul: x [2, 31] has K = 31; the weight expects n_in = 32");
    // A dense weight runs dense whatever NVFP4 mode is requested (one mode for all linears).
    linear_weight dw;
    dw.n_out = 4, dw.n_in = 32, dw.dense = random_tensor(r, dtype::F32, {4, 32});
    auto xv = to_double(x), ref = matmul_ref(xv, to_double(dw.dense), 2, 4, 32);
    for (matmul_mode md : {matmul_mode::W4A16, matmul_mode::W4A4, matmul_mode::DENSE}) {
        guarded o = make_guarded(dtype::F32, {2, 4});
        cpu_be().matmul(x, dw, o.view, md);
        EXPECT_EQ(compare(to_double(o.view), ref, 1e-10), "") << matmul_mode_name(md);
    }
    q.w.scales = tensor::view(dtype::F32, {4, 2}, q.scales.data());
    EXPECT_EQ(error_of([&] { cpu_be().matmul(x, q.w, out.view); }), "matmul: 'w.scales' has dtype f32; expected e4m3");
}

// matmul_silu (the fused gate/up stage): on the CPU, out = silu(gate) · up of the matmul into gu,
// against the double reference of both halves (silu applied in double to the bf16/f32-rounded
// matmul values as stored in gu: the op's definition); the wrapper's shape and overlap errors.
TEST(backend_ops, matmul_silu) {
    rng r(27);
    for (dtype xt : {dtype::F32, dtype::BF16})
        for (int64_t m : {1, 3, 9})
            for (int64_t n_ff : {1, 16, 40}) {
                const int64_t k = 80;
                std::string vars = std::string("x=") + dn(xt) + " M=" + std::to_string(m) + " n_ff=" + std::to_string(n_ff);
                tensor x = random_tensor(r, xt, {m, k});
                nvfp4_w q = random_nvfp4(r, 2 * n_ff, k, 0.0123f);
                tensor gu = tensor::alloc(xt, {m, 2 * n_ff}), out = tensor::alloc(xt, {m, n_ff});
                cpu_be().matmul_silu(x, q.w, gu, out, matmul_mode::W4A16);
                // gu is the matmul (checked against the reference), out the silu of its stored halves
                auto xv = to_double(x), wv = dequant_ref(q), g = to_double(gu), o = to_double(out);
                EXPECT_EQ(compare(g, matmul_ref(xv, wv, m, 2 * n_ff, k), xt == dtype::F32 ? 1e-10 : 1e-4), "") << vars;
                std::vector<double> want(size_t(m * n_ff));
                for (int64_t i = 0; i < m; ++i)
                    for (int64_t j = 0; j < n_ff; ++j) {
                        double a = g[size_t(i * 2 * n_ff + j)], b = g[size_t(i * 2 * n_ff + n_ff + j)];
                        want[size_t(i * n_ff + j)] = a / (1.0 + std::exp(-a)) * b;
                    }
                EXPECT_EQ(compare(o, want, xt == dtype::F32 ? 1e-10 : 1e-4), "") << vars;
            }
    tensor x = random_tensor(r, dtype::F32, {2, 32});
    nvfp4_w odd = random_nvfp4(r, 5, 32, 1.0f), q = random_nvfp4(r, 8, 32, 1.0f);
    tensor gu = tensor::alloc(dtype::F32, {2, 8}), out = tensor::alloc(dtype::F32, {2, 4});
    EXPECT_NE(error_of([&] { cpu_be().matmul_silu(x, odd.w, gu, out); }).find("expected an even number"), std::string::npos);
    tensor bad = tensor::alloc(dtype::F32, {2, 5});
    EXPECT_NE(error_of([&] { cpu_be().matmul_silu(x, q.w, gu, bad); }).find("'out'"), std::string::npos);
    tensor gu_front = tensor_reshape(tensor_rows(tensor_reshape(gu, {16}), 0, 8), {2, 4});
    EXPECT_NE(error_of([&] { cpu_be().matmul_silu(x, q.w, gu, gu_front); }).find("must not overlap"), std::string::npos);
}
