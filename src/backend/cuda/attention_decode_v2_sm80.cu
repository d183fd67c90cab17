// attention_decode_v2_sm80: decode-specialised split-KV paged attention (one query row per
// sequence). One CTA per (key split, kv head · head split, sequence) handles up to 4 query heads of
// the GQA group together (building blocks in attention_decode_v2.cuh), and a merge kernel combines
// the splits in fixed order (O = Σ_i e^(lse_i − lse) · O_i; deterministic). Splits past a row's
// position exit. Decode batches of ≥ 64 groups with short contexts run attention_decode_cluster_sm90
// on sm_90 instead (no merge kernel). (A merge by the last CTA of each group measured slower and
// was removed: docs/cuda-backend.md.)
#include "backend/cuda/attention_decode_v2.cuh"
#include "core/env.h"

namespace tetra {
namespace cuda {

namespace {

// One CTA's split: keys [lo, hi] of row t (sequence s) for query heads head0 .. head0 + nh − 1 of
// kv head kvh. Writes the final rows (one split) or the split's partial rows and their lse.
template <class T, int HG>
__device__ __forceinline__ void dv2_split_body(const dv2_params& p, int s, int t, int split, int kvh, int head0,
                                               int nh, int lo, int hi) {
    dv2_state<HG> st;
    dv2_keys<T, HG, 2>(p, s, t, kvh, head0, nh, lo, hi, st);  // two keys per subgroup per step
    extern __shared__ float smem[];
    dv2_merge_subgroups<T, HG>(p, st, nh, smem, [&](int h, int d, float mx, float num, float den, bool nan) {
        const int D = p.head_dim;
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
    });
}

// grid: (n_splits, n_head_kv · head_splits, n_seqs); block: k_dv2_threads. With more than one
// split, attention_decode_v2_merge_kernel combines them.
template <class T, int HG>
__global__ void __launch_bounds__(k_dv2_threads) attention_decode_v2_kernel(dv2_params p) {
    const int split = blockIdx.x, kvh = blockIdx.y / p.head_splits, hsplit = blockIdx.y % p.head_splits;
    dv2_prefetch_split<T>(p, blockIdx.z, split, kvh);
    pdl_wait();
    pdl_trigger();
    const int s = blockIdx.z, t = p.cu_seqlens_q[s];
    if (p.cu_seqlens_q[s + 1] <= t) return;  // no query row in this sequence (the whole group returns)
    const int nh = min(HG, p.group - hsplit * HG), head0 = kvh * p.group + hsplit * HG;
    int lo, hi;
    dv2_split_range(p, p.positions[t], split, lo, hi);
    // A split past the row's keys writes nothing: the merge skips it (one split: write zeros).
    if (lo <= hi || p.n_splits == 1) dv2_split_body<T, HG>(p, s, t, split, kvh, head0, nh, lo, hi);
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
    pdl_wait();
    pdl_trigger();
    const int64_t row = blockIdx.x;
    const int t = int(row / p.n_head), pos = p.positions[t], d = threadIdx.x, D = p.head_dim;
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
    const size_t smem = dv2_merge_smem_floats(n_sub, HG, p.head_dim) * sizeof(float);
    launch_pdl(be, attention_decode_v2_kernel<T, HG>, grid, dim3(k_dv2_threads), smem, p);
    if (p.n_splits > 1) {
        int threads = (p.head_dim + 31) / 32 * 32;
        launch_pdl(be, attention_decode_v2_merge_kernel<T>, dim3(unsigned(rows)), dim3(threads), 0, p);
    }
}

void attention_decode_v2_launch(backend& be, const attention_args& a) {
    int64_t n_tokens = a.q.dim(0);
    if (n_tokens == 0) return;
    dv2_dispatch(a, [&](auto tag, auto hg, const dv2_params& p) {
        dv2_launch<typename decltype(tag)::type, decltype(hg)::value>(be, a, p, n_tokens);
    });
}

std::string attention_decode_v2_accepts(const attention_args& a) { return dv2_accepts_common(a); }

}  // namespace

void register_attention_decode_v2(kernel_registry& r) {
    r.add(make_kernel<attention_args>("attention", "attention_decode_v2_sm80",
                                      cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 30,
                                      attention_decode_v2_accepts, attention_decode_v2_launch));
}

}  // namespace cuda
}  // namespace tetra
