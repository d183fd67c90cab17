// get_rows_cpu: out[i, :] = src[ids[i], :] with dtype conversion (embedding lookup, selecting the
// last token of each sequence). Ids are validated before any row is written.
#include "backend/cpu/cpu_kernels.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tetra {
namespace cpu {

// src: [n_rows, n] f32|bf16|f16; ids: i32 [m]; out: [m, n] act
static void get_rows_cpu(backend&, const get_rows_args& a) {
    const int32_t* ids = a.ids.ptr<int32_t>();
    int64_t m = a.ids.dim(0), n_rows = a.src.dim(0), n = a.src.dim(1);
    for (int64_t i = 0; i < m; ++i)
        TETRA_CHECK(ids[i] >= 0 && ids[i] < n_rows, "get_rows: ids[%lld] = %d is out of range [0, %lld) for src %s",
                    (long long)i, ids[i], (long long)n_rows, a.src.shape_str().c_str());
    parallel_for(m, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
            for (int64_t j = 0; j < n; ++j)
                act_store(a.out.data, a.out.type, i * n + j, act_load(a.src.data, a.src.type, ids[i] * n + j));
    });
}

void register_get_rows(kernel_registry& r) {
    r.add(make_kernel<get_rows_args>("get_rows", "get_rows_cpu", plain_req(), 0, nullptr, get_rows_cpu));
}

}  // namespace cpu
}  // namespace tetra
