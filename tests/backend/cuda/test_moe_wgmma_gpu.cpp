// The grouped wgmma W4A16 kernel (moe_matmul_nvfp4_w4a16_wgmma_sm90, moe_matmul_silu's form too: long
// batches — a prefill chunk's MoE layer — on an sm_90a image) against the CPU oracles, on batches
// of 8 to 128 experts with empty experts, experts of several 128-row passes, n and k that are not
// multiples of the tiles (n 136/264, k 1040/2064), Qwen3-30B-A3B's expert shapes at 512 tokens × top 8,
// NaN weight scales and ±Inf/NaN in x. Outputs are guarded (a write outside an expert's rows fails).
// Determinism: each row's bits do not depend on where it sits in its expert's passes (the rows of
// every expert reversed), and 10 repeated calls give the same bytes. On a device or image without
// wgmma, forcing the kernel must fail with "cannot run".
#include <algorithm>
#include <cstring>

#include "backend/cuda/gpu_harness.h"
#include "backend/cuda/moe_gpu_case.h"
#include "backend/moe.h"

using namespace tetra;
using namespace tetra_test;

namespace {

const std::string k_plain = "moe_matmul_nvfp4_w4a16_wgmma_sm90", k_silu = "moe_matmul_silu_nvfp4_w4a16_wgmma_sm90";

bool runs_here() {
    for (const kernel_entry* k : cuda_kernels("moe_matmul_nvfp4_w4a16"))
        if (k->name == k_plain) return kernel_rejection(*k, gpu_be().device(), nullptr).empty();
    return false;
}

struct long_case {
    int64_t ne, tokens, topk, n, k;
    int skew;        // tokens' experts drawn from the first ne / skew (the others empty)
    bool nonfinite;  // expert 0 gets a NaN scale, x ±Inf and NaN entries
};

// Offsets of `rows` rows: tokens × topk distinct experts each (as moe_route gives), counted per expert.
std::vector<int32_t> offsets_of(rng& r, const long_case& c) {
    std::vector<int32_t> counts(size_t(c.ne), 0);
    const int64_t pool = std::max<int64_t>(c.topk, c.ne / c.skew);
    for (int64_t t = 0; t < c.tokens; ++t) {
        std::vector<int32_t> ids(static_cast<size_t>(pool));
        for (int64_t e = 0; e < pool; ++e) ids[size_t(e)] = int32_t(e);
        for (int64_t s = 0; s < c.topk; ++s) {
            std::swap(ids[size_t(s)], ids[size_t(r.randint(s, pool - 1))]);
            ++counts[size_t(ids[size_t(s)])];
        }
    }
    std::vector<int32_t> off = {0};
    for (int32_t n : counts) off.push_back(off.back() + n);
    return off;
}

// x with the rows of every expert in reverse order (row i of expert e ↔ row off[e] + off[e+1] − 1 − i).
int64_t reversed_row(const std::vector<int32_t>& off, int64_t i) {
    int64_t e = 0;
    while (off[size_t(e + 1)] <= i) ++e;
    return off[size_t(e)] + off[size_t(e + 1)] - 1 - i;
}

tensor reverse_rows(const tensor& x, const std::vector<int32_t>& off) {
    tensor y = tensor::alloc(x.type, x.shape);
    const size_t row = x.nbytes() / size_t(x.dim(0));
    for (int64_t i = 0; i < x.dim(0); ++i)
        std::memcpy(static_cast<uint8_t*>(y.data) + size_t(reversed_row(off, i)) * row,
                    static_cast<const uint8_t*>(x.data) + size_t(i) * row, row);
    return y;
}

}  // namespace

// Tolerances: the plain form as test_moe_ops_gpu's bf16 bound (one bf16 rounding on each side, f32
// sums in another order: NMSE ≤ (2^-8)² ≈ 1.5e-5; 3e-5 fails any wrong row, expert, scale or k
// block). silu: gate and up are each rounded to bf16 before silu(g)·u on both sides and the product
// once more (≤ 3 roundings of 2^-9 relative): NMSE ≤ (3·2^-9)² ≈ 3.4e-5; 5e-5.
TEST(moe_wgmma_gpu, long_batches_match_cpu_and_rows_are_batch_independent) {
    if (!runs_here()) {
        force_kernel fk("moe_matmul_nvfp4_w4a16", k_plain);
        rng r(1);
        std::vector<linear_weight> ex = prepare_all(random_experts(r, 2, 16, 64, true));
        tensor x = to_gpu(random_tensor(r, dtype::BF16, {64, 64}));
        tensor o = to_gpu(i32_tensor(std::vector<int32_t>{0, 32, 64}));
        try {
            moe_matmul(gpu_be(), x, ex, o, gpu_be().alloc(dtype::BF16, {64, 16}), matmul_mode::W4A16);
            ADD_FAILURE() << k_plain << " ran on a device or image without wgmma";
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find("cannot run"), std::string::npos) << e.what();
        }
        return;
    }
    rng r(401);
    const long_case cases[] = {
        {8, 150, 2, 136, 1040, 1, false},   // 300 rows, ~37 per expert
        {16, 500, 2, 264, 2064, 4, false},  // 1000 rows on 4 experts: several passes each, 12 empty
        {128, 512, 8, 1536, 2048, 1, false},  // Qwen3-30B-A3B gate/up stacked, 4096 rows
        {128, 512, 8, 2048, 768, 2, false},   // its down, on 64 experts
        {2, 40, 2, 40, 528, 1, true}};
    int n_cases = 0;
    for (const long_case& c : cases)
        for (bool silu : {false, true}) {
            if (silu && (c.n % 32 != 0 || c.nonfinite)) continue;  // stacked [gate; up] with n_ff % 16 == 0
            const std::string vars = std::string(silu ? "silu" : "plain") + " ne=" + std::to_string(c.ne) + " rows=" +
                                     std::to_string(c.tokens * c.topk) + " n=" + std::to_string(c.n) + " k=" +
                                     std::to_string(c.k);
            const int64_t rows = c.tokens * c.topk, n_out = silu ? c.n / 2 : c.n;
            std::vector<linear_weight> host = random_experts(r, c.ne, c.n, c.k, true);
            tensor x = random_tensor(r, dtype::BF16, {rows, c.k});
            if (c.nonfinite) {
                static_cast<uint8_t*>(host[0].scales.data)[3 * (c.k / 16) + 1] = 0x7F;  // weight row 3, block 1
                write_elem(x, 5, INFINITY);
                write_elem(x, c.k + 100, NAN);
                write_elem(x, 3 * c.k - 1, -INFINITY);
            }
            const std::vector<int32_t> off = offsets_of(r, c);
            ASSERT_EQ(off.back(), rows);
            tensor offsets = i32_tensor(off), ref = tensor::alloc(dtype::BF16, {rows, n_out});
            tensor gu_cpu = tensor::alloc(dtype::BF16, {rows, c.n});
            {  // the oracle on the unprepared weights (moe_matmul_silu_cpu runs moe_matmul: the same kernel)
                force_kernel fk("moe_matmul_nvfp4_w4a16", "moe_matmul_nvfp4_w4a16_cpu");
                if (silu) moe_matmul_silu(cpu_be(), x, host, offsets, gu_cpu, ref, matmul_mode::W4A16);
                else moe_matmul(cpu_be(), x, host, offsets, ref, matmul_mode::W4A16);
            }
            const std::vector<linear_weight> dev = prepare_all(host);
            const tensor og = to_gpu(offsets), gu = gpu_be().alloc(dtype::BF16, {rows, c.n});
            force_kernel fk(silu ? "moe_matmul_silu" : "moe_matmul_nvfp4_w4a16", silu ? k_silu : k_plain);
            auto run = [&](const tensor& xin) {
                gpu_guarded out = make_gpu_guarded(dtype::BF16, {rows, n_out});
                if (silu) moe_matmul_silu(gpu_be(), to_gpu(xin), dev, og, gu, out.view, matmul_mode::W4A16);
                else moe_matmul(gpu_be(), to_gpu(xin), dev, og, out.view, matmul_mode::W4A16);
                bool ok = false;
                tensor got = out.result(&ok);
                EXPECT_TRUE(ok) << "guard bytes overwritten: " << vars;
                return bytes_of(got);
            };
            const std::vector<uint8_t> got = run(x);
            tensor got_t = tensor::alloc(dtype::BF16, {rows, n_out});
            std::memcpy(got_t.data, got.data(), got.size());
            EXPECT_EQ(compare(to_double(got_t), to_double(ref), silu ? 5e-5 : 3e-5), "") << vars;
            if (c.nonfinite) {
                int nonfinite = 0;
                for (double v : to_double(ref)) nonfinite += !std::isfinite(v);
                EXPECT_GT(nonfinite, 0) << "the oracle has no non-finite output: " << vars;
            }
            // Each row's bits do not depend on its place in its expert's passes.
            const std::vector<uint8_t> rev = run(reverse_rows(x, off));
            const size_t row = size_t(n_out) * 2;
            int moved = 0;
            for (int64_t i = 0; i < rows; ++i) {
                const int64_t j = reversed_row(off, i);
                moved += j != i;
                EXPECT_EQ(std::memcmp(got.data() + size_t(i) * row, rev.data() + size_t(j) * row, row), 0)
                    << vars << ": row " << i << " at " << j;
            }
            EXPECT_GT(moved, rows / 2) << vars;
            int same = 0;
            for (int rep = 0; rep < 10; ++rep) same += run(x) == got;
            EXPECT_EQ(same, 10) << vars;
            ++n_cases;
        }
    EXPECT_EQ(n_cases, 7);
}

// The registry picks the kernel for long batches only (≥ 16 rows per expert on average), and
// never on a device or image without wgmma.
TEST(moe_wgmma_gpu, chosen_for_long_batches_only) {
    const bool here = runs_here();
    rng r(402);
    std::vector<linear_weight> ex = prepare_all(random_experts(r, 8, 64, 256, true));
    for (int64_t rows : {8, 64, 127, 128, 1000}) {
        std::vector<int32_t> off(9);
        for (int64_t e = 0; e <= 8; ++e) off[size_t(e)] = int32_t(rows * e / 8);
        moe_matmul_args a;
        a.x = to_gpu(random_tensor(r, dtype::BF16, {rows, 256}));
        a.expert_offsets = to_gpu(i32_tensor(off));
        a.out = gpu_be().alloc(dtype::BF16, {rows, 64});
        a.act = dtype::BF16, a.align = 256, a.experts = &ex, a.n_rows = rows, a.n = 64, a.k = 256;
        const std::string sel = kernel_registry::instance().select("moe_matmul_nvfp4_w4a16", gpu_be().device(), a).name;
        const std::string want = here && rows >= 128 ? k_plain : "moe_matmul_nvfp4_w4a16_mma_sm80";
        EXPECT_EQ(sel, want) << rows << " rows";
    }
}
