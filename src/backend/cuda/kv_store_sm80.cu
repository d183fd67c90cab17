// kv_store_sm80: scatter this step's k/v rows into the paged caches by slot_mapping (slot =
// block · block_size + offset; negative slots are padding and skipped) with dtype conversion.
// Same-dtype rows of a multiple of 8 elements (bf16 decode) move as 16-B vectors, one per thread, so a
// token's k and v rows land in one round trip (the generic loop walked a 1024-element row in 8
// dependent steps: ~10 µs per decode layer on an H100); otherwise one block per token converts
// element by element. Slots beyond the cache are not checked on the device (the CPU oracle
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

// Same dtype, row % 8 == 0 (in 16-bit elements; f32 rows % 4), 16-B aligned: grid (tokens, vector blocks).
// vec_row: 16-B vectors per row.
__global__ void kv_store_vec_kernel(const uint4* k, const uint4* v, uint4* k_cache, uint4* v_cache,
                                    const int32_t* slot_mapping, int64_t vec_row, int64_t n_slots) {
    const int64_t t = blockIdx.x, j = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
    const int64_t slot = slot_mapping[t];
    if (j >= vec_row || slot < 0 || slot >= n_slots) return;
    const uint4 kv = k[t * vec_row + j], vv = v[t * vec_row + j];
    k_cache[slot * vec_row + j] = kv;
    v_cache[slot * vec_row + j] = vv;
}

static void kv_store_launch(backend& be, const kv_store_args& a) {
    int64_t n_tokens = a.k.dim(0), row = a.k.dim(1) * a.k.dim(2);
    if (n_tokens == 0 || row == 0) return;
    TETRA_CHECK(n_tokens <= 0x7fffffff, "kv_store_sm80: %lld tokens exceed the grid limit", (long long)n_tokens);
    const int64_t row_bytes = row * int64_t(dtype_size(a.k.type));
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (a.k.type == a.k_cache.type && row_bytes % 16 == 0 && aligned(a.k.data) &&
        aligned(a.v.data) && aligned(a.k_cache.data) && aligned(a.v_cache.data)) {
        const int64_t vec_row = row_bytes / 16;
        const int threads = vec_row >= 256 ? 256 : int((vec_row + 31) / 32 * 32);
        kv_store_vec_kernel<<<dim3(unsigned(n_tokens), unsigned((vec_row + threads - 1) / threads)), threads, 0,
                              stream_of(be)>>>(static_cast<const uint4*>(a.k.data), static_cast<const uint4*>(a.v.data),
                                               static_cast<uint4*>(a.k_cache.data), static_cast<uint4*>(a.v_cache.data),
                                               a.slot_mapping.ptr<const int32_t>(), vec_row,
                                               a.k_cache.dim(0) * a.k_cache.dim(1));
        CUDA_CHECK(cudaGetLastError());
        return;
    }
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
