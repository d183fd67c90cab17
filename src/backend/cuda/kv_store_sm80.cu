// kv_store_sm80: scatter this step's k/v rows into the paged caches by slot_mapping (slot =
// block · block_size + offset; negative slots are padding and skipped) with dtype conversion.
// One block per token. Slots beyond the cache are not checked on the device (the CPU oracle
// rejects them); they are skipped rather than written out of bounds.
#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {

// k, v: [n_tokens, row] at; k_cache, v_cache: [n_slots, row] ct; slot_mapping: i32 [n_tokens]
__global__ void kv_store_kernel(const void* k, const void* v, dtype at, void* k_cache, void* v_cache, dtype ct,
                                const int32_t* slot_mapping, int64_t row, int64_t n_slots) {
    int64_t t = blockIdx.x, slot = slot_mapping[t];
    if (slot < 0 || slot >= n_slots) return;
    for (int64_t j = threadIdx.x; j < row; j += blockDim.x) {
        store_any(k_cache, ct, slot * row + j, load_any(k, at, t * row + j));
        store_any(v_cache, ct, slot * row + j, load_any(v, at, t * row + j));
    }
}

static void kv_store_launch(backend& be, const kv_store_args& a) {
    int64_t n_tokens = a.k.dim(0), row = a.k.dim(1) * a.k.dim(2);
    if (n_tokens == 0 || row == 0) return;
    TETRA_CHECK(n_tokens <= 0x7fffffff, "kv_store_sm80: %lld tokens exceed the grid limit", (long long)n_tokens);
    kv_store_kernel<<<unsigned(n_tokens), 128, 0, stream_of(be)>>>(
        a.k.data, a.v.data, a.k.type, a.k_cache.data, a.v_cache.data, a.k_cache.type,
        a.slot_mapping.ptr<const int32_t>(), row, a.k_cache.dim(0) * a.k_cache.dim(1));
    CUDA_CHECK(cudaGetLastError());
}

void register_kv_store(kernel_registry& r) {
    r.add(make_kernel<kv_store_args>("kv_store", "kv_store_sm80", cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}),
                                     10, nullptr, kv_store_launch));
}

}  // namespace cuda
}  // namespace tetra
