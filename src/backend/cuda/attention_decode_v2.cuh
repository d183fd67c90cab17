// The building blocks of the decode attention kernels attention_decode_v2_sm80 (split-KV + merge
// kernel) and attention_decode_cluster_sm90 (splits of one group merged in a thread block
// cluster): one query row per sequence, a CTA takes up to 4 query heads of a GQA group, a key
// belongs to a subgroup of lanes spanning head_dim (16-byte K/V loads), every subgroup keeps its
// own f32 online softmax, and the CTA merges its subgroups in shared memory in fixed order.
#pragma once
#include "backend/cuda/attention_device.cuh"
#include "core/env.h"

namespace tetra {
namespace cuda {

constexpr int k_dv2_threads = 128;
constexpr int k_dv2_elems = 8;      // head_dim elements per lane: one or two 16-byte chunks
// Query heads per CTA. 4, not 8: a larger GQA group (Qwen3-30B-A3B: 8) takes two CTAs per kv head,
// each reading the K/V rows (the second mostly from L2), for half the per-thread softmax chain and
// twice the CTAs at small batches (measured: docs/cuda-backend.md, decode attention).
constexpr int k_dv2_max_heads = 4;

struct dv2_params : attn_base {
    int lanes_per_key;         // LK: lanes of one key's subgroup (power of two ≤ 32)
    int n_chunks;              // 16-byte chunks per K/V row (head_dim · sizeof(T) / 16)
};
// 128 bytes: a larger parameter struct (136 bytes was measured) changes nvcc's code for the whole
// kernel (the subgroup merge loops are no longer unrolled).
static_assert(sizeof(dv2_params) == 128, "dv2_params: keep the kernel parameter at 128 bytes");

// Keys [lo, hi] of split `split` for a row at position pos (lo > hi: none).
__device__ __forceinline__ void dv2_split_range(const dv2_params& p, int pos, int split, int& lo, int& hi) {
    lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
    hi = pos;
    lo = max(lo, split * p.split_len);
    if (split + 1 < p.n_splits) hi = min(hi, (split + 1) * p.split_len - 1);
}

// Before pdl_wait() (cuda_device.cuh's rule): this split's K and V rows into L2, so the loads after
// the wait hit L2 instead of waiting for DRAM behind the metadata chain. It reads only the step's
// metadata and the paged K/V rows; the row of the position itself is stored by the previous kernel
// (kv store) and is prefetched too, which is harmless: stores go through L2, so the loads after
// pdl_wait() read the new row.
template <class T>
__device__ __forceinline__ void dv2_prefetch_split(const dv2_params& p, int s, int split, int kvh) {
    const int t = p.cu_seqlens_q[s];
    if (p.cu_seqlens_q[s + 1] <= t) return;
    int lo, hi;
    dv2_split_range(p, p.positions[t], split, lo, hi);
    const int lines = (p.head_dim * int(sizeof(T)) + 127) / 128, per_key = 2 * lines;  // K lines, then V
    const int32_t* bt = p.block_tables + int64_t(s) * p.max_blocks;
    for (int i = int(threadIdx.x); i < (hi - lo + 1) * per_key; i += k_dv2_threads) {
        const int j = lo + i / per_key, r = i % per_key;
        const int64_t slot = paged_slot(bt, p.block_size, j);
        const char* row = static_cast<const char*>(r < lines ? p.k_cache : p.v_cache) +
                          (slot * p.n_head_kv + kvh) * p.head_dim * int64_t(sizeof(T));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(row + (r % lines) * 128));
    }
}

// 16 bytes of T as f32 values.
template <class T> __device__ __forceinline__ void dv2_unpack(const uint4& u, float* f);
template <> __device__ __forceinline__ void dv2_unpack<float>(const uint4& u, float* f) {
    f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y), f[2] = __uint_as_float(u.z), f[3] = __uint_as_float(u.w);
}
template <> __device__ __forceinline__ void dv2_unpack<__nv_bfloat16>(const uint4& u, float* f) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float2 v = __bfloat1622float2(h[i]);
        f[2 * i] = v.x, f[2 * i + 1] = v.y;
    }
}
template <> __device__ __forceinline__ void dv2_unpack<__half>(const uint4& u, float* f) {
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float2 v = __half22float2(h[i]);
        f[2 * i] = v.x, f[2 * i + 1] = v.y;
    }
}

// One subgroup's online-softmax state for its HG heads; the lane owns k_dv2_elems dims.
template <int HG>
struct dv2_state {
    float m[HG], l[HG], acc[HG][k_dv2_elems];
    bool nan[HG];  // a live score was NaN: the oracle's row is NaN then
};

// K and V chunks of key j (zeros where the lane has no chunk or the key is not live).
template <class T, int KCH>
__device__ __forceinline__ void dv2_load(const dv2_params& p, const int32_t* bt, int kvh, int j, bool live, int sub,
                                         uint4* k, uint4* v) {
    constexpr int VEC = 16 / int(sizeof(T));
    int64_t off = 0;
    if (live) {
        int64_t slot = paged_slot(bt, p.block_size, j);
        off = (slot * p.n_head_kv + kvh) * p.head_dim;
    }
#pragma unroll
    for (int c = 0; c < KCH; ++c) {
        int chunk = sub + c * p.lanes_per_key;
        k[c] = v[c] = make_uint4(0, 0, 0, 0);
        if (live && chunk < p.n_chunks) {
            k[c] = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(p.k_cache) + off + chunk * VEC));
            v[c] = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(p.v_cache) + off + chunk * VEC));
        }
    }
}

// The NK keys of one loop step (key u: chunks k[u], v[u], live[u]) into the subgroup's state.
// The heads' partial dot products of every key first, then their sums over the key's subgroup
// (xor shuffles, all NK·HG sums advancing together level by level), then the online update key by
// key in order. Each score is the same sum in the same order as one key at a time (and so is the
// update), so the results are those of the key-by-key loop; only the dependent chain is shorter
// (NK·HG independent shuffle chains instead of one after another: docs/perf.md, session 13).
template <class T, int HG, int KCH, int NK>
__device__ __forceinline__ void dv2_update_step(const dv2_params& p, const float (&q)[HG][k_dv2_elems],
                                                const uint4 (&k)[NK][KCH], const uint4 (&v)[NK][KCH],
                                                const bool (&live)[NK], dv2_state<HG>& st) {
    constexpr int VEC = 16 / int(sizeof(T));
    float dot[NK][HG];
#pragma unroll
    for (int u = 0; u < NK; ++u) {
        float kf[k_dv2_elems];
#pragma unroll
        for (int c = 0; c < KCH; ++c) dv2_unpack<T>(k[u][c], kf + c * VEC);
#pragma unroll
        for (int h = 0; h < HG; ++h) {
            float d = 0.0f;
#pragma unroll
            for (int e = 0; e < k_dv2_elems; ++e) d += q[h][e] * kf[e];
            dot[u][h] = d;
        }
    }
    for (int o = p.lanes_per_key >> 1; o > 0; o >>= 1)
#pragma unroll
        for (int u = 0; u < NK; ++u)
#pragma unroll
            for (int h = 0; h < HG; ++h) dot[u][h] += __shfl_xor_sync(0xffffffffu, dot[u][h], o);
#pragma unroll
    for (int u = 0; u < NK; ++u) {
        float vf[k_dv2_elems];
#pragma unroll
        for (int c = 0; c < KCH; ++c) dv2_unpack<T>(v[u][c], vf + c * VEC);
#pragma unroll
        for (int h = 0; h < HG; ++h) {
            float score = live[u] ? dot[u][h] * p.scale : -INFINITY;
            if (score != score) st.nan[h] = true, score = -INFINITY;
            float m_new = fmaxf(st.m[h], score);
            float pj = 0.0f, alpha = 1.0f;
            if (m_new != -INFINITY) {
                pj = expf(score - m_new);        // score = −inf → 0
                alpha = expf(st.m[h] - m_new);   // m = −inf → 0 (l, acc are 0 then)
            }
            st.l[h] = st.l[h] * alpha + pj;
            st.m[h] = m_new;
#pragma unroll
            for (int e = 0; e < k_dv2_elems; ++e) st.acc[h][e] = st.acc[h][e] * alpha + pj * vf[e];
        }
    }
}

// Keys [lo, hi] of row t (sequence s) for query heads head0 .. head0 + nh − 1 of kv head kvh, into
// each subgroup's state (lo > hi: none). Subgroup g takes keys lo + g, lo + g + n_sub, ...; NK keys
// per subgroup per step, all their loads issued before the first update. Uniform trip count over
// the CTA (the score shuffles need whole warps).
template <class T, int HG, int NK>
__device__ __forceinline__ void dv2_keys(const dv2_params& p, int s, int t, int kvh, int head0, int nh, int lo, int hi,
                                         dv2_state<HG>& st) {
    constexpr int VEC = 16 / int(sizeof(T)), KCH = k_dv2_elems / VEC;
    const int LK = p.lanes_per_key, D = p.head_dim, tid = threadIdx.x;
    const int sub = tid & (LK - 1), g = tid / LK, n_sub = k_dv2_threads / LK;
    float q[HG][k_dv2_elems];
#pragma unroll
    for (int h = 0; h < HG; ++h)
#pragma unroll
        for (int c = 0; c < KCH; ++c) {
            int chunk = sub + c * LK;
            uint4 u = make_uint4(0, 0, 0, 0);
            if (h < nh && chunk < p.n_chunks)
                u = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) +
                                                         (int64_t(t) * p.n_head + head0 + h) * D + chunk * VEC));
            dv2_unpack<T>(u, &q[h][c * VEC]);
        }
#pragma unroll
    for (int h = 0; h < HG; ++h) {
        st.m[h] = -INFINITY, st.l[h] = 0.0f, st.nan[h] = false;
#pragma unroll
        for (int e = 0; e < k_dv2_elems; ++e) st.acc[h][e] = 0.0f;
    }
    const int32_t* bt = p.block_tables + int64_t(s) * p.max_blocks;
    for (int jb = lo; jb <= hi; jb += NK * n_sub) {
        uint4 k[NK][KCH], v[NK][KCH];
        bool live[NK];
#pragma unroll
        for (int u = 0; u < NK; ++u) {
            int j = jb + u * n_sub + g;
            live[u] = j <= hi;
            dv2_load<T, KCH>(p, bt, kvh, j, live[u], sub, k[u], v[u]);
        }
        dv2_update_step<T, HG, KCH, NK>(p, q, k, v, live, st);
    }
}

// Shared memory of the subgroup merge: acc [n_sub][HG][D], m / l / nan / weight [n_sub][HG], the
// heads' max and NaN flag [HG] (floats).
__host__ __device__ inline size_t dv2_merge_smem_floats(int n_sub, int hg, int head_dim) {
    return size_t(n_sub) * hg * (head_dim + 4) + 2 * size_t(hg);
}

// Merges the CTA's subgroups in fixed order: emit(h, d, mx, num, den, nan) once per output element
// (h < nh, d < head_dim) with the largest subgroup max mx, num = Σ_g e^(m_g − mx)·acc_g[d] and
// den = Σ_g e^(m_g − mx)·l_g over the subgroups with a live key (m_g > −inf), in subgroup order
// (mx = −inf, num = den = 0 without live keys). The weights e^(m_g − mx) are computed once per
// (subgroup, head) before the element loop, whose sums then only load and multiply-add (the same
// operations in the same order as when every element recomputed them). Ends with the CTA's threads
// spread over the elements (no barrier after the last emit).
template <class T, int HG, class Emit>
__device__ __forceinline__ void dv2_merge_subgroups(const dv2_params& p, const dv2_state<HG>& st, int nh, float* smem,
                                                    Emit&& emit) {
    constexpr int VEC = 16 / int(sizeof(T)), KCH = k_dv2_elems / VEC;
    const int LK = p.lanes_per_key, D = p.head_dim, tid = threadIdx.x;
    const int sub = tid & (LK - 1), g = tid / LK, n_sub = k_dv2_threads / LK;
    float* red_acc = smem;
    float* red_m = red_acc + n_sub * HG * D;
    float* red_l = red_m + n_sub * HG;
    int* red_nan = reinterpret_cast<int*>(red_l + n_sub * HG);
    float* red_w = reinterpret_cast<float*>(red_nan + n_sub * HG);
    float* head_mx = red_w + n_sub * HG;
    int* head_nan = reinterpret_cast<int*>(head_mx + HG);
#pragma unroll
    for (int h = 0; h < HG; ++h) {
        if (sub == 0) red_m[g * HG + h] = st.m[h], red_l[g * HG + h] = st.l[h], red_nan[g * HG + h] = st.nan[h];
#pragma unroll
        for (int c = 0; c < KCH; ++c) {
            int chunk = sub + c * LK;
            if (chunk < p.n_chunks)
#pragma unroll
                for (int e = 0; e < VEC; ++e) red_acc[(g * HG + h) * D + chunk * VEC + e] = st.acc[h][c * VEC + e];
        }
    }
    __syncthreads();
    // Thread (gg, h) of the first n_sub · HG: the head's max and NaN flag, and subgroup gg's weight.
    for (int x = tid; x < n_sub * HG; x += k_dv2_threads) {
        const int gg = x / HG, h = x % HG;
        float mx = -INFINITY;
        bool nan = false;
        for (int q = 0; q < n_sub; ++q) mx = fmaxf(mx, red_m[q * HG + h]), nan |= red_nan[q * HG + h] != 0;
        const float mg = red_m[gg * HG + h];
        red_w[gg * HG + h] = mx != -INFINITY && mg != -INFINITY ? expf(mg - mx) : 0.0f;
        if (gg == 0) head_mx[h] = mx, head_nan[h] = nan;
    }
    __syncthreads();
    int h = tid / D, d = tid % D;
    for (int i = tid; i < nh * D; i += k_dv2_threads) {
        const float mx = head_mx[h];
        float num = 0.0f, den = 0.0f;
        if (mx != -INFINITY)
#pragma unroll 4
            for (int gg = 0; gg < n_sub; ++gg) {
                if (red_m[gg * HG + h] == -INFINITY) continue;  // no live key in that subgroup
                const float w = red_w[gg * HG + h];
                num += w * red_acc[(gg * HG + h) * D + d];
                den += w * red_l[gg * HG + h];
            }
        emit(h, d, mx, num, den, head_nan[h] != 0);
        d += k_dv2_threads;
        while (d >= D) d -= D, ++h;
    }
}

inline int dv2_next_pow2(int x) {
    int y = 1;
    while (y < x) y *= 2;
    return y;
}

// Host: dv2_params of launch `a` for element type T (no splits yet) and the heads per CTA.
template <class T>
dv2_params dv2_make_params(const attention_args& a, int* hg) {
    dv2_params p{};
    attn_fill_base(a, p);
    constexpr int VEC = 16 / int(sizeof(T)), KCH = k_dv2_elems / VEC;
    p.n_chunks = p.head_dim / VEC;
    p.lanes_per_key = std::min(32, dv2_next_pow2((p.n_chunks + KCH - 1) / KCH));
    *hg = std::min(k_dv2_max_heads, dv2_next_pow2(p.group));
    p.head_splits = (p.group + *hg - 1) / *hg;
    return p;
}

// Host: f(type_tag<T>{}, std::integral_constant<int, HG>{}, p) for launch `a`.
template <class F>
void dv2_dispatch(const attention_args& a, F&& f) {
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        int hg = 0;
        dv2_params p = dv2_make_params<T>(a, &hg);
        switch (hg) {
            case 1: f(tag, std::integral_constant<int, 1>{}, p); break;
            case 2: f(tag, std::integral_constant<int, 2>{}, p); break;
            default: f(tag, std::integral_constant<int, 4>{}, p); break;
        }
    });
}

// What both decode kernels need: cache dtype = act, one query row per sequence, 16-byte rows and
// 16-byte-aligned q/k/v, head_dim ≤ 256.
inline std::string dv2_accepts_common(const attention_args& a) {
    if (a.k_cache.type != a.act)
        return strfmt("k_cache dtype %s differs from the activation dtype %s", dtype_name(a.k_cache.type),
                      dtype_name(a.act));
    if (a.meta.max_seqlen_q != 1)
        return strfmt("decode kernel: max_seqlen_q = %d (needs 1 query row per sequence)", a.meta.max_seqlen_q);
    if (a.meta.n_seqs > 65535)  // one grid plane (z) or row (y) per sequence
        return strfmt("%d sequences in one call: the grid's y / z dimension takes at most 65535", a.meta.n_seqs);
    int64_t d = a.q.dim(2), row_bytes = d * int64_t(dtype_size(a.act));
    if (d > k_att_max_head_dim) return strfmt("head_dim %lld > %d", (long long)d, k_att_max_head_dim);
    if (row_bytes % 16 != 0)
        return strfmt("decode kernel: head_dim %lld × %s is %lld bytes, not a multiple of 16", (long long)d,
                      dtype_name(a.act), (long long)row_bytes);
    for (auto t : {std::make_pair(&a.q, "q"), {&a.k_cache, "k_cache"}, {&a.v_cache, "v_cache"}})
        if (reinterpret_cast<uintptr_t>(t.first->data) % 16 != 0)
            return strfmt("decode kernel: %s is not 16-byte aligned", t.second);
    return "";
}

// ---- the split plan and the merge kernel (attention_decode_v2_sm80, attention_decode_mma_sm80) --

// Host: the split plan of a split + merge decode launch into p.split_len / p.n_splits, and the
// partials' scratch when there is more than one split. About 2 CTAs per SM over base = n_seqs ·
// n_head_kv · head_splits groups, at most 128 splits, keys per split at least
// TETRA_ATTN_SPLIT_KEYS rounded up to a multiple of `step` (the kernel's keys per loop step).
// Short splits buy parallelism for long contexts but each CTA pays a fixed latency (q, block
// table, partial write) and the merge reads every split.
inline void dv2_plan_splits(backend& be, const attention_args& a, dv2_params& p, int64_t n_tokens, int step) {
    int64_t base = int64_t(a.meta.n_seqs) * p.n_head_kv * p.head_splits;
    int64_t want = (2 * int64_t(be.device().sm_count) + base - 1) / base;
    int64_t max_kv = a.meta.max_seqlen_kv > 0 ? a.meta.max_seqlen_kv : 1;
    static const int64_t split_keys = [] {
        int64_t v = env_int("TETRA_ATTN_SPLIT_KEYS", 16);
        TETRA_CHECK(v >= 1 && v <= 1 << 20, "TETRA_ATTN_SPLIT_KEYS=%lld: expected an integer in [1, 1048576]",
                    (long long)v);
        return v;
    }();
    int64_t min_len = std::max<int64_t>(1, (split_keys + step - 1) / step) * step;
    int64_t most = (max_kv + min_len - 1) / min_len;
    int64_t splits = std::max<int64_t>(1, std::min<int64_t>({want, most, 128}));
    int64_t len = (max_kv + splits - 1) / splits;
    len = (len + min_len - 1) / min_len * min_len;
    p.split_len = int(len);
    p.n_splits = int((max_kv + len - 1) / len);
    if (p.n_splits > 1) {
        int64_t rows = n_tokens * p.n_head;
        size_t o_bytes = size_t(rows) * p.n_splits * p.head_dim * sizeof(float);
        char* ws = static_cast<char*>(scratch(be, o_bytes + size_t(rows) * p.n_splits * sizeof(float)));
        p.part_o = reinterpret_cast<float*>(ws);
        p.part_lse = reinterpret_cast<float*>(ws + o_bytes);
    }
}

constexpr int k_dv2_merge_pre = 16;  // partials per lane the merge loads before its weights

// One block per (token, head) row: the splits that hold keys for the row, in split order. A NaN
// lse (NaN score) makes the row NaN, as in the oracle. block: 32·ceil(head_dim/32) threads. The
// first k_dv2_merge_pre partials are loaded with the lse values (one round trip instead of two:
// skipped splits' stale values are never used), the splits' weights are computed in parallel into
// shared memory (n_splits ≤ 128), and the in-order sum adds the partials in split order.
template <class T>
__global__ void attention_decode_v2_merge_kernel(dv2_params p) {
    __shared__ float s_w[128];    // e^(lse_i − max); 0 for a skipped split
    __shared__ int s_use[128];    // split i holds keys for the row and its lse is finite
    __shared__ float s_red[32];
    __shared__ int s_nan;
    const int64_t row = blockIdx.x;
    // The row's position is step metadata (cuda_device.cuh's rule): read before the wait, so that the
    // lse values (which splits hold keys depends on it) and the partials are one round trip after it.
    const int t = int(row / p.n_head), pos = p.positions[t], d = threadIdx.x, D = p.head_dim;
    pdl_wait();
    pdl_trigger();
    const float* lse = p.part_lse + row * p.n_splits;
    const float* po = p.part_o + row * p.n_splits * D + d;
    float pre[k_dv2_merge_pre];
#pragma unroll
    for (int i = 0; i < k_dv2_merge_pre; ++i) pre[i] = d < D && i < p.n_splits ? po[int64_t(i) * D] : 0.0f;
    if (threadIdx.x == 0) s_nan = 0;
    __syncthreads();
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < p.n_splits; i += blockDim.x) {
        int lo, hi;
        dv2_split_range(p, pos, i, lo, hi);
        float l = lo <= hi ? lse[i] : -INFINITY;
        s_w[i] = l;
        s_use[i] = lo <= hi && l != -INFINITY;
        if (l != l) s_nan = 1;  // benign race: every writer stores 1
        else mx = fmaxf(mx, l);
    }
    mx = warp_max(mx);
    if ((threadIdx.x & 31) == 0) s_red[threadIdx.x >> 5] = mx;
    __syncthreads();
    mx = -INFINITY;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) mx = fmaxf(mx, s_red[w]);
    const bool nan = s_nan != 0;
    for (int i = threadIdx.x; i < p.n_splits; i += blockDim.x) s_w[i] = s_use[i] ? expf(s_w[i] - mx) : 0.0f;
    __syncthreads();
    if (d >= D) return;
    float num = 0.0f, den = 0.0f;
    if (!nan && mx != -INFINITY) {
#pragma unroll
        for (int i = 0; i < k_dv2_merge_pre; ++i) {
            if (i >= p.n_splits || !s_use[i]) continue;
            const float w = s_w[i];
            num += w * pre[i];
            den += w;
        }
#pragma unroll 4
        for (int i = k_dv2_merge_pre; i < p.n_splits; ++i) {
            if (!s_use[i]) continue;
            const float w = s_w[i];
            num += w * po[int64_t(i) * D];
            den += w;
        }
    }
    float o = nan ? __int_as_float(0x7fc00000) : den > 0.0f ? num / den : 0.0f;
    static_cast<T*>(p.out)[row * D + d] = from_f32<T>(o);
}

// Host: the merge kernel after a split launch with p.n_splits > 1 (nothing with one split).
template <class T>
void dv2_launch_merge(backend& be, const dv2_params& p, int64_t n_tokens) {
    if (p.n_splits <= 1) return;
    int threads = (p.head_dim + 31) / 32 * 32;
    launch_pdl(be, attention_decode_v2_merge_kernel<T>, dim3(unsigned(n_tokens * p.n_head)), dim3(threads), 0, p);
}

}  // namespace cuda
}  // namespace tetra
