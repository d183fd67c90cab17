// attention_decode_v2_sm80: decode-specialised split-KV paged attention (one query row per
// sequence). One CTA per (key split, kv head · head split, sequence) handles up to 4 query heads of
// the GQA group together (building blocks in attention_decode_v2.cuh), and a merge kernel combines
// the splits in fixed order (O = Σ_i e^(lse_i − lse) · O_i; deterministic). Splits past a row's
// position exit. Decode batches of ≥ 64 groups with short contexts run attention_decode_cluster_sm90
// on sm_90 instead (no merge kernel). (A merge by the last CTA of each group measured slower and
// was removed: docs/cuda-backend.md.)
#include "backend/cuda/attention_decode_v2.cuh"

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

template <class T, int HG>
void dv2_launch(backend& be, const attention_args& a, dv2_params p, int64_t n_tokens) {
    const int n_sub = k_dv2_threads / p.lanes_per_key;
    dv2_plan_splits(be, a, p, n_tokens, 2 * n_sub);
    dim3 grid(unsigned(p.n_splits), unsigned(p.n_head_kv * p.head_splits), unsigned(a.meta.n_seqs));
    const size_t smem = dv2_merge_smem_floats(n_sub, HG, p.head_dim) * sizeof(float);
    launch_pdl(be, attention_decode_v2_kernel<T, HG>, grid, dim3(k_dv2_threads), smem, p);
    dv2_launch_merge<T>(be, p, n_tokens);
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
