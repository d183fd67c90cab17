// matmul_silu through the CUDA backend: which kernel the registry picks for each m (the sweep
// kernel's fused form at m ≤ 16 where the sweep kernel takes the stacked weight — k ≤ 4096, and
// 2·n_ff ≤ W4A16_SWEEP_WIDE_N_MAX above m = 8; the sm80 fused kernel up to m = 16 otherwise; the
// fused wgmma kernel for 64 < m ≤ 2048 on an sm_90a image; the
// two-step kernel otherwise) and that every fused result equals backend::matmul — which runs the same
// kernel family at that m (asserted) — followed by silu_mul_gate_up, bit for bit: same sums, same
// rounding of each half to bf16, same silu_times. Rows of m = 8 and m = 16 batches equal the row alone.
// (The fused kernels' own tests against the CPU oracle: test_matmul_gpu.cu.)
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/arch.h"
#include "backend/cuda/gpu_harness.h"
#include "backend/cuda/matmul_launch.h"
#include "backend/ops.h"

using namespace tetra;
using namespace tetra_test;

namespace {

// The matmul_silu kernel the registry should pick, and the plain matmul of the same family.
std::pair<std::string, std::string> expected_kernels(int64_t m, int64_t n_ff, int64_t k, bool wgmma) {
    if (m <= cuda::W4A16_SWEEP_M_MAX && k <= cuda::W4A16_SWEEP_K_GROUPS_MAX * 512 &&
        (m <= 8 || 2 * n_ff <= cuda::W4A16_SWEEP_WIDE_N_MAX))
        return {"matmul_silu_nvfp4_w4a16_sweep_sm80", "matmul_nvfp4_w4a16_sweep_sm80"};
    if (m <= cuda::W4A16_SILU_M_MAX) return {"matmul_silu_nvfp4_w4a16_sm80", "matmul_nvfp4_w4a16_sm80"};
    if (wgmma && m > cuda::W4A16_SM80_SMALL_M_MAX && m <= 2048)
        return {"matmul_silu_nvfp4_w4a16_wgmma_sm90", "matmul_nvfp4_w4a16_wgmma_sm90"};
    return {"matmul_silu_two_step_cuda", ""};
}

std::vector<uint16_t> download_bf16(const tensor& t) {
    std::vector<uint16_t> h(size_t(t.numel()));
    gpu_be().download(t, h.data());
    return h;
}

}  // namespace

TEST(matmul_silu_cuda_backend, selects_fused_and_equals_two_step_bitwise) {
    ASSERT_GT(cuda_device_count(), 0);
    backend& be = gpu_be();
    const bool wgmma = (be.device().features & FEAT_WGMMA) != 0;
    rng r(2026);
    // 4 groups of k (sweep: 2 warps per tile), 8 groups (4 warps per tile), 9 groups (sweep refuses)
    for (auto [n_ff, k] : {std::pair<int64_t, int64_t>{1040, 1552}, {528, 4096}, {528, 4608}}) {
        // the sm80 plain matmul must run version 1, the fused kernel's sums (version 2 sums otherwise)
        ASSERT_EQ(cuda::w4a16_sm80_small_version(2 * n_ff, k, be.device().sm_count), 1);
        linear_weight dw = be.prepare_linear(random_linear(r, 2 * n_ff, k, true));
        std::vector<uint16_t> out8, out16;
        tensor x8, x16;
        for (int64_t m : {1, 2, 3, 5, 8, 16, 17, 64, 130, 300}) {
            const std::string what = "n_ff=" + std::to_string(n_ff) + " k=" + std::to_string(k) + " m=" + std::to_string(m);
            tensor xd = to_gpu(random_tensor(r, dtype::BF16, {m, k}));
            tensor gu = be.alloc(dtype::BF16, {m, 2 * n_ff}), a = be.alloc(dtype::BF16, {m, n_ff}),
                   b = be.alloc(dtype::BF16, {m, n_ff});
            matmul_silu_args args;
            args.act = dtype::BF16, args.align = 256, args.mode = matmul_mode::W4A16, args.n_ff = n_ff, args.out = a;
            args.mm.act = dtype::BF16, args.mm.align = 256, args.mm.x = xd, args.mm.out = gu, args.mm.w = &dw;
            args.mm.m = m, args.mm.n = 2 * n_ff, args.mm.k = k;
            const auto [want_silu, want_mm] = expected_kernels(m, n_ff, k, wgmma);
            const std::string sel = kernel_registry::instance().select("matmul_silu", be.device(), args).name;
            EXPECT_EQ(sel, want_silu) << what;
            if (sel == "matmul_silu_two_step_cuda") continue;  // that kernel is the two steps themselves
            EXPECT_EQ(kernel_registry::instance().select("matmul_nvfp4_w4a16", be.device(), args.mm).name, want_mm)
                << what;
            be.matmul_silu(xd, dw, gu, a, matmul_mode::W4A16);
            be.matmul(xd, dw, gu, matmul_mode::W4A16);
            be.silu_mul_gate_up(gu, b);
            const std::vector<uint16_t> ha = download_bf16(a), hb = download_bf16(b);
            EXPECT_EQ(ha, hb) << what;
            if (m == 8) out8 = ha, x8 = to_host(xd);
            if (m == 16) out16 = ha, x16 = to_host(xd);
        }
        ASSERT_EQ(out8.size(), size_t(8 * n_ff));
        ASSERT_EQ(out16.size(), size_t(16 * n_ff));
        // row 5 of the batch of 8 and row 13 of the batch of 16 (the sweep kernel's second column tile) alone
        for (auto [row, xb, ob] : {std::tuple<int64_t, const tensor*, const std::vector<uint16_t>*>{5, &x8, &out8},
                                   {13, &x16, &out16}}) {
            tensor xr = tensor::alloc(dtype::BF16, {1, k});
            std::memcpy(xr.data, static_cast<const uint8_t*>(xb->data) + row * k * 2, size_t(k) * 2);
            tensor gu = be.alloc(dtype::BF16, {1, 2 * n_ff}), a = be.alloc(dtype::BF16, {1, n_ff});
            be.matmul_silu(to_gpu(xr), dw, gu, a, matmul_mode::W4A16);
            const std::vector<uint16_t> ha = download_bf16(a);
            EXPECT_EQ(0, std::memcmp(ha.data(), ob->data() + row * n_ff, size_t(n_ff) * 2))
                << "n_ff=" << n_ff << " k=" << k << ": row " << row << " alone differs from the batch";
        }
    }
}
