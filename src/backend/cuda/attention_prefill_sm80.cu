// attention_prefill_sm80: flash-style paged causal attention for any batch (prefill chunks and
// decode rows together), GQA: one CTA per (query tile of one sequence, kv head, head split),
// online softmax over K/V tiles gathered through block_tables (attention_device.cuh). The grid is
// sized from meta.max_seqlen_q; tiles past a sequence's query rows exit at once.
#include "backend/cuda/attention_device.cuh"

namespace tetra {
namespace cuda {

// grid: (ceil(max_seqlen_q / tokens_per_cta), n_seqs, n_head_kv · head_splits); block: 128
template <class T>
__global__ void attention_prefill_kernel(attn_params p) {
    int kvh = blockIdx.z / p.head_splits, hsplit = blockIdx.z % p.head_splits;
    attn_cta<T>(p, blockIdx.y, blockIdx.x, kvh, hsplit, -1);
}

static void attention_prefill_launch(backend& be, const attention_args& a) {
    if (a.q.dim(0) == 0 || a.meta.max_seqlen_q == 0) return;
    dispatch_act(a.act, [&](auto tag) {
        using T = typename decltype(tag)::type;
        attn_params p = attn_base_params(a, sizeof(T));
        size_t smem = attn_smem_bytes(p, sizeof(T));
        auto kern = attention_prefill_kernel<T>;
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        dim3 grid(unsigned((a.meta.max_seqlen_q + p.tokens_per_cta - 1) / p.tokens_per_cta), unsigned(a.meta.n_seqs),
                  unsigned(p.n_head_kv * p.head_splits));
        kern<<<grid, k_att_warps * 32, smem, stream_of(be)>>>(p);
        CUDA_CHECK(cudaGetLastError());
    });
}

static std::string attention_prefill_accepts(const attention_args& a) { return attn_accepts_common(a); }

void register_attention_prefill(kernel_registry& r) {
    r.add(make_kernel<attention_args>("attention", "attention_prefill_sm80",
                                      cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}), 10,
                                      attention_prefill_accepts, attention_prefill_launch));
}

}  // namespace cuda
}  // namespace tetra
