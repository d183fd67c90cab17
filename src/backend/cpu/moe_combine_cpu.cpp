// moe_combine_cpu: out[t] = Σ_s w[t, s] · y[dest[t, s]] in ascending slot order (f32), then
// + sigmoid(g[t]) · shared[t] (g in f32: 1 / (1 + exp(-g))). Each token writes only its own row
// (no atomics), so the result does not depend on threading or on the other tokens of the batch.
// With a folded norm (moe_combine_norm), add_rms_norm through the registry afterwards: the oracle.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_kernels.h"
#include "backend/moe.h"
#include "core/error.h"

namespace tetra {
namespace cpu {

// y: [n_rows, n] act; dest_rows: i32 [n_tokens, k]; topk_weights: f32 [n_tokens, k]; out: [n_tokens, n];
// shared: [n_tokens, n] or none; shared_gate: [n_tokens, 1] or none
static void moe_combine_cpu(backend& be, const moe_combine_args& a) {
    const int64_t n = a.n, k = a.k, n_rows = a.y.dim(0);
    const int32_t* dest = a.dest_rows.ptr<int32_t>();
    const float* w = a.topk_weights.ptr<float>();
    for (int64_t i = 0; i < a.n_tokens * k; ++i)
        TETRA_CHECK(dest[i] >= 0 && dest[i] < n_rows, "moe_combine: dest_rows[%lld, %lld] = %d is out of range [0, %lld)",
                    (long long)(i / k), (long long)(i % k), dest[i], (long long)n_rows);
    const bool has_shared = !a.shared.empty(), has_gate = !a.shared_gate.empty();
    parallel_for_grain(a.n_tokens, 4, [&](int64_t t0, int64_t t1) {
        std::vector<float> acc(static_cast<size_t>(n)), row(static_cast<size_t>(n));
        for (int64_t t = t0; t < t1; ++t) {
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int64_t s = 0; s < k; ++s) {
                act_load_row(a.y.data, a.y.type, int64_t(dest[t * k + s]) * n, n, row.data());
                const float ws = w[t * k + s];
                for (int64_t j = 0; j < n; ++j) acc[size_t(j)] += ws * row[size_t(j)];
            }
            if (has_shared) {
                float g = 1.0f;
                if (has_gate) g = 1.0f / (1.0f + std::exp(-act_load(a.shared_gate.data, a.shared_gate.type, t)));
                act_load_row(a.shared.data, a.shared.type, t * n, n, row.data());
                for (int64_t j = 0; j < n; ++j) acc[size_t(j)] += g * row[size_t(j)];
            }
            for (int64_t j = 0; j < n; ++j) act_store(a.out.data, a.out.type, t * n + j, acc[size_t(j)]);
        }
    });
    moe_combine_norm_after(be, a);
}

void register_moe_combine(kernel_registry& r) {
    r.add(make_kernel<moe_combine_args>("moe_combine", "moe_combine_cpu", plain_req(), 0, nullptr, moe_combine_cpu));
}

}  // namespace cpu
}  // namespace tetra
