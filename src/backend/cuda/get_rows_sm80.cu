// get_rows_sm80: out[i, :] = src[ids[i], :] with dtype conversion (embedding lookup, last-token
// selection). One block per output row. Ids out of range are not checked on the device (the op
// contract says undefined); the row is filled with NaN instead of reading out of bounds.
#include "backend/cuda/cuda_device.cuh"

namespace tetra {
namespace cuda {

// src: [n_rows, n] st; ids: i32 [m]; out: [m, n] ot
__global__ void get_rows_kernel(const void* src, dtype st, const int32_t* ids, void* out, dtype ot, int64_t n_rows,
                                int64_t n) {
    int64_t i = blockIdx.x;
    int64_t id = ids[i];
    bool ok = id >= 0 && id < n_rows;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        store_any(out, ot, i * n + j, ok ? load_any(src, st, id * n + j) : __int_as_float(0x7fc00000));
}

static void get_rows_launch(backend& be, const get_rows_args& a) {
    int64_t m = a.ids.dim(0), n = a.src.dim(1);
    if (m == 0 || n == 0) return;
    TETRA_CHECK(m <= 0x7fffffff, "get_rows_sm80: %lld ids exceed the grid limit", (long long)m);
    get_rows_kernel<<<unsigned(m), 256, 0, stream_of(be)>>>(a.src.data, a.src.type, a.ids.ptr<const int32_t>(),
                                                            a.out.data, a.out.type, a.src.dim(0), n);
    CUDA_CHECK(cudaGetLastError());
}

void register_get_rows(kernel_registry& r) {
    r.add(make_kernel<get_rows_args>("get_rows", "get_rows_sm80", cuda_req(80, {dtype::F32, dtype::BF16, dtype::F16}),
                                     10, nullptr, get_rows_launch));
}

}  // namespace cuda
}  // namespace tetra
