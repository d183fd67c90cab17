// attention_decode_cluster_sm90: decode attention (one query row per sequence) without a merge
// kernel for batches of ≥ 64 (kv head · head split, sequence) groups and short contexts. The key
// splits of one group form a thread block cluster of ≤ 4 CTAs; each CTA runs the v2 split body
// (attention_decode_v2.cuh, 4 keys per subgroup in flight for 2-byte types), leaves its merged rows
// (max, sum, numerators) in shared memory, and after a cluster barrier combines a slice of the
// group's outputs from every CTA's shared memory in split order (deterministic). Other calls
// (fewer groups, more than 64 keys per CTA) are declined: attention_decode_v2_sm80 takes them.
#include <cooperative_groups.h>

#include "backend/cuda/attention_decode_v2.cuh"

namespace tetra {
namespace cuda {

namespace {

// With fewer groups than k_dvc_min_groups, v2's many short splits and its merge kernel were
// measured faster than clusters of 8 (docs/cuda-backend.md, decode attention).
constexpr int k_dvc_min_groups = 64;
constexpr int k_dvc_target_ctas = 256;  // ~2 CTAs per SM on a 132-SM H100 (a constant: the plan is shape-only)
constexpr int k_dvc_max_cluster = k_dvc_target_ctas / k_dvc_min_groups;  // 4
constexpr int k_dvc_max_split = 64;     // keys per CTA beyond which (and beyond one step) v2 takes the call

// Keys per subgroup per step: 4 (16-byte K and V chunks of each in flight) for 2-byte types, 2 for
// f32, whose lanes hold two chunks per row.
template <class T> constexpr int dvc_keys_per_step() { return sizeof(T) == 4 ? 2 : 4; }

struct dvc_plan {
    int cluster;    // CTAs per group = key splits (1..8)
    int split_len;  // keys per split, a multiple of the key loop's step
};

// Splits for ~k_dvc_target_ctas CTAs in all, each a whole number of key-loop steps.
dvc_plan dvc_plan_of(const attention_args& a, const dv2_params& p, int keys_per_step) {
    const int64_t step = int64_t(keys_per_step) * (k_dv2_threads / p.lanes_per_key);
    const int64_t base = int64_t(a.meta.n_seqs) * p.n_head_kv * p.head_splits;
    const int64_t c = std::min<int64_t>(k_dvc_max_cluster, std::max<int64_t>(1, (k_dvc_target_ctas + base - 1) / base));
    const int64_t max_kv = std::max(a.meta.max_seqlen_kv, 1);
    int64_t len = (max_kv + c - 1) / c;
    len = (len + step - 1) / step * step;
    return {int((max_kv + len - 1) / len), int(std::min<int64_t>(len, 1 << 30))};
}

// grid: (cluster, n_head_kv · head_splits, n_seqs), clusters of (cluster, 1, 1); block:
// k_dv2_threads. Split i = blockIdx.x = the CTA's rank in its cluster.
template <class T, int HG>
__global__ void __launch_bounds__(k_dv2_threads) attention_decode_cluster_kernel(dv2_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    const int split = blockIdx.x, kvh = blockIdx.y / p.head_splits, hsplit = blockIdx.y % p.head_splits;
    dv2_prefetch_split<T>(p, blockIdx.z, split, kvh);
    pdl_wait();
    pdl_trigger();
    const int s = blockIdx.z, t = p.cu_seqlens_q[s];
    if (p.cu_seqlens_q[s + 1] <= t) return;  // no query row: the whole cluster returns, no barrier waits
    const int nh = min(HG, p.group - hsplit * HG), head0 = kvh * p.group + hsplit * HG, D = p.head_dim;
    int lo, hi;
    dv2_split_range(p, p.positions[t], split, lo, hi);  // a split past the row's keys: lo > hi, no keys
    dv2_state<HG> st;
    dv2_keys<T, HG, dvc_keys_per_step<T>()>(p, s, t, kvh, head0, nh, lo, hi, st);
    extern __shared__ float smem[];
    // This CTA's rows for the cluster: numerators [HG][D], max (NaN: a NaN score) and sum [HG].
    float* c_num = smem + dv2_merge_smem_floats(k_dv2_threads / p.lanes_per_key, HG, D);
    float* c_m = c_num + HG * D;
    float* c_den = c_m + HG;
    dv2_merge_subgroups<T, HG>(p, st, nh, smem, [&](int h, int d, float mx, float num, float den, bool nan) {
        c_num[h * D + d] = num;
        if (d == 0) c_m[h] = nan ? __int_as_float(0x7fc00000) : mx, c_den[h] = den;
    });
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();  // every CTA's rows are in its shared memory
    // This CTA's slice of the group's nh · D outputs, combined over the splits in order.
    const int n_cl = p.n_splits, n_el = nh * D, per = (n_el + n_cl - 1) / n_cl, end = min(n_el, (split + 1) * per);
    for (int i = split * per + int(threadIdx.x); i < end; i += k_dv2_threads) {
        const int h = i / D, d = i % D;
        float m[k_dvc_max_cluster], num_r[k_dvc_max_cluster], den_r[k_dvc_max_cluster];
        float mx = -INFINITY;
        bool nan = false;
#pragma unroll
        for (int r = 0; r < k_dvc_max_cluster; ++r) {
            m[r] = -INFINITY, num_r[r] = den_r[r] = 0.0f;
            if (r < n_cl) {
                m[r] = *cl.map_shared_rank(c_m + h, r);
                num_r[r] = *cl.map_shared_rank(c_num + i, r);
                den_r[r] = *cl.map_shared_rank(c_den + h, r);
            }
            nan |= m[r] != m[r];
            mx = fmaxf(mx, m[r]);
        }
        float num = 0.0f, den = 0.0f;
        if (!nan && mx != -INFINITY)
#pragma unroll
            for (int r = 0; r < k_dvc_max_cluster; ++r) {
                if (m[r] == -INFINITY) continue;  // no live key in that split
                float w = expf(m[r] - mx);
                num += w * num_r[r];
                den += w * den_r[r];
            }
        float o = nan ? __int_as_float(0x7fc00000) : den > 0.0f ? num / den : 0.0f;
        static_cast<T*>(p.out)[(int64_t(t) * p.n_head + head0 + h) * D + d] = from_f32<T>(o);
    }
    cl.sync();  // the other CTAs may still read this CTA's shared memory
#endif
}

template <class T, int HG>
void dvc_launch(backend& be, const attention_args& a, dv2_params p) {
    dvc_plan pl = dvc_plan_of(a, p, dvc_keys_per_step<T>());
    p.n_splits = pl.cluster, p.split_len = pl.split_len;
    const int n_sub = k_dv2_threads / p.lanes_per_key;
    const size_t smem = (dv2_merge_smem_floats(n_sub, HG, p.head_dim) + size_t(HG) * (p.head_dim + 2)) * sizeof(float);
    TETRA_ASSERT(smem <= 48 * 1024);
    launch_cluster_pdl(be, attention_decode_cluster_kernel<T, HG>,
                       dim3(unsigned(p.n_splits), unsigned(p.n_head_kv * p.head_splits), unsigned(a.meta.n_seqs)),
                       dim3(k_dv2_threads), smem, unsigned(p.n_splits), p);
}

void attention_decode_cluster_launch(backend& be, const attention_args& a) {
    if (a.q.dim(0) == 0) return;
    dv2_dispatch(a, [&](auto tag, auto hg, const dv2_params& p) {
        dvc_launch<typename decltype(tag)::type, decltype(hg)::value>(be, a, p);
    });
}

std::string attention_decode_cluster_accepts(const attention_args& a) {
    std::string why = dv2_accepts_common(a);
    if (!why.empty()) return why;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        int hg = 0;
        dv2_params p = dv2_make_params<T>(a, &hg);
        const int step = dvc_keys_per_step<T>() * (k_dv2_threads / p.lanes_per_key);
        dvc_plan pl = dvc_plan_of(a, p, dvc_keys_per_step<T>());
        const int64_t groups = int64_t(a.meta.n_seqs) * p.n_head_kv * p.head_splits;
        if (groups < k_dvc_min_groups)
            why = strfmt("decode cluster kernel: %lld (kv head · head split, sequence) groups (needs >= %d): the "
                         "split + merge kernels take it",
                         (long long)groups, k_dvc_min_groups);
        else if (pl.split_len > std::max(k_dvc_max_split, step))
            why = strfmt("decode cluster kernel: %d keys per CTA for max_seqlen_kv %d (at most %d): the split + "
                         "merge kernels take it",
                         pl.split_len, a.meta.max_seqlen_kv, std::max(k_dvc_max_split, step));
    });
    return why;
}

}  // namespace

// FEAT_TMA: the loaded image is sm_90+ code, which thread block clusters need as well.
void register_attention_decode_cluster(kernel_registry& r) {
    r.add(make_kernel<attention_args>("attention", "attention_decode_cluster_sm90",
                                      cuda_req(90, {dtype::F32, dtype::BF16, dtype::F16}, FEAT_TMA), 40,
                                      attention_decode_cluster_accepts, attention_decode_cluster_launch));
}

}  // namespace cuda
}  // namespace tetra
