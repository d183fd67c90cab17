// The fused MoE gate/up on the CUDA backend (moe.cpp, issue #7) computes what the unfused path
// computes, bit for bit: a grouped matmul over per-expert stacked [gate_e; up_e] weights gives, in
// each row's first and second halves, exactly the gate and the up outputs of the two separate grouped
// matmuls (every CUDA W4A16 kernel forced in turn, and the dense kernel), and silu_mul_gate_up on
// the GPU equals silu_mul of the halves on the GPU bit for bit and silu_mul_gate_up on the CPU within
// the exp difference (f32, bf16, f16), with guards around the output. (The whole model on the GPU against transformers: test_qwen3_moe_gpu.)
#include <cmath>
#include <cstring>
#include <map>

#include "backend/cuda/gpu_harness.h"
#include "backend/moe.h"

using namespace tetra;
using namespace tetra_test;

namespace {

// Expert e's gate and up ([ff, k] each, NVFP4 with one global scale per expert as ModelOpt shares
// it, or bf16) and the same pair stacked by rows: [2·ff, k].
struct expert_pairs {
    std::vector<linear_weight> gate, up, stacked;
};

tensor cat_rows(const tensor& a, const tensor& b) {
    tensor out = tensor::alloc(a.type, {a.dim(0) + b.dim(0), a.dim(1)});
    std::memcpy(out.data, a.data, a.nbytes());
    std::memcpy(out.ptr<uint8_t>() + a.nbytes(), b.data, b.nbytes());
    return out;
}

expert_pairs random_pairs(rng& r, int64_t ne, int64_t ff, int64_t k, bool nvfp4) {
    expert_pairs p;
    for (int64_t e = 0; e < ne; ++e) {
        const float sg = 1.0f / float(64 + e);
        linear_weight g = random_linear(r, ff, k, nvfp4, sg), u = random_linear(r, ff, k, nvfp4, sg), s = g;
        s.n_out = 2 * ff;
        if (nvfp4) s.codes = cat_rows(g.codes, u.codes), s.scales = cat_rows(g.scales, u.scales);
        else s.dense = cat_rows(g.dense, u.dense);
        p.gate.push_back(gpu_be().prepare_linear(g));
        p.up.push_back(gpu_be().prepare_linear(u));
        p.stacked.push_back(gpu_be().prepare_linear(s));
    }
    return p;
}

std::vector<int32_t> random_offsets(rng& r, int64_t rows, int64_t ne) {
    std::vector<int32_t> counts(size_t(ne), 0);
    for (int64_t i = 0; i < rows; ++i) ++counts[size_t(r.randint(0, std::min<int64_t>(ne, 12) - 1))];
    std::vector<int32_t> off = {0};
    for (int64_t e = 0; e < ne; ++e) off.push_back(off.back() + counts[size_t(e)]);
    return off;
}

struct case_t {
    int64_t ne, rows, ff, k;
};

// The grouped wgmma kernel (sm_90a images on sm_90) takes long batches only: ≥ 16 rows per expert.
const std::string k_long_plain = "moe_matmul_nvfp4_w4a16_wgmma_sm90";
bool long_kernel_runs_here() {
    for (const kernel_entry* k : cuda_kernels("moe_matmul_nvfp4_w4a16"))
        if (k->name == k_long_plain) return kernel_rejection(*k, gpu_be().device(), nullptr).empty();
    return false;
}

}  // namespace

TEST(moe_fused_gpu, stacked_gate_up_grouped_matmul_equals_separate_bitwise) {
    rng r(701);
    // Qwen3-30B-A3B's expert shape (ff 768, k 2048) at 8 and 64 rows (batch 1 and 8, top-8), and odd
    // shapes (a partial second tile, several passes of the mma kernel), and 200 rows over 8 experts
    // (the only case long enough for the grouped wgmma kernel).
    const case_t cases[] = {{16, 8, 768, 2048}, {16, 64, 768, 2048}, {8, 17, 40, 528}, {4, 3, 24, 1040},
                            {8, 200, 768, 2048}};
    std::map<std::string, int> ran, declined;
    for (bool nvfp4 : {true, false})
        for (const case_t& c : cases) {
            const std::string vars = std::string(nvfp4 ? "w4a16" : "dense") + " ne=" + std::to_string(c.ne) +
                                     " rows=" + std::to_string(c.rows) + " ff=" + std::to_string(c.ff) +
                                     " k=" + std::to_string(c.k);
            expert_pairs p = random_pairs(r, c.ne, c.ff, c.k, nvfp4);
            const tensor x = to_gpu(random_tensor(r, dtype::BF16, {c.rows, c.k}));
            const tensor off = to_gpu(i32_tensor(random_offsets(r, c.rows, c.ne)));
            const matmul_mode mode = nvfp4 ? matmul_mode::W4A16 : matmul_mode::DENSE;
            for_each_gpu_kernel(nvfp4 ? "moe_matmul_nvfp4_w4a16" : "moe_matmul_dense", dtype::BF16, ran, declined,
                                [&](const kernel_entry& kern) {
                tensor g = gpu_be().alloc(dtype::BF16, {c.rows, c.ff}), u = gpu_be().alloc(dtype::BF16, {c.rows, c.ff});
                gpu_guarded gu = make_gpu_guarded(dtype::BF16, {c.rows, 2 * c.ff});
                moe_matmul(gpu_be(), x, p.gate, off, g, mode);
                moe_matmul(gpu_be(), x, p.up, off, u, mode);
                moe_matmul(gpu_be(), x, p.stacked, off, gu.view, mode);
                bool ok = false;
                tensor got = gu.result(&ok);
                EXPECT_TRUE(ok) << "guard bytes overwritten: " << kern.name << " " << vars;
                tensor hg = to_host(g), hu = to_host(u);
                const size_t row = size_t(c.ff) * 2;
                int nonzero = 0, bad_rows = 0;
                for (int64_t i = 0; i < c.rows; ++i) {
                    const uint8_t* s = got.ptr<uint8_t>() + size_t(i) * 2 * row;
                    bad_rows += std::memcmp(s, hg.ptr<uint8_t>() + size_t(i) * row, row) != 0 ||
                                std::memcmp(s + row, hu.ptr<uint8_t>() + size_t(i) * row, row) != 0;
                }
                for (int64_t i = 0; i < hg.numel(); ++i) nonzero += hg.ptr<uint16_t>()[i] != 0;
                EXPECT_EQ(bad_rows, 0) << kern.name << " " << vars << ": stacked rows differ from gate | up";
                EXPECT_GT(nonzero, hg.numel() / 2) << "degenerate outputs: " << kern.name << " " << vars;
            });
        }
    if (long_kernel_runs_here()) EXPECT_TRUE(ran[k_long_plain] == 1 && declined[k_long_plain] == 4);
    ran.erase(k_long_plain), declined.erase(k_long_plain);
    EXPECT_TRUE(declined.empty()) << declined.begin()->first << " declined a case";
    for (const kernel_entry* k : cuda_kernels("moe_matmul_nvfp4_w4a16"))
        if (k->name != k_long_plain && kernel_rejection(*k, gpu_be().device(), nullptr).empty())
            EXPECT_GE(ran[k->name], 5) << k->name;
    expect_gpu_ran("moe_matmul_dense", ran, 5);
}

TEST(moe_fused_gpu, silu_mul_gate_up_equals_silu_mul_and_cpu_bitwise) {
    rng r(702);
    int n_cases = 0;
    for (dtype t : {dtype::BF16, dtype::F32, dtype::F16})
        for (auto [rows, ff] : {std::pair<int64_t, int64_t>{8, 768}, {64, 768}, {3, 40}, {1, 1}}) {
            const std::string vars = std::string(dtype_name(t)) + " rows=" + std::to_string(rows) + " ff=" + std::to_string(ff);
            tensor gu = random_tensor(r, t, {rows, 2 * ff}, 4.0);
            if (rows * ff > 10) write_elem(gu, 3, INFINITY), write_elem(gu, 2 * ff + 5, -INFINITY), write_elem(gu, 7, NAN);
            tensor g = tensor::alloc(t, {rows, ff}), u = tensor::alloc(t, {rows, ff});
            const size_t es = dtype_size(t), row = size_t(ff) * es;
            for (int64_t i = 0; i < rows; ++i) {
                std::memcpy(g.ptr<uint8_t>() + i * row, gu.ptr<uint8_t>() + i * 2 * row, row);
                std::memcpy(u.ptr<uint8_t>() + i * row, gu.ptr<uint8_t>() + i * 2 * row + row, row);
            }
            tensor cpu = tensor::alloc(t, {rows, ff});
            cpu_be().silu_mul_gate_up(gu, cpu);
            gpu_guarded fused = make_gpu_guarded(t, {rows, ff});
            gpu_be().silu_mul_gate_up(to_gpu(gu), fused.view);
            tensor split = gpu_be().alloc(t, {rows, ff});
            gpu_be().silu_mul(to_gpu(g), to_gpu(u), split);
            bool ok = false;
            tensor got = fused.result(&ok);
            EXPECT_TRUE(ok) << "guard bytes overwritten: " << vars;
            tensor want = to_host(split);
            EXPECT_EQ(std::memcmp(got.data, want.data, want.nbytes()), 0) << "GPU fused vs GPU silu_mul: " << vars;
            // Against the CPU oracle: expf vs std::exp differ by ≤ 2 ulp in f32 (CUDA math guide), then
            // one rounding to t: at most one ulp of t apart (relative 2^-23·4, 2^-10, 2^-7 with margin).
            const double tol = t == dtype::F32 ? 1e-6 : t == dtype::F16 ? 2e-3 : 1.6e-2;
            int bad = 0;
            for (int64_t i = 0; i < cpu.numel(); ++i) {
                double a = read_elem(got, i), b = read_elem(cpu, i);
                bool same = std::isfinite(b) ? std::fabs(a - b) <= tol * std::fabs(b) : (std::isnan(a) == std::isnan(b) && (std::isnan(b) || a == b));
                if (!same && bad++ < 3) ADD_FAILURE() << vars << " element " << i << ": GPU " << a << ", CPU " << b;
            }
            ++n_cases;
        }
    EXPECT_EQ(n_cases, 12);
}

// moe_matmul_silu: the registry picks the fused grouped mma kernel (silu in its epilogue) where n_ff
// is a multiple of 16 (the fused grouped wgmma kernel for 128 rows over 4 experts on an sm_90a
// image), else the two-step kernel; the fused out equals the grouped matmul into gu
// followed by silu_mul_gate_up on the GPU, bit for bit, with guards around out. Qwen3-30B-A3B's expert
// shape at 8, 64 and 512 rows (batch 1, 8 and 64 of top-8: 4, 2 and 1 warps per tile, 8 to 32 rows
// per pass), 32 rows per pass with k 4096 (x in several windows), a half of 3 tiles (an idle pair
// slot), and one the fused kernel declines (n_ff 40: its selection only). Both ops with
// offsets_early give the same bits (the reordered prologue; the offsets are uploaded before).
TEST(moe_fused_gpu, moe_matmul_silu_equals_two_step_bitwise) {
    rng r(703);
    const case_t cases[] = {{16, 8, 768, 2048},  {16, 64, 768, 2048}, {128, 512, 768, 2048},
                            {4, 128, 768, 4096}, {8, 17, 48, 528},    {4, 3, 40, 1040}};
    for (const case_t& c : cases) {
        const std::string vars = "ne=" + std::to_string(c.ne) + " rows=" + std::to_string(c.rows) +
                                 " ff=" + std::to_string(c.ff) + " k=" + std::to_string(c.k);
        expert_pairs p = random_pairs(r, c.ne, c.ff, c.k, true);
        const tensor x = to_gpu(random_tensor(r, dtype::BF16, {c.rows, c.k}));
        const tensor off = to_gpu(i32_tensor(random_offsets(r, c.rows, c.ne)));
        tensor gu = gpu_be().alloc(dtype::BF16, {c.rows, 2 * c.ff}), want = gpu_be().alloc(dtype::BF16, {c.rows, c.ff});
        gpu_guarded out = make_gpu_guarded(dtype::BF16, {c.rows, c.ff});
        moe_matmul_silu_args a;
        a.act = dtype::BF16, a.align = 256, a.mode = matmul_mode::W4A16, a.n_ff = c.ff, a.out = out.view;
        a.mm.act = dtype::BF16, a.mm.align = 256, a.mm.x = x, a.mm.expert_offsets = off, a.mm.out = gu;
        a.mm.experts = &p.stacked, a.mm.n_rows = c.rows, a.mm.n = 2 * c.ff, a.mm.k = c.k;
        const bool long_batch = long_kernel_runs_here() && c.rows >= 16 * c.ne;  // {4, 128, …}: the wgmma kernel
        EXPECT_EQ(kernel_registry::instance().select("moe_matmul_silu", gpu_be().device(), a).name,
                  c.ff % 16 != 0 ? "moe_matmul_silu_two_step_cuda"
                  : long_batch   ? "moe_matmul_silu_nvfp4_w4a16_wgmma_sm90"
                                 : "moe_matmul_silu_nvfp4_w4a16_mma_sm80")
            << vars;
        if (c.ff % 16 != 0) continue;  // the two-step kernel is the comparison itself: selection only
        moe_matmul_silu(gpu_be(), x, p.stacked, off, gu, out.view, matmul_mode::W4A16);
        bool ok = false;
        tensor got = out.result(&ok);
        EXPECT_TRUE(ok) << "guard bytes overwritten: " << vars;
        moe_matmul(gpu_be(), x, p.stacked, off, gu, matmul_mode::W4A16);
        gpu_be().silu_mul_gate_up(gu, want);
        // offsets_early (the offsets were uploaded before any of these launches): the grouped
        // kernel finds its work before its PDL wait; the same bits, fused and plain.
        tensor early_out = gpu_be().alloc(dtype::BF16, {c.rows, c.ff}), early_gu = gpu_be().alloc(dtype::BF16, {c.rows, 2 * c.ff});
        moe_matmul_silu(gpu_be(), x, p.stacked, off, gu, early_out, matmul_mode::W4A16, true);
        moe_matmul(gpu_be(), x, p.stacked, off, early_gu, matmul_mode::W4A16, true);
        tensor he = to_host(early_out), hgu = to_host(gu), hegu = to_host(early_gu);
        EXPECT_EQ(0, std::memcmp(he.data, got.data, he.nbytes())) << vars << ": offsets_early changed moe_matmul_silu";
        EXPECT_EQ(0, std::memcmp(hegu.data, hgu.data, hgu.nbytes())) << vars << ": offsets_early changed moe_matmul";
        tensor hw = to_host(want);
        int nonzero = 0;
        for (int64_t i = 0; i < hw.numel(); ++i) nonzero += hw.ptr<uint16_t>()[i] != 0;
        EXPECT_GT(nonzero, hw.numel() / 2) << "degenerate outputs: " << vars;
        EXPECT_EQ(0, std::memcmp(got.data, hw.data, hw.nbytes())) << vars << ": fused differs from the two-step result";
    }
}
