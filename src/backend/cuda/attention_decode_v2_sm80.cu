// attention_decode_v2_sm80: decode-specialised split-KV paged attention (one query row per
// sequence). One CTA per (key split, kv head · head split, sequence) handles up to 8 query heads of
// the GQA group together, so each K/V row is read once, with 16-byte loads: a key belongs to a
// subgroup of lanes spanning head_dim, every subgroup keeps its own f32 online softmax, the CTA
// merges its subgroups in shared memory, and a merge kernel combines the splits in fixed order
// (O = Σ_i e^(lse_i − lse) · O_i; deterministic). Splits past a row's position exit. (A merge by
// the last CTA of each group, bit-identical, measured slower at batch 1 and was removed:
// docs/cuda-backend.md.)
#include "backend/cuda/attention_device.cuh"
#include "core/env.h"

namespace tetra {
namespace cuda {

namespace {

constexpr int k_dv2_threads = 128;
constexpr int k_dv2_elems = 8;      // head_dim elements per lane: one or two 16-byte chunks
constexpr int k_dv2_max_heads = 8;  // query heads per CTA

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
        int64_t slot = int64_t(bt[j / p.block_size]) * p.block_size + j % p.block_size;
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

// Scores of one key for every head (reduced over the key's subgroup), then the online update.
template <class T, int HG, int KCH>
__device__ __forceinline__ void dv2_update(const dv2_params& p, const float (&q)[HG][k_dv2_elems], const uint4* k,
                                           const uint4* v, bool live, dv2_state<HG>& st) {
    constexpr int VEC = 16 / int(sizeof(T));
    float kf[k_dv2_elems], vf[k_dv2_elems];
#pragma unroll
    for (int c = 0; c < KCH; ++c) dv2_unpack<T>(k[c], kf + c * VEC), dv2_unpack<T>(v[c], vf + c * VEC);
#pragma unroll
    for (int h = 0; h < HG; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < k_dv2_elems; ++e) dot += q[h][e] * kf[e];
        for (int o = p.lanes_per_key >> 1; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        float score = live ? dot * p.scale : -INFINITY;
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

// One CTA's split: keys [lo, hi] of row t (sequence s) for query heads head0 .. head0 + nh − 1 of
// kv head kvh. Writes the final rows (one split) or the split's partial rows and their lse.
template <class T, int HG>
__device__ __forceinline__ void dv2_split_body(const dv2_params& p, int s, int t, int split, int kvh, int head0,
                                               int nh, int lo, int hi) {
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
    dv2_state<HG> st;
#pragma unroll
    for (int h = 0; h < HG; ++h) {
        st.m[h] = -INFINITY, st.l[h] = 0.0f, st.nan[h] = false;
#pragma unroll
        for (int e = 0; e < k_dv2_elems; ++e) st.acc[h][e] = 0.0f;
    }
    const int32_t* bt = p.block_tables + int64_t(s) * p.max_blocks;
    // Uniform trip count over the CTA (the score shuffles need whole warps); two keys per
    // subgroup per step, both loads issued before either update.
    for (int jb = lo; jb <= hi; jb += 2 * n_sub) {
        int j0 = jb + g, j1 = jb + n_sub + g;
        bool live0 = j0 <= hi, live1 = j1 <= hi;
        uint4 k0[KCH], v0[KCH], k1[KCH], v1[KCH];
        dv2_load<T, KCH>(p, bt, kvh, j0, live0, sub, k0, v0);
        dv2_load<T, KCH>(p, bt, kvh, j1, live1, sub, k1, v1);
        dv2_update<T, HG, KCH>(p, q, k0, v0, live0, st);
        dv2_update<T, HG, KCH>(p, q, k1, v1, live1, st);
    }

    // Merge the subgroups: red_acc [n_sub][HG][D], red_m / red_l [n_sub][HG], red_nan likewise.
    extern __shared__ float smem[];
    float* red_acc = smem;
    float* red_m = red_acc + n_sub * HG * D;
    float* red_l = red_m + n_sub * HG;
    int* red_nan = reinterpret_cast<int*>(red_l + n_sub * HG);
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
    for (int i = tid; i < nh * D; i += k_dv2_threads) {
        int h = i / D, d = i % D;
        float mx = -INFINITY;
        bool nan = false;
        for (int gg = 0; gg < n_sub; ++gg) mx = fmaxf(mx, red_m[gg * HG + h]), nan |= red_nan[gg * HG + h] != 0;
        float num = 0.0f, den = 0.0f;
        if (mx != -INFINITY)
            for (int gg = 0; gg < n_sub; ++gg) {
                float mg = red_m[gg * HG + h];
                if (mg == -INFINITY) continue;  // no live key in that subgroup
                float w = expf(mg - mx);
                num += w * red_acc[(gg * HG + h) * D + d];
                den += w * red_l[gg * HG + h];
            }
        float o = nan ? __int_as_float(0x7fc00000) : den > 0.0f ? num / den : 0.0f;
        int64_t row = int64_t(t) * p.n_head + head0 + h;
        if (p.n_splits == 1) {
            static_cast<T*>(p.out)[row * D + d] = from_f32<T>(o);
        } else {
            p.part_o[(row * p.n_splits + split) * D + d] = o;
            if (d == 0)
                p.part_lse[row * p.n_splits + split] = nan ? __int_as_float(0x7fc00000)
                                                       : den > 0.0f ? mx + logf(den)
                                                                    : -INFINITY;
        }
    }
}

// grid: (n_splits, n_head_kv · head_splits, n_seqs); block: k_dv2_threads. With more than one
// split, attention_decode_v2_merge_kernel combines them.
template <class T, int HG>
__global__ void __launch_bounds__(k_dv2_threads) attention_decode_v2_kernel(dv2_params p) {
    pdl_wait();
    pdl_trigger();
    const int split = blockIdx.x, kvh = blockIdx.y / p.head_splits, hsplit = blockIdx.y % p.head_splits;
    const int s = blockIdx.z, t = p.cu_seqlens_q[s];
    if (p.cu_seqlens_q[s + 1] <= t) return;  // no query row in this sequence (the whole group returns)
    const int nh = min(HG, p.group - hsplit * HG), head0 = kvh * p.group + hsplit * HG;
    int lo, hi;
    dv2_split_range(p, p.positions[t], split, lo, hi);
    // A split past the row's keys writes nothing: the merge skips it (one split: write zeros).
    if (lo <= hi || p.n_splits == 1) dv2_split_body<T, HG>(p, s, t, split, kvh, head0, nh, lo, hi);
}

// One block per (token, head) row: the splits that hold keys for the row, in split order. A NaN
// lse (NaN score) makes the row NaN, as in the oracle. block: 32·ceil(head_dim/32) threads. The
// splits' weights are computed in parallel into shared memory first (n_splits ≤ 128), so the
// in-order sum only waits on independent part_o loads.
template <class T>
__global__ void attention_decode_v2_merge_kernel(dv2_params p) {
    __shared__ float s_w[128];    // e^(lse_i − max); 0 for a skipped split
    __shared__ int s_use[128];    // split i holds keys for the row and its lse is finite
    __shared__ float s_red[32];
    __shared__ int s_nan;
    pdl_wait();
    pdl_trigger();
    const int64_t row = blockIdx.x;
    const int t = int(row / p.n_head), pos = p.positions[t], d = threadIdx.x, D = p.head_dim;
    const float* lse = p.part_lse + row * p.n_splits;
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
        const float* po = p.part_o + row * p.n_splits * D + d;
#pragma unroll 4
        for (int i = 0; i < p.n_splits; ++i) {
            if (!s_use[i]) continue;
            const float w = s_w[i];
            num += w * po[int64_t(i) * D];
            den += w;
        }
    }
    float o = nan ? __int_as_float(0x7fc00000) : den > 0.0f ? num / den : 0.0f;
    static_cast<T*>(p.out)[row * D + d] = from_f32<T>(o);
}

int next_pow2(int x) {
    int y = 1;
    while (y < x) y *= 2;
    return y;
}

template <class T, int HG>
void dv2_launch(backend& be, const attention_args& a, dv2_params p, int64_t n_tokens) {
    const int n_sub = k_dv2_threads / p.lanes_per_key;
    int64_t base = int64_t(a.meta.n_seqs) * p.n_head_kv * p.head_splits;
    int64_t want = (2 * int64_t(be.device().sm_count) + base - 1) / base;
    int64_t max_kv = a.meta.max_seqlen_kv > 0 ? a.meta.max_seqlen_kv : 1;
    // Keys per split: at least TETRA_ATTN_SPLIT_KEYS (rounded up to a step of the key loop, 2 keys
    // per subgroup). Short splits buy parallelism for long contexts but each CTA pays a fixed
    // latency (q, block table, partial write) and the merge reads every split.
    static const int64_t split_keys = [] {
        int64_t v = env_int("TETRA_ATTN_SPLIT_KEYS", 16);
        TETRA_CHECK(v >= 1 && v <= 1 << 20, "TETRA_ATTN_SPLIT_KEYS=%lld: expected an integer in [1, 1048576]", (long long)v);
        return v;
    }();
    int64_t min_len = std::max<int64_t>(1, (split_keys + 2 * n_sub - 1) / (2 * n_sub)) * (2 * n_sub);
    int64_t most = (max_kv + min_len - 1) / min_len;
    int64_t splits = std::max<int64_t>(1, std::min<int64_t>({want, most, 128}));
    int64_t len = (max_kv + splits - 1) / splits;
    len = (len + min_len - 1) / min_len * min_len;
    p.split_len = int(len);
    p.n_splits = int((max_kv + len - 1) / len);
    int64_t rows = n_tokens * p.n_head;
    if (p.n_splits > 1) {
        size_t o_bytes = size_t(rows) * p.n_splits * p.head_dim * sizeof(float);
        char* ws = static_cast<char*>(scratch(be, o_bytes + size_t(rows) * p.n_splits * sizeof(float)));
        p.part_o = reinterpret_cast<float*>(ws);
        p.part_lse = reinterpret_cast<float*>(ws + o_bytes);
    }
    dim3 grid(unsigned(p.n_splits), unsigned(p.n_head_kv * p.head_splits), unsigned(a.meta.n_seqs));
    const size_t smem = size_t(n_sub) * HG * (p.head_dim + 3) * sizeof(float);  // the subgroup merge
    launch_pdl(be, attention_decode_v2_kernel<T, HG>, grid, dim3(k_dv2_threads), smem, p);
    if (p.n_splits > 1) {
        int threads = (p.head_dim + 31) / 32 * 32;
        launch_pdl(be, attention_decode_v2_merge_kernel<T>, dim3(unsigned(rows)), dim3(threads), 0, p);
    }
}

void attention_decode_v2_launch(backend& be, const attention_args& a) {
    int64_t n_tokens = a.q.dim(0);
    if (n_tokens == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        dv2_params p{};
        attn_fill_base(a, p);
        constexpr int VEC = 16 / int(sizeof(T)), KCH = k_dv2_elems / VEC;
        p.n_chunks = p.head_dim / VEC;
        p.lanes_per_key = std::min(32, next_pow2((p.n_chunks + KCH - 1) / KCH));
        int hg = std::min(k_dv2_max_heads, next_pow2(p.group));
        p.head_splits = (p.group + hg - 1) / hg;
        switch (hg) {
            case 1: dv2_launch<T, 1>(be, a, p, n_tokens); break;
            case 2: dv2_launch<T, 2>(be, a, p, n_tokens); break;
            case 4: dv2_launch<T, 4>(be, a, p, n_tokens); break;
            default: dv2_launch<T, 8>(be, a, p, n_tokens); break;
        }
    });
}

std::string attention_decode_v2_accepts(const attention_args& a) {
    if (a.k_cache.type != a.act)
        return strfmt("k_cache dtype %s differs from the activation dtype %s", dtype_name(a.k_cache.type),
                      dtype_name(a.act));
    if (a.meta.max_seqlen_q != 1)
        return strfmt("decode v2 kernel: max_seqlen_q = %d (needs 1 query row per sequence)", a.meta.max_seqlen_q);
    int64_t d = a.q.dim(2), row_bytes = d * int64_t(dtype_size(a.act));
    if (d > k_att_max_head_dim) return strfmt("head_dim %lld > %d", (long long)d, k_att_max_head_dim);
    if (row_bytes % 16 != 0)
        return strfmt("decode v2 kernel: head_dim %lld × %s is %lld bytes, not a multiple of 16", (long long)d,
                      dtype_name(a.act), (long long)row_bytes);
    for (auto t : {std::make_pair(&a.q, "q"), {&a.k_cache, "k_cache"}, {&a.v_cache, "v_cache"}})
        if (reinterpret_cast<uintptr_t>(t.first->data) % 16 != 0)
            return strfmt("decode v2 kernel: %s is not 16-byte aligned", t.second);
    return "";
}

}  // namespace

void register_attention_decode_v2(kernel_registry& r) {
    r.add(make_kernel<attention_args>("attention", "attention_decode_v2_sm80",
                                      cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 30,
                                      attention_decode_v2_accepts, attention_decode_v2_launch));
}

}  // namespace cuda
}  // namespace tetra
