// moe_route_front_sm90: the MoE block's front at decode in one launch — moe_route_permute with a
// front (backend/moe.h): add_rms_norm(residual, x, w, eps, h), logits = h · routerᵀ, then the route
// and the permutation. Three dependent kernels before (norm_vec's add_rms_norm, the bf16 GEMV,
// moe_route_permute_sm80's one-CTA kernel), whose work at batch 1 is a few microseconds in all and
// whose boundaries (~1 µs each with PDL, docs/perf.md session 16) and L2 round trips were most of
// it: Qwen3-30B-A3B's ffn_norm + router + route cost 1.3 + 2.0 + 4.0 µs of a 41 µs layer (session 29).
//
// One thread block cluster of K_CL_MAX CTAs where the device can hold such a cluster (H100), else
// K_CL. Each CTA copies its slice of the router weight (rows [c·per, (c+1)·per)) to shared memory
// before pdl_wait() — a prepared weight, like the GEMV's tile; the slice's copy is on the critical
// path when the CTAs start late, so the larger cluster (32 KB a CTA at Qwen3-30B-A3B's shapes
// instead of 64) was faster: docs/perf.md, session 30 — then computes the whole norm itself (every
// CTA needs every h element): thread j owns vector j of a row, exactly norm_vec_kernel's
// one-row-per-block form (blockDim = n/8 rounded up to 32: the same block_sum tree, so the same bits).
// Its warps then compute the slice's logits in the GEMV's order (lane l chains k = 256·s + 8·l + e
// with fmaf from +0, then warp_sum; dense_gemv_kernel), round them to bf16 and store them into CTA
// 0's shared memory (DSMEM) and to the logits tensor. After a cluster barrier CTA 0 routes
// (route::route_token) and permutes (route::permute_warp) from its shared memory with one warp, and
// stores the new residual and h: only after the barrier, because every CTA read the old residual
// before it. So every output equals the three kernels' bit for bit (test_moe_ops_gpu:
// route_permute_front_equals_its_three_ops). One token only (decode at batch 1): a multi-row form
// was no faster than the three kernels at 2 and 4 tokens (docs/perf.md, session 30).
#include <cooperative_groups.h>

#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/matmul_launch.h"
#include "backend/cuda/moe_route_device.cuh"
#include "backend/cuda/norm_vec.cuh"
#include "backend/moe.h"

namespace tetra {
namespace cuda {

namespace {

constexpr int K_CL = 8;          // CTAs per cluster: the portable maximum
constexpr int K_CL_MAX = 16;     // where the device allows (H100): half the router slice per CTA
constexpr int64_t K_STATIC_MAX = 256;  // block_sum's part[32]

struct front_params {
    __nv_bfloat16* res;
    const __nv_bfloat16* x;
    const void* nw;
    dtype nwt;
    __nv_bfloat16* h;
    float eps;
    const __nv_bfloat16* router;  // [ne, n]
    __nv_bfloat16* logits;        // [1, ne]
    int32_t *ids, *counts, *offsets, *sorted, *dest;
    float* w;
    int n, ne, k, per, words;  // per: router rows per CTA; words: route_words
    bool renorm;
};

// Shared memory (bytes, 16-aligned parts): the weight slice [per][n] bf16, h [n] bf16, the logits
// [ne] bf16 (CTA 0's are the cluster's), route scratch [words] f32, ids [k] i32.
struct front_smem {
    size_t tile, hs, lg, scratch, sid, total;
};
front_smem smem_of(int n, int ne, int k, int per, int words) {
    auto up16 = [](size_t b) { return (b + 15) / 16 * 16; };
    front_smem s{};
    s.tile = 0;
    s.hs = s.tile + up16(size_t(per) * size_t(n) * 2);
    s.lg = s.hs + up16(size_t(n) * 2);
    s.scratch = s.lg + up16(size_t(ne) * 2);
    s.sid = s.scratch + up16(size_t(words) * 4);
    s.total = s.sid + up16(size_t(k) * 4);
    return s;
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900  // the kernel's body is sm_90+ code
// One logit: h (shared) · router row `col` of the slice (shared), dense_gemv_kernel's order.
__device__ __forceinline__ float logit_of(const uint4* hs, const uint4* wrow, int n) {
    const int lane = threadIdx.x & 31, segs = n >> 8, tail = n & 255;
    float acc = 0.0f;
    auto fma8 = [&](int v) {
        float xf[8], wf[8];
        bf16x8_to_f32(hs[v], xf);
        bf16x8_to_f32(wrow[v], wf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc = fmaf(wf[e], xf[e], acc);
    };
#pragma unroll 4
    for (int s = 0; s < segs; ++s) fma8(s * 32 + lane);
    if (lane * 8 < tail) fma8(segs * 32 + lane);
    return warp_sum(acc);
}
#endif

// grid (cluster size), one cluster; blockDim = n/8 rounded up to 32 (norm_vec's one-row-per-block form).
template <int EPL>
__global__ void __launch_bounds__(1024) moe_route_front_kernel(front_params p, front_smem so) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    extern __shared__ __align__(16) unsigned char smem[];
    uint4* tile = reinterpret_cast<uint4*>(smem + so.tile);
    uint4* hs = reinterpret_cast<uint4*>(smem + so.hs);
    __nv_bfloat16* lg = reinterpret_cast<__nv_bfloat16*>(smem + so.lg);
    cg::cluster_group cl = cg::this_cluster();
    const int c = int(cl.block_rank()), kv = p.n >> 3, j = threadIdx.x;
    const bool on = j < kv;
    // Arrive now, wait before the first DSMEM store: a CTA's shared memory may be written only once
    // it runs (CUDA C++ Programming Guide, distributed shared memory).
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    // Before the wait: this CTA's router rows (zeros past ne) and the norm weight.
    const int row0 = c * p.per, rows = max(0, min(p.per, p.ne - row0));
    const uint4* src = reinterpret_cast<const uint4*>(p.router) + size_t(row0) * size_t(kv);
    for (int i = j; i < p.per * kv; i += blockDim.x) {
        if (i < rows * kv) cp_async16_weight(tile + i, src + i);
        else tile[i] = make_uint4(0, 0, 0, 0);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    float wv[8] = {};
    if (on)
#pragma unroll
        for (int i = 0; i < 8; ++i) wv[i] = load_any(p.nw, p.nwt, int64_t(j) * 8 + i);
    pdl_wait();
    uint4 xq = make_uint4(0, 0, 0, 0), rq = make_uint4(0, 0, 0, 0);
    if (on) xq = reinterpret_cast<const uint4*>(p.x)[j], rq = reinterpret_cast<const uint4*>(p.res)[j];
    pdl_trigger();
    // The norm (norm_vec_kernel<T, true>'s arithmetic); h into shared memory for the logits.
    float v[8] = {};
    if (on) {
        float r8[8];
        unpack8<__nv_bfloat16>(xq, v);
        unpack8<__nv_bfloat16>(rq, r8);
#pragma unroll
        for (int i = 0; i < 8; ++i) r8[i] = r8[i] + v[i];
        rq = pack8<__nv_bfloat16>(r8);  // the new residual (CTA 0 stores it after the cluster barrier)
        unpack8<__nv_bfloat16>(rq, v);
    }
    const float r = rms_scale(block_sum(sum_sq8(v)), p.n, p.eps);
    if (on) {
        float o8[8];
        scale8(v, wv, r, o8);
        hs[j] = pack8<__nv_bfloat16>(o8);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    // The slice's logits: warp w takes columns w, w + warps, …
    const int lane = j & 31, warp = j >> 5, n_warps = int(blockDim.x >> 5);
    __nv_bfloat16* lg0 = cl.map_shared_rank(lg, 0);
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    for (int col = warp; col < rows; col += n_warps) {
        const float lv = logit_of(hs, tile + col * kv, p.n);
        if (lane == 0) {
            const __nv_bfloat16 b = __float2bfloat16_rn(lv);
            lg0[row0 + col] = b;
            p.logits[row0 + col] = b;
        }
    }
    cl.sync();  // every logit is in CTA 0's shared memory; every CTA has read the old residual
    if (c != 0) return;
    if (on) reinterpret_cast<uint4*>(p.res)[j] = rq, reinterpret_cast<uint4*>(p.h)[j] = hs[j];
    float* scratch = reinterpret_cast<float*>(smem + so.scratch);
    int32_t* sid = reinterpret_cast<int32_t*>(smem + so.sid);
    if (warp != 0) return;
    route::route_token<__nv_bfloat16, EPL>(lg, p.ids, p.w, 0, p.ne, p.k, p.renorm, scratch, sid);
    __syncwarp();
    route::permute_warp(sid, p.counts, p.offsets, p.sorted, p.dest, p.k, p.ne, p.k);
#endif
}

using front_kernel = void (*)(front_params, front_smem);
front_kernel kernel_of(int epl) {
    switch (epl) {
        case 1: return moe_route_front_kernel<1>;
        case 2: return moe_route_front_kernel<2>;
        case 4: return moe_route_front_kernel<4>;
        default: return moe_route_front_kernel<8>;
    }
}

// Whether a cluster of K_CL_MAX CTAs (a non-portable size) of `threads` threads and `smem` bytes each can
// be resident on this device (cudaOccupancyMaxActiveClusters; cached per device and shape).
bool cluster_fits(int epl, int threads, size_t smem) {
    static std::mutex mu;
    static std::map<std::tuple<int, int, int, size_t>, bool> known;
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(mu);
    const auto key = std::make_tuple(dev, epl, threads, smem);
    auto it = known.find(key);
    if (it != known.end()) return it->second;
    front_kernel kern = kernel_of(epl);
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(K_CL_MAX), cfg.blockDim = dim3(unsigned(threads)), cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = K_CL_MAX, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr, cfg.numAttrs = 1;
    int clusters = 0;
    const bool ok = cudaOccupancyMaxActiveClusters(&clusters, kern, &cfg) == cudaSuccess && clusters >= 1;
    (void)cudaGetLastError();  // a device without that cluster size answers with an error: K_CL then
    return known[key] = ok;
}

// The launch shape and its reason to decline (empty: takes it).
struct front_plan {
    int threads = 0, per = 0, words = 0, epl = 0, ncl = 0;
    front_smem smem{};
    std::string why;
};

front_plan plan_of(const moe_route_permute_args& a) {
    front_plan pl;
    const moe_route_front& f = a.front;
    const moe_route_args& r = a.route;
    if (!f.router) return pl.why = "no front (the logits are an input): moe_route_permute_sm80 takes it", pl;
    const linear_weight& w = *f.router;
    const int64_t n = f.residual.dim(1), nt = r.n_tokens, ne = r.n_expert, k = r.k;
    if (a.act != dtype::BF16) return pl.why = strfmt("activations are %s (needs bf16)", dtype_name(a.act)), pl;
    if (w.kind != linear_kind::DENSE || w.dense.type != dtype::BF16)
        return pl.why = "the router weight is not dense bf16 (the bf16 GEMV's operand)", pl;
    if (!norm_vec_takes(2, n, nt, {f.residual.data, f.x.data, f.h.data}) || !norm_vec_row_per_block(n))
        return pl.why = strfmt("n_embd %lld: needs a multiple of 8 in (256, 8192] and 16-byte aligned rows (norm_vec's "
                               "one-row-per-block form)", (long long)n), pl;
    if (reinterpret_cast<uintptr_t>(w.dense.data) % 16 != 0)
        return pl.why = "the router weight is not 16-byte aligned", pl;
    if (nt != 1 || k > 32)
        return pl.why = strfmt("%lld tokens × top %lld: needs one token and k <= 32 (at 2 and 4 tokens of "
                               "Qwen3-30B-A3B the three kernels were as fast: docs/perf.md, session 30)",
                               (long long)nt, (long long)k), pl;
    pl.threads = int((n / 8 + 31) / 32 * 32);
    if (ne > route::PERM_EXPERTS)
        return pl.why = strfmt("%lld experts (at most %d)", (long long)ne, route::PERM_EXPERTS), pl;
    pl.epl = ne <= 32 ? 1 : ne <= 64 ? 2 : ne <= 128 ? 4 : 8;
    pl.words = route::route_words(int(ne), int(k), pl.epl);
    pl.ncl = K_CL_MAX;
    const size_t smem_max = smem_of(int(n), int(ne), int(k), int((ne + K_CL_MAX - 1) / K_CL_MAX), pl.words).total;
    if (!cluster_fits(pl.epl, pl.threads, smem_max)) pl.ncl = K_CL;
    pl.per = int((ne + pl.ncl - 1) / pl.ncl);
    pl.smem = smem_of(int(n), int(ne), int(k), pl.per, pl.words);
    const int64_t cap = smem_optin_here() - K_STATIC_MAX;
    if (int64_t(pl.smem.total) > cap)
        pl.why = strfmt("needs %zu B of shared memory per CTA (router slice %d × %lld); the device allows %lld",
                        pl.smem.total, pl.per, (long long)n, (long long)cap);
    return pl;
}

template <int EPL>
void launch_epl(backend& be, const moe_route_permute_args& a, const front_plan& pl) {
    const moe_route_front& f = a.front;
    const moe_route_args& r = a.route;
    const moe_permute_args& u = a.permute;
    auto kern = moe_route_front_kernel<EPL>;
    static const bool static_ok =
        static_smem_bytes(reinterpret_cast<const void*>(kern), K_STATIC_MAX, "moe_route_front_sm90") >= 0;
    (void)static_ok;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(pl.smem.total)));
    front_params p{};
    p.res = f.residual.ptr<__nv_bfloat16>(), p.x = f.x.ptr<const __nv_bfloat16>(), p.nw = f.w.data;
    p.nwt = f.w.type, p.h = f.h.ptr<__nv_bfloat16>(), p.eps = f.eps;
    p.router = f.router->dense.ptr<const __nv_bfloat16>(), p.logits = r.logits.ptr<__nv_bfloat16>();
    p.ids = r.topk_ids.ptr<int32_t>(), p.w = r.topk_weights.ptr<float>();
    p.counts = u.expert_counts.ptr<int32_t>(), p.offsets = u.expert_offsets.ptr<int32_t>();
    p.sorted = u.sorted_tokens.ptr<int32_t>(), p.dest = u.dest_rows.ptr<int32_t>();
    p.n = int(f.residual.dim(1)), p.ne = int(r.n_expert), p.k = int(r.k);
    p.per = pl.per, p.words = pl.words, p.renorm = r.norm_topk_prob;
    if (pl.ncl > 8) CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    launch_cluster_pdl(be, kern, dim3(unsigned(pl.ncl)), dim3(unsigned(pl.threads)), pl.smem.total, unsigned(pl.ncl), p,
                       pl.smem);
}

void moe_route_front_launch(backend& be, const moe_route_permute_args& a) {
    const front_plan pl = plan_of(a);
    TETRA_CHECK(pl.why.empty(), "moe_route_front_sm90: %s", pl.why.c_str());
    switch (pl.epl) {
        case 1: launch_epl<1>(be, a, pl); break;
        case 2: launch_epl<2>(be, a, pl); break;
        case 4: launch_epl<4>(be, a, pl); break;
        default: launch_epl<8>(be, a, pl); break;
    }
}

std::string moe_route_front_accepts(const moe_route_permute_args& a) { return plan_of(a).why; }

}  // namespace

// FEAT_TMA: the loaded image is sm_90+ code, which thread block clusters need. Priority 20, above
// moe_route_permute_sm80 (10), which runs a front as its two ops and then its own kernel.
void register_moe_route_front_sm90(kernel_registry& r) {
    r.add(make_kernel<moe_route_permute_args>("moe_route_permute", "moe_route_front_sm90",
                                              cuda_req(90, {dtype::BF16}, FEAT_TMA), 20, moe_route_front_accepts,
                                              moe_route_front_launch));
}

}  // namespace cuda
}  // namespace tetra
