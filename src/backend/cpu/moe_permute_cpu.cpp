// moe_permute_cpu: stable counting sort of the n_tokens·k (token, slot) assignments by expert.
// Sequential on purpose: O(n_tokens·k) integer work (a few thousand items per step), and the order
// inside each expert group is ascending (token, slot) by construction, whatever the thread count.
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "backend/moe.h"
#include "core/error.h"

namespace tetra {
namespace cpu {

// topk_ids: i32 [n_tokens, k]; expert_counts: i32 [n_expert]; expert_offsets: i32 [n_expert + 1];
// sorted_tokens: i32 [n_tokens·k]; dest_rows: i32 [n_tokens, k]
void moe_permute_cpu(backend&, const moe_permute_args& a) {
    const int64_t n = a.n_tokens * a.k, ne = a.n_expert;
    const int32_t* ids = a.topk_ids.ptr<int32_t>();
    int32_t* counts = a.expert_counts.ptr<int32_t>();
    int32_t* offsets = a.expert_offsets.ptr<int32_t>();
    for (int64_t e = 0; e < ne; ++e) counts[e] = 0;
    for (int64_t i = 0; i < n; ++i) {
        TETRA_CHECK(ids[i] >= 0 && ids[i] < ne, "moe_permute: topk_ids[%lld, %lld] = %d is out of range [0, %lld)",
                    (long long)(i / a.k), (long long)(i % a.k), ids[i], (long long)ne);
        ++counts[ids[i]];
    }
    offsets[0] = 0;
    for (int64_t e = 0; e < ne; ++e) offsets[e + 1] = offsets[e] + counts[e];
    std::vector<int32_t> cursor(offsets, offsets + ne);
    int32_t* sorted = a.sorted_tokens.ptr<int32_t>();
    int32_t* dest = a.dest_rows.ptr<int32_t>();
    for (int64_t i = 0; i < n; ++i) {  // i = t·k + s: ascending (token, slot)
        int32_t r = cursor[size_t(ids[i])]++;
        sorted[r] = int32_t(i / a.k);
        dest[i] = r;
    }
}

void register_moe_permute(kernel_registry& r) {
    kernel_req req = plain_req();
    req.act_dtypes = {dtype::I32};
    r.add(make_kernel<moe_permute_args>("moe_permute", "moe_permute_cpu", req, 0, nullptr, moe_permute_cpu));
}

}  // namespace cpu
}  // namespace tetra
