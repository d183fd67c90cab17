// moe_matmul_cpu / moe_matmul_avx2: the grouped matmul over experts, built from the dense CPU matmul
// kernels: expert e's rows [offsets[e], offsets[e+1]) are one matmul_args slice launched on the
// matching kernel (plain oracle or AVX2), experts in ascending order. Those kernels compute each
// output row independently of the other rows (same k order whatever M), so a token's result is
// bit-identical alone or in any batch. Parallelism is inside each slice (over weight rows).
#include <string>

#include "backend/cpu/cpu_kernels.h"
#include "backend/moe.h"
#include "core/error.h"

namespace tetra {
namespace cpu {

namespace {

// Runs kernel `inner` (a matmul_* entry of the process registry) on every non-empty expert slice.
// x: [n_rows, K] act; out: [n_rows, N] act; expert_offsets: i32 [n_expert + 1]
void grouped(backend& be, const moe_matmul_args& a, const char* inner) {
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

void dense_cpu(backend& be, const moe_matmul_args& a) { grouped(be, a, "matmul_dense_cpu"); }
void dense_avx2(backend& be, const moe_matmul_args& a) { grouped(be, a, "matmul_dense_avx2"); }
void w4a16_cpu(backend& be, const moe_matmul_args& a) { grouped(be, a, "matmul_nvfp4_w4a16_cpu"); }
void w4a16_avx2(backend& be, const moe_matmul_args& a) { grouped(be, a, "matmul_nvfp4_w4a16_avx2"); }
void w4a4_cpu(backend& be, const moe_matmul_args& a) { grouped(be, a, "matmul_nvfp4_w4a4_cpu"); }
void w4a4_avx2(backend& be, const moe_matmul_args& a) { grouped(be, a, "matmul_nvfp4_w4a4_avx2"); }

// The AVX2 entries have the requirements of the kernels they run (f32 activations, AVX2+FMA+F16C).
kernel_req avx2_req() {
    kernel_req req;
    req.device = device_kind::CPU;
    req.features = FEAT_CPU_AVX2_FMA_F16C;
    req.act_dtypes = {dtype::F32};
    return req;
}

}  // namespace

void register_moe_matmul(kernel_registry& r) {
    using A = moe_matmul_args;
    r.add(make_kernel<A>("moe_matmul_dense", "moe_matmul_dense_cpu", plain_req(), 0, nullptr, dense_cpu));
    r.add(make_kernel<A>("moe_matmul_dense", "moe_matmul_dense_avx2", avx2_req(), 10, nullptr, dense_avx2));
    r.add(make_kernel<A>("moe_matmul_nvfp4_w4a16", "moe_matmul_nvfp4_w4a16_cpu", plain_req(), 0, nullptr, w4a16_cpu));
    r.add(make_kernel<A>("moe_matmul_nvfp4_w4a16", "moe_matmul_nvfp4_w4a16_avx2", avx2_req(), 10, nullptr, w4a16_avx2));
    r.add(make_kernel<A>("moe_matmul_nvfp4_w4a4", "moe_matmul_nvfp4_w4a4_cpu", plain_req(), 0, nullptr, w4a4_cpu));
    r.add(make_kernel<A>("moe_matmul_nvfp4_w4a4", "moe_matmul_nvfp4_w4a4_avx2", avx2_req(), 10, nullptr, w4a4_avx2));
}

}  // namespace cpu
}  // namespace tetra
