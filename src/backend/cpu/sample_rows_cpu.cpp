// sample_rows_cpu: the oracle of the batched sampling op — per row: widen to f32, reject NaN/+inf,
// apply the row's entries (min_tokens, penalties), then row_sampler (THE ALGORITHM, shared with
// engine/sampler). Rows are independent; they run on the thread pool, one row_sampler per chunk.
#include "backend/cpu/cpu_kernels.h"
#include "backend/sampling.h"

namespace tetra {
namespace cpu {

namespace {

// logits: [n_rows, n_vocab] act; rows: i32 [n_rows, 14]; entries: i32 [n_entries, 4]; out: i32 [n_rows]
void sample_rows_cpu(backend&, const sample_rows_args& a) {
    const int64_t n = a.n_vocab;
    const sample_row* rows = a.rows.ptr<const sample_row>();
    const sample_entry* entries = a.n_entries ? a.entries.ptr<const sample_entry>() : nullptr;
    int32_t* out = a.out.ptr<int32_t>();
    parallel_for(a.n_rows, [&](int64_t r0, int64_t r1) {
        row_sampler smp;
        std::vector<float> x(static_cast<size_t>(n));
        for (int64_t r = r0; r < r1; ++r) {
            act_load_row(a.logits.data, a.act, r * n, n, x.data());
            if (sampler_first_bad_logit(x.data(), int32_t(n)) >= 0) {
                out[r] = int32_t(sample_error::NON_FINITE);
                continue;
            }
            sample_row row = rows[r];
            // the device clamps the range the same way: never read outside `entries`
            int64_t e0 = std::min<int64_t>(std::max<int32_t>(row.entry0, 0), a.n_entries);
            int64_t e1 = std::min<int64_t>(e0 + std::max<int32_t>(row.n_entries, 0), a.n_entries);
            row.n_entries = int32_t(e1 - e0);
            apply_sample_entries(x.data(), int32_t(n), row, entries ? entries + e0 : nullptr);
            out[r] = smp.sample(x.data(), int32_t(n), filter_of(row), row.seed, row.step);
        }
    });
}

}  // namespace

void register_sample_rows(kernel_registry& r) {
    r.add(make_kernel<sample_rows_args>("sample_rows", "sample_rows_cpu", plain_req(), 0, nullptr, sample_rows_cpu));
}

}  // namespace cpu
}  // namespace tetra
