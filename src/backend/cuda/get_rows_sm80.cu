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

// Same dtype, 16-B rows and pointers: grid (ids, vector blocks), one 16-B vector per thread, so a row
// is one round trip (the element loop above waits a load latency per 256 elements). An id outside
// [0, n_rows) yields NaN rows, as above (f32 0x7fc00000; 16-bit 0x7fff, what cvt.rn writes for NaN).
__global__ void get_rows_vec_kernel(const uint4* src, const int32_t* ids, uint4* out, int64_t n_rows, int64_t vecs,
                                    uint4 nan4) {
    pdl_wait();
    pdl_trigger();
    const int64_t i = blockIdx.x, j = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
    if (j >= vecs) return;
    const int64_t id = ids[i];
    out[i * vecs + j] = id >= 0 && id < n_rows ? src[id * vecs + j] : nan4;
}

static void get_rows_launch(backend& be, const get_rows_args& a) {
    int64_t m = a.ids.dim(0), n = a.src.dim(1);
    if (m == 0 || n == 0) return;
    TETRA_CHECK(m <= 0x7fffffff, "get_rows_sm80: %lld ids exceed the grid limit", (long long)m);
    const int64_t row_bytes = n * int64_t(dtype_size(a.src.type));
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (a.src.type == a.out.type && row_bytes % 16 == 0 && aligned(a.src.data) && aligned(a.out.data) &&
        (a.src.type == dtype::F32 || a.src.type == dtype::BF16 || a.src.type == dtype::F16)) {
        const int64_t vecs = row_bytes / 16;
        const int threads = vecs >= 256 ? 256 : int((vecs + 31) / 32 * 32);
        const uint32_t w = a.src.type == dtype::F32 ? 0x7fc00000u : 0x7fff7fffu;  // the cvt instructions' canonical NaN
        const int64_t blocks = (vecs + threads - 1) / threads;
        if (blocks <= 65535) {
            launch_pdl(be, get_rows_vec_kernel, dim3(unsigned(m), unsigned(blocks)), dim3(threads), 0,
                       static_cast<const uint4*>(a.src.data), a.ids.ptr<const int32_t>(), static_cast<uint4*>(a.out.data),
                       a.src.dim(0), vecs, make_uint4(w, w, w, w));
            return;
        }
    }
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
