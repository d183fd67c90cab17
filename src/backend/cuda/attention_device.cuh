// Paged attention building blocks shared by attention_prefill_sm80 and attention_decode_sm80 (the
// decode v2 kernel shares attn_base and attn_fill_base): a CTA owns up to k_rows query rows (tokens
// × heads of one kv-head group of one sequence), streams K/V tiles of k_bk keys through shared
// memory (gathered through the block table) and keeps a flash-style online softmax per row
// (running max m, sum l, output rescaled when m grows; 1/l at the end). CUDA cores, f32 math; no
// tensor cores yet. Causal per row: keys j ≤ position (and j > position − window with a window).
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {

constexpr int k_att_warps = 4;                       // warps per CTA
constexpr int k_att_rows_per_warp = 4;               // query rows per warp
constexpr int k_att_rows = k_att_warps * k_att_rows_per_warp;
constexpr int k_att_bk = 32;                         // keys per tile (one per lane in the score step)
constexpr int k_att_max_head_dim = 256;
constexpr int k_att_ni = k_att_max_head_dim / 32;    // output dims per lane

// The cache slot of key j of a sequence whose block table row is bt: the paged layout every
// attention kernel reads (a K/V row is at ((slot · n_head_kv + kv head) · head_dim)).
__device__ __forceinline__ int64_t paged_slot(const int32_t* bt, int block_size, int j) {
    return int64_t(bt[j / block_size]) * block_size + j % block_size;
}

// The fields every paged-attention kernel reads (attn_params, and dv2_params of
// attention_decode_v2_sm80.cu, extend it). Split-KV decode: split i covers keys
// [i·split_len, (i+1)·split_len) (the last split: to the row's position) and writes its normalized
// partial output and log-sum-exp to part_o / part_lse; n_splits = 1: no partials. (Pointers first:
// the derived structs' ints fill the tail, so attn_params keeps its 128 bytes and its SASS.)
struct attn_base {
    const void* q;             // [n_tokens, n_head, head_dim] T
    const void* k_cache;       // [n_blocks, block_size, n_head_kv, head_dim] T
    const void* v_cache;
    void* out;                 // [n_tokens, n_head·head_dim] T
    const int32_t* cu_seqlens_q;
    const int32_t* positions;
    const int32_t* block_tables;  // [n_seqs, max_blocks]
    float* part_o = nullptr;   // [n_tokens·n_head, n_splits, head_dim] f32
    float* part_lse = nullptr; // [n_tokens·n_head, n_splits] f32
    int n_head, n_head_kv, head_dim, group, block_size, max_blocks;
    float scale;
    int window;                // 0 = none
    int head_splits;           // CTAs per kv head along the group
    int n_splits = 1, split_len = 0;
};

struct attn_params : attn_base {
    int heads_per_cta;         // query heads of one group a CTA covers (≤ k_att_rows)
    int tokens_per_cta;        // query tokens a CTA covers (k_att_rows / heads_per_cta)
    int kstride;               // shared K row stride in elements (padded against bank conflicts)
};
static_assert(sizeof(attn_params) == 128, "attn_params: its ints should fill attn_base's tail padding");

// Dynamic shared memory of one CTA for element type size `elt`.
inline size_t attn_smem_bytes(const attn_params& p, size_t elt) {
    return size_t(k_att_rows) * p.head_dim * 4 + size_t(k_att_bk) * p.kstride * elt +
           size_t(k_att_bk) * p.head_dim * elt + size_t(k_att_rows) * k_att_bk * 4;
}

// K row stride (elements) whose 4-byte word stride is odd where possible: lanes reading key rows
// at the same d then hit distinct banks.
inline int attn_kstride(int head_dim, size_t elt) {
    if (elt == 4) return head_dim % 2 ? head_dim : head_dim + 1;
    int s = (head_dim + 1) / 2 * 2;  // even, so rows stay 4-byte aligned
    return (s / 2) % 2 ? s : s + 2;
}

// The query rows of one CTA and the key range each may see (shared memory). Row r =
// token_local · heads_per_cta + head_local; tok = −1 marks an unused row.
struct attn_rows {
    int tok[k_att_rows], head[k_att_rows], lo[k_att_rows], hi[k_att_rows];
    int lo_all, hi_all;  // union of the rows' key ranges (hi_all < lo_all: no keys)
};

// Fills rw (every thread calls it); false when the CTA owns no query row (uniform: it may return).
// split ≥ 0 restricts every row to that split's keys (the last split runs to the row's position).
__device__ __forceinline__ bool attn_rows_setup(const attn_params& p, int s, int tile, int kvh, int hsplit,
                                                int split, attn_rows& rw) {
    const int tid = threadIdx.x, tok0 = p.cu_seqlens_q[s], tok1 = p.cu_seqlens_q[s + 1];
    if (tid == 0) rw.lo_all = 0x7fffffff, rw.hi_all = -1;
    __syncthreads();
    if (tid < k_att_rows) {
        int tl = tid / p.heads_per_cta, hl = tid % p.heads_per_cta;
        int t = tok0 + tile * p.tokens_per_cta + tl, hg = hsplit * p.heads_per_cta + hl;
        bool ok = tl < p.tokens_per_cta && t < tok1 && hg < p.group;
        int lo = 0, hi = -1;
        if (ok) {
            hi = p.positions[t];
            lo = p.window > 0 ? max(0, hi - p.window + 1) : 0;
            if (split >= 0) {
                lo = max(lo, split * p.split_len);
                if (split + 1 < p.n_splits) hi = min(hi, (split + 1) * p.split_len - 1);
            }
            if (lo <= hi) atomicMin(&rw.lo_all, lo), atomicMax(&rw.hi_all, hi);
        }
        rw.tok[tid] = ok ? t : -1;
        rw.head[tid] = ok ? kvh * p.group + hg : -1;
        rw.lo[tid] = lo, rw.hi[tid] = hi;
    }
    __syncthreads();
    bool any_row = false;
    for (int r = 0; r < k_att_rows; ++r) any_row |= rw.tok[r] >= 0;
    return any_row;
}

// Online-softmax state of one warp's rows; lane owns output dims lane + 32·i. nan: a live score
// was NaN — the oracle's whole row is NaN then (its sum of exps is NaN), while fmaxf would
// silently drop it from the running max.
struct attn_state {
    float m[k_att_rows_per_warp], l[k_att_rows_per_warp], acc[k_att_rows_per_warp][k_att_ni];
    bool nan[k_att_rows_per_warp];
};

// Keys [j0, j0 + k_att_bk) of kv head kvh into shared memory through the block table row bt;
// keys past hi_all are zero (never read from the cache: its unowned slots may hold anything).
template <class T>
__device__ __forceinline__ void attn_load_tile(const attn_params& p, const int32_t* bt, int kvh, int j0, int hi_all,
                                               T* k_s, T* v_s) {
    const int D = p.head_dim;
    const T* kc = static_cast<const T*>(p.k_cache);
    const T* vc = static_cast<const T*>(p.v_cache);
    for (int i = threadIdx.x; i < k_att_bk * D; i += blockDim.x) {
        int jj = i / D, d = i % D, j = j0 + jj;
        T kv = from_f32<T>(0.0f), vv = kv;
        if (j <= hi_all) {
            int64_t slot = paged_slot(bt, p.block_size, j);
            int64_t off = (slot * p.n_head_kv + kvh) * D + d;
            kv = kc[off], vv = vc[off];
        }
        k_s[jj * p.kstride + d] = kv;
        v_s[jj * D + d] = vv;
    }
}

// One K/V tile for the warp's rows: scores (lane = key; four rows share every K element read),
// the online-softmax update, then P·V (lane = output dims).
template <class T>
__device__ __forceinline__ void attn_tile_update(const attn_params& p, const attn_rows& rw, const float* q_s,
                                                 const T* k_s, const T* v_s, float* p_s, int j0, attn_state& st) {
    const int D = p.head_dim, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float sc[k_att_rows_per_warp];
#pragma unroll
    for (int rr = 0; rr < k_att_rows_per_warp; ++rr) sc[rr] = 0.0f;
    const T* krow = k_s + lane * p.kstride;
    const float* qw = q_s + warp * k_att_rows_per_warp * D;
    for (int d = 0; d < D; ++d) {
        float kd = to_f32(krow[d]);
#pragma unroll
        for (int rr = 0; rr < k_att_rows_per_warp; ++rr) sc[rr] += qw[rr * D + d] * kd;
    }
    const int j = j0 + lane;
#pragma unroll
    for (int rr = 0; rr < k_att_rows_per_warp; ++rr) {
        int r = warp * k_att_rows_per_warp + rr;
        bool live = rw.tok[r] >= 0 && j >= rw.lo[r] && j <= rw.hi[r];
        float score = live ? sc[rr] * p.scale : -INFINITY;
        st.nan[rr] |= __any_sync(0xffffffffu, score != score);
        if (score != score) score = -INFINITY;
        float m_new = fmaxf(st.m[rr], warp_max(score));
        float pj = 0.0f, alpha = 1.0f;
        if (m_new != -INFINITY) {
            pj = live ? expf(score - m_new) : 0.0f;
            alpha = expf(st.m[rr] - m_new);  // m = −inf → 0, and l, acc are 0 then anyway
        }
        st.l[rr] = st.l[rr] * alpha + warp_sum(pj);
        st.m[rr] = m_new;
        p_s[r * k_att_bk + lane] = pj;
#pragma unroll
        for (int i = 0; i < k_att_ni; ++i) st.acc[rr][i] *= alpha;
    }
    __syncwarp();
    for (int jj = 0; jj < k_att_bk && j0 + jj <= rw.hi_all; ++jj) {
        const T* vrow = v_s + jj * D;
        float vd[k_att_ni];
#pragma unroll
        for (int i = 0; i < k_att_ni; ++i) vd[i] = lane + 32 * i < D ? to_f32(vrow[lane + 32 * i]) : 0.0f;
#pragma unroll
        for (int rr = 0; rr < k_att_rows_per_warp; ++rr) {
            float pj = p_s[(warp * k_att_rows_per_warp + rr) * k_att_bk + jj];
#pragma unroll
            for (int i = 0; i < k_att_ni; ++i) st.acc[rr][i] += pj * vd[i];
        }
    }
}

// Final rows (split < 0) or the split's normalized partial rows and their log-sum-exp.
template <class T>
__device__ __forceinline__ void attn_store(const attn_params& p, const attn_rows& rw, int split, const attn_state& st) {
    const int D = p.head_dim, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int rr = 0; rr < k_att_rows_per_warp; ++rr) {
        int r = warp * k_att_rows_per_warp + rr;
        if (rw.tok[r] < 0) continue;
        int64_t row = int64_t(rw.tok[r]) * p.n_head + rw.head[r];
        float inv = st.nan[rr] ? __int_as_float(0x7fc00000) : st.l[rr] > 0.0f ? 1.0f / st.l[rr] : 0.0f;
        if (split < 0) {
            T* o = static_cast<T*>(p.out) + row * D;
#pragma unroll
            for (int i = 0; i < k_att_ni; ++i)
                if (lane + 32 * i < D) o[lane + 32 * i] = from_f32<T>(st.acc[rr][i] * inv);
        } else {
            float* o = p.part_o + (row * p.n_splits + split) * D;
#pragma unroll
            for (int i = 0; i < k_att_ni; ++i)
                if (lane + 32 * i < D) o[lane + 32 * i] = st.acc[rr][i] * inv;
            if (lane == 0)
                p.part_lse[row * p.n_splits + split] = st.nan[rr]       ? __int_as_float(0x7fc00000)
                                                       : st.l[rr] > 0.0f ? st.m[rr] + logf(st.l[rr])
                                                                         : -INFINITY;
        }
    }
}

// The CTA body: query tile `tile` of sequence s, kv head kvh, head split hsplit. split < 0: plain
// prefill writing final outputs; split ≥ 0: only that split's keys, writing partials.
template <class T>
__device__ void attn_cta(const attn_params& p, int s, int tile, int kvh, int hsplit, int split) {
    extern __shared__ float smem[];
    float* q_s = smem;                                                   // [k_att_rows][head_dim]
    T* k_s = reinterpret_cast<T*>(q_s + k_att_rows * p.head_dim);       // [k_att_bk][kstride]
    T* v_s = k_s + k_att_bk * p.kstride;                                 // [k_att_bk][head_dim]
    float* p_s = reinterpret_cast<float*>(v_s + k_att_bk * p.head_dim);  // [k_att_rows][k_att_bk]
    __shared__ attn_rows rw;
    if (!attn_rows_setup(p, s, tile, kvh, hsplit, split, rw)) return;  // tile past the query rows
    const int D = p.head_dim;
    for (int i = threadIdx.x; i < k_att_rows * D; i += blockDim.x) {
        int r = i / D, d = i % D;
        q_s[i] = rw.tok[r] >= 0 ? to_f32(static_cast<const T*>(p.q)[(int64_t(rw.tok[r]) * p.n_head + rw.head[r]) * D + d])
                                : 0.0f;
    }
    attn_state st;
#pragma unroll
    for (int rr = 0; rr < k_att_rows_per_warp; ++rr) {
        st.m[rr] = -INFINITY, st.l[rr] = 0.0f, st.nan[rr] = false;
#pragma unroll
        for (int i = 0; i < k_att_ni; ++i) st.acc[rr][i] = 0.0f;
    }
    const int32_t* bt = p.block_tables + int64_t(s) * p.max_blocks;
    const int lo_all = rw.lo_all, hi_all = rw.hi_all;
    for (int j0 = lo_all; j0 <= hi_all; j0 += k_att_bk) {
        __syncthreads();  // previous tile fully consumed (and q_s written, the first time)
        attn_load_tile<T>(p, bt, kvh, j0, hi_all, k_s, v_s);
        __syncthreads();
        attn_tile_update<T>(p, rw, q_s, k_s, v_s, p_s, j0, st);
    }
    attn_store<T>(p, rw, split, st);
}

// Host: the attn_base fields of launch `a` (no splits yet). Kernels accept only k_cache dtype == act.
inline void attn_fill_base(const attention_args& a, attn_base& p) {
    p.q = a.q.data, p.k_cache = a.k_cache.data, p.v_cache = a.v_cache.data, p.out = a.out.data;
    p.cu_seqlens_q = a.meta.cu_seqlens_q.ptr<const int32_t>();
    p.positions = a.meta.positions.ptr<const int32_t>();
    p.block_tables = a.meta.block_tables.ptr<const int32_t>();
    p.n_head = int(a.q.dim(1)), p.n_head_kv = int(a.k_cache.dim(2)), p.head_dim = int(a.q.dim(2));
    p.group = p.n_head / p.n_head_kv, p.block_size = a.meta.block_size, p.max_blocks = int(a.meta.block_tables.dim(1));
    p.scale = a.scale, p.window = a.sliding_window;
}

// Host: attn_params of launch `a` for element size `elt`.
inline attn_params attn_base_params(const attention_args& a, size_t elt) {
    attn_params p;
    attn_fill_base(a, p);
    p.heads_per_cta = p.group < k_att_rows ? p.group : k_att_rows;
    p.tokens_per_cta = k_att_rows / p.heads_per_cta;
    p.head_splits = (p.group + p.heads_per_cta - 1) / p.heads_per_cta;
    p.kstride = attn_kstride(p.head_dim, elt);
    return p;
}


// What both attention kernels cannot handle.
inline std::string attn_accepts_common(const attention_args& a) {
    if (a.k_cache.type != a.act)
        return strfmt("k_cache dtype %s differs from the activation dtype %s", dtype_name(a.k_cache.type),
                      dtype_name(a.act));
    if (a.q.dim(2) > k_att_max_head_dim)
        return strfmt("head_dim %lld > %d", (long long)a.q.dim(2), k_att_max_head_dim);
    if (a.meta.n_seqs > 65535)  // one grid row (y) per sequence
        return strfmt("%d sequences in one call: the grid's y dimension takes at most 65535", a.meta.n_seqs);
    return "";
}

}  // namespace cuda
}  // namespace tetra
