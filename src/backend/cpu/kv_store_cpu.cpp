// kv_store_cpu: scatter this step's k/v rows into the paged caches by slot_mapping (slot =
// block · block_size + offset; negative slots are padding and skipped). Slots are validated first.
#include "backend/cpu/cpu_kernels.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cpu {

// k, v: [n_tokens, n_head_kv, head_dim] act; caches: [n_blocks, block_size, n_head_kv, head_dim];
// slot_mapping: i32 [n_tokens]
static void kv_store_cpu(backend&, const kv_store_args& a) {
    int64_t n_tokens = a.k.dim(0), row = a.k.dim(1) * a.k.dim(2);
    int64_t n_slots = a.k_cache.dim(0) * a.k_cache.dim(1);
    const int32_t* slots = a.slot_mapping.ptr<int32_t>();
    for (int64_t t = 0; t < n_tokens; ++t)
        TETRA_CHECK(slots[t] < n_slots, "kv_store: slot_mapping[%lld] = %d is out of range for a cache of %lld slots",
                    (long long)t, slots[t], (long long)n_slots);
    parallel_for(n_tokens, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            if (slots[t] < 0) continue;
            for (int64_t j = 0; j < row; ++j) {
                act_store(a.k_cache.data, a.k_cache.type, slots[t] * row + j, act_load(a.k.data, a.k.type, t * row + j));
                act_store(a.v_cache.data, a.v_cache.type, slots[t] * row + j, act_load(a.v.data, a.v.type, t * row + j));
            }
        }
    });
}

void register_kv_store(kernel_registry& r) {
    r.add(make_kernel<kv_store_args>("kv_store", "kv_store_cpu", plain_req(), 0, nullptr, kv_store_cpu));
}

}  // namespace cpu
}  // namespace tetra
