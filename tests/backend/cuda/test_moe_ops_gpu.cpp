// The CUDA MoE kernels (moe_*_sm80.cu) against the CPU kernels (the oracles, themselves tested
// against double references in tests/backend/test_moe_ops.cpp) on the same inputs: route and
// permute bit-exact, combine bit-exact (same f32 operation order, no contraction), the grouped
// matmuls within an NMSE bound set by bf16 output rounding, every CUDA W4A16 kernel forced in turn;
// odd shapes, k = 1/2/8, n_expert 4/8/128, 1/3/64 tokens, experts receiving no rows, NaN logits (and a
// route stress test: n_expert 8–2048, k ≤ 32, 1–300 tokens, ties, NaN/±Inf rows, f32 near ties),
// NaN/Inf in x and NaN weight scales. Then determinism, per W4A16 kernel: a grouped-matmul row is
// bit-identical alone and inside a 200-row batch; a token's MoE block output on the GPU is
// bit-identical alone and inside a batch of 64, and over 200 repeats.
// Outputs are guarded (sentinels around, NaN inside): a stray or missing write fails.
#include <algorithm>
#include <cstring>
#include <map>

#include "backend/cuda/gpu_harness.h"
#include "backend/cuda/moe_gpu_case.h"
#include "backend/cuda/moe_expert_table_sm80.h"
#include "backend/moe.h"

using namespace tetra;
using namespace tetra_test;

namespace {

// The grouped wgmma kernel takes only long batches (≥ 16 rows per expert on average): it declines
// most cases here, and test_moe_wgmma_gpu checks it on its own.
const std::string k_long_batch_kernel = "moe_matmul_nvfp4_w4a16_wgmma_sm90";

std::vector<int32_t> to_i32(const tensor& t) {
    std::vector<int32_t> v(size_t(t.numel()));
    std::memcpy(v.data(), t.data, v.size() * 4);
    return v;
}

tensor i32_2d(const std::vector<int32_t>& v, int64_t rows, int64_t cols) {
    tensor t = i32_tensor(v);
    t.shape = {rows, cols};
    return t;
}

// Bit-equal f32 arrays, except that a NaN matches any NaN (x86 and the GPU make different NaN payloads).
std::string same_f32(const tensor& got, const tensor& ref) {
    for (int64_t i = 0; i < ref.numel(); ++i) {
        float g = got.ptr<float>()[i], r = ref.ptr<float>()[i];
        if (std::isnan(g) && std::isnan(r)) continue;
        if (std::memcmp(&g, &r, 4) != 0)
            return "element " + std::to_string(i) + ": got " + std::to_string(g) + ", expected " + std::to_string(r);
    }
    return "";
}

// n_tokens rows of k distinct experts from [0, ne); skew > 0 draws from the first ne/skew experts
// only (so most experts receive no rows).
std::vector<int32_t> random_assignment(rng& r, int64_t n_tokens, int64_t ne, int64_t k, int64_t skew = 1) {
    int64_t pool_n = std::max<int64_t>(k, ne / skew);
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < n_tokens; ++t) {
        std::vector<int32_t> pool;
        for (int32_t e = 0; e < pool_n; ++e) pool.push_back(e);
        for (int64_t s = 0; s < k; ++s) {
            int64_t j = r.randint(s, pool_n - 1);
            std::swap(pool[size_t(s)], pool[size_t(j)]);
            ids.push_back(pool[size_t(s)]);
        }
    }
    return ids;
}

struct cases_t {
    int64_t ne, k, nt;
};
const cases_t k_cases[] = {{4, 1, 1}, {4, 2, 3},  {4, 4, 64},  {8, 1, 3},   {8, 2, 64},
                           {8, 8, 1}, {128, 8, 1}, {128, 8, 3}, {128, 2, 64}, {128, 8, 64}};

// moe_route on the CPU and on the GPU (outputs between guard bytes): ids and weights bit-equal.
void expect_route_equal(const tensor& logits, int64_t k, bool norm, const std::string& vars) {
    const int64_t nt = logits.dim(0);
    tensor ids_c = tensor::alloc(dtype::I32, {nt, k}), w_c = tensor::alloc(dtype::F32, {nt, k});
    moe_route(cpu_be(), logits, norm, ids_c, w_c);
    gpu_guarded ids_g = make_gpu_guarded(dtype::I32, {nt, k}), w_g = make_gpu_guarded(dtype::F32, {nt, k});
    moe_route(gpu_be(), to_gpu(logits), norm, ids_g.view, w_g.view);
    bool ok1 = false, ok2 = false;
    tensor ids = ids_g.result(&ok1), w = w_g.result(&ok2);
    EXPECT_TRUE(ok1 && ok2) << "guard bytes overwritten: " << vars;
    EXPECT_EQ(to_i32(ids), to_i32(ids_c)) << vars;
    EXPECT_EQ(same_f32(w, w_c), "") << vars;
    // moe_route_permute on the GPU (one CTA for ≤ 16 tokens of ≤ 256 experts, else the two kernels)
    // against moe_route_cpu then moe_permute_cpu: all six outputs bit-equal.
    const int64_t ne = logits.dim(1);
    tensor cc = tensor::alloc(dtype::I32, {ne}), co = tensor::alloc(dtype::I32, {ne + 1});
    tensor cs = tensor::alloc(dtype::I32, {nt * k}), cd = tensor::alloc(dtype::I32, {nt, k});
    moe_permute(cpu_be(), ids_c, ne, cc, co, cs, cd);
    gpu_guarded fi = make_gpu_guarded(dtype::I32, {nt, k}), fw = make_gpu_guarded(dtype::F32, {nt, k});
    gpu_guarded fc = make_gpu_guarded(dtype::I32, {ne}), fo = make_gpu_guarded(dtype::I32, {ne + 1});
    gpu_guarded fs = make_gpu_guarded(dtype::I32, {nt * k}), fd = make_gpu_guarded(dtype::I32, {nt, k});
    moe_route_permute(gpu_be(), to_gpu(logits), norm, fi.view, fw.view, fc.view, fo.view, fs.view, fd.view);
    bool ok[6];
    EXPECT_EQ(to_i32(fi.result(&ok[0])), to_i32(ids_c)) << "fused " << vars;
    EXPECT_EQ(same_f32(fw.result(&ok[1]), w_c), "") << "fused " << vars;
    EXPECT_EQ(to_i32(fc.result(&ok[2])), to_i32(cc)) << "fused " << vars;
    EXPECT_EQ(to_i32(fo.result(&ok[3])), to_i32(co)) << "fused " << vars;
    EXPECT_EQ(to_i32(fs.result(&ok[4])), to_i32(cs)) << "fused " << vars;
    EXPECT_EQ(to_i32(fd.result(&ok[5])), to_i32(cd)) << "fused " << vars;
    EXPECT_TRUE(ok[0] && ok[1] && ok[2] && ok[3] && ok[4] && ok[5]) << "fused: guard bytes overwritten: " << vars;
}

}  // namespace

// Logits: bf16 N(0, 3²) (continuous), or multiples of 1/8 in [-1, 1] (many exact ties: the lower
// index must win on both), and rows with a NaN at expert 0 / in the middle (the CPU's NaN rules).
TEST(moe_ops_gpu, route_equals_cpu_bitwise) {
    rng r(301);
    int n_cases = 0;
    for (const cases_t& c : k_cases)
        for (int kind = 0; kind < 3; ++kind)
            for (bool norm : {false, true}) {
                std::string vars = "n_expert=" + std::to_string(c.ne) + " k=" + std::to_string(c.k) + " n_tokens=" +
                                   std::to_string(c.nt) + " kind=" + std::to_string(kind) + " norm=" + std::to_string(norm);
                std::vector<double> v(size_t(c.nt * c.ne));
                for (double& x : v) x = kind == 1 ? double(r.randint(-8, 8)) / 8 : 3 * r.normal();
                if (kind == 2) {
                    v[0] = NAN;  // token 0: NaN at expert 0 (all of its p are NaN)
                    if (c.nt > 1) v[size_t(c.ne + c.ne / 2)] = NAN;  // token 1: NaN in the middle
                }
                expect_route_equal(make_tensor(dtype::BF16, {c.nt, c.ne}, v), c.k, norm, vars);
                ++n_cases;
            }
    EXPECT_EQ(n_cases, 60);
}

namespace {

constexpr int k_route_kinds = 12;

// One token's router logits of one kind (the CPU's ordering and NaN rules under stress).
std::vector<double> route_row(rng& r, int kind, int64_t ne, int64_t t) {
    std::vector<double> x(static_cast<size_t>(ne));
    for (int64_t e = 0; e < ne; ++e) {
        double n = 3 * r.normal();
        switch (kind) {
            case 0: x[size_t(e)] = n; break;                                        // continuous
            case 1: x[size_t(e)] = double(r.randint(-8, 8)) / 8; break;             // many exact ties
            case 2: x[size_t(e)] = 0.5; break;                                      // all equal
            case 3: x[size_t(e)] = 13 * n; break;                                   // most p underflow to 0
            case 4: x[size_t(e)] = r.randint(0, 3) ? n : NAN; break;                // NaN scattered
            case 5: x[size_t(e)] = r.randint(0, 9) ? NAN : n; break;                // mostly NaN (< k numbers)
            case 6: x[size_t(e)] = r.randint(0, 1) ? -INFINITY : n; break;          // half -inf (p = 0)
            case 7: x[size_t(e)] = 1.0 + double(r.randint(0, 3)) * 0x1p-23; break;  // f32: 1-ulp near ties
            case 8: x[size_t(e)] = e == 0 ? NAN : n; break;                         // NaN at expert 0: all NaN
            case 9: x[size_t(e)] = n; break;                                        // one +inf below
            case 10: x[size_t(e)] = -INFINITY; break;                               // all -inf: all NaN
            default: x[size_t(e)] = e % 32 == t % 32 ? 5 + n : n - 5; break;        // top experts on one lane
        }
    }
    if (kind == 4 || kind == 5) x[0] = 3 * r.normal();  // a number at expert 0: the max is a number
    if (kind == 9) x[size_t(r.randint(1, ne - 1))] = INFINITY;
    return x;
}

}  // namespace

// The route against moe_route_cpu bit for bit over n_expert 8/60/64/128/256/300/2048 (every
// experts-per-lane variant, partial lanes), k 1/2/8/32, 1–300 tokens (1..4 warps per CTA, many
// CTAs), bf16 and f32 logits (f16 too at 128/8), renorm on and off, and 12 row kinds: continuous,
// exact ties, all equal, p underflowing to 0, NaN scattered / mostly NaN / at expert 0, -inf, +inf,
// all -inf, 1-ulp f32 near ties (equal p after the division), and the top experts all on one lane.
// Up to 7 tokens: every row of one kind; more tokens: row t of kind t mod 12.
TEST(moe_ops_gpu, route_stress_equals_cpu_bitwise) {
    rng r(303);
    int n_cases = 0;
    for (int64_t ne : {8, 60, 64, 128, 256, 300, 2048})
        for (int64_t k : {1, 2, 8, 32}) {
            if (k > ne) continue;
            const bool main_shape = ne == 128 && k == 8;
            std::vector<int64_t> nts = {1, 7, 64, 300};
            if (main_shape) nts = {1, 2, 3, 4, 5, 7, 8, 31, 33, 64, 65, 127, 300};
            std::vector<dtype> types = {dtype::BF16, dtype::F32};
            if (main_shape) types.push_back(dtype::F16);
            for (int64_t nt : nts)
                for (dtype type : types)
                    for (int kind = nt <= 7 ? 0 : -1; kind < (nt <= 7 ? k_route_kinds : 0); ++kind)
                        for (bool norm : {false, true}) {
                            std::string vars = "n_expert=" + std::to_string(ne) + " k=" + std::to_string(k) +
                                               " n_tokens=" + std::to_string(nt) + " " + dtype_name(type) +
                                               " kind=" + std::to_string(kind) + " norm=" + std::to_string(norm);
                            std::vector<double> v;
                            for (int64_t t = 0; t < nt; ++t) {
                                std::vector<double> row = route_row(r, kind >= 0 ? kind : int(t % k_route_kinds), ne, t);
                                v.insert(v.end(), row.begin(), row.end());
                            }
                            expect_route_equal(make_tensor(type, {nt, ne}, v), k, norm, vars);
                            ++n_cases;
                        }
        }
    // 26 (n_expert, k) pairs × 2 dtypes × 2 norms × (2 small token counts × 12 kinds + 2 mixed), and
    // 128/8: 3 dtypes × 2 norms × (6 small token counts × 12 kinds + 7 mixed).
    EXPECT_EQ(n_cases, 2 * (26 * 2 * (2 * 12 + 2) + 3 * (6 * 12 + 7)));
}

TEST(moe_ops_gpu, permute_equals_cpu) {
    rng r(302);
    int n_cases = 0;
    for (const cases_t& c : k_cases)
        for (int64_t skew : {1, 16}) {
            std::string vars = "n_expert=" + std::to_string(c.ne) + " k=" + std::to_string(c.k) + " n_tokens=" +
                               std::to_string(c.nt) + " skew=" + std::to_string(skew);
            tensor ids = i32_2d(random_assignment(r, c.nt, c.ne, c.k, skew), c.nt, c.k);
            tensor cc = tensor::alloc(dtype::I32, {c.ne}), co = tensor::alloc(dtype::I32, {c.ne + 1});
            tensor cs = tensor::alloc(dtype::I32, {c.nt * c.k}), cd = tensor::alloc(dtype::I32, {c.nt, c.k});
            moe_permute(cpu_be(), ids, c.ne, cc, co, cs, cd);
            gpu_guarded gc = make_gpu_guarded(dtype::I32, {c.ne}), go = make_gpu_guarded(dtype::I32, {c.ne + 1});
            gpu_guarded gs = make_gpu_guarded(dtype::I32, {c.nt * c.k}), gd = make_gpu_guarded(dtype::I32, {c.nt, c.k});
            moe_permute(gpu_be(), to_gpu(ids), c.ne, gc.view, go.view, gs.view, gd.view);
            bool ok[4];
            EXPECT_EQ(to_i32(gc.result(&ok[0])), to_i32(cc)) << vars;
            EXPECT_EQ(to_i32(go.result(&ok[1])), to_i32(co)) << vars;
            EXPECT_EQ(to_i32(gs.result(&ok[2])), to_i32(cs)) << vars;
            EXPECT_EQ(to_i32(gd.result(&ok[3])), to_i32(cd)) << vars;
            EXPECT_TRUE(ok[0] && ok[1] && ok[2] && ok[3]) << "guard bytes overwritten: " << vars;
            ++n_cases;
        }
    // Long batches (prefill-sized) × 8 of 128 experts, around where the ids stop being staged in
    // shared memory: (128 + 8·T)·4 B against 48 KB less the kernel's 80 static bytes — T = 1517 is
    // the last staged; 1518–1520 used to ask for 49088–49152 B and fail to launch. Past 64 tokens
    // (512 assignments) the chunked kernel runs: chunks of 759 (1517 tokens, not a multiple of 32) to
    // 4096 assignments per warp (8192 tokens), and 2048 tokens skewed onto few experts.
    for (int64_t nt : {1517, 1518, 1520, 1521, 2000, 2048, 8192}) {
        tensor ids = i32_2d(random_assignment(r, nt, 128, 8, nt == 2048 ? 16 : 1), nt, 8);
        tensor cc = tensor::alloc(dtype::I32, {128}), co = tensor::alloc(dtype::I32, {129});
        tensor cs = tensor::alloc(dtype::I32, {nt * 8}), cd = tensor::alloc(dtype::I32, {nt, 8});
        moe_permute(cpu_be(), ids, 128, cc, co, cs, cd);
        tensor gc = gpu_be().alloc(dtype::I32, {128}), go = gpu_be().alloc(dtype::I32, {129});
        tensor gs = gpu_be().alloc(dtype::I32, {nt * 8}), gd = gpu_be().alloc(dtype::I32, {nt, 8});
        moe_permute(gpu_be(), to_gpu(ids), 128, gc, go, gs, gd);
        EXPECT_EQ(to_i32(to_host(gc)), to_i32(cc)) << nt << " tokens";
        EXPECT_EQ(to_i32(to_host(go)), to_i32(co)) << nt << " tokens";
        EXPECT_EQ(to_i32(to_host(gs)), to_i32(cs)) << nt << " tokens";
        EXPECT_EQ(to_i32(to_host(gd)), to_i32(cd)) << nt << " tokens";
    }
    EXPECT_EQ(n_cases, 20);
    // More experts than threads (each thread owns a range of experts; the scan crosses warps).
    int n_wide = 0;
    for (int64_t ne : {513, 1500, 8192})
        for (int64_t nt : {1, 7, 300}) {
            std::string vars = "n_expert=" + std::to_string(ne) + " n_tokens=" + std::to_string(nt);
            tensor wi = i32_2d(random_assignment(r, nt, ne, 8, nt == 7 ? 16 : 1), nt, 8);
            tensor wc = tensor::alloc(dtype::I32, {ne}), wo = tensor::alloc(dtype::I32, {ne + 1});
            tensor ws = tensor::alloc(dtype::I32, {nt * 8}), wd = tensor::alloc(dtype::I32, {nt, 8});
            moe_permute(cpu_be(), wi, ne, wc, wo, ws, wd);
            tensor gwc = gpu_be().alloc(dtype::I32, {ne}), gwo = gpu_be().alloc(dtype::I32, {ne + 1});
            tensor gws = gpu_be().alloc(dtype::I32, {nt * 8}), gwd = gpu_be().alloc(dtype::I32, {nt, 8});
            moe_permute(gpu_be(), to_gpu(wi), ne, gwc, gwo, gws, gwd);
            EXPECT_EQ(to_i32(to_host(gwc)), to_i32(wc)) << vars;
            EXPECT_EQ(to_i32(to_host(gwo)), to_i32(wo)) << vars;
            EXPECT_EQ(to_i32(to_host(gws)), to_i32(ws)) << vars;
            EXPECT_EQ(to_i32(to_host(gwd)), to_i32(wd)) << vars;
            ++n_wide;
        }
    EXPECT_EQ(n_wide, 9);
}

namespace {

// Offsets of n_rows rows over ne experts: random counts, expert 2 (and, for ne = 128, all but ~n_rows
// experts) empty.
std::vector<int32_t> random_offsets(rng& r, int64_t n_rows, int64_t ne) {
    std::vector<int32_t> counts(size_t(ne), 0);
    for (int64_t i = 0; i < n_rows; ++i) ++counts[size_t(r.randint(0, ne - 1))];
    if (ne > 2) counts[1] += counts[2], counts[2] = 0;
    std::vector<int32_t> off = {0};
    for (int64_t e = 0; e < ne; ++e) off.push_back(off.back() + counts[size_t(e)]);
    return off;
}

}  // namespace

// W4A16 and dense against the CPU oracles (moe_matmul_*_cpu: exact dequant, f32 sums), with bf16 x
// and out, then with f32 x and out (--dtype float32; only the CUDA-core kernels take it).
// bf16: each side rounds its f32 result once to bf16 (relative error ≤ 2^-9) and the f32 sums
// differ only in order (relative ~K·2^-24 ≤ 1e-4 of Σ|terms| here), so |gpu − cpu| ≤ 2^-8|ref| +
// O(1e-4)|ref| per element: NMSE ≤ (2^-8)² ≈ 1.5e-5 in the worst case; 3e-5 fails any wrong row,
// expert, scale or k block (those give NMSE ≥ ~1e-2). f32: no output rounding, only the order of
// the f32 sums: ~sqrt(K) roundings of 2^-24 relative to Σ|terms| (≤ ~80 |ref| on these random
// rows) gives NMSE ~1e-11 at K = 6160; 1e-9 is 4 orders above the measured ~1e-13 and 7 below a
// wrong row. Non-finite outputs must match in place and kind (compare()). Every CUDA kernel of the
// op is forced in turn (for_each_gpu_kernel); a kernel without the dtype must refuse.
namespace {

struct mm_shape_t {
    int64_t ne, rows, n, k;
    int one_expert;  // ≥ 0: every row on this expert (the others empty); -1: random_offsets
    bool nonfinite;  // x gets +Inf / NaN entries and expert 0 a NaN scale (0x7F)
};

std::string mm_vars(bool nvfp4, const mm_shape_t& sh) {
    return std::string(nvfp4 ? "w4a16" : "dense") + " n_expert=" + std::to_string(sh.ne) + " rows=" +
           std::to_string(sh.rows) + " n=" + std::to_string(sh.n) + " k=" + std::to_string(sh.k) +
           " one_expert=" + std::to_string(sh.one_expert) + " nonfinite=" + std::to_string(sh.nonfinite);
}

// Rows per pass of the mma kernel are 8·NT with NT from rows / min(n_expert, rows) (1: ≤ 8, 2: ≤ 16,
// else 4): the one-expert cases cover partial and full n8 tiles, several passes (17 rows at NT 1)
// and NT 2/4; k 2064 at NT 4 and k 6160 at NT 1 need several x windows; n 8/40/264 leave the
// second tile of the last CTA idle or partial.
const mm_shape_t k_mm_shapes[] = {
    {4, 1, 40, 80, -1, false},    {4, 3, 24, 528, -1, false},    {8, 64, 72, 144, -1, false},
    {8, 16, 16, 1040, -1, false}, {128, 8, 40, 64, -1, false},   {128, 64, 264, 208, -1, false},
    {128, 3, 8, 16, -1, false},   {3, 1, 40, 528, 1, false},     {3, 2, 40, 528, 1, false},
    {3, 7, 40, 528, 1, false},    {3, 8, 40, 528, 1, false},     {3, 9, 40, 528, 1, false},
    {3, 17, 40, 528, 1, false},   {3, 64, 40, 528, 1, false},    {1, 9, 24, 1040, 0, false},
    {1, 17, 136, 272, 0, false},  {1, 64, 264, 2064, 0, false},  {2, 33, 8, 2064, 1, false},
    {128, 512, 136, 272, -1, false}, {16, 200, 100, 1552, -1, false}, {4, 3, 40, 6160, -1, false},
    {4, 11, 40, 1040, -1, true},  {1, 40, 24, 528, 0, true}};

std::vector<int32_t> mm_offsets(rng& r, const mm_shape_t& sh) {
    if (sh.one_expert < 0) return random_offsets(r, sh.rows, sh.ne);
    std::vector<int32_t> off(size_t(sh.ne + 1), 0);
    for (int64_t e = sh.one_expert + 1; e <= sh.ne; ++e) off[size_t(e)] = int32_t(sh.rows);
    return off;
}

}  // namespace

TEST(moe_ops_gpu, matmul_w4a16_and_dense_match_cpu) {
    rng r(303);
    std::map<std::string, int> ran, declined, ran_f32;
    int n_cases = 0;
    for (dtype act : {dtype::BF16, dtype::F32})
    for (bool nvfp4 : {true, false})
        for (const mm_shape_t& sh : k_mm_shapes) {
            if (!nvfp4 && sh.nonfinite) continue;  // the dense weights have no scales
            const std::string vars = mm_vars(nvfp4, sh) + " act=" + dtype_name(act);
            std::vector<linear_weight> host = random_experts(r, sh.ne, sh.n, sh.k, nvfp4);
            tensor x = random_tensor(r, act, {sh.rows, sh.k});
            if (sh.nonfinite) {
                static_cast<uint8_t*>(host[0].scales.data)[3 * (sh.k / 16) + 1] = 0x7F;  // weight row 3, block 1
                write_elem(x, 5, INFINITY);  // row 0: +Inf at k 5
                if (sh.rows > 1) write_elem(x, sh.k + 100, NAN);  // row 1: NaN at k 100
                if (sh.rows > 2) write_elem(x, 2 * sh.k + sh.k - 1, -INFINITY);  // row 2: -Inf at the last k
            }
            std::vector<linear_weight> dev = prepare_all(host);
            tensor offsets = i32_tensor(mm_offsets(r, sh));
            tensor ref = tensor::alloc(act, {sh.rows, sh.n});
            {
                force_kernel fk(nvfp4 ? "moe_matmul_nvfp4_w4a16" : "moe_matmul_dense",
                                nvfp4 ? "moe_matmul_nvfp4_w4a16_cpu" : "moe_matmul_dense_cpu");
                moe_matmul(cpu_be(), x, host, offsets, ref, nvfp4 ? matmul_mode::W4A16 : matmul_mode::DENSE);
            }
            std::vector<double> c = to_double(ref);
            int nonfinite = 0;
            for (double v : c) nonfinite += !std::isfinite(v);
            if (sh.nonfinite) EXPECT_GT(nonfinite, 0) << "the oracle has no non-finite output: " << vars;
            const tensor xg = to_gpu(x), og = to_gpu(offsets);
            for_each_gpu_kernel(nvfp4 ? "moe_matmul_nvfp4_w4a16" : "moe_matmul_dense", act,
                                act == dtype::F32 ? ran_f32 : ran, declined, [&](const kernel_entry& kern) {
                gpu_guarded out = make_gpu_guarded(act, {sh.rows, sh.n});
                moe_matmul(gpu_be(), xg, dev, og, out.view, nvfp4 ? matmul_mode::W4A16 : matmul_mode::DENSE);
                bool ok = false;
                tensor got = out.result(&ok);
                EXPECT_TRUE(ok) << "guard bytes overwritten: " << kern.name << " " << vars;
                std::vector<double> g = to_double(got);
                EXPECT_EQ(compare(g, c, act == dtype::F32 ? 1e-9 : 3e-5), "") << kern.name << " " << vars;
                double num = 0, den = 0;
                for (size_t i = 0; i < c.size(); ++i)
                    if (std::isfinite(c[i])) num += (g[i] - c[i]) * (g[i] - c[i]), den += c[i] * c[i];
                std::printf("[matmul] %s %s: NMSE %.3g, %d non-finite\n", kern.name.c_str(), vars.c_str(),
                            den > 0 ? num / den : num, nonfinite);
            });
            ++n_cases;
        }
    EXPECT_EQ(n_cases, 88);
    // The long-batch kernel ran the 5 bf16 shapes with ≥ 16 rows per expert and declined the rest.
    const int long_ran = ran[k_long_batch_kernel], long_declined = declined[k_long_batch_kernel];
    ran.erase(k_long_batch_kernel), declined.erase(k_long_batch_kernel);
    if (long_ran + long_declined > 0)
        EXPECT_TRUE(long_ran == 5 && long_declined == 18) << long_ran << " ran, " << long_declined << " declined";
    EXPECT_TRUE(declined.empty()) << declined.begin()->first << " declined a case";
    for (const kernel_entry* k : cuda_kernels("moe_matmul_nvfp4_w4a16"))
        if (k->name != k_long_batch_kernel && kernel_rejection(*k, gpu_be().device(), nullptr).empty())
            EXPECT_GE(ran[k->name], 23) << k->name;
    expect_gpu_ran("moe_matmul_dense", ran, 21);
    // f32: the CUDA-core kernels ran every case; the bf16-only mma kernel refused when forced
    EXPECT_EQ(ran_f32, (std::map<std::string, int>{{"moe_matmul_dense_sm80", 21}, {"moe_matmul_nvfp4_w4a16_sm80", 23}}));
}

// The mma kernel's grid is the host's bound on the work items (passes of 8·NT rows): with j = min(ne,
// rows) non-empty experts, j + (rows − j) / (8·NT). Assignments that reach it exactly (j − 1
// experts with one row, one expert with the rest, (rows − j) a multiple of 8·NT) must still compute
// every row: against the CPU oracle, for NT = 1, 2, 4 and a decode-like 8 rows over 128 experts.
TEST(moe_ops_gpu, matmul_w4a16_mma_at_the_work_item_bound) {
    rng r(308);
    struct bound_case { int64_t ne, rows, big; };  // big: the expert holding rows − (j − 1)
    const bound_case cases[] = {{8, 64, 3}, {8, 104, 7}, {4, 164, 1}, {3, 19, 0}, {128, 8, 77}};
    int n_cases = 0;
    for (const bound_case& bc : cases) {
        const int64_t n = 40, k = 528, j = std::min(bc.ne, bc.rows);
        std::vector<int32_t> count(size_t(bc.ne), 0);
        if (bc.ne >= bc.rows) {
            for (int64_t i = 0; i < j; ++i) count[size_t((bc.big + 9 * i) % bc.ne)] = 1;  // j distinct experts
        } else {
            for (int64_t e = 0; e < bc.ne; ++e) count[size_t(e)] = 1;
            count[size_t(bc.big)] = int32_t(bc.rows - (j - 1));
        }
        std::vector<int32_t> off(size_t(bc.ne + 1), 0);
        for (int64_t e = 0; e < bc.ne; ++e) off[size_t(e + 1)] = off[size_t(e)] + count[size_t(e)];
        ASSERT_EQ(off.back(), bc.rows);
        const std::string vars = "ne=" + std::to_string(bc.ne) + " rows=" + std::to_string(bc.rows);
        std::vector<linear_weight> host = random_experts(r, bc.ne, n, k, true);
        tensor x = random_tensor(r, dtype::BF16, {bc.rows, k}), offsets = i32_tensor(off);
        tensor ref = tensor::alloc(dtype::BF16, {bc.rows, n});
        {
            force_kernel fk("moe_matmul_nvfp4_w4a16", "moe_matmul_nvfp4_w4a16_cpu");
            moe_matmul(cpu_be(), x, host, offsets, ref, matmul_mode::W4A16);
        }
        std::vector<linear_weight> dev = prepare_all(host);
        force_kernel fk("moe_matmul_nvfp4_w4a16", "moe_matmul_nvfp4_w4a16_mma_sm80");
        gpu_guarded out = make_gpu_guarded(dtype::BF16, {bc.rows, n});
        moe_matmul(gpu_be(), to_gpu(x), dev, to_gpu(offsets), out.view, matmul_mode::W4A16);
        bool ok = false;
        std::vector<double> got = to_double(out.result(&ok)), want = to_double(ref);
        EXPECT_TRUE(ok) << "guard bytes overwritten: " << vars;
        EXPECT_EQ(compare(got, want, 3e-5), "") << vars;
        int zero_rows = 0;  // a dropped pass would leave its rows unwritten (guard pattern) or zero
        for (int64_t i = 0; i < bc.rows; ++i) {
            bool all_zero = true;
            for (int64_t c = 0; c < n; ++c) all_zero = all_zero && got[size_t(i * n + c)] == 0.0;
            zero_rows += all_zero;
        }
        EXPECT_EQ(zero_rows, 0) << vars;
        ++n_cases;
    }
    EXPECT_EQ(n_cases, 5);
}

// A row's bits do not depend on the batch: rows of a 200-row batch over 8 experts (8·NT = 32 rows
// per pass in the mma kernel) equal the same rows computed alone (one row, NT = 1), for every CUDA
// W4A16 kernel.
TEST(moe_ops_gpu, matmul_w4a16_row_alone_equals_row_in_batch) {
    rng r(306);
    const int64_t ne = 8, rows = 200, n = 136, k = 1040;
    std::vector<linear_weight> dev = prepare_all(random_experts(r, ne, n, k, true));
    std::vector<int32_t> off = random_offsets(r, rows, ne);
    int n_kernels = 0;
    for (dtype act : {dtype::BF16, dtype::F32})
    for (const kernel_entry* kern : cuda_kernels("moe_matmul_nvfp4_w4a16")) {
        if (!handles(*kern, act) || kern->name == k_long_batch_kernel) continue;  // a row alone: too short
        tensor x = random_tensor(r, act, {rows, k});
        const int64_t es = int64_t(dtype_size(act));
        force_kernel fk("moe_matmul_nvfp4_w4a16", kern->name);
        tensor big = gpu_be().alloc(act, {rows, n});
        moe_matmul(gpu_be(), to_gpu(x), dev, to_gpu(i32_tensor(off)), big, matmul_mode::W4A16);
        std::vector<uint8_t> all = bytes_of(to_host(big));
        int checked = 0;
        for (int64_t row : {int64_t(0), int64_t(31), int64_t(32), int64_t(77), int64_t(150), rows - 1}) {
            int64_t e = 0;
            while (off[size_t(e + 1)] <= row) ++e;
            std::vector<int32_t> one(size_t(ne + 1), 0);
            for (int64_t j = e + 1; j <= ne; ++j) one[size_t(j)] = 1;
            tensor o = gpu_be().alloc(act, {1, n});
            moe_matmul(gpu_be(), to_gpu(row_of(x, row)), dev, to_gpu(i32_tensor(one)), o, matmul_mode::W4A16);
            std::vector<uint8_t> alone = bytes_of(to_host(o));
            EXPECT_EQ(std::memcmp(alone.data(), all.data() + size_t(row * n * es), size_t(n * es)), 0)
                << kern->name << " " << dtype_name(act) << ": row " << row << " (expert " << e
                << ") alone vs in the batch";
            ++checked;
        }
        EXPECT_EQ(checked, 6);
        ++n_kernels;
    }
    EXPECT_EQ(n_kernels, 3) << "expected the mma and the CUDA-core W4A16 MoE kernels (bf16), the CUDA-core one (f32)";
}

// The mma kernel splits a tile's k over 1, 2 or 4 warps depending on the call's grid (ks_for), and
// every split must give the same bits: rows over 128 experts (two each: 1 warp per tile), one row on
// each of ~3·SMs/32 experts (2 warps), one row alone (4 warps), the same rows compared bitwise.
TEST(moe_ops_gpu, matmul_w4a16_mma_k_splits_agree) {
    rng r(307);
    const int64_t ne = 128, n = 1024, k = 1040;  // 64 tiles; k crosses two 512-groups and a partial one
    const int sms = gpu_be().device().sm_count;
    const int64_t few = std::min<int64_t>(ne, (3 * sms + 31) / 32);
    std::vector<linear_weight> dev = prepare_all(random_experts(r, ne, n, k, true));
    tensor x = random_tensor(r, dtype::BF16, {2 * ne, k});  // row 2e and 2e + 1 on expert e
    force_kernel fk("moe_matmul_nvfp4_w4a16", "moe_matmul_nvfp4_w4a16_mma_sm80");
    auto run = [&](const tensor& xs, const std::vector<int32_t>& off) {
        tensor o = gpu_be().alloc(dtype::BF16, {xs.dim(0), n});
        moe_matmul(gpu_be(), to_gpu(xs), dev, to_gpu(i32_tensor(off)), o, matmul_mode::W4A16);
        return bytes_of(to_host(o));
    };
    std::vector<int32_t> off_all(size_t(ne + 1)), off_few(size_t(ne + 1)), off_one(size_t(ne + 1), 1);
    for (int64_t e = 0; e <= ne; ++e) off_all[size_t(e)] = int32_t(2 * e), off_few[size_t(e)] = int32_t(std::min(e, few));
    off_one[0] = 0;
    tensor x_few = tensor::alloc(dtype::BF16, {few, k});
    for (int64_t i = 0; i < few; ++i) std::memcpy(static_cast<uint8_t*>(x_few.data) + i * k * 2, static_cast<uint8_t*>(x.data) + 2 * i * k * 2, size_t(k * 2));
    EXPECT_EQ(cuda::moe_w4a16_mma_ks(n, k, 2 * ne, ne, sms), 1);
    EXPECT_EQ(cuda::moe_w4a16_mma_ks(n, k, few, ne, sms), 2);
    EXPECT_EQ(cuda::moe_w4a16_mma_ks(n, k, 1, ne, sms), 4);
    std::vector<uint8_t> all = run(x, off_all), some = run(x_few, off_few), one = run(row_of(x, 0), off_one);
    const size_t rb = size_t(n) * 2;
    int nonzero = 0;
    for (uint8_t b : all) nonzero += b != 0;
    EXPECT_GT(nonzero, int(all.size() / 2));
    for (int64_t i = 0; i < few; ++i)
        EXPECT_EQ(std::memcmp(some.data() + size_t(i) * rb, all.data() + size_t(2 * i) * rb, rb), 0) << "row " << 2 * i << ": 2 vs 1 warps per tile";
    EXPECT_EQ(std::memcmp(one.data(), all.data(), rb), 0) << "row 0: 4 vs 1 warps per tile";
}

// rows_per_expert_max (the model's promise: an expert has at most one row per token) lets the
// grouped mma kernel stage a smaller x window where that puts the grid in fewer waves.
// Qwen3-30B-A3B's expert shapes (gate/up [1536, 2048] fused with silu, down [2048, 768], 128 experts),
// decode batches of 1 to 8 tokens routed to 8 distinct experts each: every output equals the call
// without the promise bit for bit. On a GPU of ≥ 100 SMs with ≥ 200 KB of shared memory per block (H100,
// H200, B200) batch 2's gate/up takes the smaller window (384 CTAs of 77 KB: two per SM, two waves),
// so the test checks that the path ran there.
TEST(moe_ops_gpu, matmul_w4a16_mma_rows_per_expert_window) {
    rng r(311);
    const int64_t ne = 128, n_ff = 768, k = 2048, topk = 8;
    std::vector<linear_weight> gu = prepare_all(random_experts(r, ne, 2 * n_ff, k, true));
    std::vector<linear_weight> down = prepare_all(random_experts(r, ne, k, n_ff, true));
    force_kernel fk("moe_matmul_nvfp4_w4a16", "moe_matmul_nvfp4_w4a16_mma_sm80");
    force_kernel fs("moe_matmul_silu", "moe_matmul_silu_nvfp4_w4a16_mma_sm80");
    int smaller = 0;
    for (int64_t tokens : {1, 2, 3, 4, 8}) {
        const std::vector<int32_t> ids = random_assignment(r, tokens, ne, topk);
        std::vector<int32_t> counts(size_t(ne), 0), off = {0};
        for (int32_t e : ids) ++counts[size_t(e)];
        for (int64_t e = 0; e < ne; ++e) off.push_back(off.back() + counts[size_t(e)]);
        const int64_t rows = tokens * topk;
        tensor x = to_gpu(random_tensor(r, dtype::BF16, {rows, k})), o = to_gpu(i32_tensor(off));
        tensor scratch = gpu_be().alloc(dtype::BF16, {rows, 2 * n_ff});
        for (bool silu : {true, false}) {
            const int64_t kin = silu ? k : n_ff, nout = silu ? n_ff : k;
            tensor xin = silu ? x : to_gpu(random_tensor(r, dtype::BF16, {rows, kin}));
            std::vector<uint8_t> got[2];
            for (int bound = 0; bound < 2; ++bound) {
                tensor out = gpu_be().alloc(dtype::BF16, {rows, nout});
                const int64_t promise = bound ? tokens : 0;
                if (silu) moe_matmul_silu(gpu_be(), xin, gu, o, scratch, out, matmul_mode::W4A16, false, promise);
                else moe_matmul(gpu_be(), xin, down, o, out, matmul_mode::W4A16, false, promise);
                got[bound] = bytes_of(to_host(out));
            }
            moe_matmul_args a;
            a.n = silu ? 2 * n_ff : k, a.k = kin, a.n_rows = rows, a.experts = silu ? &gu : &down;
            a.rows_per_expert_max = tokens;
            const int x_rows = cuda::moe_w4a16_mma_x_rows(gpu_be(), a, silu);
            smaller += x_rows < 8;
            EXPECT_TRUE(x_rows == 8 || x_rows == tokens) << x_rows;
            EXPECT_EQ(got[1], got[0]) << (silu ? "gate/up" : "down") << " tokens=" << tokens << " x_rows=" << x_rows;
        }
    }
    const device_info& dev = gpu_be().device();
    if (dev.sm_count >= 100 && dev.smem_per_block >= 200 * 1024)
        EXPECT_GE(smaller, 1) << "no call took the smaller x window on this device";
}

// Same inputs → the same bits: y rows gathered through dest, f32 weights, optional shared expert
// with and without its sigmoid gate.
TEST(moe_ops_gpu, combine_equals_cpu_bitwise) {
    rng r(304);
    int n_cases = 0;
    for (const cases_t& c : k_cases)
        for (int shared_mode = 0; shared_mode < 3; ++shared_mode) {
            const int64_t n = c.ne == 8 ? 300 : 37;
            std::string vars = "n_expert=" + std::to_string(c.ne) + " k=" + std::to_string(c.k) + " n_tokens=" +
                               std::to_string(c.nt) + " shared=" + std::to_string(shared_mode);
            tensor ids = i32_2d(random_assignment(r, c.nt, c.ne, c.k), c.nt, c.k);
            tensor cc = tensor::alloc(dtype::I32, {c.ne}), co = tensor::alloc(dtype::I32, {c.ne + 1});
            tensor cs = tensor::alloc(dtype::I32, {c.nt * c.k}), dest = tensor::alloc(dtype::I32, {c.nt, c.k});
            moe_permute(cpu_be(), ids, c.ne, cc, co, cs, dest);
            tensor y = random_tensor(r, dtype::BF16, {c.nt * c.k, n});
            tensor w = random_tensor(r, dtype::F32, {c.nt, c.k}, 0.5);
            tensor sh = shared_mode ? random_tensor(r, dtype::BF16, {c.nt, n}) : tensor();
            tensor gate = shared_mode == 2 ? random_tensor(r, dtype::BF16, {c.nt, 1}, 2.0) : tensor();
            tensor ref = tensor::alloc(dtype::BF16, {c.nt, n});
            moe_combine(cpu_be(), y, dest, w, ref, sh, gate);
            gpu_guarded out = make_gpu_guarded(dtype::BF16, {c.nt, n});
            moe_combine(gpu_be(), to_gpu(y), to_gpu(dest), to_gpu(w), out.view, shared_mode ? to_gpu(sh) : tensor(),
                        shared_mode == 2 ? to_gpu(gate) : tensor());
            bool ok = false;
            tensor got = out.result(&ok);
            EXPECT_TRUE(ok) << "guard bytes overwritten: " << vars;
            EXPECT_EQ(bytes_of(got), bytes_of(ref)) << vars;
            ++n_cases;
        }
    EXPECT_EQ(n_cases, 30);
}

// The next add_rms_norm folded into the combine (moe_combine_norm): out, the updated residual and h
// equal the GPU's combine followed by its add_rms_norm bit for bit (the fused kernel runs norm_vec's
// sums where add_rms_norm runs norm_vec: n = 576, 1000, 2048, 8192 — asserted through the op
// profiler: no add_rms_norm launch of its own —; n = 200 takes the two launches), k = 1, 3, 8, 10
// (slots past the first 8 in a second pass), with and without the gated shared expert, bf16 and f32
// norm weights; out also equals the CPU's combine.
TEST(moe_ops_gpu, combine_with_folded_norm_equals_combine_then_norm) {
    rng r(305);
    int n_cases = 0;
    const std::pair<int64_t, int64_t> nks[] = {{2048, 8}, {1000, 8}, {576, 8}, {200, 8},
                                               {2048, 3}, {2048, 10}, {8192, 1}};
    for (auto [n, k] : nks)
        for (int64_t nt : {1, 3})
            for (int shared_mode : {0, 2})
                for (dtype wt : {dtype::BF16, dtype::F32}) {
                    const int64_t ne = 16;
                    std::string vars = "n=" + std::to_string(n) + " k=" + std::to_string(k) + " n_tokens=" +
                                       std::to_string(nt) + " shared=" +
                                       std::to_string(shared_mode) + " w=" + dtype_name(wt);
                    tensor ids = i32_2d(random_assignment(r, nt, ne, k), nt, k);
                    tensor cc = tensor::alloc(dtype::I32, {ne}), co = tensor::alloc(dtype::I32, {ne + 1});
                    tensor cs = tensor::alloc(dtype::I32, {nt * k}), dest = tensor::alloc(dtype::I32, {nt, k});
                    moe_permute(cpu_be(), ids, ne, cc, co, cs, dest);
                    tensor y = random_tensor(r, dtype::BF16, {nt * k, n});
                    tensor w = random_tensor(r, dtype::F32, {nt, k}, 0.5);
                    tensor sh = shared_mode ? random_tensor(r, dtype::BF16, {nt, n}) : tensor();
                    tensor gate = shared_mode ? random_tensor(r, dtype::BF16, {nt, 1}, 2.0) : tensor();
                    tensor res = random_tensor(r, dtype::BF16, {nt, n}, 4.0), nw = random_tensor(r, wt, {n});
                    tensor ref = tensor::alloc(dtype::BF16, {nt, n});
                    moe_combine(cpu_be(), y, dest, w, ref, sh, gate);
                    std::vector<std::vector<uint8_t>> got[2];
                    for (int fused = 0; fused < 2; ++fused) {
                        backend& be = gpu_be();
                        tensor out = be.alloc(dtype::BF16, {nt, n}), h = be.alloc(dtype::BF16, {nt, n});
                        tensor rd = to_gpu(res), nwd = to_gpu(nw), yd = to_gpu(y), dd = to_gpu(dest), wd = to_gpu(w);
                        tensor shd = shared_mode ? to_gpu(sh) : tensor(), gd = shared_mode ? to_gpu(gate) : tensor();
                        if (fused) {
                            moe_combine_norm nm{rd, nwd, h, 1e-5f};
                            reset_op_profile();
                            set_op_profiling(true);
                            moe_combine(be, yd, dd, wd, out, shd, gd, &nm);
                            set_op_profiling(false);
                            int norms = 0;
                            for (const op_profile_entry& e : op_profile())
                                norms += e.kernel.rfind("add_rms_norm", 0) == 0;
                            EXPECT_EQ(norms, n > 256 ? 0 : 1) << vars << ": the norm's own kernel ran (or did not)";
                        } else {
                            moe_combine(be, yd, dd, wd, out, shd, gd);
                            be.add_rms_norm(rd, out, nwd, 1e-5f, h);
                        }
                        got[fused] = {bytes_of(to_host(out)), bytes_of(to_host(rd)), bytes_of(to_host(h))};
                    }
                    EXPECT_EQ(got[1][0], bytes_of(ref)) << vars << ": out vs the CPU's combine";
                    EXPECT_EQ(got[1][0], got[0][0]) << vars << ": out";
                    EXPECT_EQ(got[1][1], got[0][1]) << vars << ": the residual";
                    EXPECT_NE(got[1][1], bytes_of(res)) << vars << ": the residual was not updated";
                    EXPECT_EQ(got[1][2], got[0][2]) << vars << ": h";
                    ++n_cases;
                }
    EXPECT_EQ(n_cases, 56);
}

// moe_route_permute with a front (the post-attention add_rms_norm and the router matmul folded in,
// moe_route_front) on the GPU equals its three ops on the GPU (add_rms_norm, the router matmul,
// moe_route_permute) bit for bit, every output: for one token on sm_90+ the one cluster kernel
// (moe_route_front_sm90) must be the one that ran, and it repeats norm_vec's and the bf16 GEMV's
// sums; 2 and 4 tokens take moe_route_permute_sm80, which runs the two ops before its own kernel.
// Against the CPU: the residual bit for bit (an element-wise bf16 add), h within an NMSE of 1e-5
// (bf16 rounding of sums in another order), and the CPU's route of the GPU's logits bit for bit.
// Shapes: Qwen3-30B-A3B's (n_embd 2048, 128 experts, top 8) at 1, 2 and 4 tokens, n_embd 264 (two
// warps; an 8-element tail per row of the GEMV), 1000 and 4096, 4 / 60 / 64 / 256 experts (CTAs with
// no router rows, slices past the last expert), f32 and bf16 norm weights.
TEST(moe_ops_gpu, route_permute_front_equals_its_three_ops) {
    rng r(306);
    struct fc {
        int64_t n, ne, k, nt;
    };
    const fc cases[] = {{2048, 128, 8, 1}, {2048, 128, 8, 2}, {2048, 128, 8, 4}, {264, 60, 4, 1},
                        {1000, 256, 2, 1}, {4096, 64, 8, 1}, {2048, 4, 1, 1}};
    const bool cluster = gpu_be().device().cc >= 90;
    int n_cases = 0;
    for (const fc& f : cases)
        for (dtype wt : {dtype::BF16, dtype::F32}) {
            const int64_t n = f.n, ne = f.ne, k = f.k, nt = f.nt;
            const bool renorm = (n + nt) % 2 == 0;
            std::string vars = "n=" + std::to_string(n) + " ne=" + std::to_string(ne) + " k=" + std::to_string(k) +
                               " n_tokens=" + std::to_string(nt) + " w=" + dtype_name(wt);
            linear_weight router = random_linear(r, ne, n, false);
            for (int64_t i = 0; i < ne * n; ++i)  // N(0, 1/n): logits of order 1, as a trained router's
                write_elem(router.dense, i, read_elem(router.dense, i) / std::sqrt(double(n)));
            const linear_weight rg = gpu_be().prepare_linear(router);
            tensor x = random_tensor(r, dtype::BF16, {nt, n}), res0 = random_tensor(r, dtype::BF16, {nt, n}, 4.0);
            tensor nw = random_tensor(r, wt, {n});
            std::vector<std::vector<uint8_t>> got[2];
            for (int fused = 0; fused < 2; ++fused) {
                backend& be = gpu_be();
                tensor res = to_gpu(res0), xd = to_gpu(x), nwd = to_gpu(nw), h = be.alloc(dtype::BF16, {nt, n});
                tensor lg = be.alloc(dtype::BF16, {nt, ne});
                tensor ids = be.alloc(dtype::I32, {nt, k}), w = be.alloc(dtype::F32, {nt, k});
                tensor cc = be.alloc(dtype::I32, {ne}), co = be.alloc(dtype::I32, {ne + 1});
                tensor cs = be.alloc(dtype::I32, {nt * k}), cd = be.alloc(dtype::I32, {nt, k});
                if (fused) {
                    moe_route_front fr{res, xd, nwd, h, 1e-5f, &rg};
                    reset_op_profile();
                    set_op_profiling(true);
                    moe_route_permute(be, lg, renorm, ids, w, cc, co, cs, cd, &fr);
                    set_op_profiling(false);
                    int front_kernel = 0;
                    for (const op_profile_entry& e : op_profile())
                        front_kernel += e.kernel.rfind("moe_route_front_sm90", 0) == 0;
                    EXPECT_EQ(front_kernel, cluster && nt == 1 ? 1 : 0) << vars << ": which kernel ran";
                } else {
                    be.add_rms_norm(res, xd, nwd, 1e-5f, h);
                    be.matmul(h, rg, lg);
                    moe_route_permute(be, lg, renorm, ids, w, cc, co, cs, cd);
                }
                for (const tensor* t : {&res, &h, &lg, &ids, &w, &cc, &co, &cs, &cd})
                    got[fused].push_back(bytes_of(to_host(*t)));
            }
            const char* names[] = {"residual", "h", "logits", "ids", "weights", "counts", "offsets", "sorted", "dest"};
            for (size_t i = 0; i < 9; ++i) EXPECT_EQ(got[1][i], got[0][i]) << vars << ": " << names[i];
            // against the CPU
            tensor res_c = tensor::alloc(dtype::BF16, {nt, n}), h_c = tensor::alloc(dtype::BF16, {nt, n});
            std::memcpy(res_c.data, res0.data, res0.nbytes());
            cpu_be().add_rms_norm(res_c, x, nw, 1e-5f, h_c);
            EXPECT_EQ(got[1][0], bytes_of(res_c)) << vars << ": residual vs the CPU";
            EXPECT_NE(got[1][0], bytes_of(res0)) << vars << ": the residual was not updated";
            tensor h_g = tensor::alloc(dtype::BF16, {nt, n});
            std::memcpy(h_g.data, got[1][1].data(), h_g.nbytes());
            EXPECT_EQ(compare(to_double(h_g), to_double(h_c), 1e-5), "") << vars << ": h vs the CPU";
            tensor lg_g = tensor::alloc(dtype::BF16, {nt, ne});
            std::memcpy(lg_g.data, got[1][2].data(), lg_g.nbytes());
            tensor ids_c = tensor::alloc(dtype::I32, {nt, k}), w_c = tensor::alloc(dtype::F32, {nt, k});
            tensor cc = tensor::alloc(dtype::I32, {ne}), co = tensor::alloc(dtype::I32, {ne + 1});
            tensor cs = tensor::alloc(dtype::I32, {nt * k}), cd = tensor::alloc(dtype::I32, {nt, k});
            moe_route_permute(cpu_be(), lg_g, renorm, ids_c, w_c, cc, co, cs, cd);
            const tensor* cpu_out[] = {&ids_c, &w_c, &cc, &co, &cs, &cd};
            for (size_t i = 0; i < 6; ++i)
                EXPECT_EQ(got[1][3 + i], bytes_of(*cpu_out[i])) << vars << ": " << names[3 + i]
                                                               << " vs the CPU's route";
            ++n_cases;
        }
    EXPECT_EQ(n_cases, 14);
}

namespace {

// The routed MoE FFN on the GPU (route + permute → gather → gate/up → silu·up → down → combine) for
// tokens x [T, K] with router logits [T, ne]: the output's bytes.
struct gpu_moe_block {
    int64_t ne = 128, k = 8, n_embd = 528, n_ff = 208;  // k crosses a 512-group; n not a multiple of 128
    std::vector<linear_weight> gate, up, down;
    gpu_moe_block(rng& r) {
        gate = prepare_all(random_experts(r, ne, n_ff, n_embd, true));
        up = prepare_all(random_experts(r, ne, n_ff, n_embd, true));
        down = prepare_all(random_experts(r, ne, n_embd, n_ff, true));
    }
    std::vector<uint8_t> run(const tensor& x_host, const tensor& logits_host) {
        backend& be = gpu_be();
        int64_t t = x_host.dim(0), rows = t * k;
        tensor x = to_gpu(x_host), logits = to_gpu(logits_host);
        tensor ids = be.alloc(dtype::I32, {t, k}), w = be.alloc(dtype::F32, {t, k});
        tensor counts = be.alloc(dtype::I32, {ne}), offsets = be.alloc(dtype::I32, {ne + 1});
        tensor sorted = be.alloc(dtype::I32, {rows}), dest = be.alloc(dtype::I32, {t, k});
        tensor xs = be.alloc(dtype::BF16, {rows, n_embd}), g = be.alloc(dtype::BF16, {rows, n_ff});
        tensor u = be.alloc(dtype::BF16, {rows, n_ff}), ys = be.alloc(dtype::BF16, {rows, n_embd});
        tensor out = be.alloc(dtype::BF16, {t, n_embd});
        // as model/moe.cpp: one op (a token alone takes the one-CTA kernel, the batch of 64 the two kernels)
        moe_route_permute(be, logits, true, ids, w, counts, offsets, sorted, dest);
        be.get_rows(x, sorted, xs);
        moe_matmul(be, xs, gate, offsets, g);
        moe_matmul(be, xs, up, offsets, u);
        be.silu_mul(g, u, g);
        moe_matmul(be, g, down, offsets, ys);
        moe_combine(be, ys, dest, w, out);
        return bytes_of(to_host(out));
    }
};

}  // namespace

// Per CUDA W4A16 kernel (forced): three tokens alone equal themselves inside the batch of 64, and
// 200 repeated runs of the batch are bit-identical to the first.
TEST(moe_ops_gpu, block_is_deterministic_alone_vs_batch_and_repeated) {
    rng r(305);
    gpu_moe_block blk(r);
    tensor x = random_tensor(r, dtype::BF16, {64, blk.n_embd});
    tensor logits = random_tensor(r, dtype::BF16, {64, blk.ne}, 2.0);
    const size_t row = size_t(blk.n_embd) * 2;
    int n_kernels = 0;
    for (const kernel_entry* kern : cuda_kernels("moe_matmul_nvfp4_w4a16")) {
        if (kern->name == k_long_batch_kernel) continue;  // 64 tokens over 128 experts: too short for it
        force_kernel fk("moe_matmul_nvfp4_w4a16", kern->name);
        std::vector<uint8_t> batch = blk.run(x, logits);
        int nonzero = 0;
        for (uint8_t b : batch) nonzero += b != 0;
        EXPECT_GT(nonzero, int(batch.size() / 2)) << kern->name << ": the block output is mostly zero";
        for (int64_t i : {0, 17, 63}) {
            std::vector<uint8_t> one = blk.run(row_of(x, i), row_of(logits, i));
            EXPECT_EQ(std::memcmp(one.data(), batch.data() + size_t(i) * row, row), 0)
                << kern->name << ": token " << i << " alone vs batch";
        }
        int same = 0;
        for (int rep = 0; rep < 200; ++rep) same += blk.run(x, logits) == batch;
        EXPECT_EQ(same, 200) << kern->name;
        ++n_kernels;
    }
    EXPECT_EQ(n_kernels, 2) << "expected the mma and the CUDA-core W4A16 MoE kernels";
}

