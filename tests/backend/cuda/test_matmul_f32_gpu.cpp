// The f32-activation matmuls (matmul_f32_sm80.cu, the kernels of --dtype float32 runs) through the
// CUDA backend against the CPU backend (the oracle: exact NVFP4 dequant or the bf16 weight, f32
// sums): W4A16 on the prepared (re-laid) weight and bf16 dense, odd shapes (k a multiple of 16 but
// not of 64, k not a multiple of 8 for dense, n not a multiple of the tiles), 1..64 rows (row groups
// of 4 partly filled), guarded outputs, NaN/±Inf parity, a row alone vs inside a batch bit for bit,
// and the registry's routing (f32 calls go to these kernels, bf16 calls never do).
#include <cstring>
#include <map>

#include "backend/cuda/gpu_harness.h"
#include "backend/ops.h"

using namespace tetra;
using namespace tetra_test;

namespace {

matmul_mode mode_of(bool nvfp4) { return nvfp4 ? matmul_mode::W4A16 : matmul_mode::DENSE; }

tensor run_gpu(const tensor& x, const linear_weight& dev, int64_t n, bool nvfp4, const std::string& vars) {
    gpu_guarded out = make_gpu_guarded(dtype::F32, {x.dim(0), n});
    gpu_be().matmul(to_gpu(x), dev, out.view, mode_of(nvfp4));
    bool ok = false;
    tensor got = out.result(&ok);
    EXPECT_TRUE(ok) << "guard bytes overwritten: " << vars;
    return got;
}

struct shape_t {
    int64_t n, k;
    bool nvfp4;
};
const shape_t k_shapes[] = {{33, 80, true},   {100, 208, true},  {257, 1040, true}, {61, 4112, true},
                            {40, 16, true},   {19, 37, false},   {33, 80, false},   {257, 1040, false},
                            {1000, 576, false}, {7, 4100, false}};
const int64_t k_rows[] = {1, 3, 4, 5, 17, 64};

}  // namespace

// Both sides keep f32 and differ only in the order of the f32 sums: ~sqrt(K) roundings of 2^-24
// relative to Σ|terms| (≤ ~80 |ref| on these random rows) give NMSE ~1e-11 at K = 4112; 1e-9 sits 4
// orders above the measured ~1e-13 and 7 below a wrong row, tile, scale or k block.
TEST(matmul_f32_gpu, w4a16_and_dense_match_cpu) {
    rng r(401);
    int n_cases = 0;
    for (const shape_t& sh : k_shapes) {
        linear_weight host = random_linear(r, sh.n, sh.k, sh.nvfp4);
        linear_weight dev = gpu_be().prepare_linear(host);
        for (int64_t m : k_rows)
            for (bool nonfinite : {false, true}) {
                const std::string vars = std::string(sh.nvfp4 ? "w4a16" : "dense") + " n=" + std::to_string(sh.n) +
                                         " k=" + std::to_string(sh.k) + " m=" + std::to_string(m) +
                                         " nonfinite=" + std::to_string(nonfinite);
                tensor x = random_tensor(r, dtype::F32, {m, sh.k});
                if (nonfinite) {
                    write_elem(x, 5, INFINITY);  // row 0: +Inf
                    if (m > 1) write_elem(x, sh.k + sh.k / 2, NAN);  // row 1: NaN
                    if (m > 2) write_elem(x, 3 * sh.k - 1, -INFINITY);  // row 2: -Inf at the last k
                }
                tensor ref = tensor::alloc(dtype::F32, {m, sh.n});
                cpu_be().matmul(x, host, ref, mode_of(sh.nvfp4));
                std::vector<double> c = to_double(ref), g = to_double(run_gpu(x, dev, sh.n, sh.nvfp4, vars));
                int bad = 0;
                for (double v : c) bad += !std::isfinite(v);
                EXPECT_EQ(bad > 0, nonfinite) << "the oracle's non-finite outputs: " << vars;
                EXPECT_EQ(compare(g, c, 1e-9), "") << vars;
                ++n_cases;
            }
    }
    EXPECT_EQ(n_cases, 120);
}

// A row's bits do not depend on the batch (the summation order depends only on k): rows of a
// 64-row call equal the same rows computed alone, and a repeat of the call is bit-identical.
TEST(matmul_f32_gpu, rows_alone_equal_rows_in_batch) {
    rng r(402);
    for (bool nvfp4 : {true, false}) {
        const int64_t n = 136, k = 1040, m = 64;
        linear_weight dev = gpu_be().prepare_linear(random_linear(r, n, k, nvfp4));
        tensor x = random_tensor(r, dtype::F32, {m, k});
        const std::string what = nvfp4 ? "w4a16" : "dense";
        tensor all = run_gpu(x, dev, n, nvfp4, what), again = run_gpu(x, dev, n, nvfp4, what);
        EXPECT_EQ(std::memcmp(all.data, again.data, all.nbytes()), 0) << what << ": a repeat differs";
        for (int64_t row : {0, 3, 4, 37, 63}) {
            tensor one = tensor::alloc(dtype::F32, {1, k});
            std::memcpy(one.data, x.ptr<float>() + row * k, size_t(k) * 4);
            tensor alone = run_gpu(one, dev, n, nvfp4, what);
            EXPECT_EQ(std::memcmp(alone.data, all.ptr<float>() + row * n, size_t(n) * 4), 0)
                << what << ": row " << row << " alone vs in the batch";
        }
    }
}

// f32 calls are routed to the CUDA-core f32 kernels (the tensor-core ones give the reason they
// cannot take f32), and the f32 kernels never take a bf16 call.
TEST(matmul_f32_gpu, registry_routes_by_activation_dtype) {
    rng r(403);
    const int64_t n = 64, k = 256;
    for (bool nvfp4 : {true, false}) {
        linear_weight dev = gpu_be().prepare_linear(random_linear(r, n, k, nvfp4));
        const std::string op = nvfp4 ? "matmul_nvfp4_w4a16" : "matmul_dense";
        const std::string f32_kernel = nvfp4 ? "matmul_nvfp4_w4a16_f32_sm80" : "matmul_dense_f32_sm80";
        for (dtype act : {dtype::F32, dtype::BF16}) {
            tensor x = gpu_be().alloc(act, {2, k}), out = gpu_be().alloc(act, {2, n});
            matmul_args a;
            a.act = act, a.align = 256;  // cudaMalloc'd buffers
            a.x = x, a.out = out, a.w = &dev, a.m = 2, a.n = n, a.k = k;
            const std::string sel = kernel_registry::instance().select(op, gpu_be().device(), a).name;
            if (act == dtype::F32) {
                EXPECT_EQ(sel, f32_kernel);
                for (const kernel_candidate& c : kernel_registry::instance().candidates(op, gpu_be().device(), &a))
                    if (c.kernel->req.device == device_kind::CUDA && c.kernel->name != f32_kernel)
                        EXPECT_FALSE(c.why_not.empty()) << c.kernel->name << " took an f32 call";
            } else {
                EXPECT_NE(sel, f32_kernel);
            }
        }
    }
}
