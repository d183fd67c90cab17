// moe_matmul_dense_cpu, and the grouped-matmul driver of every moe_matmul_* CPU kernel: expert e's
// rows [offsets[e], offsets[e+1]) are one matmul_args slice launched on the matching dense matmul
// kernel (plain oracle or AVX2), experts in ascending order. Those kernels compute each output row
// independently of the other rows (same k order whatever M), so a token's result is bit-identical
// alone or in any batch. Parallelism is inside each slice (over weight rows).
#include "backend/cpu/moe_kernels.h"
#include "core/error.h"

namespace tetra {
namespace cpu {

// x: [n_rows, K] act; out: [n_rows, N] act; expert_offsets: i32 [n_expert + 1]
void moe_matmul_grouped(backend& be, const moe_matmul_args& a, const char* inner) {
    const kernel_entry* kern = kernel_registry::instance().find(inner);
    TETRA_ASSERT(kern != nullptr);
    const std::vector<linear_weight>& ex = *a.experts;
    const int32_t* off = a.expert_offsets.ptr<int32_t>();
    const int64_t ne = int64_t(ex.size());
    TETRA_CHECK(off[0] == 0 && off[ne] == a.n_rows, "moe_matmul: expert_offsets span [%d, %d); expected [0, %lld) (x rows)",
                off[0], off[ne], (long long)a.n_rows);
    for (int64_t e = 0; e < ne; ++e)
        TETRA_CHECK(off[e + 1] >= off[e], "moe_matmul: expert_offsets[%lld] = %d < expert_offsets[%lld] = %d",
                    (long long)(e + 1), off[e + 1], (long long)e, off[e]);
    for (int64_t e = 0; e < ne; ++e) {
        int64_t r0 = off[e], cnt = off[e + 1] - off[e];
        if (cnt == 0) continue;
        matmul_args m;
        m.act = a.act, m.align = a.align;
        m.x = tensor_rows(a.x, r0, cnt), m.out = tensor_rows(a.out, r0, cnt);
        m.w = &ex[size_t(e)], m.m = cnt, m.n = a.n, m.k = a.k;
        kern->launch(be, m);
    }
}

kernel_req moe_matmul_avx2_req() {
    kernel_req req;
    req.device = device_kind::CPU;
    req.features = FEAT_CPU_AVX2_FMA_F16C;
    req.act_dtypes = {dtype::F32};
    return req;
}

// x: [n_rows, K] act; experts: dense [N, K]; out: [n_rows, N] act
static void moe_matmul_dense_cpu(backend& be, const moe_matmul_args& a) { moe_matmul_grouped(be, a, "matmul_dense_cpu"); }

kernel_entry moe_matmul_dense_cpu_entry() {
    return make_kernel<moe_matmul_args>("moe_matmul_dense", "moe_matmul_dense_cpu", plain_req(), 0, nullptr,
                                        moe_matmul_dense_cpu);
}

void register_moe_matmul(kernel_registry& r) {
    for (kernel_entry (*entry)() :
         {moe_matmul_dense_cpu_entry, moe_matmul_dense_avx2_entry, moe_matmul_nvfp4_w4a16_cpu_entry,
          moe_matmul_nvfp4_w4a16_avx2_entry, moe_matmul_nvfp4_w4a4_cpu_entry, moe_matmul_nvfp4_w4a4_avx2_entry})
        r.add(entry());
}

}  // namespace cpu
}  // namespace tetra
