// attention_decode_sm80: split-KV (flash-decoding) paged attention for decode batches (one query
// row per sequence): CTAs over (split, sequence, kv head · head split) each attend to one key
// range and write a normalized partial output plus its log-sum-exp to scratch; a merge kernel
// combines them, O = Σ_i e^(lse_i − lse) · O_i. The split count is chosen from max_seqlen_kv and
// the SM count so the grid has ~2 CTAs per SM; the last split runs to each row's position.
#include "backend/cuda/attention_device.cuh"

namespace tetra {
namespace cuda {

// grid: (n_splits, n_seqs, n_head_kv · head_splits); block: 128
template <class T>
__global__ void attention_decode_kernel(attn_params p) {
    int kvh = blockIdx.z / p.head_splits, hsplit = blockIdx.z % p.head_splits;
    attn_cta<T>(p, blockIdx.y, 0, kvh, hsplit, blockIdx.x);
}

// One block per (token, head) row: out[row, :] from its n_splits partials. Splits without keys
// have lse = −inf and weigh 0; a NaN lse (NaN score) makes the row NaN, as in the oracle. block: 32·ceil(head_dim/32) threads (≤ 256).
template <class T>
__global__ void attention_merge_kernel(const float* part_o, const float* part_lse, T* out, int n_splits, int head_dim) {
    int64_t row = blockIdx.x;
    const float* lse = part_lse + row * n_splits;
    float mx = -INFINITY;
    bool nan = false;
    for (int i = 0; i < n_splits; ++i) mx = fmaxf(mx, lse[i]), nan |= lse[i] != lse[i];
    int d = threadIdx.x;
    if (d >= head_dim) return;
    float num = nan ? __int_as_float(0x7fc00000) : 0.0f, den = nan ? 1.0f : 0.0f;
    if (!nan && mx != -INFINITY)
        for (int i = 0; i < n_splits; ++i) {
            float w = expf(lse[i] - mx);  // lse = −inf → 0
            num += w * part_o[(row * n_splits + i) * head_dim + d];
            den += w;
        }
    out[row * head_dim + d] = from_f32<T>(den > 0.0f ? num / den : 0.0f);
}

static void attention_decode_launch(backend& be, const attention_args& a) {
    int64_t n_tokens = a.q.dim(0);
    if (n_tokens == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        attn_params p = attn_base_params(a, sizeof(T));
        int64_t base_ctas = int64_t(a.meta.n_seqs) * p.n_head_kv * p.head_splits;
        int64_t want = (2 * int64_t(be.device().sm_count) + base_ctas - 1) / base_ctas;
        int64_t max_kv = a.meta.max_seqlen_kv > 0 ? a.meta.max_seqlen_kv : 1;
        int64_t most = (max_kv + k_att_bk - 1) / k_att_bk;  // at least one key tile per split
        int64_t splits = std::max<int64_t>(1, std::min<int64_t>({want, most, 64}));
        int64_t len = (max_kv + splits - 1) / splits;
        len = (len + k_att_bk - 1) / k_att_bk * k_att_bk;
        p.split_len = int(len);
        p.n_splits = int((max_kv + len - 1) / len);
        int64_t rows = n_tokens * p.n_head;
        size_t o_bytes = size_t(rows) * p.n_splits * p.head_dim * sizeof(float);
        char* ws = static_cast<char*>(scratch(be, o_bytes + size_t(rows) * p.n_splits * sizeof(float)));
        p.part_o = reinterpret_cast<float*>(ws);
        p.part_lse = reinterpret_cast<float*>(ws + o_bytes);
        size_t smem = attn_smem_bytes(p, sizeof(T));
        auto kern = attention_decode_kernel<T>;
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        dim3 grid(unsigned(p.n_splits), unsigned(a.meta.n_seqs), unsigned(p.n_head_kv * p.head_splits));
        kern<<<grid, k_att_warps * 32, smem, stream_of(be)>>>(p);
        CUDA_CHECK(cudaGetLastError());
        int threads = (p.head_dim + 31) / 32 * 32;
        attention_merge_kernel<T><<<unsigned(rows), threads, 0, stream_of(be)>>>(p.part_o, p.part_lse, a.out.ptr<T>(),
                                                                                p.n_splits, p.head_dim);
        CUDA_CHECK(cudaGetLastError());
    });
}

// Decode only: every sequence has at most one query row (then its CTA row is that token).
static std::string attention_decode_accepts(const attention_args& a) {
    std::string why = attn_accepts_common(a);
    if (!why.empty()) return why;
    if (a.meta.max_seqlen_q != 1)
        return strfmt("decode kernel: max_seqlen_q = %d (needs 1 query row per sequence)", a.meta.max_seqlen_q);
    return "";
}

void register_attention_decode(kernel_registry& r) {
    r.add(make_kernel<attention_args>("attention", "attention_decode_sm80",
                                      cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 20,
                                      attention_decode_accepts, attention_decode_launch));
}

}  // namespace cuda
}  // namespace tetra
