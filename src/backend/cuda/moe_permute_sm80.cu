// moe_permute_sm80: the stable counting sort of moe_permute_cpu in one CTA, integers only. The
// counts come from one pass over topk_ids (shared-memory integer atomics, which also stages the ids
// in shared memory when they fit), a block-wide exclusive scan (warp shuffles, then the warp
// totals) gives the offsets, and thread t, owning a contiguous range of experts, walks the ids in
// order and places each assignment of its experts at the next row of the group — ascending (token,
// slot) within a group by construction, the same integers as the CPU whatever the launch shape.
// O(n_tokens·k) broadcast reads per expert in the placement; ids outside [0, n_expert) are skipped
// (undefined, moe.h). Long batches (more assignments than threads, ≤ 764 experts: per-warp counts
// in 48 KB) take moe_permute_chunked_kernel instead: the same integers, each warp placing a chunk.
// Programmatic dependent launch (sm_90+): the CTA becomes resident while moe_route finishes.
// moe_route_permute_sm80 (same file): for decode batches the router (moe_route_device.cuh) and this
// permutation in one CTA, the ids passed in shared memory; larger calls run the two kernels.
#include "backend/cuda/cuda_device.cuh"
#include "backend/cuda/moe_route_device.cuh"
#include "backend/moe.h"

namespace tetra {
namespace cuda {

namespace {

constexpr int THREADS = 512, WARPS = THREADS / 32;
constexpr unsigned FULL = 0xffffffffu;

// Exclusive scan of v over the CTA (every thread calls it); tot: the CTA's total.
__device__ __forceinline__ int block_exclusive_scan(int v, int* warp_sums, int& tot) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int incl = v;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int u = __shfl_up_sync(FULL, incl, d);
        if (lane >= d) incl += u;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        int w = lane < WARPS ? warp_sums[lane] : 0, wi = w;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int u = __shfl_up_sync(FULL, wi, d);
            if (lane >= d) wi += u;
        }
        if (lane < WARPS) warp_sums[lane] = wi - w;  // exclusive prefix of the warp totals
        if (lane == WARPS - 1) warp_sums[WARPS] = wi;
    }
    __syncthreads();
    tot = warp_sums[WARPS];
    return warp_sums[warp] + incl - v;
}

// The permutation by the whole CTA (THREADS threads). ids: i32 [n] in global memory; counts: i32
// [ne]; offsets: i32 [ne + 1]; sorted: i32 [n]; dest: i32 [n]; base: shared [ne]; sid: shared [n].
// staged: the ids are copied to sid once (every pass then reads broadcast shared loads); in_smem:
// they are in sid already (the fused router wrote them), ids is not read.
__device__ __forceinline__ void permute_block(const int32_t* ids, int32_t* counts, int32_t* offsets, int32_t* sorted,
                                              int32_t* dest, int n, int ne, int k, bool staged, bool in_smem,
                                              int32_t* base, int32_t* sid, int* warp_sums) {
    for (int e = threadIdx.x; e < ne; e += THREADS) base[e] = 0;
    __syncthreads();
    // Counts: one pass over the ids, integer shared-memory atomics (exact, order-free).
    for (int i = threadIdx.x; i < n; i += THREADS) {
        const int e = in_smem ? sid[i] : __ldg(ids + i);
        if (staged && !in_smem) sid[i] = e;
        if (e >= 0 && e < ne) atomicAdd(&base[e], 1);
    }
    __syncthreads();
    const int32_t* src = staged || in_smem ? sid : ids;
    const int per = (ne + THREADS - 1) / THREADS, e0 = threadIdx.x * per, e1 = min(ne, e0 + per);
    int mine = 0;
    for (int e = e0; e < e1; ++e) {
        counts[e] = base[e];
        mine += base[e];
    }
    int tot = 0, run = block_exclusive_scan(mine, warp_sums, tot);
    for (int e = e0; e < e1; ++e) {
        const int c = base[e];
        base[e] = run;
        offsets[e] = run;
        run += c;
    }
    if (threadIdx.x == 0) offsets[ne] = tot;
    // Placement: each thread walks the ids in order for its experts (stable by construction).
    for (int e = e0; e < e1; ++e) {
        int r = base[e];
        for (int i = 0; i < n; ++i)
            if (src[i] == e) {
                sorted[r] = i / k;
                dest[i] = r++;
            }
    }
}

__global__ void __launch_bounds__(THREADS) moe_permute_kernel(const int32_t* ids, int32_t* counts, int32_t* offsets,
                                                              int32_t* sorted, int32_t* dest, int n, int ne, int k,
                                                              bool staged) {
    extern __shared__ int32_t base[];  // [ne]: counts, then offsets (then the next free row); [n]: ids
    __shared__ int warp_sums[WARPS + 1];
    pdl_wait();
    pdl_trigger();
    permute_block(ids, counts, offsets, sorted, dest, n, ne, k, staged, false, base, base + ne, warp_sums);
}

// The permutation of a long batch (prefill: thousands of assignments) by the whole CTA, each warp
// owning a contiguous chunk of the assignments: per-warp counts (hist[w][e], shared-memory integer
// atomics), one scan over the experts that also gives each (warp, expert) its first row, then every
// warp walks its chunk in order, 32 assignments at a time, and places each at its row + the number
// of equal experts on lower lanes (__match_any_sync) — ascending (token, slot) within a group, the
// same integers as permute_block, whose placement walks all n ids once per expert (O(n · ne / THREADS)
// dependent loads: 1.9 ms per layer at 2048 tokens × 8 of 128 experts on an H100, docs/perf.md
// session 27). hist: shared [WARPS][ne].
__global__ void __launch_bounds__(THREADS) moe_permute_chunked_kernel(const int32_t* ids, int32_t* counts,
                                                                      int32_t* offsets, int32_t* sorted, int32_t* dest,
                                                                      int n, int ne, int k) {
    extern __shared__ int32_t hist[];  // [WARPS][ne]
    __shared__ int warp_sums[WARPS + 1];
    pdl_wait();
    pdl_trigger();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int chunk = (n + WARPS - 1) / WARPS, c0 = min(n, warp * chunk), c1 = min(n, c0 + chunk);
    for (int i = threadIdx.x; i < WARPS * ne; i += THREADS) hist[i] = 0;
    __syncthreads();
    int32_t* mine_hist = hist + warp * ne;
    for (int i = c0 + lane; i < c1; i += 32) {
        const int e = __ldg(ids + i);
        if (e >= 0 && e < ne) atomicAdd(&mine_hist[e], 1);
    }
    __syncthreads();
    // Experts e0 .. e1 − 1 of this thread: totals, the scan, then each warp's first row per expert.
    const int per = (ne + THREADS - 1) / THREADS, e0 = min(ne, int(threadIdx.x) * per), e1 = min(ne, e0 + per);
    int mine = 0;
    for (int e = e0; e < e1; ++e) {
        int tot = 0;
        for (int w = 0; w < WARPS; ++w) tot += hist[w * ne + e];
        counts[e] = tot;
        mine += tot;
    }
    int total = 0, run = block_exclusive_scan(mine, warp_sums, total);
    for (int e = e0; e < e1; ++e) {
        offsets[e] = run;
        for (int w = 0; w < WARPS; ++w) {
            const int c = hist[w * ne + e];
            hist[w * ne + e] = run;
            run += c;
        }
    }
    if (threadIdx.x == 0) offsets[ne] = total;
    __syncthreads();
    const unsigned lower = (1u << lane) - 1u;
    for (int b = c0; b < c1; b += 32) {
        const int i = b + lane;
        const int e = i < c1 ? __ldg(ids + i) : -1;
        const bool valid = e >= 0 && e < ne;
        const unsigned peers = __match_any_sync(FULL, valid ? e : -1);
        if (valid) {
            const int r = mine_hist[e] + __popc(peers & lower);
            sorted[r] = i / k;
            dest[i] = r;
        }
        __syncwarp();
        if (valid && lane == __ffs(peers) - 1) mine_hist[e] += __popc(peers);
        __syncwarp();
    }
}

// The router and the permutation in one CTA (moe_route_permute, decode batches): warp t routes
// token t (route::route_token, as moe_route_kernel) and leaves its ids in shared memory, then the
// CTA permutes them (permute_block). Shared memory: [n_tokens][words] router scratch, [ne] base,
// [n_tokens·k] ids.
template <class T, int EPL>
__global__ void __launch_bounds__(THREADS) moe_route_permute_kernel(const T* __restrict__ logits, int32_t* ids,
                                                                    float* __restrict__ w, int32_t* counts,
                                                                    int32_t* offsets, int32_t* sorted, int32_t* dest,
                                                                    int n_tokens, int ne, int k, bool renorm, int words,
                                                                    bool warp_perm) {
    extern __shared__ __align__(16) float smem[];
    __shared__ int warp_sums[WARPS + 1];
    int32_t* base = reinterpret_cast<int32_t*>(smem + size_t(n_tokens) * size_t(words));
    int32_t* sid = base + ne;
    pdl_wait();
    pdl_trigger();
    const int warp = threadIdx.x >> 5;
    if (warp < n_tokens) route::route_token<T, EPL>(logits, ids, w, warp, ne, k, renorm, smem + size_t(warp) * size_t(words), sid);
    if (warp_perm) {  // n_tokens · k ≤ 32: one warp permutes (n_tokens is uniform: the block's or warp 0's barrier)
        if (n_tokens > 1) __syncthreads();
        else __syncwarp();
        if (warp == 0) route::permute_warp(sid, counts, offsets, sorted, dest, n_tokens * k, ne, k);
        return;
    }
    __syncthreads();  // permute_block's first loop does not touch sid, its barrier follows
    permute_block(ids, counts, offsets, sorted, dest, n_tokens * k, ne, k, false, true, base, sid, warp_sums);
}

}  // namespace

// Ids staged in shared memory while offsets + ids fit the default 48 KB less the kernels' static
// __shared__ bytes (warp_sums: 80 B; CUDA counts both against the 48 KB: with the whole 48 KB as the
// bound, 1518–1520 tokens of a 128-expert top-8 model asked for 49088–49152 B and the launch failed).
constexpr int64_t k_permute_static_max = 256;
constexpr int64_t k_permute_smem = 48 * 1024 - k_permute_static_max;

static void moe_permute_launch(backend& be, const moe_permute_args& a) {
    static const bool static_ok =  // once: the kernel's static bytes within the allowance k_permute_smem leaves
        static_smem_bytes(reinterpret_cast<const void*>(moe_permute_kernel), k_permute_static_max,
                          "moe_permute_sm80") >= 0 &&
        static_smem_bytes(reinterpret_cast<const void*>(moe_permute_chunked_kernel), k_permute_static_max,
                          "moe_permute_sm80") >= 0;
    (void)static_ok;
    const int64_t n = a.n_tokens * a.k;
    const size_t hist_bytes = size_t(WARPS) * size_t(a.n_expert) * sizeof(int32_t);
    if (n > THREADS && hist_bytes <= size_t(k_permute_smem)) {  // a long batch: per-warp chunks
        launch_pdl(be, moe_permute_chunked_kernel, dim3(1), dim3(THREADS), hist_bytes, a.topk_ids.ptr<const int32_t>(),
                   a.expert_counts.ptr<int32_t>(), a.expert_offsets.ptr<int32_t>(), a.sorted_tokens.ptr<int32_t>(),
                   a.dest_rows.ptr<int32_t>(), int(n), int(a.n_expert), int(a.k));
        return;
    }
    const bool staged = (a.n_expert + n) * int64_t(sizeof(int32_t)) <= k_permute_smem;
    const size_t smem = size_t(a.n_expert + (staged ? n : 0)) * sizeof(int32_t);
    launch_pdl(be, moe_permute_kernel, dim3(1), dim3(THREADS), smem, a.topk_ids.ptr<const int32_t>(),
               a.expert_counts.ptr<int32_t>(), a.expert_offsets.ptr<int32_t>(), a.sorted_tokens.ptr<int32_t>(),
               a.dest_rows.ptr<int32_t>(), int(n), int(a.n_expert), int(a.k), staged);
}

static std::string moe_permute_accepts(const moe_permute_args& a) {
    if (a.n_expert > 8192) return "n_expert = " + std::to_string(a.n_expert) + " > 8192 (offsets in shared memory)";
    return "";
}

void moe_route_launch(backend& be, const moe_route_args& a);  // moe_route_sm80.cu
std::string moe_route_accepts(const moe_route_args& a);

// One launch for decode batches: ≤ WARPS tokens (one warp each), ≤ 256 experts (8 per lane) and
// router scratch + offsets + ids within the default 48 KB; otherwise the two kernels one after the
// other. ≤ 32 assignments (n_tokens · k): the permutation by warp 0 (permute_warp).
static void moe_route_permute_launch(backend& be, const moe_route_permute_args& a) {
    moe_route_front_before(be, a);  // a front: its two ops first (moe_route_front_sm90 fuses them)
    const moe_route_args& r = a.route;
    const moe_permute_args& p = a.permute;
    route::with_epl(r.n_expert, [&](auto epl) {
        constexpr int EPL = decltype(epl)::value;
        const int words = route::route_words(int(r.n_expert), int(r.k), EPL);
        const size_t smem = (size_t(r.n_tokens) * size_t(words) + size_t(r.n_expert + r.n_tokens * r.k)) * 4;
        if constexpr (EPL <= 8) {
            static_assert(32 * EPL <= route::PERM_EXPERTS, "permute_warp counts every expert of the fused launch");
            if (r.n_tokens >= 1 && r.n_tokens <= WARPS && smem <= size_t(k_permute_smem)) {
                dispatch_act(r.act, [&](auto tag) {
                    using T = typename decltype(tag)::type;
                    launch_pdl(be, moe_route_permute_kernel<T, EPL>, dim3(1), dim3(THREADS), smem,
                               r.logits.ptr<const T>(), r.topk_ids.ptr<int32_t>(), r.topk_weights.ptr<float>(),
                               p.expert_counts.ptr<int32_t>(), p.expert_offsets.ptr<int32_t>(),
                               p.sorted_tokens.ptr<int32_t>(), p.dest_rows.ptr<int32_t>(), int(r.n_tokens),
                               int(r.n_expert), int(r.k), r.norm_topk_prob, words,
                               r.n_tokens * r.k <= 32);
                });
                return;
            }
        }
        moe_route_launch(be, r);
        moe_permute_launch(be, p);
    });
}

static std::string moe_route_permute_accepts(const moe_route_permute_args& a) {
    std::string why = moe_route_accepts(a.route);
    if (why.empty()) why = moe_permute_accepts(a.permute);
    return why;
}

void register_moe_permute_sm80(kernel_registry& r) {
    kernel_req req = cuda_req(80, {dtype::I32});
    r.add(make_kernel<moe_permute_args>("moe_permute", "moe_permute_sm80", req, 10, moe_permute_accepts,
                                        moe_permute_launch));
    r.add(make_kernel<moe_route_permute_args>("moe_route_permute", "moe_route_permute_sm80",
                                              cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 10,
                                              moe_route_permute_accepts, moe_route_permute_launch));
}

}  // namespace cuda
}  // namespace tetra
